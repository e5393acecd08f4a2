//! The open client connections, for management: what each protocol says about its
//! connection (opaque strings: the core does not know protocols), and a way to ask one
//! to close that the connection's driver listens to.
//!
//! A connection registers once, after its handshake, and unregisters when its
//! [`Registration`] drops; nothing here is touched per message. What a connection
//! counts of its messages it publishes once per wake-up (see [`Registration::publish`]).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

use super::rates::RateWindow;

/// What a protocol tells about a connection when it registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The protocol's name, e.g. "stomp".
    pub protocol: String,
    /// The protocol version agreed, e.g. "1.2".
    pub version: String,
    /// What carries the protocol's bytes, e.g. "tcp" or "websocket".
    pub transport: &'static str,
    pub peer: SocketAddr,
    pub tls: bool,
    /// `None` for an anonymous connection.
    pub user: Option<String>,
    /// The client's own name for itself: STOMP client-id, AMQP container-id.
    pub client_id: Option<String>,
}

/// What connections are counted by for metrics.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConnectionKind {
    pub protocol: String,
    pub transport: &'static str,
    pub tls: bool,
}

/// One open connection as management sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionInfo {
    pub id: u64,
    pub descriptor: Descriptor,
    /// Epoch milliseconds.
    pub connected_at: u64,
    /// Its messages since it opened, as last published.
    pub traffic: Traffic,
    /// Received and sent per second lately (see [`super::rates::RATE_WINDOW`]).
    pub received_per_second: f64,
    pub sent_per_second: f64,
}

/// A connection's messages since it opened, as its protocol session counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Whole messages the client sent (STOMP SEND, AMQP transfers), taken or refused.
    pub received: u64,
    /// Messages delivered to the client.
    pub sent: u64,
}

/// Where a connection's task publishes its [`Traffic`]. Written by that one task
/// only, and on a cache line of its own, so a store never waits on another core
/// (management reads it now and then).
#[derive(Debug, Default)]
#[repr(align(64))]
struct TrafficCells {
    received: AtomicU64,
    sent: AtomicU64,
}

impl TrafficCells {
    fn load(&self) -> Traffic {
        Traffic {
            received: self.received.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
        }
    }
}

struct Open {
    info: ConnectionInfo,
    close: Arc<Notify>,
    traffic: Arc<TrafficCells>,
    /// The previous reading of `traffic`, for its rates.
    rates: RateWindow<2>,
}

impl Open {
    /// What management sees, moving the rates' reading on.
    fn read(&mut self, now: Instant) -> ConnectionInfo {
        let traffic = self.traffic.load();
        let [received, sent] = self.rates.rates_at(now, [traffic.received, traffic.sent]);
        ConnectionInfo {
            traffic,
            received_per_second: received,
            sent_per_second: sent,
            ..self.info.clone()
        }
    }
}

/// Every open connection that registered.
#[derive(Default)]
pub struct Connections {
    next_id: AtomicU64,
    open: Mutex<BTreeMap<u64, Open>>,
    /// What the connections send to (see [`super::producers`]).
    pub(super) producers: Arc<super::producers::Producers>,
}

impl Connections {
    /// Registers a connection; it is listed until the registration drops.
    pub fn register(self: &Arc<Self>, descriptor: Descriptor) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let close = Arc::new(Notify::new());
        let traffic = Arc::new(TrafficCells::default());
        let info = ConnectionInfo {
            id,
            descriptor,
            connected_at: super::message::now_ms(),
            traffic: Traffic::default(),
            received_per_second: 0.0,
            sent_per_second: 0.0,
        };
        self.open.lock().insert(
            id,
            Open {
                info,
                close: close.clone(),
                traffic: traffic.clone(),
                rates: RateWindow::default(),
            },
        );
        Registration {
            id,
            close,
            traffic,
            registry: self.clone(),
        }
    }

    /// Every open connection, oldest first. Takes their rates, so it moves each
    /// one's reading on (readings within a second repeat the last rates).
    pub fn list(&self) -> Vec<ConnectionInfo> {
        let now = Instant::now();
        self.open.lock().values_mut().map(|o| o.read(now)).collect()
    }

    pub fn get(&self, id: u64) -> Option<ConnectionInfo> {
        let now = Instant::now();
        self.open.lock().get_mut(&id).map(|o| o.read(now))
    }

    /// Asks connection `id` to close; false when there is none.
    pub fn close(&self, id: u64) -> bool {
        match self.open.lock().get(&id) {
            Some(open) => {
                // A stored permit: the driver sees it even if it is not waiting yet.
                open.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Open connections counted by protocol, transport and TLS.
    pub fn count_by_protocol(&self) -> BTreeMap<ConnectionKind, usize> {
        let mut counts = BTreeMap::new();
        for open in self.open.lock().values() {
            let d = &open.info.descriptor;
            let kind = ConnectionKind {
                protocol: d.protocol.clone(),
                transport: d.transport,
                tls: d.tls,
            };
            *counts.entry(kind).or_default() += 1;
        }
        counts
    }
}

/// A registered connection; unregisters on drop.
pub struct Registration {
    id: u64,
    close: Arc<Notify>,
    traffic: Arc<TrafficCells>,
    registry: Arc<Connections>,
}

impl Registration {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Makes the connection's counts visible to management. Plain stores: only
    /// the connection's own task writes them, so no read-modify-write is needed.
    #[inline]
    pub fn publish(&self, traffic: Traffic) {
        self.traffic
            .received
            .store(traffic.received, Ordering::Relaxed);
        self.traffic.sent.store(traffic.sent, Ordering::Relaxed);
    }

    /// Resolves when management asked this connection to close.
    pub async fn close_requested(&self) {
        self.close.notified().await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.open.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(protocol: &str, tls: bool) -> Descriptor {
        Descriptor {
            protocol: protocol.into(),
            version: "1".into(),
            transport: "tcp",
            peer: "127.0.0.1:1".parse().unwrap(),
            tls,
            user: None,
            client_id: None,
        }
    }

    #[tokio::test]
    async fn listed_while_registered_and_closed_on_request() {
        let registry = Arc::new(Connections::default());
        let a = registry.register(descriptor("stomp", false));
        let b = registry.register(descriptor("amqp", true));
        assert_eq!(registry.list().len(), 2);
        let amqp_tls = ConnectionKind {
            protocol: "amqp".into(),
            transport: "tcp",
            tls: true,
        };
        assert_eq!(registry.count_by_protocol()[&amqp_tls], 1);
        assert!(registry.close(a.id()));
        // The request waits as a permit until the driver looks.
        tokio::time::timeout(std::time::Duration::from_secs(1), a.close_requested())
            .await
            .expect("close requested");
        let id = b.id();
        b.publish(Traffic {
            received: 3,
            sent: 5,
        });
        let listed = registry.get(id).unwrap();
        assert_eq!(
            listed.traffic,
            Traffic {
                received: 3,
                sent: 5
            }
        );
        // The first reading has nothing to compare with.
        assert_eq!(
            (listed.received_per_second, listed.sent_per_second),
            (0.0, 0.0)
        );
        drop(b);
        assert!(registry.get(id).is_none());
        assert!(!registry.close(id));
    }
}
