//! AMQP messages to and from `core::Message`.
//!
//! Inbound, the core gets the neutral fields (so a STOMP consumer or a selector can read them)
//! plus the original encoding from the message annotations on (`WireForm`, format
//! [`WIRE_FORMAT`]), so an AMQP consumer receives the bare message it came in with. Outbound,
//! a message with that wire form gets a fresh header in front of those bytes; any other message
//! (e.g. from STOMP) is built from the neutral fields.
//!
//! | core field      | AMQP                                                    | STOMP header            |
//! |-----------------|---------------------------------------------------------|-------------------------|
//! | body            | data (joined) / amqp-value string or binary / else the encoded body | body        |
//! | durable         | header.durable                                          | persistent              |
//! | priority        | header.priority                                         | priority                |
//! | expires_at      | properties.absolute-expiry-time, else now + header.ttl  | expires / ttl           |
//! | message_id      | properties.message-id (text form)                       | original-message-id     |
//! | correlation_id  | properties.correlation-id                               | correlation-id          |
//! | reply_to        | properties.reply-to                                     | reply-to                |
//! | content_type    | properties.content-type                                 | content-type            |
//! | subject         | properties.subject                                      | subject                 |
//! | group_id        | properties.group-id, else app-property JMSXGroupID / _AMQ_GROUP_ID / _HQ_GROUP_ID | JMSXGroupID |
//! | group_seq       | properties.group-sequence (uint, 4294967295 = -1)       | JMSXGroupSeq            |
//! | due_at          | annotation x-opt-delivery-time (abs) / x-opt-delivery-delay (rel), or app-properties AMQ_SCHEDULED_TIME, _AMQ_SCHED_DELIVERY, AMQ_SCHEDULED_DELAY | same names |
//! | (core: due_at)  | app-properties in the queue's `delay_headers` (x-delay, delay (s) by default), read by the core | same names |
//! | properties      | application-properties (typed)                          | other headers (strings) |

use crate::core::delay_headers::DelayHeaderNames;
use crate::core::message::{Message, Property, Value, WireForm};
use crate::core::properties::Properties as UserProperties;
use crate::protocol::amqp::wire::error::AmqpCodecError;
use crate::protocol::amqp::wire::messaging::{
    ApplicationProperties, Body, Header, Message as AmqpMessage, MessageId, MessageView, Properties,
};
use crate::protocol::amqp::wire::types::{code, Map, Str, Symbol, Value as AmqpValue};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// `WireForm::format` of our stored encoding: message-annotations (if any), bare message, footer.
pub const WIRE_FORMAT: u32 = 0x414d_5150; // "AMQP"

/// Ten years: a delay beyond it is a mistake, not a delay (as for STOMP).
const ABSURD_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

pub const DELIVERY_TIME: &str = "x-opt-delivery-time";
pub const DELIVERY_DELAY: &str = "x-opt-delivery-delay";
const GROUP_ID_PROPERTIES: [&str; 3] = ["JMSXGroupID", "_AMQ_GROUP_ID", "_HQ_GROUP_ID"];

/// Why an AMQP message cannot become a core message (rejected with `amqp:invalid-field`).
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("invalid {field}: {why}")]
    InvalidField {
        field: &'static str,
        why: &'static str,
    },
    /// The application properties do not decode (rejected with `amqp:decode-error`).
    #[error("application-properties: {0}")]
    Malformed(AmqpCodecError),
}

impl ConvertError {
    /// The AMQP error condition to reject the message with.
    pub fn condition(&self) -> &'static str {
        match self {
            ConvertError::InvalidField { .. } => {
                crate::protocol::amqp::wire::error::condition::INVALID_FIELD
            }
            ConvertError::Malformed(e) => e.condition(),
        }
    }
}

fn invalid(field: &'static str, why: &'static str) -> ConvertError {
    ConvertError::InvalidField { field, why }
}

