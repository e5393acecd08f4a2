//! The on-disk form of a message. Versioned so a later broker can read what an
//! earlier one wrote; the store treats it as opaque bytes.

use super::message::{Message, Property, Value, WireForm};
use crate::store::MessageRecord;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::sync::Arc;

const VERSION: u8 = 1;
const NONE_LEN: u32 = u32::MAX;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("stored message is truncated")]
    Truncated,
    #[error("stored message has unknown version {0}")]
    Version(u8),
    #[error("stored message has an unknown value tag {0}")]
    Tag(u8),
    #[error("stored message has text that is not UTF-8")]
    Utf8,
}

/// What the store keeps beside the message itself.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    pub message: Message,
    pub delivery_count: u32,
}

pub fn encode(message: &Message, delivery_count: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(encoded_len_hint(message));
    encode_into(message, delivery_count, &mut out);
    out.freeze()
}

/// Room for a record: exact for the fixed part and the body, a guess for the rest.
fn encoded_len_hint(message: &Message) -> usize {
    96 + message.body.len() + message.properties.count() * 32
}

/// The store asks for a message's record only when it writes it (see
/// `store::record`): most are acknowledged first and never need one.
impl MessageRecord for Message {
    fn encode_record(&self, delivery_count: u32, out: &mut Vec<u8>) {
        out.reserve(encoded_len_hint(self));
        encode_into(self, delivery_count, out);
    }
}

fn encode_into(message: &Message, delivery_count: u32, out: &mut impl BufMut) {
    out.put_u8(VERSION);
    out.put_u8(u8::from(message.durable));
    out.put_u8(message.priority);
    out.put_u32(delivery_count);
    out.put_u64(message.timestamp);
    out.put_u64(message.due_at.unwrap_or(0));
    out.put_u64(message.expires_at.unwrap_or(0));
    match message.group_seq {
        Some(seq) => {
            out.put_u8(1);
            out.put_i32(seq);
        }
        None => out.put_u8(0),
    }
    put_str(out, Some(&message.address));
    for field in [
        &message.message_id,
        &message.correlation_id,
        &message.reply_to,
        &message.content_type,
        &message.subject,
        &message.user_id,
        &message.group_id,
    ] {
        put_str(out, field.as_deref());
    }
    out.put_u32(message.properties.len() as u32);
    for (name, value) in &message.properties {
        put_str(out, Some(name));
        put_value(out, value);
    }
    match &message.wire {
        Some(wire) => {
            out.put_u8(1);
            out.put_u32(wire.format);
            put_bytes(out, &wire.bytes);
        }
        None => out.put_u8(0),
    }
    put_bytes(out, &message.body);
}

pub fn decode(mut buf: Bytes) -> Result<StoredMessage, DecodeError> {
    let version = get_u8(&mut buf)?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let durable = get_u8(&mut buf)? != 0;
    let priority = get_u8(&mut buf)?;
    need(&buf, 4 + 8 * 3)?;
    let delivery_count = buf.get_u32();
    let timestamp = buf.get_u64();
    let due_at = nonzero(buf.get_u64());
    let expires_at = nonzero(buf.get_u64());
    let group_seq = if get_u8(&mut buf)? == 1 {
        need(&buf, 4)?;
        Some(buf.get_i32())
    } else {
        None
    };
    let address = get_str(&mut buf)?.unwrap_or_else(|| Arc::from(""));
    let message_id = get_str(&mut buf)?;
    let correlation_id = get_str(&mut buf)?;
    let reply_to = get_str(&mut buf)?;
    let content_type = get_str(&mut buf)?;
    let subject = get_str(&mut buf)?;
    let user_id = get_str(&mut buf)?;
    let group_id = get_str(&mut buf)?;
    need(&buf, 4)?;
    let count = buf.get_u32() as usize;
    let mut properties: Vec<Property> = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let name = get_str(&mut buf)?.ok_or(DecodeError::Truncated)?;
        let value = get_value(&mut buf)?;
        properties.push((name, value));
    }
    let wire = if get_u8(&mut buf)? == 1 {
        need(&buf, 4)?;
        let format = buf.get_u32();
        let bytes = get_bytes(&mut buf)?.ok_or(DecodeError::Truncated)?;
        Some(WireForm { format, bytes })
    } else {
        None
    };
    let body = get_bytes(&mut buf)?.unwrap_or_default();
    Ok(StoredMessage {
        message: Message {
            body,
            properties: properties.into(),
            address,
            message_id,
            correlation_id,
            reply_to,
            content_type,
            subject,
            user_id,
            group_id,
            group_seq,
            due_at,
            expires_at,
            timestamp,
            durable,
            priority,
            wire,
            may_carry_delay: false,
        },
        delivery_count,
    })
}

