//! The schedule as it is on disk: the `scheduled` column family read and
//! changed directly. The running [`Schedule`](super::Schedule) uses these for
//! entries that are not in its window; `weir schedule` uses them on the data
//! dir of a stopped broker.

use super::listing::{stored_page, KeyFilter};
use super::ScheduleError;
use crate::core::message::Message;
use crate::core::persist;
use crate::store::{Op, ScheduleKey, Store};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;

/// A key no entry ever has (due at the epoch): the window's first bound.
pub(super) const BARRIER_KEY: ScheduleKey = ScheduleKey {
    due_ms: 0,
    queue: 0,
    seq: 0,
};

/// The first key after the barrier: where a scan of real entries starts.
pub const FIRST_KEY: ScheduleKey = ScheduleKey {
    due_ms: 0,
    queue: 0,
    seq: 1,
};

/// One waiting message, as the auditor sees it.
#[derive(Debug, Clone)]
pub struct ScheduledMessage {
    pub key: ScheduleKey,
    pub message: Arc<Message>,
    pub delivery_count: u32,
    /// Survives a restart (persistent message or durable queue).
    pub durable: bool,
}

/// The key right after `key`, for scans that continue past it.
pub fn next_key(key: ScheduleKey) -> ScheduleKey {
    match key.seq.checked_add(1) {
        Some(seq) => ScheduleKey { seq, ..key },
        None => match key.queue.checked_add(1) {
            Some(queue) => ScheduleKey {
                queue,
                seq: 0,
                ..key
            },
            None => ScheduleKey {
                due_ms: key.due_ms.saturating_add(1),
                queue: 0,
                seq: 0,
            },
        },
    }
}

/// `due:queue:seq`, the form `weir schedule` prints and accepts.
pub fn format_key(key: &ScheduleKey) -> String {
    format!("{}:{}:{}", key.due_ms, key.queue, key.seq)
}

pub fn parse_key(text: &str) -> Option<ScheduleKey> {
    let mut parts = text.trim().split(':');
    let due_ms = parts.next()?.parse().ok()?;
    let queue = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(ScheduleKey { due_ms, queue, seq })
}

/// Decodes a record; `durable` is the message's own flag (byte 1 of the record).
pub(super) fn decode(key: ScheduleKey, record: Bytes) -> Result<ScheduledMessage, ScheduleError> {
    let durable = record.get(1) == Some(&1);
    let stored = persist::decode(record).map_err(|source| ScheduleError::Corrupt {
        key: format_key(&key),
        source,
    })?;
    Ok(ScheduledMessage {
        key,
        message: Arc::new(stored.message),
        delivery_count: stored.delivery_count,
        durable,
    })
}

/// The entry under `key`, if there is one on disk.
pub fn read(store: &Store, key: ScheduleKey) -> Result<Option<ScheduledMessage>, ScheduleError> {
    match store.scan_scheduled(key, 1)?.pop() {
        Some((found, record)) if found == key => decode(key, record).map(Some),
        _ => Ok(None),
    }
}

/// Up to `limit` entries with key >= `from` in due-time order, of one queue or
/// of all. Entries are ordered by due time first, so picking one queue's
/// entries steps over the others' keys (without reading their records).
pub fn list(
    store: &Store,
    queue: Option<u32>,
    from: ScheduleKey,
    limit: usize,
) -> Result<Vec<ScheduledMessage>, ScheduleError> {
    let filter = KeyFilter {
        keys: from.max(FIRST_KEY)..super::MAX_KEY,
        queue,
    };
    stored_page(store, &filter, limit)
}

/// Removes the entry under `key` from disk and returns it.
pub async fn cancel(store: &Store, key: ScheduleKey) -> Result<ScheduledMessage, ScheduleError> {
    let entry = read(store, key)?.ok_or_else(|| ScheduleError::NotFound(format_key(&key)))?;
    store.submit(Op::DeleteScheduled { key }).wait().await?;
    Ok(entry)
}

/// Moves the entry under `key` to `new_due_ms` and returns it as it is now.
/// The sequence is kept: sequences are unique across queues and restarts, so
/// the new key cannot collide with another entry.
pub async fn reschedule(
    store: &Store,
    key: ScheduleKey,
    new_due_ms: u64,
) -> Result<ScheduledMessage, ScheduleError> {
    let entry = read(store, key)?.ok_or_else(|| ScheduleError::NotFound(format_key(&key)))?;
    let moved = moved(entry, new_due_ms);
    let record = persist::encode(&moved.message, moved.delivery_count);
    store
        .submit_all(vec![
            Op::DeleteScheduled { key },
            Op::PutScheduled {
                key: moved.key,
                record,
            },
        ])
        .wait()
        .await?;
    Ok(moved)
}

/// Replaces the properties and/or body of the entry under `key` (see
/// [`Schedule::edit`](super::Schedule::edit)) and returns it as it is now.
pub async fn edit(
    store: &Store,
    key: ScheduleKey,
    change: super::MessageEdit,
) -> Result<ScheduledMessage, ScheduleError> {
    let entry = read(store, key)?.ok_or_else(|| ScheduleError::NotFound(format_key(&key)))?;
    let message = Arc::new(super::edit::edited(&entry.message, change));
    let record = persist::encode(&message, entry.delivery_count);
    store
        .submit(Op::PutScheduled { key, record })
        .wait()
        .await?;
    Ok(ScheduledMessage { message, ..entry })
}

/// When the schedule acts on a message due at `due_ms`: then, or when its
/// ttl ends if that is sooner (it is removed as expired, never delivered).
/// The key's time is this, so the timer wakes for whichever comes first.
pub fn wake_at(message: &Message, due_ms: u64) -> u64 {
    message.expires_at.map_or(due_ms, |exp| exp.min(due_ms))
}

/// The same entry due at another time.
pub(super) fn moved(entry: ScheduledMessage, new_due_ms: u64) -> ScheduledMessage {
    let mut message = Arc::unwrap_or_clone(entry.message);
    message.due_at = Some(new_due_ms);
    ScheduledMessage {
        key: ScheduleKey {
            due_ms: wake_at(&message, new_due_ms),
            ..entry.key
        },
        message: Arc::new(message),
        ..entry
    }
}

/// Queue ids to names, from the `queues` column family. The record layout
/// (version 1, then the id as u32 big-endian) is the broker's; read here so
/// the CLI can name queues without recovering a whole broker.
pub fn queue_names(store: &Store) -> Result<HashMap<u32, String>, ScheduleError> {
    let mut out = HashMap::new();
    for queue in store.queues()? {
        let id = queue
            .record
            .get(1..5)
            .and_then(|b| <[u8; 4]>::try_from(b).ok());
        if let Some(id) = id {
            out.insert(u32::from_be_bytes(id), queue.name);
        }
    }
    Ok(out)
}
