//! Producers counted by the queue they send to, for management: a protocol registers a
//! producer when one starts sending to an anycast address (an AMQP link attached to it, a
//! STOMP connection's first SEND there) and the count goes down when the registration
//! drops (the link detaches, the connection closes). The core knows only addresses.
//!
//! Nothing here is touched per message: a registration is made once per producer, and
//! [`ConnectionProducers`] remembers the address it noted last so a connection sending to
//! one queue again and again pays a string comparison.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// How many producers send to each address now.
#[derive(Default)]
pub struct Producers {
    counts: Mutex<HashMap<Arc<str>, usize>>,
}

impl Producers {
    /// Counts one producer of `address` until the registration drops.
    pub fn register(self: &Arc<Self>, address: Arc<str>) -> ProducerRegistration {
        *self.counts.lock().entry(address.clone()).or_default() += 1;
        ProducerRegistration {
            address,
            registry: self.clone(),
        }
    }

    /// Producers sending to `address` now.
    pub fn count(&self, address: &str) -> usize {
        self.counts.lock().get(address).copied().unwrap_or(0)
    }
}

/// One producer of an address; uncounted on drop.
pub struct ProducerRegistration {
    address: Arc<str>,
    registry: Arc<Producers>,
}

impl ProducerRegistration {
    pub fn address(&self) -> &Arc<str> {
        &self.address
    }
}

impl Drop for ProducerRegistration {
    fn drop(&mut self) {
        let mut counts = self.registry.counts.lock();
        if let Some(count) = counts.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

impl std::fmt::Debug for ProducerRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ProducerRegistration")
            .field(&self.address)
            .finish()
    }
}

/// The addresses one connection has sent to, each counted as one producer for as long
/// as the connection lives, however many messages it sends there.
#[derive(Default)]
pub struct ConnectionProducers {
    held: HashMap<Arc<str>, ProducerRegistration>,
    /// The address noted last: the common case of one destination checks only this.
    last: Option<Arc<str>>,
}

impl ConnectionProducers {
    /// Notes that the connection sends to `address`.
    #[inline]
    pub fn note(&mut self, producers: &Arc<Producers>, address: &Arc<str>) {
        if self.last.as_ref().is_some_and(|last| **last == **address) {
            return;
        }
        self.note_other(producers, address);
    }

    #[cold]
    fn note_other(&mut self, producers: &Arc<Producers>, address: &Arc<str>) {
        if !self.held.contains_key(&**address) {
            self.held
                .insert(address.clone(), producers.register(address.clone()));
        }
        self.last = Some(address.clone());
    }
}

impl super::connections::Connections {
    /// The producers of the connections registered here.
    pub fn producers(&self) -> &Arc<Producers> {
        &self.producers
    }
}

impl super::Broker {
    /// Producers by the address they send to (each protocol registers its own).
    pub fn producers(&self) -> &Arc<Producers> {
        self.connections().producers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_while_registered() {
        let producers = Arc::new(Producers::default());
        let a = producers.register("orders".into());
        let b = producers.register("orders".into());
        assert_eq!(producers.count("orders"), 2);
        assert_eq!(producers.count("other"), 0);
        drop(a);
        assert_eq!(producers.count("orders"), 1);
        drop(b);
        assert_eq!(producers.count("orders"), 0);
        assert!(producers.counts.lock().is_empty(), "no entry left behind");
    }

    #[test]
    fn a_connection_is_one_producer_per_address() {
        let producers = Arc::new(Producers::default());
        let (orders, audit): (Arc<str>, Arc<str>) = ("orders".into(), "audit".into());
        let mut connection = ConnectionProducers::default();
        for address in [&orders, &orders, &audit, &orders, &audit] {
            connection.note(&producers, address);
        }
        assert_eq!(producers.count("orders"), 1);
        assert_eq!(producers.count("audit"), 1);
        let mut other = ConnectionProducers::default();
        other.note(&producers, &orders);
        assert_eq!(producers.count("orders"), 2);
        drop(connection);
        assert_eq!(producers.count("orders"), 1);
        assert_eq!(producers.count("audit"), 0);
    }
}
