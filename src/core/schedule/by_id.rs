//! Waiting messages found by their message id within one queue, for APIs
//! that address a message by id whether or not it is due yet (Zaqar's get
//! and delete by id find a delayed message too), through the queue's index
//! by id (`ids.rs`). The queue's first lookup builds it: the entries the
//! window holds, then the queue's records on disk, read a chunk at a time
//! through the per-queue index `scheduled_by_queue` outside every lock the
//! timer and publishers take. Then a lookup reads only the entries its ids
//! name: a miss reads nothing.

use super::stored::{self, next_key, ScheduledMessage, FIRST_KEY};
use super::{Schedule, ScheduleEditError, ScheduleError, MAX_KEY};
use crate::core::broker::Broker;
use crate::store::{ScheduleKey, StoreError};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Records read per step of a build (each decoded whole, bodies too).
const BUILD_CHUNK: usize = 1024;

impl Schedule {
    /// The waiting messages of queue `queue` whose message id is one of
    /// `message_ids`, in due order: for each id the earliest due, should two
    /// share it. Nothing is taken out of the schedule: a message found may
    /// fall due right after (a [`cancel`](Self::cancel) of it then answers
    /// [`ScheduleEditError::AlreadyDue`]).
    ///
    /// Cost: the queue's first lookup reads its waiting entries once to
    /// build its index (O(messages waiting in this queue)); every lookup
    /// after it reads only the entries its ids name, from memory or one
    /// record each from disk. A store error during the build fails the
    /// lookup; the next one builds again.
    pub async fn find_by_message_ids(
        &self,
        queue: &str,
        message_ids: &[&str],
    ) -> Result<Vec<ScheduledMessage>, ScheduleEditError> {
        let broker = self.inner.broker()?;
        let Some(q) = broker.queue(queue) else {
            return Err(ScheduleEditError::UnknownQueue(queue.to_owned()));
        };
        let queue_id = q.id();
        let mut wanted: Vec<&str> = message_ids.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        // Counted before an entry is visible anywhere, uncounted once it
        // left: a queue with none waiting needs no index and no read.
        if wanted.is_empty() || self.inner.counts.of(queue_id) == 0 {
            return Ok(Vec::new());
        }
        self.keep_ids(&broker, queue_id).await?;
        let mut candidates = Vec::new();
        for id in &wanted {
            candidates.extend(self.inner.ids.keys_of(queue_id, id).unwrap_or_default());
        }
        let mut found: BTreeMap<String, ScheduledMessage> = BTreeMap::new();
        let mut on_disk = Vec::new();
        {
            let window = self.inner.window.lock();
            for key in candidates {
                match window.entries.get(&key).or_else(|| window.parked.get(&key)) {
                    Some(w) => keep_earliest(&mut found, &wanted, w.to_scheduled(key)),
                    // At or below the bound and not in memory: it left meanwhile.
                    None if key <= window.bound => {}
                    None => on_disk.push(key),
                }
            }
        }
        if !on_disk.is_empty() {
            // Its record was submitted before it was entered.
            self.inner.barrier().await?;
            self.inner
                .ids
                .records_read
                .fetch_add(on_disk.len() as u64, Ordering::Relaxed);
            let store = self.inner.store.clone();
            let read = tokio::task::spawn_blocking(move || {
                on_disk
                    .into_iter()
                    .map(|key| stored::read(&store, key))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
            .unwrap_or(Err(ScheduleError::Store(StoreError::Closed)))?;
            // None: it left between the index and the read.
            for entry in read.into_iter().flatten() {
                keep_earliest(&mut found, &wanted, entry);
            }
        }
        let mut out: Vec<ScheduledMessage> = found.into_values().collect();
        out.sort_by_key(|entry| entry.key);
        Ok(out)
    }

    /// Builds `queue`'s index unless it has one; concurrent first lookups
    /// wait for one build.
    async fn keep_ids(&self, broker: &Broker, queue: u32) -> Result<(), ScheduleEditError> {
        let ids = &self.inner.ids;
        if ids.is_on(queue) {
            return Ok(());
        }
        let _builder = ids.builder.lock().await;
        if !ids.start(queue) {
            return Ok(());
        }
        let built = self.enter_waiting(broker, queue).await;
        if let Err(e) = &built {
            tracing::error!(queue, error = %e, "cannot read the delayed messages to index their ids");
        }
        ids.finish(queue, built.is_ok());
        built
    }

    /// Enters every entry of `queue` waiting now: those in the window, then
    /// those on disk. Entries scheduled from the start of the build on enter
    /// themselves; one met twice (in memory and on disk) is entered once.
    async fn enter_waiting(&self, broker: &Broker, queue: u32) -> Result<(), ScheduleEditError> {
        let ids = &self.inner.ids;
        let in_memory: Vec<(u64, ScheduleKey)> = {
            let window = self.inner.window.lock();
            window
                .entries
                .iter()
                .chain(window.parked.iter())
                .filter(|(key, _)| key.queue == queue)
                .filter_map(|(key, w)| Some((ids.hash(w.message.message_id.as_deref()?), *key)))
                .collect()
        };
        ids.enter_built(queue, in_memory);
        // Records submitted before the build started are on disk after this.
        self.inner.barrier().await?;
        let queue_durable = broker
            .queue_by_id(queue)
            .is_some_and(|q| q.settings().durable);
        let boot_seq = self.inner.boot_seq;
        let mut from = FIRST_KEY;
        loop {
            let store = self.inner.store.clone();
            let page = tokio::task::spawn_blocking(move || {
                store.scan_scheduled_range(from..MAX_KEY, Some(queue), BUILD_CHUNK)
            })
            .await
            .unwrap_or(Err(StoreError::Closed))?;
            let Some(last) = page.last().map(|(key, _)| *key) else {
                break;
            };
            let full = page.len() >= BUILD_CHUNK;
            ids.records_read
                .fetch_add(page.len() as u64, Ordering::Relaxed);
            let found: Vec<(u64, ScheduleKey)> = page
                .into_iter()
                .filter_map(|(key, record)| stored::decode(key, record).ok())
                // Not durable, from an earlier run: dropped when paged in.
                .filter(|e| e.durable || queue_durable || e.key.seq >= boot_seq)
                .filter_map(|e| Some((ids.hash(e.message.message_id.as_deref()?), e.key)))
                .collect();
            ids.enter_built(queue, found);
            if !full {
                break;
            }
            from = next_key(last);
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// Records read from disk by lookups by id and the builds of their index.
    #[cfg(test)]
    pub(super) fn records_read_by_id(&self) -> u64 {
        self.inner.ids.records_read.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(super) fn has_id_index(&self, queue: u32) -> bool {
        self.inner.ids.has_index(queue)
    }
}

/// Keeps `entry` when its message id is wanted and no earlier entry has it.
fn keep_earliest(
    found: &mut BTreeMap<String, ScheduledMessage>,
    wanted: &[&str],
    entry: ScheduledMessage,
) {
    let Some(id) = entry.message.message_id.as_deref() else {
        return;
    };
    if wanted.binary_search(&id).is_err() {
        return;
    }
    match found.get(id) {
        Some(earlier) if earlier.key <= entry.key => {}
        _ => {
            found.insert(id.to_owned(), entry);
        }
    }
}
