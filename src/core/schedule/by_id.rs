//! Waiting messages found by their message id within one queue, for APIs
//! that address a message by id whether or not it is due yet (Zaqar's get
//! and delete by id find a delayed message too).
//!
//! The schedule keeps no index by message id (millions of waiting messages
//! cost disk, not RAM): a lookup walks the queue's own entries through the
//! per-queue index `scheduled_by_queue`, never another queue's, and reads
//! their records a page at a time.

use super::listing::{stored_page, KeyFilter};
use super::stored::{next_key, ScheduledMessage, FIRST_KEY};
use super::{Schedule, ScheduleEditError, ScheduleError, MAX_KEY};
use crate::store::StoreError;
use std::collections::{BTreeMap, HashSet};

/// Records read per step of a lookup (each decoded whole, bodies too).
const LOOKUP_PAGE: usize = 64;

impl Schedule {
    /// The waiting messages of queue `queue` whose message id is one of
    /// `message_ids`, in due order: for each id the earliest due, should two
    /// share it. Nothing is taken out of the schedule: a message found may
    /// fall due right after (a [`cancel`](Self::cancel) of it then answers
    /// [`ScheduleEditError::AlreadyDue`]).
    ///
    /// Cost: the queue's waiting entries are read (and decoded) until every
    /// id is found, so a lookup of an id that is not waiting reads all of
    /// them: O(messages waiting in this queue), whatever waits in other
    /// queues. Entries held in memory only (not durable, not spilled) are
    /// looked for in the window, O(entries in memory) under its lock, and
    /// only when the queue is not durable: every entry scheduled while the
    /// queue is durable is on disk. (So a memory-only entry scheduled before
    /// a queue was made durable at run time is not found.)
    pub async fn find_by_message_ids(
        &self,
        queue: &str,
        message_ids: &[&str],
    ) -> Result<Vec<ScheduledMessage>, ScheduleEditError> {
        let broker =
            self.inner
                .broker
                .upgrade()
                .ok_or(ScheduleEditError::Store(ScheduleError::Store(
                    StoreError::Closed,
                )))?;
        let Some(q) = broker.queue(queue) else {
            return Err(ScheduleEditError::UnknownQueue(queue.to_owned()));
        };
        let queue_id = q.id();
        let mut wanted: Vec<&str> = message_ids.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let mut found: BTreeMap<String, ScheduledMessage> = BTreeMap::new();
        // Counted before an entry is visible anywhere, uncounted once it
        // left: a queue with none waiting needs no barrier and no read.
        if wanted.is_empty() || self.inner.counts.of(queue_id) == 0 {
            return Ok(Vec::new());
        }
        if !q.settings().durable {
            // Before the barrier: an entry evicted from here meanwhile is
            // spilled by a write the barrier then waits for.
            let window = self.inner.window.lock();
            let memory_only = window
                .entries
                .iter()
                .chain(window.parked.iter())
                .filter(|(key, w)| key.queue == queue_id && !w.on_disk);
            for (key, w) in memory_only {
                keep_earliest(&mut found, &wanted, w.to_scheduled(*key));
            }
        }
        // Durable entries are written when scheduled: once the writes
        // submitted before now are applied, the disk has each of them.
        self.inner.barrier().await?;
        // Ids met on disk; the disk is read in due order, so the first
        // entry met for an id is its earliest there.
        let mut on_disk: HashSet<String> = HashSet::new();
        let mut from = FIRST_KEY;
        while on_disk.len() < wanted.len() {
            let filter = KeyFilter {
                keys: from..MAX_KEY,
                queue: Some(queue_id),
            };
            let store = self.inner.store.clone();
            let page =
                tokio::task::spawn_blocking(move || stored_page(&store, &filter, LOOKUP_PAGE))
                    .await
                    .unwrap_or(Err(ScheduleError::Store(StoreError::Closed)))?;
            let Some(last) = page.last().map(|entry| entry.key) else {
                break;
            };
            let full = page.len() >= LOOKUP_PAGE;
            for entry in page {
                if let Some(id) = keep_earliest(&mut found, &wanted, entry) {
                    on_disk.insert(id);
                }
            }
            if !full {
                break;
            }
            from = next_key(last);
        }
        let mut out: Vec<ScheduledMessage> = found.into_values().collect();
        out.sort_by_key(|entry| entry.key);
        Ok(out)
    }
}

/// Keeps `entry` when its message id is wanted and no earlier entry has it;
/// the id when it is wanted.
fn keep_earliest(
    found: &mut BTreeMap<String, ScheduledMessage>,
    wanted: &[&str],
    entry: ScheduledMessage,
) -> Option<String> {
    let id = entry.message.message_id.as_deref()?.to_owned();
    wanted.binary_search(&id.as_str()).ok()?;
    match found.get(&id) {
        Some(earlier) if earlier.key <= entry.key => {}
        _ => {
            found.insert(id.clone(), entry);
        }
    }
    Some(id)
}
