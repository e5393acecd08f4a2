//! A message's user properties, decoded when someone first reads them.
//!
//! Most messages are never asked for their properties: an AMQP message goes
//! out to AMQP consumers as the bytes it came in, and only selectors, other
//! protocols and the store read them. Building them for every message (a
//! vector, an interned name and a value per property) was a fifth of taking
//! in a message, and the names' shared counts were touched again by whichever
//! thread dropped it. A protocol may therefore hand over its encoded
//! properties, already checked, with the function that decodes them.

use super::message::Value;
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

pub type Property = (Arc<str>, Value);

/// Decodes a protocol's encoded properties. Only ever given bytes the
/// protocol checked when the message came in, so it cannot fail; anything it
/// cannot represent it leaves out, as the protocol would have.
pub type DecodeProperties = fn(&Bytes) -> Vec<Property>;

/// User properties in arrival order. A list beats a map here: messages carry a
/// handful of properties and are read far more often than searched.
#[derive(Clone)]
pub struct Properties(Repr);

#[derive(Clone)]
enum Repr {
    List(Vec<Property>),
    Encoded(Encoded),
}

#[derive(Clone)]
struct Encoded {
    bytes: Bytes,
    /// How many properties the bytes hold (for sizing before decoding).
    count: u32,
    decode: DecodeProperties,
    decoded: OnceLock<Vec<Property>>,
}

impl Properties {
    /// Properties left encoded until read.
    pub fn encoded(bytes: Bytes, count: usize, decode: DecodeProperties) -> Self {
        Properties(Repr::Encoded(Encoded {
            bytes,
            count: u32::try_from(count).unwrap_or(u32::MAX),
            decode,
            decoded: OnceLock::new(),
        }))
    }

    pub fn list(&self) -> &[Property] {
        match &self.0 {
            Repr::List(list) => list,
            Repr::Encoded(e) => e.decoded.get_or_init(|| (e.decode)(&e.bytes)),
        }
    }

    /// How many there are, without decoding them.
    pub fn count(&self) -> usize {
        match &self.0 {
            Repr::List(list) => list.len(),
            Repr::Encoded(e) => e.count as usize,
        }
    }

    /// The bytes a decoded list holds: each name and value plus a pair's
    /// fixed size. Encoded properties are a slice of the message's wire form
    /// and hold nothing of their own until decoded.
    pub fn memory_size(&self) -> usize {
        const PAIR: usize = std::mem::size_of::<Property>();
        let value_size = |v: &Value| match v {
            Value::String(s) => s.len(),
            Value::Binary(b) => b.len(),
            _ => 0,
        };
        let list = match &self.0 {
            Repr::List(list) => list.as_slice(),
            Repr::Encoded(e) => e.decoded.get().map_or(&[][..], Vec::as_slice),
        };
        list.iter()
            .map(|(name, value)| PAIR + name.len() + value_size(value))
            .sum()
    }

    /// Whether they are still waiting to be decoded.
    pub fn is_encoded(&self) -> bool {
        matches!(&self.0, Repr::Encoded(e) if e.decoded.get().is_none())
    }

    /// The properties as a list to change, decoded first if need be.
    pub fn to_mut(&mut self) -> &mut Vec<Property> {
        if let Repr::Encoded(e) = &mut self.0 {
            let list = match e.decoded.take() {
                Some(list) => list,
                None => (e.decode)(&e.bytes),
            };
            self.0 = Repr::List(list);
        }
        match &mut self.0 {
            Repr::List(list) => list,
            Repr::Encoded(_) => unreachable!("just decoded"),
        }
    }

    pub fn push(&mut self, property: Property) {
        self.to_mut().push(property);
    }

    /// The same properties holding no slice of a shared buffer: `own` gives
    /// each one's bytes their own (see
    /// [`Message::detached`](super::message::Message::detached)).
    pub fn detached(&self, own: impl Fn(&Bytes) -> Bytes) -> Properties {
        match &self.0 {
            Repr::List(list) => Properties(Repr::List(
                list.iter()
                    .map(|(name, value)| {
                        let value = match value {
                            Value::Binary(b) => Value::Binary(own(b)),
                            other => other.clone(),
                        };
                        (name.clone(), value)
                    })
                    .collect(),
            )),
            Repr::Encoded(e) => Properties(Repr::Encoded(Encoded {
                bytes: own(&e.bytes),
                count: e.count,
                decode: e.decode,
                decoded: OnceLock::new(),
            })),
        }
    }
}

impl Default for Properties {
    fn default() -> Self {
        Properties(Repr::List(Vec::new()))
    }
}

impl From<Vec<Property>> for Properties {
    fn from(list: Vec<Property>) -> Self {
        Properties(Repr::List(list))
    }
}

impl FromIterator<Property> for Properties {
    fn from_iter<I: IntoIterator<Item = Property>>(iter: I) -> Self {
        Properties(Repr::List(iter.into_iter().collect()))
    }
}

impl std::ops::Deref for Properties {
    type Target = [Property];

    fn deref(&self) -> &[Property] {
        self.list()
    }
}

impl<'a> IntoIterator for &'a Properties {
    type Item = &'a Property;
    type IntoIter = std::slice::Iter<'a, Property>;

    fn into_iter(self) -> Self::IntoIter {
        self.list().iter()
    }
}

impl PartialEq for Properties {
    fn eq(&self, other: &Self) -> bool {
        self.list() == other.list()
    }
}

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.list()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DECODED: AtomicUsize = AtomicUsize::new(0);

    /// One property per byte: its value is the byte.
    fn decode_bytes(bytes: &Bytes) -> Vec<Property> {
        DECODED.fetch_add(1, Ordering::SeqCst);
        bytes
            .iter()
            .map(|b| (Arc::from(format!("p{b}")), Value::Int(i64::from(*b))))
            .collect()
    }

    #[test]
    fn encoded_properties_decode_once_when_first_read() {
        let before = DECODED.load(Ordering::SeqCst);
        let props = Properties::encoded(Bytes::from_static(&[1, 2]), 2, decode_bytes);
        assert!(props.is_encoded());
        assert_eq!(props.count(), 2, "counted without decoding");
        assert_eq!(DECODED.load(Ordering::SeqCst), before);
        assert_eq!(props[1].1, Value::Int(2));
        assert_eq!(props.iter().count(), 2);
        assert!(!props.is_encoded());
        assert_eq!(DECODED.load(Ordering::SeqCst), before + 1, "decoded once");
    }

    #[test]
    fn changing_encoded_properties_decodes_them_first() {
        let mut props = Properties::encoded(Bytes::from_static(&[7]), 1, decode_bytes);
        props.push((Arc::from("extra"), Value::Null));
        let names: Vec<&str> = props.iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["p7", "extra"]);
        assert_eq!(
            props,
            Properties::from(vec![
                (Arc::from("p7"), Value::Int(7)),
                (Arc::from("extra"), Value::Null)
            ])
        );
    }

    #[test]
    fn detached_properties_own_their_bytes() {
        let buffer = Bytes::from(vec![3u8; 64]);
        let props = Properties::encoded(buffer.slice(0..2), 2, decode_bytes);
        let copy = props.detached(|b| Bytes::copy_from_slice(b));
        assert!(copy.is_encoded());
        assert_eq!(copy, props);
        let Repr::Encoded(e) = &copy.0 else {
            panic!("still encoded")
        };
        assert!(!std::ptr::eq(e.bytes.as_ptr(), buffer.as_ptr()));
    }
}
