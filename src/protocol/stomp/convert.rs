//! STOMP frames to and from core messages: destinations, the headers with a
//! meaning (persistence, expiry, priority, groups, delays), user headers.

use super::codec::FrameWriter;
use super::error::StompError;
use super::frame::Frame;
use crate::core::delay_headers::DelayHeaderNames;
use crate::core::message::{now_ms, Message, Value};
use crate::core::names::Names;
use crate::core::RoutingType;
use crate::protocol::write_parts::WriteParts;
use std::sync::Arc;

/// Why a SEND cannot become a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("missing required header '{0}'")]
    MissingHeader(&'static str),
    #[error("invalid value {value:?} for header '{header}': {why}")]
    InvalidHeader {
        header: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("invalid destination '{0}'")]
    InvalidDestination(String),
}

/// A destination as STOMP names it, resolved to the core's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub name: String,
    pub routing: RoutingType,
}

/// `/queue/x` and plain `x` are queues (as in Artemis), `/topic/x` is a topic.
pub fn parse_destination(text: &str) -> Result<Destination, ConvertError> {
    let (name, routing) = if let Some(rest) = text.strip_prefix("/queue/") {
        (rest, RoutingType::Anycast)
    } else if let Some(rest) = text.strip_prefix("/topic/") {
        (rest, RoutingType::Multicast)
    } else if let Some(rest) = text.strip_prefix("/amq/queue/") {
        (rest, RoutingType::Anycast)
    } else {
        (text, RoutingType::Anycast)
    };
    if name.is_empty() || name.starts_with('/') {
        return Err(ConvertError::InvalidDestination(text.to_owned()));
    }
    Ok(Destination {
        name: name.to_owned(),
        routing,
    })
}

/// The STOMP name of a core destination.
pub fn format_destination(name: &str, routing: RoutingType) -> String {
    match routing {
        RoutingType::Anycast => format!("/queue/{name}"),
        RoutingType::Multicast => format!("/topic/{name}"),
    }
}

/// Headers that steer the broker and are not carried as message properties.
const FRAME_HEADERS: &[&str] = &[
    "destination",
    "receipt",
    "transaction",
    "content-length",
    "content-type",
    "persistent",
    "priority",
    "expires",
    "ttl",
    "correlation-id",
    "reply-to",
    "message-id",
    "subject",
    "JMSXGroupID",
    "_AMQ_GROUP_ID",
    "_HQ_GROUP_ID",
    "JMSXGroupSeq",
    "AMQ_SCHEDULED_DELAY",
    "AMQ_SCHEDULED_TIME",
    "_AMQ_SCHED_DELIVERY",
    "redelivered",
    "subscription",
    "ack",
    "timestamp",
];

/// The place of a broker header in `FRAME_HEADERS`, as a constant.
macro_rules! slot {
    ($name:literal) => {
        const { slot_of($name) }
    };
}

pub const GROUP_ID_HEADERS: [&str; 3] = ["JMSXGroupID", "_AMQ_GROUP_ID", "_HQ_GROUP_ID"];

/// Builds the core message for a SEND. `now` is the broker clock in ms. A header
/// named in `delay_names` stays a property and marks the message for the core, which
/// reads it as a delay if the queue's `delay_headers` say so.
pub fn message_from_send(
    frame: &Frame,
    dest: &Destination,
    now: u64,
    names: &mut Names,
    delay_names: &DelayHeaderNames,
) -> Result<Message, ConvertError> {
    let mut message = Message::new(names.get(&dest.name), frame.body.clone(), now);
    // One pass over the headers: broker headers are noted (the first of a
    // repeated one wins), the rest become properties.
    let mut known = Known::default();
    let mut properties = Vec::new();
    for (name, value) in frame.headers.iter() {
        if let Some(index) = frame_header_slot(name) {
            known.values[index].get_or_insert(value);
            continue;
        }
        if properties
            .iter()
            .any(|(n, _): &(Arc<str>, Value)| &**n == name)
        {
            continue;
        }
        message.may_carry_delay |= delay_names.contains(name);
        properties.push((names.get(name), Value::String(Arc::from(value))));
    }
    message.properties = properties.into();
    message.durable = known
        .get(slot!("persistent"))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if let Some(p) = known.get(slot!("priority")) {
        message.priority = parse_num::<u8>("priority", p)?.min(9);
    }
    message.expires_at = expiry(&known, now)?;
    message.content_type = known.text(slot!("content-type"));
    message.correlation_id = known.text(slot!("correlation-id"));
    message.reply_to = known.text(slot!("reply-to"));
    message.subject = known.text(slot!("subject"));
    message.message_id = known.text(slot!("message-id"));
    message.group_id = [
        slot!("JMSXGroupID"),
        slot!("_AMQ_GROUP_ID"),
        slot!("_HQ_GROUP_ID"),
    ]
    .into_iter()
    .find_map(|h| known.text(h));
    if let Some(seq) = known.get(slot!("JMSXGroupSeq")) {
        message.group_seq = Some(parse_group_seq(seq)?);
    }
    message.due_at = due_time(&known, now)?;
    Ok(message)
}

