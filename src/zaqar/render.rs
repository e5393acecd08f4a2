//! Messages as Zaqar shows them, and their ids.
//!
//! A message posted through this API carries a generated id (24 hex digits,
//! like Zaqar's) as its message id; a message that came another way is
//! named by its message id when that is URL-safe, else `s` and its
//! sequence in the queue.

use super::limits;
use crate::core::message::{now_ms, Message, Value as CoreValue};
use crate::core::queue::{Peeked, Queue};
use serde_json::{json, Value};
use std::sync::Arc;

/// The message property that records the `Client-ID` of the poster (for
/// `echo`).
pub const CLIENT_ID_PROPERTY: &str = "ZaqarClientId";

pub fn new_message_id() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes[..8].copy_from_slice(&now_ms().to_be_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
