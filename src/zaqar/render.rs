//! Messages as Zaqar shows them, and their ids.
//!
//! A message posted through this API carries a generated id (24 hex digits,
//! like Zaqar's) as its message id; a message that came another way is
//! named by its message id when that is URL-safe, else `s` and its
//! sequence in the queue.

use super::{canonical, limits};
use crate::core::message::{now_ms, Message, Value as CoreValue};
use crate::core::queue::{Peeked, Queue};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The message property that records the `Client-ID` of the poster (for
/// `echo`).
pub const CLIENT_ID_PROPERTY: &str = "ZaqarClientId";

/// Bytes of randomness in a message id (24 hex digits).
const ID_BYTES: usize = 12;

/// `n` fresh message ids, from one read of the OS's randomness: a post
/// names up to [`limits::MAX_MESSAGES_PER_PAGE`] messages, and a read and
/// a `format!` per byte were a sixth of its cost.
pub fn new_message_ids(n: usize) -> Vec<String> {
    const PER_READ: usize = limits::MAX_MESSAGES_PER_PAGE as usize;
    let mut buffer = [0u8; ID_BYTES * PER_READ];
    let mut ids = Vec::with_capacity(n);
    while ids.len() < n {
        let bytes = &mut buffer[..(n - ids.len()).min(PER_READ) * ID_BYTES];
        if getrandom::fill(bytes).is_err() {
            // No OS randomness: time and a counter are still unique in
            // this process.
            static NEXT: AtomicU32 = AtomicU32::new(0);
            for id in bytes.chunks_mut(ID_BYTES) {
                id[..8].copy_from_slice(&now_ms().to_be_bytes());
                id[8..].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_be_bytes());
            }
        }
        ids.extend(bytes.chunks(ID_BYTES).map(hex));
    }
    ids
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// An id this API names a message by as it is (else `s` and its sequence).
pub fn url_safe(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !is_sequence_id(id)
}

fn is_sequence_id(id: &str) -> bool {
    id.strip_prefix('s')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub fn id_of(message: &Message, seq: u64) -> String {
    match message.message_id.as_deref() {
        Some(id) if url_safe(id) => id.to_owned(),
        _ => format!("s{seq}"),
    }
}

/// The message named `id` in `queue`, waiting (in memory or paged) or in
/// flight: by its sequence, or by its message id through the queue's index
/// of them (the oldest, should two share it).
pub async fn find(queue: &Arc<Queue>, id: &str) -> Option<Peeked> {
    if is_sequence_id(id) {
        let seq: u64 = id[1..].parse().ok()?;
        return queue
            .peek_one(seq)
            .filter(|p| id_of(&p.message, p.seq) == id);
    }
    queue.peek_by_id(id).await.into_iter().next()
}

pub fn posted_by(message: &Message) -> Option<&str> {
    match message.property(CLIENT_ID_PROPERTY) {
        Some(CoreValue::String(s)) => Some(s),
        _ => None,
    }
}

/// `{"id", "href", "ttl", "age", "body"}`, with `claim_id` and
/// `claim_count` when claimed.
pub fn message_json(base: &str, message: &Message, seq: u64, claim: Option<(&str, u32)>) -> Value {
    let now = now_ms();
    let id = id_of(message, seq);
    let ttl = message.expires_at.map_or(limits::MAX_MESSAGE_TTL, |e| {
        e.saturating_sub(message.timestamp) / 1000
    });
    let body: Value = serde_json::from_slice(&message.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&message.body).into_owned()));
    let mut href = format!("{base}/messages/{id}");
    if let Some((claim_id, _)) = claim {
        href.push_str("?claim_id=");
        href.push_str(claim_id);
    }
    let mut out = json!({
        "id": id,
        "href": href,
        "ttl": ttl,
        "age": now.saturating_sub(message.timestamp) / 1000,
        "body": body,
    });
    if let Some((claim_id, count)) = claim {
        out["claim_id"] = json!(claim_id);
        out["claim_count"] = json!(count);
    }
    out
}

/// [`message_json`] as its text, written straight into `out`: what a
/// claim answers with, without a tree per message or a parse of its body
/// when the body is stored as serde_json writes it (see [`canonical`]).
/// The keys are in the order serde_json's map writes them.
pub fn write_message_json(
    out: &mut Vec<u8>,
    base: &str,
    message: &Message,
    seq: u64,
    claim: Option<(&str, u32)>,
) {
    let now = now_ms();
    let id = id_of(message, seq);
    let ttl = message.expires_at.map_or(limits::MAX_MESSAGE_TTL, |e| {
        e.saturating_sub(message.timestamp) / 1000
    });
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b"{\"age\":");
    out.extend_from_slice(
        number
            .format(now.saturating_sub(message.timestamp) / 1000)
            .as_bytes(),
    );
    out.extend_from_slice(b",\"body\":");
    if canonical::is_canonical(&message.body) {
        out.extend_from_slice(&message.body);
    } else {
        let body: Value = serde_json::from_slice(&message.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&message.body).into_owned()));
        write_json(out, &body);
    }
    let mut href = format!("{base}/messages/{id}");
    if let Some((claim_id, count)) = claim {
        out.extend_from_slice(b",\"claim_count\":");
        out.extend_from_slice(number.format(count).as_bytes());
        out.extend_from_slice(b",\"claim_id\":");
        write_json(out, claim_id);
        href.push_str("?claim_id=");
        href.push_str(claim_id);
    }
    out.extend_from_slice(b",\"href\":");
    write_json(out, &href);
    out.extend_from_slice(b",\"id\":");
    write_json(out, &id);
    out.extend_from_slice(b",\"ttl\":");
    out.extend_from_slice(number.format(ttl).as_bytes());
    out.push(b'}');
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // A string or a tree parsed from JSON, into a Vec: this cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    #[test]
    fn message_ids_are_24_lowercase_hex_digits_and_differ() {
        let ids = super::new_message_ids(45);
        assert_eq!(ids.len(), 45);
        for id in &ids {
            assert_eq!(id.len(), 24);
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            assert!(super::url_safe(id));
        }
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        assert_eq!(super::hex(&[0x00, 0x9f, 0xa0, 0xff]), "009fa0ff");
    }

    #[test]
    fn a_message_written_directly_reads_as_its_tree_writes() {
        use crate::core::message::{now_ms, Message};
        use bytes::Bytes;
        use std::sync::Arc;
        let bodies: [&[u8]; 6] = [
            br#"{"pad":"xxx","seq":1}"#,
            br#"{"seq":1, "pad":"x"}"#,
            b"1.50",
            b"not json",
            b"\xff\xfe",
            br#""quote \" and \\""#,
        ];
        let now = now_ms();
        for (i, body) in bodies.iter().enumerate() {
            let mut m = Message::new(Arc::from("p/q"), Bytes::copy_from_slice(body), now - 5_000);
            m.expires_at = (i % 2 == 0).then_some(now + 60_000);
            m.message_id = (i != 3).then(|| Arc::from(format!("id{i}").as_str()));
            for claim in [None, Some(("c\"laim", 3))] {
                let mut out = Vec::new();
                super::write_message_json(&mut out, "/v2/queues/q", &m, 7, claim);
                let tree = super::message_json("/v2/queues/q", &m, 7, claim);
                assert_eq!(String::from_utf8_lossy(&out), tree.to_string());
            }
        }
    }
}
