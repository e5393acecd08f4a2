//! What an auditor sees of the schedule: pages of waiting messages filtered
//! by queue and due-time range, one message in full, and how many fall due
//! when (a timeline). Plain, serializable types: a management API or the
//! `weir schedule` CLI prints them as they are.

use super::stored::{self, ScheduledMessage, FIRST_KEY};
use super::ScheduleError;
use crate::core::message::{Message, Value};
use crate::store::{ScheduleKey, Store};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Which waiting messages to list, one page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleQuery {
    /// Only this queue's messages (by name); every queue's when absent.
    pub queue: Option<String>,
    /// Due at or after this time (epoch ms).
    pub from_ms: Option<u64>,
    /// Due before this time (epoch ms).
    pub to_ms: Option<u64>,
    /// The `next` of the previous page: the listing continues after it.
    pub cursor: Option<String>,
    /// Messages per page at most.
    pub limit: usize,
    /// Body bytes shown per message at most.
    pub preview_bytes: usize,
}

impl ScheduleQuery {
    pub const DEFAULT_LIMIT: usize = 100;
    pub const DEFAULT_PREVIEW: usize = 256;
}

/// One page of a listing, in due-time order.
#[derive(Debug, Clone, Serialize)]
pub struct SchedulePage {
    pub items: Vec<ScheduledSummary>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next: Option<String>,
}

/// A waiting message as a listing shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduledSummary {
    /// Names the message in [`Schedule::view`](super::Schedule::view),
    /// `cancel`, `reschedule` and `edit` (`due:queue:seq`, as `weir schedule` prints).
    pub id: String,
    pub queue: String,
    /// When it falls due (epoch ms). One whose ttl (`headers.expires_ms`)
    /// ends first never does: it is removed then.
    pub due_ms: u64,
    /// When the broker accepted it (epoch ms).
    pub enqueued_ms: u64,
    /// Body size in bytes.
    pub size: usize,
    /// Survives a restart (persistent message or durable queue).
    pub durable: bool,
    pub delivery_count: u32,
    pub message_id: Option<String>,
    pub group_id: Option<String>,
    pub headers: Headers,
    /// User properties (STOMP headers, AMQP application properties).
    pub properties: Vec<PropertyEntry>,
    /// The first body bytes, as text where they are UTF-8 (lossy elsewhere).
    pub body_preview: String,
    /// The body is longer than the preview.
    pub body_truncated: bool,
}

/// A waiting message in full.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduledDetail {
    #[serde(flatten)]
    pub summary: ScheduledSummary,
    /// The whole body, for whoever serializes it their way (base64, a download).
    #[serde(skip)]
    pub body: Bytes,
    /// The whole body when it is UTF-8 text.
    pub body_text: Option<String>,
}

/// The message's standard fields, as every protocol names them in its own way.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Headers {
    pub priority: u8,
    pub expires_ms: Option<u64>,
    pub correlation_id: Option<String>,
    pub reply_to: Option<String>,
    pub content_type: Option<String>,
    pub subject: Option<String>,
    pub user_id: Option<String>,
    pub group_seq: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PropertyEntry {
    pub name: String,
    pub value: PropertyValue,
}

impl PropertyEntry {
    /// Every user property of `message`, in its order, typed.
    pub fn all_of(message: &Message) -> Vec<PropertyEntry> {
        message
            .properties
            .list()
            .iter()
            .map(|(name, value)| PropertyEntry {
                name: name.to_string(),
                value: value.into(),
            })
            .collect()
    }
}

/// A property value, tagged with its type so a number stays a number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum PropertyValue {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    String(String),
    Binary(Vec<u8>),
}

impl From<&Value> for PropertyValue {
    fn from(value: &Value) -> Self {
        match value {
            Value::Null => PropertyValue::Null,
            Value::Bool(b) => PropertyValue::Bool(*b),
            Value::Int(i) => PropertyValue::Int(*i),
            Value::Double(d) => PropertyValue::Double(*d),
            Value::String(s) => PropertyValue::String(s.to_string()),
            Value::Binary(b) => PropertyValue::Binary(b.to_vec()),
        }
    }
}

impl From<PropertyValue> for Value {
    fn from(value: PropertyValue) -> Self {
        match value {
            PropertyValue::Null => Value::Null,
            PropertyValue::Bool(b) => Value::Bool(b),
            PropertyValue::Int(i) => Value::Int(i),
            PropertyValue::Double(d) => Value::Double(d),
            PropertyValue::String(s) => Value::String(s.into()),
            PropertyValue::Binary(b) => Value::Binary(b.into()),
        }
    }
}

/// How many messages fall due in each of `buckets` equal slices of a range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    pub from_ms: u64,
    /// Width of each bucket in ms (the last may end past the range).
    pub bucket_ms: u64,
    pub counts: Vec<u64>,
}

impl Timeline {
    pub(super) fn new(due: Range<u64>, buckets: usize) -> Timeline {
        let buckets = buckets.max(1);
        let span = due.end.saturating_sub(due.start).max(1);
        Timeline {
            from_ms: due.start,
            bucket_ms: span.div_ceil(buckets as u64),
            counts: vec![0; buckets],
        }
    }

    pub(super) fn count(&mut self, due_ms: u64) {
        let Some(offset) = due_ms.checked_sub(self.from_ms) else {
            return;
        };
        if let Some(count) = self.counts.get_mut((offset / self.bucket_ms) as usize) {
            *count += 1;
        }
    }
}

