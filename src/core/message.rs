//! The protocol-neutral message. Every codec converts to and from this.

use bytes::Bytes;
use std::sync::Arc;

/// A property value. STOMP headers arrive as strings; AMQP application
/// properties keep their types so selectors can compare numbers as numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    String(Arc<str>),
    Binary(Bytes),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a string for a text-only protocol such as STOMP.
    pub fn to_text(&self) -> String {
        match self {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Double(d) => d.to_string(),
            Value::String(s) => s.to_string(),
            Value::Binary(b) => String::from_utf8_lossy(b).into_owned(),
        }
    }
}

pub use super::properties::{DecodeProperties, Properties, Property};

/// An encoding of the whole message that a protocol may reuse verbatim when the
/// consumer speaks the same format (AMQP to AMQP forwards the original bytes).
/// `format` is an opaque number owned by the protocol that produced it.
#[derive(Debug, Clone, PartialEq)]
pub struct WireForm {
    pub format: u32,
    pub bytes: Bytes,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    /// Body bytes, usually a slice of the read buffer it arrived in.
    pub body: Bytes,
    pub properties: Properties,
    /// The destination the sender named, as the core knows it (e.g. `orders`).
    pub address: Arc<str>,
    pub message_id: Option<Arc<str>>,
    pub correlation_id: Option<Arc<str>>,
    pub reply_to: Option<Arc<str>>,
    pub content_type: Option<Arc<str>>,
    pub subject: Option<Arc<str>>,
    pub user_id: Option<Arc<str>>,
    /// JMSXGroupID and friends.
    pub group_id: Option<Arc<str>>,
    /// JMSXGroupSeq, signed: -1 closes the group.
    pub group_seq: Option<i32>,
    /// Epoch milliseconds before which the message must not be delivered.
    pub due_at: Option<u64>,
    /// Epoch milliseconds after which the message must not be delivered.
    pub expires_at: Option<u64>,
    /// Epoch milliseconds at which the broker accepted the message.
    pub timestamp: u64,
    pub durable: bool,
    /// 0..=9, 4 is normal.
    pub priority: u8,
    /// The original encoding, when a protocol wants to forward it unchanged.
    pub wire: Option<WireForm>,
    /// A property is named like a delay header of some queue: set by the protocol that
    /// read it, so the core looks through the properties for a delay only then (see
    /// [`super::delay_headers`]). Meaningful at publish only; never stored.
    pub may_carry_delay: bool,
}

impl Message {
    pub const DEFAULT_PRIORITY: u8 = 4;

    /// A message for `address` with nothing else set: normal priority, not durable.
    /// Built field by field, not from `Default`: the default's empty address is a
    /// shared `Arc<str>`, counted up and down again (two atomic operations) for every
    /// message the codecs build.
    pub fn new(address: Arc<str>, body: Bytes, timestamp: u64) -> Self {
        Message {
            body,
            properties: Properties::default(),
            address,
            message_id: None,
            correlation_id: None,
            reply_to: None,
            content_type: None,
            subject: None,
            user_id: None,
            group_id: None,
            group_seq: None,
            due_at: None,
            expires_at: None,
            timestamp,
            durable: false,
            priority: Self::DEFAULT_PRIORITY,
            wire: None,
            may_carry_delay: false,
        }
    }

    pub fn property(&self, name: &str) -> Option<&Value> {
        self.properties
            .iter()
            .find(|(key, _)| &**key == name)
            .map(|(_, value)| value)
    }

    pub fn is_expired_at(&self, now_ms: u64) -> bool {
        self.expires_at.is_some_and(|at| at <= now_ms)
    }

    /// Approximate memory held by the message, for queue memory accounting.
    pub fn weight(&self) -> usize {
        let wire = self.wire.as_ref().map(|w| &w.bytes);
        // A body or encoded properties cut from the wire form hold no memory of their own.
        let body = match wire {
            Some(wire) if subslice_offset(wire, &self.body).is_some() => 0,
            _ => self.body.len(),
        };
        let properties = self.properties.memory_size();
        std::mem::size_of::<Self>() + wire.map_or(0, Bytes::len) + body + properties
    }

