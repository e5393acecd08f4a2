//! Reading the perf stamp out of an AMQP message without decoding it.
//!
//! The consumer side of `weir perf` shares the machine with the broker it
//! measures; decoding every section into a value tree (maps, strings as
//! `Bytes` slices) was a quarter of its CPU. This walks the sections by their
//! encoded sizes to the application properties and reads the four perf
//! entries in place. Anything it does not expect returns `None`, and the
//! caller falls back to the full decoder, so it can only be faster, not
//! different.

use super::headers;
use super::Stamp;

const APPLICATION_PROPERTIES: u64 = 0x74;

/// The stamp of a message of run `run_id`; `None` when absent or unusual.
pub fn scan(payload: &[u8], run_id: u64) -> Option<Stamp> {
    let mut i = payload;
    loop {
        let (&marker, rest) = i.split_first()?;
        if marker != 0x00 {
            return None;
        }
        let (code, rest) = descriptor_code(rest)?;
        if code == APPLICATION_PROPERTIES {
            return properties(rest, run_id);
        }
        if code > APPLICATION_PROPERTIES {
            // Body or footer: no application properties in this message.
            return None;
        }
        i = skip(rest)?;
    }
}

fn descriptor_code(i: &[u8]) -> Option<(u64, &[u8])> {
    let (&c, rest) = i.split_first()?;
    match c {
        0x53 => rest.split_first().map(|(&n, r)| (u64::from(n), r)),
        0x80 => take::<8>(rest).map(|(b, r)| (u64::from_be_bytes(b), r)),
        0x44 => Some((0, rest)),
        _ => None,
    }
}

fn take<const N: usize>(i: &[u8]) -> Option<([u8; N], &[u8])> {
    let head = i.get(..N)?.try_into().ok()?;
    Some((head, &i[N..]))
}

/// Skips one encoded value (a described one with its descriptor).
fn skip(i: &[u8]) -> Option<&[u8]> {
    let (&c, rest) = i.split_first()?;
    if c == 0x00 {
        return skip(skip(rest)?);
    }
    let (len, rest) = match c >> 4 {
        0x4 => (0, rest),
        0x5 => (1, rest),
        0x6 => (2, rest),
        0x7 => (4, rest),
        0x8 => (8, rest),
        0x9 => (16, rest),
        0xA | 0xC | 0xE => rest.split_first().map(|(&n, r)| (usize::from(n), r))?,
        0xB | 0xD | 0xF => take::<4>(rest).map(|(b, r)| (u32::from_be_bytes(b) as usize, r))?,
        _ => return None,
    };
    rest.get(len..)
}

fn properties(i: &[u8], run_id: u64) -> Option<Stamp> {
    let (&c, rest) = i.split_first()?;
    let (count, mut i) = match c {
        0xC1 => {
            let (b, r) = take::<2>(rest)?;
            (usize::from(b[1]), r)
        }
        0xD1 => {
            let (b, r) = take::<8>(rest)?;
            (u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as usize, r)
        }
        _ => return None,
    };
    let (mut run, mut producer, mut seq, mut sent) = (None, None, None, None);
    for _ in 0..count / 2 {
        let (key, rest) = string(i)?;
        let (value, rest) = number(rest)?;
        i = rest;
        match key {
            k if k == headers::RUN.as_bytes() => run = value,
            k if k == headers::PRODUCER.as_bytes() => producer = value,
            k if k == headers::SEQ.as_bytes() => seq = value,
            k if k == headers::SENT.as_bytes() => sent = value,
            _ => {}
        }
    }
    if run? != run_id {
        return None;
    }
    Some(Stamp {
        producer: u32::try_from(producer?).ok()?,
        seq: seq?,
        sent_us: sent?,
        group: None,
    })
}

fn string(i: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&c, rest) = i.split_first()?;
    let (len, rest) = match c {
        0xA1 | 0xA3 => rest.split_first().map(|(&n, r)| (usize::from(n), r))?,
        0xB1 | 0xB3 => take::<4>(rest).map(|(b, r)| (u32::from_be_bytes(b) as usize, r))?,
        _ => return None,
    };
    Some((rest.get(..len)?, rest.get(len..)?))
}