/// A listing resolved to store terms: which keys, which queue.
#[derive(Debug, Clone)]
pub(super) struct KeyFilter {
    pub keys: Range<ScheduleKey>,
    pub queue: Option<u32>,
}

impl KeyFilter {
    /// Keys due in `due` (epoch ms), after `cursor` when given.
    pub fn new(queue: Option<u32>, due: Range<u64>, cursor: Option<ScheduleKey>) -> KeyFilter {
        let start = due_key(due.start).max(FIRST_KEY);
        let start = match cursor {
            Some(after) => start.max(stored::next_key(after)),
            None => start,
        };
        KeyFilter {
            keys: start..due_key(due.end),
            queue,
        }
    }

    pub fn matches(&self, key: &ScheduleKey) -> bool {
        self.keys.contains(key) && self.queue.is_none_or(|q| q == key.queue)
    }
}

/// The first key due at `due_ms`.
pub fn due_key(due_ms: u64) -> ScheduleKey {
    ScheduleKey {
        due_ms,
        queue: 0,
        seq: 0,
    }
}

/// The due-time range of a query: everything when unbounded.
pub(super) fn due_range(query: &ScheduleQuery) -> Range<u64> {
    query.from_ms.unwrap_or(0)..query.to_ms.unwrap_or(u64::MAX)
}

/// Up to `limit` entries on disk that pass `filter`, in due-time order. The
/// running schedule adds what it holds in memory only; `weir schedule` lists
/// a stopped broker's with this alone.
pub(super) fn stored_page(
    store: &Store,
    filter: &KeyFilter,
    limit: usize,
) -> Result<Vec<ScheduledMessage>, ScheduleError> {
    store
        .scan_scheduled_range(filter.keys.clone(), filter.queue, limit)?
        .into_iter()
        .map(|(key, record)| stored::decode(key, record))
        .collect()
}

/// Counts the keys on disk that pass `filter` into `timeline`, reading no records.
pub(super) fn count_stored(
    store: &Store,
    filter: &KeyFilter,
    timeline: &mut Timeline,
) -> Result<(), ScheduleError> {
    store.for_each_scheduled_key(filter.keys.clone(), filter.queue, |key| {
        timeline.count(key.due_ms);
        true
    })?;
    Ok(())
}

impl ScheduledSummary {
    pub fn new(entry: &ScheduledMessage, queue: String, preview_bytes: usize) -> Self {
        let message = &entry.message;
        let preview = &message.body[..message.body.len().min(preview_bytes)];
        ScheduledSummary {
            id: stored::format_key(&entry.key),
            queue,
            // The key's time is the expiry of one whose ttl ends first.
            due_ms: message.due_at.unwrap_or(entry.key.due_ms),
            enqueued_ms: message.timestamp,
            size: message.body.len(),
            durable: entry.durable,
            delivery_count: entry.delivery_count,
            message_id: text(&message.message_id),
            group_id: text(&message.group_id),
            headers: headers(message),
            properties: PropertyEntry::all_of(message),
            body_preview: String::from_utf8_lossy(preview).into_owned(),
            body_truncated: preview.len() < message.body.len(),
        }
    }
}

impl ScheduledDetail {
    /// The body in base64 when it is not UTF-8 text (`body_text` carries it then), as the
    /// API answers and `weir schedule view` shows it offline.
    pub fn body_base64(&self) -> Option<String> {
        use base64::Engine as _;
        self.body_text
            .is_none()
            .then(|| base64::engine::general_purpose::STANDARD.encode(&self.body))
    }

    pub fn new(entry: &ScheduledMessage, queue: String) -> Self {
        let body = entry.message.body.clone();
        ScheduledDetail {
            summary: ScheduledSummary::new(entry, queue, 0),
            body_text: std::str::from_utf8(&body).ok().map(str::to_owned),
            body,
        }
    }
}

fn headers(message: &Message) -> Headers {
    Headers {
        priority: message.priority,
        expires_ms: message.expires_at,
        correlation_id: text(&message.correlation_id),
        reply_to: text(&message.reply_to),
        content_type: text(&message.content_type),
        subject: text(&message.subject),
        user_id: text(&message.user_id),
        group_seq: message.group_seq,
    }
}

fn text(field: &Option<std::sync::Arc<str>>) -> Option<String> {
    field.as_deref().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_puts_each_due_time_in_its_slice() {
        let mut timeline = Timeline::new(1_000..2_000, 4);
        assert_eq!(timeline.bucket_ms, 250);
        for due in [1_000, 1_249, 1_250, 1_999, 2_000, 999] {
            timeline.count(due);
        }
        assert_eq!(timeline.counts, [2, 1, 0, 1]);
    }

    #[test]
    fn a_filter_starts_after_its_cursor_and_stops_before_the_end() {
        let after = ScheduleKey {
            due_ms: 1_500,
            queue: 2,
            seq: 9,
        };
        let filter = KeyFilter::new(Some(2), 1_000..2_000, Some(after));
        assert!(!filter.matches(&after));
        assert!(filter.matches(&ScheduleKey { seq: 10, ..after }));
        assert!(!filter.matches(&ScheduleKey { queue: 3, ..after }));
        assert!(!filter.matches(&due_key(2_000)));
        // A cursor before the range does not widen it.
        let early = KeyFilter::new(None, 1_000..2_000, Some(due_key(10)));
        assert!(!early.matches(&due_key(999)));
        assert!(early.matches(&due_key(1_000)));
    }
}