    /// The same message owning exact-size copies of its bytes. Codecs hand
    /// out slices of their read buffer, so a message kept for minutes while
    /// its neighbours are long gone would pin a whole buffer (64 KiB for 256
    /// bytes); whatever holds messages sparsely and for long (the delay
    /// window) detaches them first. The body stays a slice of the wire form
    /// when it was one, so nothing is copied twice.
    pub fn detached(&self) -> Message {
        let wire = self.wire.as_ref().map(|w| WireForm {
            format: w.format,
            bytes: Bytes::copy_from_slice(&w.bytes),
        });
        // A part of the wire form (the body, encoded properties) becomes the same
        // part of the copy; anything else is copied on its own.
        let own = |part: &Bytes| {
            match (&self.wire, &wire) {
                (Some(old), Some(new)) => {
                    subslice_offset(&old.bytes, part).map(|at| new.bytes.slice(at..at + part.len()))
                }
                _ => None,
            }
            .unwrap_or_else(|| Bytes::copy_from_slice(part))
        };
        Message {
            body: own(&self.body),
            properties: self.properties.detached(own),
            wire,
            ..self.clone()
        }
    }
}

/// Where `part` starts inside `whole`, when it is a slice of it.
fn subslice_offset(whole: &Bytes, part: &Bytes) -> Option<usize> {
    let start = whole.as_ptr() as usize;
    let at = (part.as_ptr() as usize).checked_sub(start)?;
    (at + part.len() <= whole.len()).then_some(at)
}

/// Milliseconds since the Unix epoch, the broker's one clock for due and expiry times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall clock (epoch ms) to within a few milliseconds, for times a person
/// reads (when a group was last active) taken on the message path: where the
/// system has a coarse clock it reads the time of the kernel's last tick, without
/// reading the CPU's counter, so it costs a fraction of [`now_ms`].
pub fn coarse_now_ms() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime only writes the timespec it is given, which lives
        // on this stack frame for the whole call.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
            let seconds = u64::try_from(ts.tv_sec).unwrap_or(0);
            let millis = u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000;
            return seconds * 1000 + millis;
        }
    }
    now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_is_the_wall_clock_to_a_few_ms() {
        let before = now_ms();
        let coarse = coarse_now_ms();
        let after = now_ms();
        // Linux ticks at least every 10 ms (HZ=100).
        assert!(
            coarse + 20 >= before && coarse <= after,
            "{before} {coarse} {after}"
        );
    }

    #[test]
    fn a_body_inside_the_wire_form_weighs_nothing_more() {
        let wire = Bytes::from(vec![1u8; 1000]);
        let sliced = Message {
            body: wire.slice(100..900),
            wire: Some(WireForm {
                format: 0,
                bytes: wire.clone(),
            }),
            ..Message::default()
        };
        let copied = Message {
            body: Bytes::from(vec![1u8; 800]),
            ..sliced.clone()
        };
        let base = std::mem::size_of::<Message>();
        assert_eq!(sliced.weight(), base + 1000);
        assert_eq!(copied.weight(), base + 1800);
    }

    #[test]
    fn detached_message_owns_exact_copies() {
        let buffer = Bytes::from(vec![7u8; 64 * 1024]);
        let wire = buffer.slice(100..400);
        let message = Message {
            body: wire.slice(50..250),
            wire: Some(WireForm {
                format: 1,
                bytes: wire.clone(),
            }),
            properties: vec![("b".into(), Value::Binary(buffer.slice(0..4)))].into(),
            ..Message::default()
        };
        let copy = message.detached();
        assert_eq!(copy, message);
        let new_wire = &copy.wire.as_ref().unwrap().bytes;
        assert_ne!(new_wire.as_ptr(), wire.as_ptr());
        // The body is re-sliced from the copied wire form, not copied again.
        assert_eq!(subslice_offset(new_wire, &copy.body), Some(50));
        let Value::Binary(b) = &copy.properties[0].1 else {
            panic!("binary property lost")
        };
        assert_ne!(b.as_ptr(), buffer.as_ptr());
        drop(message);
        drop(wire);
        // Only the copies are left holding memory: the 64 KiB buffer is free.
        assert!(buffer.is_unique());
    }
}