/// An unsigned or non-negative integer, or decimal text (as some brokers
/// turn properties into strings); `None` inside for other values, which are
/// skipped.
fn number(i: &[u8]) -> Option<(Option<u64>, &[u8])> {
    let (&c, rest) = i.split_first()?;
    let fixed = |n: usize| -> Option<(Option<u64>, &[u8])> {
        let bytes = rest.get(..n)?;
        let mut v = 0u64;
        for &b in bytes {
            v = (v << 8) | u64::from(b);
        }
        Some((Some(v), &rest[n..]))
    };
    // Signed encodings (a broker that maps properties to JMS longs): only
    // non-negative values count.
    let signed = |n: usize| -> Option<(Option<u64>, &[u8])> {
        let bytes = rest.get(..n)?;
        let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
        let (v, r) = fixed(n)?;
        Some((v.filter(|_| !negative), r))
    };
    match c {
        0x43 | 0x44 => Some((Some(0), rest)),
        0x52 | 0x53 => fixed(1),
        0x70 => fixed(4),
        0x80 => fixed(8),
        0x54 | 0x55 => signed(1),
        0x71 => signed(4),
        0x81 => signed(8),
        0xA1 | 0xB1 => {
            let (text, rest) = string(i)?;
            let v = std::str::from_utf8(text).ok().and_then(|s| s.parse().ok());
            Some((v, rest))
        }
        _ => Some((None, skip(i)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use weir_wire::amqp::{Body, Message, MessageId, Properties, Str, Value};

    fn message(props: Vec<(Value, Value)>) -> Bytes {
        Message {
            properties: Some(Properties {
                message_id: Some(MessageId::String(Str::from("id-1"))),
                group_id: Some(Str::from("g7")),
                ..Properties::default()
            }),
            message_annotations: Some(vec![(Value::symbol("x-opt-jms-dest"), Value::Byte(0))]),
            application_properties: Some(props),
            body: Body::Data(vec![Bytes::from_static(b"body")]),
            ..Message::default()
        }
        .to_bytes()
    }

    #[test]
    fn reads_the_stamp_past_other_sections_in_any_integer_form() {
        let stamp = Some(Stamp {
            producer: 3,
            seq: 300,
            sent_us: 1_700_000_000_000_000,
            group: None,
        });
        let plain = message(vec![
            (Value::string("other"), Value::List(vec![Value::Int(-1)])),
            (Value::string("perf-run"), Value::Ulong(42)),
            (Value::string("perf-p"), Value::Uint(3)),
            (Value::string("perf-seq"), Value::Ulong(300)),
            (
                Value::string("perf-ts"),
                Value::Ulong(1_700_000_000_000_000),
            ),
        ]);
        assert_eq!(scan(&plain, 42), stamp);
        assert_eq!(scan(&plain, 41), None);
        let converted = message(vec![
            (Value::string("perf-run"), Value::Long(42)),
            (Value::string("perf-p"), Value::Int(3)),
            (Value::string("perf-seq"), Value::string("300")),
            (Value::string("perf-ts"), Value::Long(1_700_000_000_000_000)),
        ]);
        assert_eq!(scan(&converted, 42), stamp);
    }

    #[test]
    fn anything_unexpected_is_none_not_a_wrong_stamp() {
        let negative = message(vec![
            (Value::string("perf-run"), Value::Ulong(42)),
            (Value::string("perf-p"), Value::Int(-3)),
            (Value::string("perf-seq"), Value::Ulong(1)),
            (Value::string("perf-ts"), Value::Ulong(1)),
        ]);
        assert_eq!(scan(&negative, 42), None);
        let full = message(vec![
            (Value::string("perf-run"), Value::Ulong(42)),
            (Value::string("perf-p"), Value::Uint(1)),
            (Value::string("perf-seq"), Value::Ulong(2)),
            (Value::string("perf-ts"), Value::Ulong(3)),
        ]);
        let right = scan(&full, 42);
        assert!(right.is_some());
        // Cut anywhere: no panic, and either nothing or the whole stamp.
        for cut in 0..full.len() {
            let got = scan(&full[..cut], 42);
            assert!(got.is_none() || got == right, "cut at {cut}: {got:?}");
        }
        assert_eq!(scan(b"junk", 42), None);
    }
}
