//! Which user properties a queue reads as a per-message delay (`delay_headers`).
//!
//! The broker-defined names ([`BROKER_DELAY_NAMES`], and AMQP's `x-opt-delivery-*`
//! annotations) mean a delay wherever they appear, so the protocols turn them into
//! `Message::due_at` as a message comes in. Names other brokers use, RabbitMQ's `x-delay`
//! and Zaqar's `delay`, are ordinary header names in many applications: they travel as
//! plain properties and are read as a delay only on a queue that lists them. A value
//! that is not a delay (`delay: soon`) stays a plain property and refuses nothing.
//!
//! The protocols do not know a message's queue settings while they read it, so the
//! broker hands them [`DelayHeaderNames`], every name any queue lists. A protocol marks
//! a message that carries one (`Message::may_carry_delay`), and only then does the core
//! look through its properties: a message without such a name costs one table lookup
//! per property, and a queue without delays nothing more.

use super::message::Value;
use super::properties::Properties;
use std::sync::Arc;

/// Names read as a delay on every queue, whatever its `delay_headers` say.
pub const BROKER_DELAY_NAMES: [&str; 3] = [
    "AMQ_SCHEDULED_DELAY",
    "AMQ_SCHEDULED_TIME",
    "_AMQ_SCHED_DELIVERY",
];

/// What one unit of a delay header's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayUnit {
    Millis,
    Seconds,
}

/// A property name read as a relative delay, with its unit: written `NAME:ms` or
/// `NAME:s` in the config (the unit is required, so `delay` cannot silently mean
/// milliseconds to one reader and Zaqar's seconds to another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayHeader {
    pub name: Arc<str>,
    pub unit: DelayUnit,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DelayHeaderError {
    #[error("\"{0}\" is not NAME:ms or NAME:s (a property name and the unit of its value)")]
    NoUnit(String),
    #[error("\"{0}\" has no name before its unit")]
    EmptyName(String),
    #[error("\"{0}\" is always read as a delay; list only other names")]
    BrokerDefined(String),
}

impl DelayHeader {
    /// `x-delay` in milliseconds (RabbitMQ) and `delay` in seconds (Zaqar): what
    /// Weir read before the list was a setting.
    pub fn defaults() -> Vec<DelayHeader> {
        vec![
            DelayHeader {
                name: Arc::from("x-delay"),
                unit: DelayUnit::Millis,
            },
            DelayHeader {
                name: Arc::from("delay"),
                unit: DelayUnit::Seconds,
            },
        ]
    }

    /// Parses `NAME:ms` or `NAME:s`; the unit follows the last colon.
    pub fn parse(text: &str) -> Result<DelayHeader, DelayHeaderError> {
        let (name, unit) = text
            .rsplit_once(':')
            .ok_or_else(|| DelayHeaderError::NoUnit(text.to_owned()))?;
        let unit = match unit {
            "ms" => DelayUnit::Millis,
            "s" => DelayUnit::Seconds,
            _ => return Err(DelayHeaderError::NoUnit(text.to_owned())),
        };
        if name.is_empty() {
            return Err(DelayHeaderError::EmptyName(text.to_owned()));
        }
        if BROKER_DELAY_NAMES.contains(&name) {
            return Err(DelayHeaderError::BrokerDefined(name.to_owned()));
        }
        Ok(DelayHeader {
            name: Arc::from(name),
            unit,
        })
    }

    /// `NAME:ms` or `NAME:s`, as written in the config and read by [`DelayHeader::parse`].
    pub fn text(&self) -> String {
        let unit = match self.unit {
            DelayUnit::Millis => "ms",
            DelayUnit::Seconds => "s",
        };
        format!("{}:{unit}", self.name)
    }

    /// The delay a value asks for, in milliseconds: a non-negative integer, or text
    /// holding one. Anything else is not a delay. Saturates, so an absurd value
    /// meets `max_message_delay` like any other long delay.
    fn millis(&self, value: &Value) -> Option<u64> {
        let amount = match value {
            Value::Int(n) => u64::try_from(*n).ok()?,
            Value::String(text) => text.trim().parse::<u64>().ok()?,
            _ => return None,
        };
        Some(match self.unit {
            DelayUnit::Millis => amount,
            DelayUnit::Seconds => amount.saturating_mul(1_000),
        })
    }
}

/// The due time from the first of `headers` that `properties` carry with a value that
/// is a delay (see [`DelayHeader`]); `None` when there is none.
pub fn due_at(properties: &Properties, headers: &[DelayHeader], now: u64) -> Option<u64> {
    headers.iter().find_map(|header| {
        let (_, value) = properties.iter().find(|(name, _)| *name == header.name)?;
        header.millis(value).map(|ms| now.saturating_add(ms))
    })
}

/// Every property name some queue reads as a delay, for the protocols' check as they
/// read a message (see the module comment). Looked up by first byte first: almost every
/// property is turned away by one bit test.
#[derive(Debug, Clone, Default)]
pub struct DelayHeaderNames {
    first_bytes: [u64; 4],
    names: Vec<Arc<str>>,
}

