//! The auditor's operations on a running schedule (Zaqar's delayed queues:
//! "see messages before they are claimed, and even edit them"): list, view,
//! cancel, reschedule and edit a waiting message, each change durable.
//!
//! Listing and every operation on one message hold the schedule's `paging`
//! lock, so no page-in moves the window's bound under them. An operation
//! takes its entry out of the window under the window lock, where the timer
//! takes due entries too: whichever comes first has the entry, the other
//! finds it gone. A cancel therefore either removes
//! a message that is then never delivered, or fails with
//! [`ScheduleEditError::AlreadyDue`] because the timer moved it into its queue:
//! never both, never neither. A changed entry is written before it goes back
//! into the window, so the delete that moves it into its queue follows the write.

use super::listing::{
    due_range, stored_page, KeyFilter, PropertyEntry, SchedulePage, ScheduleQuery, ScheduledDetail,
    ScheduledSummary, Timeline,
};
use super::stored::{self, format_key, parse_key, ScheduledMessage};
use super::{Inner, Schedule, ScheduleError, Waiting};
use crate::core::broker::Broker;
use crate::core::message::{now_ms, Message, Property};
use crate::core::persist;
use crate::store::{Op, ScheduleKey, StoreError};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// Buckets a timeline may ask for at most (a chart is a few hundred wide).
pub const MAX_TIMELINE_BUCKETS: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ScheduleEditError {
    #[error("no delayed message {0}")]
    NotFound(String),
    /// The timer moved it into its queue (or is doing so): it is delivered as it was.
    #[error("delayed message {0} is already due and delivered")]
    AlreadyDue(String),
    /// The new due time is further ahead than the queue's `max_message_delay`.
    #[error("delayed message {id}: {requested_ms} ms ahead is past the queue's max_message_delay of {max_ms} ms")]
    OutOfRange {
        id: String,
        requested_ms: u64,
        max_ms: u64,
    },
    #[error("'{0}' is not a delayed message id like 1700000000000:3:42")]
    BadId(String),
    #[error("no queue named '{0}'")]
    UnknownQueue(String),
    #[error("{0}")]
    Store(ScheduleError),
}

impl From<ScheduleError> for ScheduleEditError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::NotFound(id) => ScheduleEditError::NotFound(id),
            other => ScheduleEditError::Store(other),
        }
    }
}

impl From<StoreError> for ScheduleEditError {
    fn from(e: StoreError) -> Self {
        ScheduleEditError::Store(e.into())
    }
}

impl From<Arc<StoreError>> for ScheduleEditError {
    fn from(e: Arc<StoreError>) -> Self {
        ScheduleEditError::Store(e.into())
    }
}

/// What an edit replaces; what it leaves out stays as it was.
#[derive(Debug, Clone, Default)]
pub struct MessageEdit {
    /// Every user property (STOMP header, AMQP application property).
    pub properties: Option<Vec<PropertyEntry>>,
    /// The body, as bytes the caller decoded its own way (base64, raw upload).
    pub body: Option<Bytes>,
    /// Standard headers to set or clear.
    pub headers: HeaderEdit,
}

/// Standard headers an edit sets (`Some(Some(v))`) or clears (`Some(None)`);
/// `None` leaves one as it was. What a sender chooses freely is editable:
/// priority, expiry, correlation id, reply-to, content type, subject, group
/// and group sequence. What names the message or where it goes is not (see
/// [`FIXED_FIELDS`]): its id, queue, sender, enqueue time, durability, due
/// time (reschedule it) and delivery count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeaderEdit {
    pub priority: Option<u8>,
    /// Epoch ms after which it is never delivered.
    pub expires_ms: Option<Option<u64>>,
    pub correlation_id: Option<Option<String>>,
    pub reply_to: Option<Option<String>>,
    pub content_type: Option<Option<String>>,
    pub subject: Option<Option<String>>,
    pub group_id: Option<Option<String>>,
    pub group_seq: Option<Option<i32>>,
}

/// Editable headers, by the names a listing shows them under.
pub const EDITABLE_HEADERS: [&str; 9] = [
    "priority",
    "expires_ms",
    "ttl_ms",
    "correlation_id",
    "reply_to",
    "content_type",
    "subject",
    "group_id",
    "group_seq",
];

