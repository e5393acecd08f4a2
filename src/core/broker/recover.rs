//! Recovery at start: queues from their records, messages from the store,
//! the first of each queue in memory and the rest left paged.

use super::Broker;
use crate::core::error::CoreError;
use crate::core::persist;
use crate::core::queue::{PagedAtStart, Queue};
use crate::core::queue_record::QueueRecord;
use crate::core::recovery_progress::RecoveryProgress;
use crate::store::StoreError;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Broker {
    pub(super) fn recover(&self) -> Result<(), CoreError> {
        let store = &self.inner.store;
        let mut by_id: HashMap<u32, Arc<Queue>> = HashMap::new();
        let mut max_id = 0;
        for recovered in store.queues()? {
            let record = QueueRecord::decode(&recovered.record)
                .map_err(|_| StoreError::Corrupt(recovered.name.clone().into_bytes()))?;
            let id = record.id;
            max_id = max_id.max(id);
            let name: Arc<str> = Arc::from(recovered.name.as_str());
            let topic = record.topic.as_deref();
            let mut settings = self.settings_for(topic.unwrap_or(&name));
            record.changes.settings.apply_to(&mut settings);
            let queue = self.new_queue(name.clone(), id, settings);
            if record.changes.paused {
                queue.pause(true);
            }
            queue.set_changes(record.changes);
            if let Some(topic) = topic {
                self.bind_to_topic(topic, &queue);
            }
            self.inner.queues.insert(name, queue.clone());
            self.inner.queues_by_id.insert(id, queue.clone());
            by_id.insert(id, queue);
        }
        self.inner
            .next_queue_id
            .store(max_id + 1, Ordering::Relaxed);

        struct Loading {
            in_memory: Vec<(u64, Bytes)>,
            /// Sequence and group of each message left on disk.
            backlog: Vec<PagedAtStart>,
            next_seq: u64,
        }
        let mut loading: HashMap<u32, Loading> = HashMap::new();
        let mut stale = Vec::new();
        let mut progress = RecoveryProgress::new(
            by_id.len(),
            store.estimate_messages(),
            self.inner.recovery.clone(),
        );
        store.for_each_message(|key, record| {
            progress.message_read(key.queue);
            let Some(queue) = by_id.get(&key.queue) else {
                stale.push(key);
                return;
            };
            // Byte 1 of a record is the durable flag: non-durable messages
            // paged to disk do not survive a restart.
            if record.get(1) != Some(&1) && !queue.settings().durable {
                stale.push(key);
                return;
            }
            let l = loading.entry(key.queue).or_insert(Loading {
                in_memory: Vec::new(),
                backlog: Vec::new(),
                next_seq: 1,
            });
            l.next_seq = key.seq + 1;
            if l.backlog.is_empty() && l.in_memory.len() < queue.settings().max_memory_messages {
                l.in_memory.push((key.seq, record));
            } else {
                // Paged back in lane by lane: only its group is kept.
                match persist::decode(record) {
                    Ok(stored) => l.backlog.push((key.seq, stored.message.group_id)),
                    Err(e) => {
                        tracing::error!(queue = %queue.name(), seq = key.seq, error = %e, "skipping unreadable stored message");
                        stale.push(key);
                    }
                }
            }
        })?;
        store.delete_messages_now(&stale)?;
        let mut total = 0;
        for (id, l) in loading {
            if let Some(queue) = by_id.get(&id) {
                total += l.in_memory.len() + l.backlog.len();
                queue.recover(l.in_memory, l.backlog, l.next_seq);
            }
        }
        // Claims hold their messages again until they end (after the
        // messages are back in their queues, before anyone consumes).
        self.restore_claims()?;
        progress.finish();
        tracing::info!(
            queues = by_id.len(),
            messages = total,
            read = progress.messages(),
            seconds = progress.elapsed().as_secs_f64(),
            "recovered"
        );
        Ok(())
    }
}