impl DelayHeaderNames {
    pub fn new<'a>(headers: impl IntoIterator<Item = &'a DelayHeader>) -> Self {
        let mut names = DelayHeaderNames::default();
        for header in headers {
            if names.names.contains(&header.name) {
                continue;
            }
            if let Some(&first) = header.name.as_bytes().first() {
                names.first_bytes[usize::from(first >> 6)] |= 1 << (first & 63);
            }
            names.names.push(header.name.clone());
        }
        names
    }

    /// Whether a name starting with this byte may be one of them.
    #[inline]
    pub fn may_start(&self, first: u8) -> bool {
        self.first_bytes[usize::from(first >> 6)] & (1 << (first & 63)) != 0
    }

    pub fn contains(&self, name: &str) -> bool {
        name.as_bytes().first().is_some_and(|b| self.may_start(*b))
            && self.names.iter().any(|n| **n == *name)
    }
}

/// Kept as its config text (a queue's settings changed at run time are stored).
impl serde::Serialize for DelayHeader {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> serde::Deserialize<'de> for DelayHeader {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DelayHeader::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> DelayHeader {
        DelayHeader::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn props(list: &[(&str, Value)]) -> Properties {
        list.iter()
            .map(|(n, v)| (Arc::from(*n), v.clone()))
            .collect()
    }

    fn text(s: &str) -> Value {
        Value::String(Arc::from(s))
    }

    #[test]
    fn names_carry_their_unit() {
        assert_eq!(
            DelayHeader::defaults(),
            vec![header("x-delay:ms"), header("delay:s")]
        );
        assert_eq!(
            header("a:b:s").name.as_ref(),
            "a:b",
            "the unit follows the last colon"
        );
        let errors = [
            ("delay", DelayHeaderError::NoUnit("delay".into())),
            ("delay:min", DelayHeaderError::NoUnit("delay:min".into())),
            (":ms", DelayHeaderError::EmptyName(":ms".into())),
            (
                "AMQ_SCHEDULED_DELAY:ms",
                DelayHeaderError::BrokerDefined("AMQ_SCHEDULED_DELAY".into()),
            ),
        ];
        for (text, want) in errors {
            assert_eq!(DelayHeader::parse(text), Err(want), "{text}");
        }
    }

    #[test]
    fn the_first_listed_name_with_a_delay_wins() {
        let headers = DelayHeader::defaults();
        let due = |list: &[(&str, Value)]| due_at(&props(list), &headers, 1_000);
        assert_eq!(due(&[("x-delay", text("300"))]), Some(1_300));
        assert_eq!(due(&[("x-delay", Value::Int(300))]), Some(1_300));
        assert_eq!(due(&[("delay", text(" 2 "))]), Some(3_000));
        assert_eq!(
            due(&[("delay", text("2")), ("x-delay", text("5"))]),
            Some(1_005)
        );
        assert_eq!(
            due(&[("x-delay", text("0"))]),
            Some(1_000),
            "an explicit zero"
        );
        assert_eq!(due(&[("other", text("5"))]), None);
        assert_eq!(due(&[]), None);
    }

    #[test]
    fn a_value_that_is_not_a_delay_is_no_delay() {
        let headers = DelayHeader::defaults();
        let due = |list: &[(&str, Value)]| due_at(&props(list), &headers, 1_000);
        for bad in [
            text("abc"),
            text("-5"),
            text("1.5"),
            Value::Int(-1),
            Value::Double(2.0),
        ] {
            assert_eq!(due(&[("x-delay", bad.clone())]), None, "{bad:?}");
        }
        assert_eq!(
            due(&[("x-delay", text("soon")), ("delay", text("1"))]),
            Some(2_000),
            "the next listed name is still read"
        );
        assert_eq!(
            due(&[("delay", text("99999999999999999999"))]),
            None,
            "beyond u64"
        );
        assert_eq!(due(&[("delay", text("18446744073709551"))]), Some(u64::MAX));
    }

    #[test]
    fn an_empty_list_reads_nothing() {
        let p = props(&[("x-delay", text("300")), ("delay", text("2"))]);
        assert_eq!(due_at(&p, &[], 1_000), None);
    }

    #[test]
    fn names_are_found_by_first_byte_then_in_full() {
        let custom = [header("retry-in:s")];
        let names = DelayHeaderNames::new(DelayHeader::defaults().iter().chain(&custom));
        for name in ["x-delay", "delay", "retry-in"] {
            assert!(names.contains(name), "{name}");
        }
        for name in ["delays", "x", "", "destination", "\u{e9}t\u{e9}"] {
            assert!(!names.contains(name), "{name}");
        }
        assert!(names.may_start(b'x') && names.may_start(b'd') && names.may_start(b'r'));
        assert!(!names.may_start(b'A') && !names.may_start(0xc3));
        assert!(!DelayHeaderNames::default().contains("delay"));
    }
}