/// Fields of a waiting message that no edit changes, and why.
pub const FIXED_FIELDS: [(&str, &str); 12] = [
    ("id", "it names the scheduled entry"),
    ("message_id", "it is the sender's identity of the message"),
    (
        "queue",
        "the destination is fixed: cancel and send it again",
    ),
    (
        "destination",
        "the destination is fixed: cancel and send it again",
    ),
    (
        "address",
        "the destination is fixed: cancel and send it again",
    ),
    ("user_id", "it is the authenticated sender"),
    ("enqueued_ms", "it is when the broker accepted the message"),
    ("timestamp", "it is when the broker accepted the message"),
    (
        "durable",
        "a message's persistence is chosen when it is sent",
    ),
    ("due_ms", "reschedule it instead"),
    ("delivery_count", "it counts deliveries made"),
    ("size", "it follows from the body"),
];

/// A header edit that cannot be made; `field` names it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct HeaderEditError {
    pub field: String,
    pub reason: String,
}

impl HeaderEditError {
    fn new(field: &str, reason: impl Into<String>) -> Self {
        HeaderEditError {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Refuses a field no edit changes (or one that is no field at all).
pub fn refuse_field(field: &str) -> HeaderEditError {
    match FIXED_FIELDS.iter().find(|(name, _)| *name == field) {
        Some((_, why)) => HeaderEditError::new(field, format!("cannot be changed: {why}")),
        None => HeaderEditError::new(
            field,
            format!(
                "no such header; editable are {}",
                EDITABLE_HEADERS.join(", ")
            ),
        ),
    }
}

impl HeaderEdit {
    pub fn is_empty(&self) -> bool {
        *self == HeaderEdit::default()
    }

    /// From a JSON object of header names to values (`null` clears one).
    /// `ttl_ms` sets the expiry that many ms from `now_ms` (as a sender's
    /// time to live would), and is exclusive with `expires_ms`.
    pub fn from_json(
        headers: &serde_json::Map<String, serde_json::Value>,
        now_ms: u64,
    ) -> Result<HeaderEdit, HeaderEditError> {
        use serde_json::Value;
        let mut edit = HeaderEdit::default();
        if headers.contains_key("ttl_ms") && headers.contains_key("expires_ms") {
            return Err(HeaderEditError::new(
                "ttl_ms",
                "give ttl_ms or expires_ms, not both",
            ));
        }
        fn text(field: &str, value: &Value) -> Result<Option<String>, HeaderEditError> {
            match value {
                Value::Null => Ok(None),
                Value::String(s) => Ok(Some(s.clone())),
                _ => Err(HeaderEditError::new(field, "must be a string or null")),
            }
        }
        fn whole(field: &str, value: &Value) -> Result<Option<u64>, HeaderEditError> {
            match value {
                Value::Null => Ok(None),
                v => v.as_u64().map(Some).ok_or_else(|| {
                    HeaderEditError::new(field, "must be a whole number of ms or null")
                }),
            }
        }
        for (field, value) in headers {
            let f = field.as_str();
            match f {
                "priority" => {
                    let p = value
                        .as_u64()
                        .filter(|p| *p <= 9)
                        .ok_or_else(|| HeaderEditError::new(f, "must be a number from 0 to 9"))?;
                    edit.priority = Some(p as u8);
                }
                "expires_ms" => edit.expires_ms = Some(whole(f, value)?),
                "ttl_ms" => {
                    edit.expires_ms = Some(whole(f, value)?.map(|ttl| now_ms.saturating_add(ttl)))
                }
                "correlation_id" => edit.correlation_id = Some(text(f, value)?),
                "reply_to" => edit.reply_to = Some(text(f, value)?),
                "content_type" => edit.content_type = Some(text(f, value)?),
                "subject" => edit.subject = Some(text(f, value)?),
                "group_id" => edit.group_id = Some(text(f, value)?),
                "group_seq" => {
                    let seq = match value {
                        Value::Null => None,
                        v => Some(v.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(
                            || HeaderEditError::new(f, "must be a 32-bit integer or null"),
                        )?),
                    };
                    edit.group_seq = Some(seq);
                }
                other => return Err(refuse_field(other)),
            }
        }
        Ok(edit)
    }

    fn apply(self, message: &mut Message) {
        let text = |v: Option<String>| v.map(Arc::<str>::from);
        if let Some(p) = self.priority {
            message.priority = p;
        }
        if let Some(at) = self.expires_ms {
            message.expires_at = at;
        }
        if let Some(v) = self.correlation_id {
            message.correlation_id = text(v);
        }
        if let Some(v) = self.reply_to {
            message.reply_to = text(v);
        }
        if let Some(v) = self.content_type {
            message.content_type = text(v);
        }
        if let Some(v) = self.subject {
            message.subject = text(v);
        }
        if let Some(v) = self.group_id {
            message.group_id = text(v);
        }
        if let Some(v) = self.group_seq {
            message.group_seq = v;
        }
    }
}

impl Schedule {
    /// A page of waiting messages, in due-time order (see [`ScheduleQuery`]).
    /// A snapshot: a message falling due meanwhile may still show.
    pub async fn list_page(
        &self,
        query: &ScheduleQuery,
    ) -> Result<SchedulePage, ScheduleEditError> {
        let broker = self.inner.broker()?;
        let queue = queue_id(&broker, query.queue.as_deref())?;
        let cursor = query.cursor.as_deref().map(parse_id).transpose()?;
        let filter = KeyFilter::new(queue, due_range(query), cursor);
        let limit = match query.limit {
            0 => ScheduleQuery::DEFAULT_LIMIT,
            n => n,
        };
        let _paging = self.inner.paging.lock().await;
        self.inner.barrier().await?;
        // One more than a page from each side tells whether another page follows.
        let mut merged = self.inner.in_memory(&filter, limit + 1);
        let store = self.inner.store.clone();
        let stored = tokio::task::spawn_blocking(move || stored_page(&store, &filter, limit + 1))
            .await
            .unwrap_or(Err(ScheduleError::Store(StoreError::Closed)))?;
        for entry in stored {
            merged.entry(entry.key).or_insert(entry);
        }
        let more = merged.len() > limit;
        let items: Vec<ScheduledSummary> = merged
            .into_values()
            .take(limit)
            .map(|entry| {
                ScheduledSummary::new(
                    &entry,
                    queue_name(&broker, entry.key.queue),
                    query.preview_bytes,
                )
            })
            .collect();
        let next = match (more, items.last()) {
            (true, Some(last)) => Some(last.id.clone()),
            _ => None,
        };
        Ok(SchedulePage { items, next })
    }

    /// How many messages (of one queue, or all) fall due in each of `buckets`
    /// slices of `due` (epoch ms, at most [`MAX_TIMELINE_BUCKETS`]). Counts
    /// keys only: no message is read or decoded, so one whose ttl ends
    /// before its due time counts when it ends (it is removed then).
    pub async fn timeline(
        &self,
        queue: Option<&str>,
        due: Range<u64>,
        buckets: usize,
    ) -> Result<Timeline, ScheduleEditError> {
        let broker = self.inner.broker()?;
        let filter = KeyFilter::new(queue_id(&broker, queue)?, due.clone(), None);
        let mut timeline = Timeline::new(due, buckets.min(MAX_TIMELINE_BUCKETS));
        // Without the paging lock: counting millions of keys takes seconds,
        // and page-ins must go on meanwhile or later entries would be late.
        // An entry spilled during the count may be counted twice: a chart
        // tolerates that, a listing would not.
        self.inner.barrier().await?;
        {
            // Entries on disk are counted there; the rest only live here.
            let window = self.inner.window.lock();
            let memory_only = window
                .entries
                .range(filter.keys.clone())
                .chain(window.parked.iter())
                .filter(|(key, w)| !w.on_disk && filter.matches(key));
            for (key, _) in memory_only {
                timeline.count(key.due_ms);
            }
        }
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || {
            super::listing::count_stored(&store, &filter, &mut timeline).map(|()| timeline)
        })
        .await
        .unwrap_or(Err(ScheduleError::Store(StoreError::Closed)))
        .map_err(Into::into)
    }

    /// One waiting message in full.
    pub async fn view(&self, id: &str) -> Result<ScheduledDetail, ScheduleEditError> {
        let key = parse_id(id)?;
        let broker = self.inner.broker()?;
        let _paging = self.inner.paging.lock().await;
        let in_memory = {
            let window = self.inner.window.lock();
            match window.entries.get(&key).or_else(|| window.parked.get(&key)) {
                Some(w) => Some(w.to_scheduled(key)),
                None if key <= window.bound => return Err(gone(key)),
                None => None,
            }
        };
        let entry = match in_memory {
            Some(entry) => entry,
            None => {
                self.inner.barrier().await?;
                stored::read(&self.inner.store, key)?.ok_or_else(|| gone(key))?
            }
        };
        Ok(ScheduledDetail::new(&entry, queue_name(&broker, key.queue)))
    }

    /// Removes a waiting message for good: it is never delivered, after a
    /// restart neither. Returns it as it was.
    pub async fn cancel(&self, id: &str) -> Result<ScheduledSummary, ScheduleEditError> {
        let key = parse_id(id)?;
        let broker = self.inner.broker()?;
        let _paging = self.inner.paging.lock().await;
        let entry = match self.inner.take(key).map_err(|_| gone(key))? {
            Some(w) => {
                if w.on_disk {
                    let delete = self.inner.store.submit(Op::DeleteScheduled { key });
                    delete.wait().await?;
                }
                w.to_scheduled(key)
            }
            None => {
                self.inner.barrier().await?;
                let entry = stored::read(&self.inner.store, key)?.ok_or_else(|| gone(key))?;
                let delete = self.inner.store.submit(Op::DeleteScheduled { key });
                delete.wait().await?;
                entry
            }
        };
        self.inner.counts.remove(key.queue, 1);
        let id = entry.message.message_id.as_deref();
        self.inner.ids.left([(key.queue, id, key)]);
        Ok(summary(&broker, &entry))
    }

    /// Moves a waiting message to another due time; one in the past is due
    /// now. Refused past the queue's `max_message_delay`. Returns it under
    /// its new id (the due time is part of the id).
    pub async fn reschedule(
        &self,
        id: &str,
        new_due_ms: u64,
    ) -> Result<ScheduledSummary, ScheduleEditError> {
        let key = parse_id(id)?;
        let broker = self.inner.broker()?;
        let now = now_ms();
        let due = new_due_ms.max(now);
        if let Some(queue) = broker.queue_by_id(key.queue) {
            let max_ms = queue.settings().max_message_delay.as_millis() as u64;
            if due - now > max_ms {
                return Err(ScheduleEditError::OutOfRange {
                    id: id.to_owned(),
                    requested_ms: due - now,
                    max_ms,
                });
            }
        }
        let _paging = self.inner.paging.lock().await;
        let w = self.inner.take_anywhere(&broker, key).await?;
        let moved = stored::moved(w.to_scheduled(key), due);
        let new_key = moved.key;
        // Written whatever the entry's durability: it was on disk or about to
        // be evicted there, and the timer deletes it on delivery either way.
        let completion = self.inner.store.submit_all(vec![
            Op::DeleteScheduled { key },
            Op::PutScheduled {
                key: new_key,
                record: persist::encode(&moved.message, moved.delivery_count),
            },
        ]);
        self.inner.insert(
            new_key,
            Waiting {
                message: moved.message.clone(),
                on_disk: true,
                ..w
            },
        );
        let id = moved.message.message_id.as_deref();
        self.inner.ids.left([(key.queue, id, key)]);
        self.inner.ids.entered(key.queue, id, new_key);
        completion.wait().await?;
        Ok(summary(&broker, &moved))
    }

    /// Replaces a waiting message's properties and/or body; its consumer
    /// receives it so. The message's original encoding is dropped, so every
    /// protocol sends it from the edited fields. It keeps its id, and so the
    /// time it is keyed by: an edited expiry counts from then (one moved
    /// past that time is put back under its due time or new expiry; one
    /// moved before its due time is removed as expired at the latest then).
    pub async fn edit(
        &self,
        id: &str,
        edit: MessageEdit,
    ) -> Result<ScheduledSummary, ScheduleEditError> {
        let key = parse_id(id)?;
        let broker = self.inner.broker()?;
        let _paging = self.inner.paging.lock().await;
        let w = self.inner.take_anywhere(&broker, key).await?;
        let message = Arc::new(edited(&w.message, edit));
        let completion = match w.on_disk {
            true => self.inner.store.submit(Op::PutScheduled {
                key,
                record: persist::encode(&message, w.delivery_count),
            }),
            // Not durable and not spilled: it lives in memory only.
            false => crate::store::Completion::ready(),
        };
        let changed = Waiting { message, ..w };
        let entry = changed.to_scheduled(key);
        self.inner.insert(key, changed);
        completion.wait().await?;
        Ok(summary(&broker, &entry))
    }
}

impl Inner {
    pub(super) fn broker(&self) -> Result<Broker, ScheduleEditError> {
        self.broker
            .upgrade()
            .ok_or(ScheduleEditError::Store(ScheduleError::Store(
                StoreError::Closed,
            )))
    }

    /// Up to `limit` entries held in memory that pass `filter`, by key.
    fn in_memory(
        &self,
        filter: &KeyFilter,
        limit: usize,
    ) -> BTreeMap<ScheduleKey, ScheduledMessage> {
        let window = self.window.lock();
        let mut out = BTreeMap::new();
        let parked = window.parked.iter().filter(|(key, _)| filter.matches(key));
        for (key, w) in parked.take(limit) {
            out.insert(*key, w.to_scheduled(*key));
        }
        let waiting = window.entries.range(filter.keys.clone());
        for (key, w) in waiting.filter(|(key, _)| filter.matches(key)).take(limit) {
            out.insert(*key, w.to_scheduled(*key));
        }
        out
    }

    /// The entry under `key` out of the window, or read from disk when it is
    /// there only (its record stays until rewritten). Call with `paging` held.
    async fn take_anywhere(
        &self,
        broker: &Broker,
        key: ScheduleKey,
    ) -> Result<Waiting, ScheduleEditError> {
        if let Some(w) = self.take(key).map_err(|_| gone(key))? {
            return Ok(w);
        }
        self.barrier().await?;
        let entry = stored::read(&self.store, key)?.ok_or_else(|| gone(key))?;
        let queue_durable = broker
            .queue_by_id(key.queue)
            .is_some_and(|q| q.settings().durable);
        Ok(Waiting {
            queue: key.queue,
            message: entry.message,
            delivery_count: entry.delivery_count,
            durable: entry.durable || queue_durable,
            on_disk: true,
        })
    }
}

/// The message with the edit applied.
pub(super) fn edited(message: &Message, edit: MessageEdit) -> Message {
    let mut message = message.clone();
    if let Some(properties) = edit.properties {
        message.properties = properties
            .into_iter()
            .map(|p| -> Property { (p.name.into(), p.value.into()) })
            .collect();
    }
    if let Some(body) = edit.body {
        message.body = body;
    }
    edit.headers.apply(&mut message);
    // A protocol would forward these bytes verbatim, unedited.
    message.wire = None;
    message
}

/// Not in the schedule: delivered already if it was due, else never there (or cancelled).
fn gone(key: ScheduleKey) -> ScheduleEditError {
    match key.due_ms <= now_ms() {
        true => ScheduleEditError::AlreadyDue(format_key(&key)),
        false => ScheduleEditError::NotFound(format_key(&key)),
    }
}

fn parse_id(id: &str) -> Result<ScheduleKey, ScheduleEditError> {
    parse_key(id).ok_or_else(|| ScheduleEditError::BadId(id.to_owned()))
}

fn queue_id(broker: &Broker, name: Option<&str>) -> Result<Option<u32>, ScheduleEditError> {
    name.map(|name| {
        broker
            .queue(name)
            .map(|q| q.id())
            .ok_or_else(|| ScheduleEditError::UnknownQueue(name.to_owned()))
    })
    .transpose()
}

/// A queue's name; its id once it is deleted (its messages are dropped when due).
fn queue_name(broker: &Broker, id: u32) -> String {
    broker
        .queue_by_id(id)
        .map_or_else(|| format!("#{id}"), |q| q.name().to_string())
}

fn summary(broker: &Broker, entry: &ScheduledMessage) -> ScheduledSummary {
    ScheduledSummary::new(
        entry,
        queue_name(broker, entry.key.queue),
        ScheduleQuery::DEFAULT_PREVIEW,
    )
}