/// The broker headers of one SEND, found in a single pass, looked up by
/// their place in `FRAME_HEADERS` (fixed at compile time by `slot!`: a
/// lookup by name scanned that list a dozen times per message).
#[derive(Default)]
struct Known<'a> {
    values: [Option<&'a str>; FRAME_HEADERS.len()],
}

impl<'a> Known<'a> {
    fn get(&self, slot: usize) -> Option<&'a str> {
        self.values[slot]
    }

    fn text(&self, slot: usize) -> Option<Arc<str>> {
        self.get(slot).filter(|v| !v.is_empty()).map(Arc::from)
    }
}

/// Where a header sits in `FRAME_HEADERS`, if it is one. Every header of every SEND is
/// looked up: comparing against the whole list was 5% of the broker's CPU, so the names
/// are bucketed by length and first byte (at most a few candidates each).
fn frame_header_slot(name: &str) -> Option<usize> {
    const LONGEST: usize = 24;
    type Buckets = Vec<Vec<(u8, usize)>>;
    static BUCKETS: std::sync::OnceLock<Buckets> = std::sync::OnceLock::new();
    let buckets = BUCKETS.get_or_init(|| {
        let mut b: Buckets = vec![Vec::new(); LONGEST + 1];
        for (slot, h) in FRAME_HEADERS.iter().enumerate() {
            b[h.len()].push((h.as_bytes()[0], slot));
        }
        b
    });
    let first = *name.as_bytes().first()?;
    buckets
        .get(name.len())?
        .iter()
        .find(|(f, slot)| *f == first && FRAME_HEADERS[*slot] == name)
        .map(|(_, slot)| *slot)
}