fn nonzero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

fn need(buf: &Bytes, n: usize) -> Result<(), DecodeError> {
    if buf.remaining() < n {
        Err(DecodeError::Truncated)
    } else {
        Ok(())
    }
}

fn get_u8(buf: &mut Bytes) -> Result<u8, DecodeError> {
    need(buf, 1)?;
    Ok(buf.get_u8())
}

fn put_bytes(out: &mut impl BufMut, bytes: &[u8]) {
    out.put_u32(bytes.len() as u32);
    out.put_slice(bytes);
}

fn put_str(out: &mut impl BufMut, s: Option<&str>) {
    match s {
        Some(s) => put_bytes(out, s.as_bytes()),
        None => out.put_u32(NONE_LEN),
    }
}

fn get_bytes(buf: &mut Bytes) -> Result<Option<Bytes>, DecodeError> {
    need(buf, 4)?;
    let len = buf.get_u32();
    if len == NONE_LEN {
        return Ok(None);
    }
    need(buf, len as usize)?;
    Ok(Some(buf.split_to(len as usize)))
}

fn get_str(buf: &mut Bytes) -> Result<Option<Arc<str>>, DecodeError> {
    match get_bytes(buf)? {
        None => Ok(None),
        Some(b) => std::str::from_utf8(&b)
            .map(|s| Some(Arc::from(s)))
            .map_err(|_| DecodeError::Utf8),
    }
}

fn put_value(out: &mut impl BufMut, value: &Value) {
    match value {
        Value::Null => out.put_u8(0),
        Value::Bool(b) => {
            out.put_u8(1);
            out.put_u8(u8::from(*b));
        }
        Value::Int(i) => {
            out.put_u8(2);
            out.put_i64(*i);
        }
        Value::Double(d) => {
            out.put_u8(3);
            out.put_f64(*d);
        }
        Value::String(s) => {
            out.put_u8(4);
            put_str(out, Some(s));
        }
        Value::Binary(b) => {
            out.put_u8(5);
            put_bytes(out, b);
        }
    }
}

fn get_value(buf: &mut Bytes) -> Result<Value, DecodeError> {
    Ok(match get_u8(buf)? {
        0 => Value::Null,
        1 => Value::Bool(get_u8(buf)? != 0),
        2 => {
            need(buf, 8)?;
            Value::Int(buf.get_i64())
        }
        3 => {
            need(buf, 8)?;
            Value::Double(buf.get_f64())
        }
        4 => Value::String(get_str(buf)?.ok_or(DecodeError::Truncated)?),
        5 => Value::Binary(get_bytes(buf)?.ok_or(DecodeError::Truncated)?),
        tag => return Err(DecodeError::Tag(tag)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Message {
        Message {
            body: Bytes::from_static(b"hello\0world"),
            properties: vec![
                (Arc::from("color"), Value::String(Arc::from("red"))),
                (Arc::from("n"), Value::Int(-3)),
                (Arc::from("f"), Value::Double(2.5)),
                (Arc::from("b"), Value::Bool(true)),
                (Arc::from("raw"), Value::Binary(Bytes::from_static(&[0, 1]))),
                (Arc::from("nil"), Value::Null),
            ]
            .into(),
            address: Arc::from("orders"),
            message_id: Some(Arc::from("id-1")),
            group_id: Some(Arc::from("g")),
            group_seq: Some(-1),
            due_at: Some(123),
            expires_at: Some(456),
            timestamp: 99,
            durable: true,
            priority: 7,
            wire: Some(WireForm {
                format: 1,
                bytes: Bytes::from_static(b"wire"),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let back = decode(encode(&m, 3)).unwrap();
        assert_eq!(back.message, m);
        assert_eq!(back.delivery_count, 3);
    }

    #[test]
    fn the_record_the_writer_makes_is_the_same_record() {
        let m = sample();
        // The writer reuses its buffer: what was there before must not leak in.
        let mut out = b"left over".to_vec();
        out.clear();
        m.encode_record(7, &mut out);
        assert_eq!(out, encode(&m, 7));
        let back = decode(Bytes::from(out)).unwrap();
        assert_eq!((back.message, back.delivery_count), (m, 7));
    }

    #[test]
    fn truncation_is_an_error() {
        let full = encode(&sample(), 0);
        for cut in 0..full.len() {
            assert!(decode(full.slice(..cut)).is_err(), "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(Bytes::from(bytes));
        }
    }
}