/// The core's text form of a message-id / correlation-id.
pub fn id_text(id: &MessageId) -> Arc<str> {
    match id {
        MessageId::String(s) => Arc::from(s.as_str()),
        MessageId::Ulong(n) => Arc::from(n.to_string()),
        MessageId::Uuid(u) => Arc::from(uuid_text(u)),
        MessageId::Binary(b) => Arc::from(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

fn uuid_text(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Application properties the broker acts on (delays, groups): always decoded in full.
fn has_meaning(name: &str) -> bool {
    name.as_bytes()
        .first()
        .is_some_and(|b| may_have_meaning(*b))
        && (ScheduleProperties::NAMES.contains(&name) || !kept_as_property(name))
}

/// Every name the broker acts on starts with one of these: most names are
/// turned away by their first byte instead of by seven comparisons (a test
/// keeps the list whole). Names the core may read as a delay have their own
/// first bytes, in [`DelayHeaderNames`].
fn may_have_meaning(first: u8) -> bool {
    matches!(first, b'A' | b'_' | b'J')
}

/// A scalar read in place: a value, or text still to be copied.
enum InPlace<'a> {
    Value(Value),
    Text(&'a str),
}

/// [`core_value`] of an encoded fixed-width number, boolean, null or short string,
/// read in place; `None` for anything else (or anything malformed), which the
/// caller decodes in full.
fn scalar_core_value(encoded: &[u8]) -> Option<Value> {
    Some(match read_in_place(encoded)? {
        InPlace::Value(v) => v,
        InPlace::Text(text) => Value::String(Arc::from(text)),
    })
}

/// [`scalar_core_value`] without making anything: checking a value costs no allocation.
fn read_in_place(encoded: &[u8]) -> Option<InPlace<'_>> {
    let (&c, b) = encoded.split_first()?;
    let be4 = || b.try_into().ok().map(u32::from_be_bytes);
    let be8 = || b.try_into().ok().map(u64::from_be_bytes);
    Some(InPlace::Value(match (c, b) {
        (code::NULL, []) => Value::Null,
        (code::TRUE, []) | (code::BOOLEAN, [1]) => Value::Bool(true),
        (code::FALSE, []) | (code::BOOLEAN, [0]) => Value::Bool(false),
        (code::UINT0 | code::ULONG0, []) => Value::Int(0),
        (code::UBYTE | code::SMALLUINT | code::SMALLULONG, [n]) => Value::Int(i64::from(*n)),
        (code::BYTE | code::SMALLINT | code::SMALLLONG, [n]) => Value::Int(i64::from(*n as i8)),
        (code::USHORT, [h, l]) => Value::Int(i64::from(u16::from_be_bytes([*h, *l]))),
        (code::SHORT, [h, l]) => Value::Int(i64::from(i16::from_be_bytes([*h, *l]))),
        (code::UINT, _) => Value::Int(i64::from(be4()?)),
        (code::INT, _) => Value::Int(i64::from(be4()? as i32)),
        (code::ULONG | code::LONG | code::TIMESTAMP, _) => Value::Int(be8()? as i64),
        (code::FLOAT, _) => Value::Double(f64::from(f32::from_bits(be4()?))),
        (code::DOUBLE, _) => Value::Double(f64::from_bits(be8()?)),
        (code::STR8, [len, text @ ..]) if usize::from(*len) == text.len() => {
            return crate::protocol::amqp::wire::types::text(text)
                .ok()
                .map(InPlace::Text)
        }
        _ => return None,
    }))
}

/// Application properties the core keeps: group ids and sequences become fields instead.
fn kept_as_property(name: &str) -> bool {
    !GROUP_ID_PROPERTIES.contains(&name) && name != "JMSXGroupSeq"
}

/// The core properties of an application-properties map that [`inbound`] checked
/// (see [`Properties::encoded`]): the same ones, in the same order, it would
/// have built at once.
fn decode_properties(map: &Bytes) -> Vec<Property> {
    let mut entries = ApplicationProperties::of(map);
    let mut out = Vec::with_capacity(entries.size_hint().1.unwrap_or(0).saturating_sub(1));
    while let Some(Ok((key, encoded))) = entries.next_encoded() {
        let Some(name) = key.filter(|name| kept_as_property(name)) else {
            continue;
        };
        let value = scalar_core_value(encoded)
            .or_else(|| entries.decode(encoded).ok().as_ref().and_then(core_value));
        if let Some(value) = value {
            out.push((Arc::from(name), value));
        }
    }
    out
}

/// An application-property value as the core keeps it (typed, so selectors compare numbers).
pub fn core_value(v: &AmqpValue) -> Option<Value> {
    Some(match v {
        AmqpValue::Null => Value::Null,
        AmqpValue::Bool(b) => Value::Bool(*b),
        AmqpValue::Ubyte(n) => Value::Int(i64::from(*n)),
        AmqpValue::Ushort(n) => Value::Int(i64::from(*n)),
        AmqpValue::Uint(n) => Value::Int(i64::from(*n)),
        AmqpValue::Ulong(n) => Value::Int(*n as i64),
        AmqpValue::Byte(n) => Value::Int(i64::from(*n)),
        AmqpValue::Short(n) => Value::Int(i64::from(*n)),
        AmqpValue::Int(n) => Value::Int(i64::from(*n)),
        AmqpValue::Long(n) => Value::Int(*n),
        AmqpValue::Timestamp(n) => Value::Int(*n),
        AmqpValue::Float(f) => Value::Double(f64::from(*f)),
        AmqpValue::Double(f) => Value::Double(*f),
        AmqpValue::Char(c) => Value::String(Arc::from(c.to_string())),
        AmqpValue::String(s) => Value::String(Arc::from(s.as_str())),
        AmqpValue::Symbol(s) => Value::String(Arc::from(s.as_str())),
        AmqpValue::Binary(b) => Value::Binary(b.clone()),
        AmqpValue::Uuid(u) => Value::String(Arc::from(uuid_text(u))),
        _ => return None,
    })
}

fn amqp_value(v: &Value) -> AmqpValue {
    match v {
        Value::Null => AmqpValue::Null,
        Value::Bool(b) => AmqpValue::Bool(*b),
        Value::Int(n) => AmqpValue::Long(*n),
        Value::Double(f) => AmqpValue::Double(*f),
        Value::String(s) => AmqpValue::String(Str::from(&**s)),
        Value::Binary(b) => AmqpValue::Binary(b.clone()),
    }
}

fn key_str(k: &AmqpValue) -> Option<&str> {
    match k {
        AmqpValue::String(s) => Some(s.as_str()),
        AmqpValue::Symbol(s) => Some(s.as_str()),
        _ => None,
    }
}

fn annotation<'m>(map: Option<&'m Map>, key: &str) -> Option<&'m AmqpValue> {
    map?.iter()
        .find(|(k, _)| key_str(k) == Some(key))
        .map(|(_, v)| v)
}

fn as_i64(v: &AmqpValue) -> Option<i64> {
    match v {
        AmqpValue::Timestamp(n) | AmqpValue::Long(n) => Some(*n),
        AmqpValue::Int(n) => Some(i64::from(*n)),
        AmqpValue::Uint(n) => Some(i64::from(*n)),
        AmqpValue::Ulong(n) => i64::try_from(*n).ok(),
        AmqpValue::Short(n) => Some(i64::from(*n)),
        AmqpValue::Byte(n) => Some(i64::from(*n)),
        AmqpValue::Ubyte(n) => Some(i64::from(*n)),
        AmqpValue::Ushort(n) => Some(i64::from(*n)),
        AmqpValue::String(s) => s.as_str().trim().parse().ok(),
        _ => None,
    }
}

/// The application properties that schedule a message, first occurrence of each,
/// in the order of [`ScheduleProperties::NAMES`].
#[derive(Default)]
struct ScheduleProperties([Option<AmqpValue>; 3]);

impl ScheduleProperties {
    /// The broker-defined names (`core::delay_headers::BROKER_DELAY_NAMES`); the
    /// others a queue may read as a delay stay plain properties for the core.
    const NAMES: [&'static str; 3] = [
        "AMQ_SCHEDULED_TIME",
        "_AMQ_SCHED_DELIVERY",
        "AMQ_SCHEDULED_DELAY",
    ];

    fn note(&mut self, name: &str, value: &AmqpValue) {
        if let Some(i) = Self::NAMES.iter().position(|n| *n == name) {
            self.0[i].get_or_insert_with(|| value.clone());
        }
    }

    fn get(&self, name: &str) -> Option<&AmqpValue> {
        let i = Self::NAMES.iter().position(|n| *n == name)?;
        self.0[i].as_ref()
    }
}

/// The due time: `x-opt-delivery-time` (absolute) beats `x-opt-delivery-delay` (relative);
/// then the application properties other brokers' clients use (as STOMP headers do).
fn due_at(
    view: &MessageView,
    props: &ScheduleProperties,
    now: impl Fn() -> u64,
) -> Result<Option<u64>, ConvertError> {
    let ann = view.message_annotations();
    let absolute = [
        (annotation(ann, DELIVERY_TIME), DELIVERY_TIME),
        (props.get("AMQ_SCHEDULED_TIME"), "AMQ_SCHEDULED_TIME"),
        (props.get("_AMQ_SCHED_DELIVERY"), "_AMQ_SCHED_DELIVERY"),
    ];
    for (value, name) in absolute {
        if let Some(v) = value {
            let at = as_i64(v).ok_or(invalid(name, "not an integer time"))?;
            let at = u64::try_from(at).map_err(|_| invalid(name, "negative time"))?;
            if at > now().saturating_add(ABSURD_MS) {
                return Err(invalid(name, "absurdly far in the future"));
            }
            return Ok(Some(at));
        }
    }
    let relative = [
        (annotation(ann, DELIVERY_DELAY), DELIVERY_DELAY),
        (props.get("AMQ_SCHEDULED_DELAY"), "AMQ_SCHEDULED_DELAY"),
    ];
    for (value, name) in relative {
        if let Some(v) = value {
            let d = as_i64(v).ok_or(invalid(name, "not an integer delay"))?;
            let ms = u64::try_from(d).map_err(|_| invalid(name, "a delay cannot be negative"))?;
            if ms > ABSURD_MS {
                return Err(invalid(name, "absurdly far in the future"));
            }
            return Ok(Some(now() + ms));
        }
    }
    Ok(None)
}

/// The body as neutral bytes: a single data section as the slice it is, several
/// joined, a string or binary amqp-value as its bytes, anything else as its encoded
/// section(s).
fn body_bytes(view: &MessageView) -> Bytes {
    if let Some(data) = view.single_data() {
        return data;
    }
    match view.body() {
        Body::Empty => Bytes::new(),
        Body::Data(chunks) => {
            let mut b = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            chunks.iter().for_each(|c| b.extend_from_slice(c));
            b.freeze()
        }
        Body::Value(AmqpValue::String(s)) => s.as_bytes().clone(),
        Body::Value(AmqpValue::Binary(b)) => b.clone(),
        Body::Value(_) | Body::Sequence(_) => view
            .ranges()
            .body
            .clone()
            .map_or_else(Bytes::new, |r| view.raw().slice(r)),
    }
}

/// Builds the core message for a transfer's payload. `address` is where the link (or the
/// message's `to`, for the anonymous relay) sends it. `arrived` stamps it (the connection
/// reads the clock once per wake-up, before the frames it then reads); a delay or a
/// time-to-live counts from `now()`, read only for a message that has one, so that a
/// message read after the stamp is never due, or expired, before it came in.
/// An application property named in `delay_names` marks the message for the core,
/// which reads it as a delay if the queue's `delay_headers` say so.
pub fn inbound(
    view: &MessageView,
    address: Arc<str>,
    arrived: u64,
    now: impl Fn() -> u64,
    delay_names: &DelayHeaderNames,
) -> Result<Message, ConvertError> {
    let mut m = Message::new(address, body_bytes(view), arrived);
    if let Some(h) = view.header() {
        m.durable = h.durable;
        m.priority = h.priority.min(9);
        m.expires_at = h.ttl.filter(|t| *t > 0).map(|t| now() + u64::from(t));
    }
    if let Some(p) = view.properties() {
        m.message_id = p.message_id.as_ref().map(id_text);
        m.correlation_id = p.correlation_id.as_ref().map(id_text);
        m.reply_to = p.reply_to.as_ref().map(|s| Arc::from(s.as_str()));
        m.content_type = p.content_type.as_ref().map(|s| Arc::from(s.as_str()));
        m.subject = p.subject.as_ref().map(|s| Arc::from(s.as_str()));
        m.user_id = p
            .user_id
            .as_ref()
            .map(|b| Arc::from(String::from_utf8_lossy(b).as_ref()));
        if let Some(at) = p.absolute_expiry_time.filter(|t| *t > 0) {
            m.expires_at = Some(at as u64);
        }
        m.group_id = p.group_id.as_ref().map(|s| Arc::from(s.as_str()));
        m.group_seq = p.group_sequence.map(|s| s as i32);
    }
    // Every entry is checked now, as the message comes in; the broker acts on a
    // few (delays, groups). The rest stay encoded until someone reads them
    // (see `core::properties`): AMQP consumers get the original bytes anyway.
    let mut schedule = ScheduleProperties::default();
    let map = view.application_properties_encoded();
    let kept = match plain_entries(map, delay_names) {
        Some(kept) => kept,
        None => walk_entries(view, &mut m, &mut schedule, delay_names)?,
    };
    if kept > 0 {
        if let Some(map) = view.application_properties_bytes() {
            m.properties = UserProperties::encoded(map, kept, decode_properties);
        }
    }
    m.due_at = due_at(view, &schedule, now)?;
    let ranges = view.ranges();
    let from = ranges
        .message_annotations
        .as_ref()
        .map_or(ranges.bare.start, |r| r.start);
    m.wire = Some(WireForm {
        format: WIRE_FORMAT,
        bytes: view.raw().slice(from..),
    });
    Ok(m)
}

/// The entries of an application-properties map when every one is plain: an
/// ASCII string key that cannot be one the broker acts on (nor one a queue may
/// read as a delay), and a value
/// [`read_in_place`] checks. That is what nearly every client sends, and one
/// pass over the bytes tells, where [`walk_entries`] reads entry by entry.
/// `None` sends the map the long way: anything else in it, no map, or anything
/// malformed (which the long way reports).
fn plain_entries(map: &[u8], delay_names: &DelayHeaderNames) -> Option<usize> {
    // The size covers the count and the entries; the map must end where it says.
    let (count, mut body) = match map {
        [code::MAP8, size, count, rest @ ..] => {
            (usize::from(*size) == rest.len() + 1).then_some((usize::from(*count), rest))?
        }
        [code::MAP32, rest @ ..] => {
            let word = |at: usize| -> Option<usize> {
                let b: [u8; 4] = rest.get(at..at + 4)?.try_into().ok()?;
                Some(u32::from_be_bytes(b) as usize)
            };
            let body = rest.get(8..)?;
            (word(0)? == body.len() + 4).then_some((word(4)?, body))?
        }
        _ => return None,
    };
    if count % 2 != 0 {
        return None;
    }
    for _ in 0..count / 2 {
        let [code::STR8 | code::SYM8, len, rest @ ..] = body else {
            return None;
        };
        let (name, rest) = rest.split_at_checked(usize::from(*len))?;
        // An ASCII name whose first byte rules out a meaning; any other goes
        // the long way. (One OR over the bytes: names are short.)
        let ascii = name.iter().fold(0, |all, b| all | b) < 0x80;
        let first = name.first().copied();
        if !ascii || first.is_none_or(|b| may_have_meaning(b) || delay_names.may_start(b)) {
            return None;
        }
        let width = match *rest.first()? {
            code::NULL | code::TRUE | code::FALSE | code::UINT0 | code::ULONG0 => 0,
            code::BOOLEAN => match *rest.get(1)? {
                0 | 1 => 1,
                _ => return None,
            },
            code::UBYTE | code::SMALLUINT | code::SMALLULONG => 1,
            code::BYTE | code::SMALLINT | code::SMALLLONG => 1,
            code::USHORT | code::SHORT => 2,
            code::UINT | code::INT | code::FLOAT => 4,
            code::ULONG | code::LONG | code::TIMESTAMP | code::DOUBLE => 8,
            code::STR8 => {
                let len = usize::from(*rest.get(1)?);
                crate::protocol::amqp::wire::types::text(rest.get(2..2 + len)?).ok()?;
                1 + len
            }
            _ => return None,
        };
        body = rest.get(1 + width..)?;
    }
    // Bytes the count does not cover make the map malformed.
    body.is_empty().then_some(count / 2)
}

/// Checks every application property, takes the group and delay ones into `m`
/// and `schedule`, marks `m` when one may be a queue's delay header, and returns
/// how many the core keeps.
fn walk_entries(
    view: &MessageView,
    m: &mut Message,
    schedule: &mut ScheduleProperties,
    delay_names: &DelayHeaderNames,
) -> Result<usize, ConvertError> {
    let mut entries = view.application_property_entries();
    let mut kept = 0;
    while let Some(entry) = entries.next_encoded() {
        let (key, encoded) = entry.map_err(ConvertError::Malformed)?;
        let Some(name) = key else {
            // Not kept, but still checked, as every value is.
            entries.decode(encoded).map_err(ConvertError::Malformed)?;
            continue;
        };
        if !has_meaning(name) {
            m.may_carry_delay |= delay_names.contains(name);
            // Most are plain numbers or short strings: checked in place.
            if read_in_place(encoded).is_none() {
                entries.decode(encoded).map_err(ConvertError::Malformed)?;
            }
            kept += 1;
            continue;
        }
        let v = entries.decode(encoded).map_err(ConvertError::Malformed)?;
        schedule.note(name, &v);
        let Some(value) = core_value(&v) else {
            continue;
        };
        if GROUP_ID_PROPERTIES.contains(&name) {
            if m.group_id.is_none() {
                m.group_id = value.as_str().map(Arc::from);
            }
            continue;
        }
        if name == "JMSXGroupSeq" {
            if m.group_seq.is_none() {
                m.group_seq = as_i64(&v).map(|s| s as u32 as i32);
            }
            continue;
        }
        kept += 1;
    }
    Ok(kept)
}

/// Brings the original bytes in line with a group id the broker stamped on the
/// message (connection-factory autogroup or group_id), so AMQP consumers see it.
pub fn stamp_group(m: &mut Message) {
    let (Some(group), Some(wire)) = (&m.group_id, &m.wire) else {
        return;
    };
    let Ok(view) = MessageView::parse(wire.bytes.clone()) else {
        return;
    };
    if view.properties().is_some_and(|p| p.group_id.is_some()) {
        return;
    }
    let Ok(mut amqp) = view.to_message() else {
        return;
    };
    amqp.properties
        .get_or_insert_with(Properties::default)
        .group_id = Some(Str::from(&**group));
    m.wire = Some(WireForm {
        format: WIRE_FORMAT,
        bytes: amqp.to_bytes(),
    });
}

/// The header an outgoing delivery carries.
fn header_for(m: &Message, delivery_count: u32, now: u64) -> Header {
    Header {
        durable: m.durable,
        priority: m.priority,
        ttl: m
            .expires_at
            .map(|at| u32::try_from(at.saturating_sub(now).max(1)).unwrap_or(u32::MAX)),
        first_acquirer: delivery_count <= 1,
        delivery_count: delivery_count.saturating_sub(1),
    }
}

/// Received sections at least this long follow their new header from where they are
/// (see [`outbound`]); shorter ones are cheaper to copy than to share.
pub const SHARE_FROM: usize = 1024;

/// Encodes the payload for a delivery into `buf`: the original bytes behind a fresh header
/// when the message came in over AMQP, otherwise a message built from the neutral fields.
/// Original bytes of [`SHARE_FROM`] or more are not copied: they are returned, to be sent
/// right after `buf`.
pub fn outbound(
    m: &Message,
    delivery_count: u32,
    now: u64,
    group_first_key: Option<&str>,
    buf: &mut BytesMut,
) -> Option<Bytes> {
    use crate::protocol::amqp::wire::described::Composite;
    let header = header_for(m, delivery_count, now);
    if let Some(key) = group_first_key {
        // The first message of a group for this consumer carries the key as an
        // application property (Artemis group-first-key): rebuild this one message.
        let mut amqp = match &m.wire {
            Some(w) if w.format == WIRE_FORMAT => match MessageView::parse(w.bytes.clone()) {
                Ok(view) => view
                    .to_message()
                    .unwrap_or_else(|_| build(m, header.clone())),
                Err(_) => build(m, header.clone()),
            },
            _ => build(m, header.clone()),
        };
        amqp.header = Some(header);
        amqp.application_properties
            .get_or_insert_with(Map::new)
            .push((AmqpValue::String(Str::from(key)), AmqpValue::Bool(true)));
        amqp.encode(buf);
        return None;
    }
    match &m.wire {
        Some(w) if w.format == WIRE_FORMAT => {
            header.encode(buf);
            if w.bytes.len() >= SHARE_FROM {
                return Some(w.bytes.clone());
            }
            buf.extend_from_slice(&w.bytes);
        }
        _ => build(m, header).encode(buf),
    }
    None
}

/// A message from another protocol, as an AMQP client expects it.
fn build(m: &Message, header: Header) -> AmqpMessage {
    let text = |s: &Option<Arc<str>>| s.as_deref().map(Str::from);
    let properties = Properties {
        message_id: m
            .message_id
            .as_deref()
            .map(|s| MessageId::String(Str::from(s))),
        user_id: m
            .user_id
            .as_deref()
            .map(|s| Bytes::copy_from_slice(s.as_bytes())),
        to: Some(Str::from(&*m.address)),
        subject: text(&m.subject),
        reply_to: text(&m.reply_to),
        correlation_id: m
            .correlation_id
            .as_deref()
            .map(|s| MessageId::String(Str::from(s))),
        content_type: m.content_type.as_deref().map(Symbol::from),
        content_encoding: None,
        absolute_expiry_time: m.expires_at.map(|t| t as i64),
        creation_time: Some(m.timestamp as i64),
        group_id: text(&m.group_id),
        group_sequence: m.group_seq.map(|s| s as u32),
        reply_to_group_id: None,
    };
    let application_properties: Map = m
        .properties
        .iter()
        .map(|(k, v)| (AmqpValue::String(Str::from(&**k)), amqp_value(v)))
        .collect();
    let mut annotations = Map::new();
    if let Some(at) = m.due_at {
        annotations.push((
            AmqpValue::symbol(DELIVERY_TIME),
            AmqpValue::Timestamp(at as i64),
        ));
    }
    AmqpMessage {
        header: Some(header),
        delivery_annotations: None,
        message_annotations: (!annotations.is_empty()).then_some(annotations),
        properties: Some(properties),
        application_properties: (!application_properties.is_empty())
            .then_some(application_properties),
        body: Body::Data(vec![m.body.clone()]),
        footer: None,
    }
}

#[cfg(test)]
mod tests;