/// Where a header sits in `FRAME_HEADERS`; a name not in it fails the build.
const fn slot_of(name: &str) -> usize {
    let mut i = 0;
    while i < FRAME_HEADERS.len() {
        let (a, b) = (FRAME_HEADERS[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("not in FRAME_HEADERS");
}

fn parse_num<T: std::str::FromStr>(header: &'static str, value: &str) -> Result<T, ConvertError> {
    value
        .trim()
        .parse::<T>()
        .map_err(|_| ConvertError::InvalidHeader {
            header,
            value: value.chars().take(40).collect(),
            why: "not a non-negative integer",
        })
}

/// JMSXGroupSeq is signed, but JMS clients over AMQP write -1 as 4294967295.
fn parse_group_seq(value: &str) -> Result<i32, ConvertError> {
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| ConvertError::InvalidHeader {
            header: "JMSXGroupSeq",
            value: value.chars().take(40).collect(),
            why: "not an integer",
        })?;
    if (i32::MIN as i64..=u32::MAX as i64).contains(&n) {
        Ok(n as u32 as i32)
    } else {
        Err(ConvertError::InvalidHeader {
            header: "JMSXGroupSeq",
            value: value.to_owned(),
            why: "out of range",
        })
    }
}

/// `expires` is absolute epoch ms (0 = never, as ActiveMQ); `ttl` is relative ms.
fn expiry(frame: &Known<'_>, now: u64) -> Result<Option<u64>, ConvertError> {
    if let Some(v) = frame.get(slot!("expires")) {
        let at: u64 = parse_num("expires", v)?;
        return Ok((at != 0).then_some(at));
    }
    if let Some(v) = frame.get(slot!("ttl")) {
        let ttl: u64 = parse_num("ttl", v)?;
        return Ok((ttl != 0).then_some(now.saturating_add(ttl)));
    }
    Ok(None)
}

/// Ten years: anything beyond is a mistake, not a delay.
const ABSURD_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The due time from the broker-defined delay headers; an absolute time beats a
/// relative delay. `Some(now)` for an explicit zero delay, which overrides a queue's
/// default delay. Other brokers' names (`x-delay`, `delay`) are the core's to read,
/// by the queue's `delay_headers`.
fn due_time(frame: &Known<'_>, now: u64) -> Result<Option<u64>, ConvertError> {
    let absolute = [
        ("AMQ_SCHEDULED_TIME", slot!("AMQ_SCHEDULED_TIME")),
        ("_AMQ_SCHED_DELIVERY", slot!("_AMQ_SCHED_DELIVERY")),
    ];
    for (header, slot) in absolute {
        if let Some(v) = frame.get(slot) {
            let at = delay_value(header, v)?;
            if at > now.saturating_add(ABSURD_MS) {
                return Err(absurd(header, v));
            }
            return Ok(Some(at));
        }
    }
    if let Some(v) = frame.get(slot!("AMQ_SCHEDULED_DELAY")) {
        let ms = delay_value("AMQ_SCHEDULED_DELAY", v)?;
        if ms > ABSURD_MS {
            return Err(absurd("AMQ_SCHEDULED_DELAY", v));
        }
        return Ok(Some(now + ms));
    }
    Ok(None)
}

fn delay_value(header: &'static str, value: &str) -> Result<u64, ConvertError> {
    let trimmed = value.trim();
    if trimmed.starts_with('-') {
        return Err(ConvertError::InvalidHeader {
            header,
            value: value.chars().take(40).collect(),
            why: "a delay cannot be negative",
        });
    }
    parse_num(header, trimmed)
}

fn absurd(header: &'static str, value: &str) -> ConvertError {
    ConvertError::InvalidHeader {
        header,
        value: value.chars().take(40).collect(),
        why: "delay is absurdly far in the future",
    }
}

/// What the MESSAGE frame needs beyond the message itself.
pub struct DeliveryInfo<'a> {
    pub subscription: &'a str,
    pub message_id: &'a str,
    pub ack: bool,
    pub destination: &'a str,
    pub redelivered: bool,
    pub group_first_key: Option<&'a str>,
}

/// Writes the MESSAGE frame for a delivery straight into the connection's write buffer:
/// no frame, header list or number strings are built per message. A large body is
/// queued in `parts` after the headers instead of being copied.
pub fn write_message(
    message: &Message,
    info: DeliveryInfo<'_>,
    mut w: FrameWriter<'_>,
    parts: &mut WriteParts,
) -> Result<(), StompError> {
    w.known("subscription", info.subscription.as_bytes())?;
    if info.ack {
        w.known("ack", info.message_id.as_bytes())?;
    }
    w.known("message-id", info.message_id.as_bytes())?;
    w.known("destination", info.destination.as_bytes())?;
    if info.redelivered {
        w.known("redelivered", b"true")?;
    }
    if let Some(ct) = &message.content_type {
        w.known("content-type", ct.as_bytes())?;
    }
    if message.durable {
        w.known("persistent", b"true")?;
    }
    w.known_number("priority", i64::from(message.priority.min(9)));
    w.known_number("timestamp", clamp(message.timestamp));
    if let Some(at) = message.expires_at {
        w.known_number("expires", clamp(at));
    }
    if let Some(at) = message.due_at {
        // The due time the broker honoured, so consumers can check punctuality.
        w.known_number("delivery-time", clamp(at));
    }
    for (name, value) in [
        ("correlation-id", &message.correlation_id),
        ("reply-to", &message.reply_to),
        ("subject", &message.subject),
        ("JMSXGroupID", &message.group_id),
        ("original-message-id", &message.message_id),
    ] {
        if let Some(v) = value {
            w.known(name, v.as_bytes())?;
        }
    }
    if let Some(seq) = message.group_seq {
        w.known_number("JMSXGroupSeq", i64::from(seq));
    }
    if let Some(key) = info.group_first_key {
        w.header(key.as_bytes(), b"true")?;
    }
    for (name, value) in &message.properties {
        match value {
            Value::String(text) => w.header(name.as_bytes(), text.as_bytes())?,
            Value::Int(n) => w.header_int(name.as_bytes(), *n)?,
            Value::Bool(b) => w.header(name.as_bytes(), if *b { b"true" } else { b"false" })?,
            other => w.header(name.as_bytes(), other.to_text().as_bytes())?,
        }
    }
    w.finish_sharing(&message.body, parts);
    Ok(())
}

/// Epoch milliseconds as a header number (they fit an i64 for 292 million years).
fn clamp(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

pub fn now() -> u64 {
    now_ms()
}

#[cfg(test)]
mod tests {
    use super::super::frame::Command;
    use super::*;

    fn send(headers: &[(&'static str, &'static str)]) -> Frame {
        let mut f = Frame::new(Command::Send);
        for (k, v) in headers {
            f.add_header(*k, *v);
        }
        f
    }

    #[test]
    fn destinations() {
        assert_eq!(
            parse_destination("/queue/a").unwrap().routing,
            RoutingType::Anycast
        );
        assert_eq!(
            parse_destination("/topic/a").unwrap().routing,
            RoutingType::Multicast
        );
        assert_eq!(parse_destination("plain").unwrap().name, "plain");
        assert!(parse_destination("/queue/").is_err());
    }

    #[test]
    fn maps_headers() {
        let dest = parse_destination("/queue/q").unwrap();
        let f = send(&[
            ("persistent", "true"),
            ("priority", "7"),
            ("ttl", "1000"),
            ("JMSXGroupID", "g"),
            ("JMSXGroupSeq", "4294967295"),
            ("color", "red"),
            ("color", "blue"),
        ]);
        let m = message_from_send(
            &f,
            &dest,
            5000,
            &mut Names::default(),
            &default_delay_names(),
        )
        .unwrap();
        assert!(m.durable);
        assert_eq!(m.priority, 7);
        assert_eq!(m.expires_at, Some(6000));
        assert_eq!(m.group_id.as_deref(), Some("g"));
        assert_eq!(m.group_seq, Some(-1));
        assert_eq!(m.property("color"), Some(&Value::String(Arc::from("red"))));
        assert_eq!(m.properties.len(), 1);
    }

    /// The MESSAGE frame `write_message` writes, read back by the decoder.
    fn written(m: &Message, info: DeliveryInfo<'_>, escape: bool) -> Frame {
        use super::super::codec::{Inbound, Limits, StompCodec};
        use tokio_util::codec::Decoder;
        let mut head = bytes::BytesMut::new();
        let mut parts = WriteParts::default();
        write_message(
            m,
            info,
            FrameWriter::new(Command::Message, escape, &mut head),
            &mut parts,
        )
        .unwrap();
        parts.seal(&mut head);
        let mut buf = bytes::BytesMut::from(&parts.gathered()[..]);
        let mut codec = StompCodec::new(Limits::default());
        codec.set_version(if escape {
            super::super::frame::Version::V1_2
        } else {
            super::super::frame::Version::V1_0
        });
        match codec.decode(&mut buf).unwrap() {
            Some(Inbound::Frame(f)) => {
                assert!(buf.is_empty());
                f
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_large_body_is_shared_not_copied_and_reads_back_whole() {
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let m = Message {
            body: bytes::Bytes::from(body.clone()),
            ..Message::default()
        };
        let info = || DeliveryInfo {
            subscription: "s",
            message_id: "1.2",
            ack: false,
            destination: "/queue/q",
            redelivered: false,
            group_first_key: None,
        };
        let mut head = bytes::BytesMut::new();
        let mut parts = WriteParts::default();
        write_message(
            &m,
            info(),
            FrameWriter::new(Command::Message, true, &mut head),
            &mut parts,
        )
        .unwrap();
        // The headers and the body are queued; only the closing NUL is in the buffer.
        assert_eq!(&head[..], b"\0");
        assert!(parts.len() > body.len());
        let f = written(&m, info(), true);
        assert_eq!(f.header("content-length"), Some("20000"));
        assert_eq!(&f.body[..], &body[..]);
    }

    #[test]
    fn message_frames_carry_every_field() {
        let m = Message {
            body: bytes::Bytes::from_static(b"hello"),
            properties: vec![
                (Arc::from("color"), Value::String(Arc::from("red:blue"))),
                (Arc::from("count"), Value::Int(-12)),
                (Arc::from("ok"), Value::Bool(true)),
                (Arc::from("ratio"), Value::Double(0.5)),
            ]
            .into(),
            content_type: Some(Arc::from("text/plain")),
            correlation_id: Some(Arc::from("c\n1")),
            group_id: Some(Arc::from("g")),
            group_seq: Some(-1),
            message_id: Some(Arc::from("m-1")),
            durable: true,
            priority: 7,
            timestamp: 1_700_000_000_123,
            expires_at: Some(1_700_000_060_000),
            due_at: Some(1_700_000_001_000),
            ..Message::default()
        };
        let info = || DeliveryInfo {
            subscription: "s-1",
            message_id: "3.44",
            ack: true,
            destination: "/queue/q",
            redelivered: true,
            group_first_key: Some("first"),
        };
        let f = written(&m, info(), true);
        assert_eq!(f.command, Command::Message);
        for (name, value) in [
            ("subscription", "s-1"),
            ("ack", "3.44"),
            ("message-id", "3.44"),
            ("destination", "/queue/q"),
            ("redelivered", "true"),
            ("content-type", "text/plain"),
            ("persistent", "true"),
            ("priority", "7"),
            ("timestamp", "1700000000123"),
            ("expires", "1700000060000"),
            ("delivery-time", "1700000001000"),
            ("correlation-id", "c\n1"),
            ("JMSXGroupID", "g"),
            ("original-message-id", "m-1"),
            ("JMSXGroupSeq", "-1"),
            ("first", "true"),
            ("color", "red:blue"),
            ("count", "-12"),
            ("ok", "true"),
            ("ratio", "0.5"),
            ("content-length", "5"),
        ] {
            assert_eq!(f.header(name), Some(value), "{name}");
        }
        assert_eq!(&f.body[..], b"hello");
        // STOMP 1.0 cannot escape: a colon in a value is fine, a line break is not.
        let f = written(
            &Message {
                correlation_id: None,
                ..m.clone()
            },
            info(),
            false,
        );
        assert_eq!(f.header("color"), Some("red:blue"));
        let mut buf = bytes::BytesMut::from(&b"before"[..]);
        let err = write_message(
            &m,
            info(),
            FrameWriter::new(Command::Message, false, &mut buf),
            &mut WriteParts::default(),
        );
        assert!(err.is_err());
        assert_eq!(&buf[..], b"before", "a failed frame leaves nothing behind");
    }

    #[test]
    fn every_frame_header_is_found_and_nothing_else() {
        for (slot, name) in FRAME_HEADERS.iter().enumerate() {
            assert_eq!(frame_header_slot(name), Some(slot), "{name}");
        }
        for other in [
            "",
            "x",
            "colour",
            "destinatioN",
            "receipts",
            "a-very-long-header-name-indeed",
        ] {
            assert_eq!(frame_header_slot(other), None, "{other}");
        }
    }

    fn default_delay_names() -> DelayHeaderNames {
        DelayHeaderNames::new(&crate::core::delay_headers::DelayHeader::defaults())
    }

    #[test]
    fn delay_forms() {
        let dest = parse_destination("q").unwrap();
        let convert = |headers: &[(&'static str, &'static str)]| {
            let names = default_delay_names();
            message_from_send(&send(headers), &dest, 1000, &mut Names::default(), &names)
        };
        let due = |h: &'static str, v: &'static str| convert(&[(h, v)]).map(|m| m.due_at);
        assert_eq!(due("AMQ_SCHEDULED_DELAY", "500"), Ok(Some(1500)));
        assert_eq!(due("AMQ_SCHEDULED_TIME", "9999"), Ok(Some(9999)));
        assert_eq!(due("_AMQ_SCHED_DELIVERY", "9999"), Ok(Some(9999)));
        assert_eq!(due("AMQ_SCHEDULED_DELAY", "0"), Ok(Some(1000)));
        assert!(due("AMQ_SCHEDULED_DELAY", "-5").is_err());
        assert!(due("AMQ_SCHEDULED_DELAY", "soon").is_err());
        assert!(due("_AMQ_SCHED_DELIVERY", "later").is_err());
        assert!(due("AMQ_SCHEDULED_DELAY", "999999999999999").is_err());
        // Absolute beats relative.
        let both = convert(&[("AMQ_SCHEDULED_DELAY", "1"), ("AMQ_SCHEDULED_TIME", "7777")]);
        assert_eq!(both.map(|m| m.due_at), Ok(Some(7777)));
    }

    #[test]
    fn other_brokers_delay_names_stay_properties_for_the_core_to_read() {
        let dest = parse_destination("q").unwrap();
        let convert = |headers: &[(&'static str, &'static str)], names: &DelayHeaderNames| {
            message_from_send(&send(headers), &dest, 1000, &mut Names::default(), names)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let defaults = default_delay_names();
        for (name, value) in [("x-delay", "300"), ("delay", "abc"), ("x-delay", "-5")] {
            let m = convert(&[(name, value), ("color", "red")], &defaults);
            assert_eq!(m.due_at, None, "{name}: the core's to read");
            assert!(m.may_carry_delay, "{name}");
            assert_eq!(m.property(name), Some(&Value::String(Arc::from(value))));
        }
        let plain = convert(&[("color", "red"), ("delays", "1")], &defaults);
        assert!(
            !plain.may_carry_delay,
            "no delay name, nothing for the core to look at"
        );
        let none = convert(&[("delay", "2")], &DelayHeaderNames::default());
        assert!(!none.may_carry_delay, "no queue reads it");
        assert_eq!(none.property("delay"), Some(&Value::String(Arc::from("2"))));
    }
}
