//! Connection factories in the Artemis sense: named producer defaults a client
//! picks without code changes (by acceptor or by virtual host), here the
//! message-grouping ones: `autogroup` and a fixed `group_id`.

use super::message::Message;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectionFactory {
    pub name: String,
    /// Every producer gets its own unique group id.
    pub autogroup: bool,
    /// Every message gets this group id.
    pub group_id: Option<Arc<str>>,
}

/// The group a producer stamps on messages that carry none of their own.
#[derive(Debug, Clone, Default)]
pub struct ProducerGroup(Option<Arc<str>>);

static AUTOGROUP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ConnectionFactory {
    /// Called once per producer (AMQP sender link, STOMP connection).
    pub fn new_producer(&self) -> ProducerGroup {
        if let Some(id) = &self.group_id {
            return ProducerGroup(Some(id.clone()));
        }
        if self.autogroup {
            return ProducerGroup(Some(unique_group_id()));
        }
        ProducerGroup(None)
    }
}

impl ProducerGroup {
    /// An explicit group id on the message wins.
    pub fn apply(&self, message: &mut Message) {
        if message.group_id.is_none() {
            message.group_id.clone_from(&self.0);
        }
    }

    pub fn group_id(&self) -> Option<&Arc<str>> {
        self.0.as_ref()
    }
}

/// Random enough to be unique across restarts and brokers: time, process and a counter.
fn unique_group_id() -> Arc<str> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = AUTOGROUP_COUNTER.fetch_add(1, Ordering::Relaxed);
    Arc::from(format!("{:x}-{:x}-{:x}", nanos, std::process::id(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autogroup_gives_each_producer_its_own_group() {
        let f = ConnectionFactory {
            name: "orders".into(),
            autogroup: true,
            group_id: None,
        };
        let (a, b) = (f.new_producer(), f.new_producer());
        assert_ne!(a.group_id(), b.group_id());
        let mut m = Message::default();
        a.apply(&mut m);
        assert_eq!(m.group_id.as_ref(), a.group_id());
        let mut explicit = Message {
            group_id: Some(Arc::from("mine")),
            ..Default::default()
        };
        a.apply(&mut explicit);
        assert_eq!(explicit.group_id.as_deref(), Some("mine"));
    }

    #[test]
    fn fixed_group_id() {
        let f = ConnectionFactory {
            name: "g".into(),
            autogroup: false,
            group_id: Some(Arc::from("Group-0")),
        };
        let mut m = Message::default();
        f.new_producer().apply(&mut m);
        assert_eq!(m.group_id.as_deref(), Some("Group-0"));
    }
}
