//! A queue's messages by their message id (a JMS `JMSMessageID`, a STOMP
//! `message-id`, a Zaqar message id): a client that names a message by the
//! id it gave or was given finds its sequence in one hash lookup, wherever
//! the message waits (in memory, paged to disk, in flight).
//!
//! Only the Zaqar API looks messages up by id, so a queue keeps no index
//! until the first lookup: publishing and recovery pay nothing for it on
//! queues used only through STOMP and AMQP (every JMS message carries an
//! id). The first lookup builds it — the messages in memory under the
//! lock, then those paged to disk from the store, outside it — and from
//! then on every message placed in the queue is entered. A restart forgets
//! it; the next lookup builds it again.
//!
//! It keeps a 64-bit hash of each id (seeded per process), not the id:
//! about 24 bytes a message whether it is in memory or paged, where the id
//! itself would keep ~60 more alive for a paged one. Two ids may share a
//! hash; a lookup tells them apart by the message's id. It is not updated
//! when a message leaves (acknowledged, expired, moved: many paths, some on
//! the dispatch path): an entry may name a sequence that is gone, so a
//! lookup checks the message it finds. Entries whose message left are
//! pruned once the index has grown to twice what it held after the last
//! pruning (plus [`SLACK`]): amortised O(1) per message, and the index never
//! holds more than about twice the queue's messages.

use super::inspect::{MessageState, QueuedMessage};
use super::{Queue, State};
use crate::core::fast_map::{FastMap, FastSet};
use crate::core::message::now_ms;
use crate::core::persist;
use crate::store::{Op, StoreError};
use std::hash::BuildHasher;
use std::sync::Arc;

/// Entries added past twice the last pruned size before pruning again: a
/// small queue is not pruned on every message.
const SLACK: usize = 4096;

/// Records read from the store at a time while building the index: the
/// queue's lock is taken once per chunk to enter them.
const BUILD_CHUNK: usize = 1024;

/// Whether a queue keeps its index of message ids.
#[derive(Debug, Default)]
pub(super) enum IdIndex {
    /// Nobody has looked a message up by id: nothing is entered.
    #[default]
    Off,
    /// The first lookup is reading the paged messages' ids; messages placed
    /// meanwhile are entered.
    Building(MessageIds),
    On(MessageIds),
}

impl IdIndex {
    fn ids_mut(&mut self) -> Option<&mut MessageIds> {
        match self {
            IdIndex::Off => None,
            IdIndex::Building(ids) | IdIndex::On(ids) => Some(ids),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct MessageIds {
    hasher: foldhash::fast::RandomState,
    /// The first sequence entered for each id's hash.
    first: FastMap<u64, u64>,
    /// Later sequences of hashes entered more than once (a client that sent
    /// the same id again, or two ids with one hash).
    more: FastMap<u64, Vec<u64>>,
    /// Entries in both maps.
    len: usize,
    /// Prune when `len` exceeds this.
    prune_at: usize,
}

impl MessageIds {
    /// Enters `id` for the message `seq`.
    pub fn insert(&mut self, id: &str, seq: u64) {
        let key = self.hasher.hash_one(id);
        match self.first.get(&key) {
            None => {
                self.first.insert(key, seq);
            }
            Some(&first) if first == seq => return,
            Some(_) => {
                let more = self.more.entry(key).or_default();
                if more.contains(&seq) {
                    return;
                }
                more.push(seq);
            }
        }
        self.len += 1;
    }

    /// The sequences that may be `id`'s, oldest entry first: some may be
    /// gone, or another id's.
    pub fn seqs_of(&self, id: &str) -> Vec<u64> {
        let key = self.hasher.hash_one(id);
        let mut seqs: Vec<u64> = self.first.get(&key).copied().into_iter().collect();
        if let Some(more) = self.more.get(&key) {
            seqs.extend_from_slice(more);
        }
        seqs
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    fn needs_pruning(&self) -> bool {
        self.len > self.prune_at.max(SLACK)
    }

    /// Keeps only the entries whose sequence `live` says is still in the queue.
    fn retain(&mut self, live: impl Fn(u64) -> bool) {
        self.first.retain(|_, seq| live(*seq));
        self.more.retain(|_, seqs| {
            seqs.retain(|seq| live(*seq));
            !seqs.is_empty()
        });
        // A hash whose first sequence left but a later one stayed moves up.
        let orphans: Vec<u64> = self
            .more
            .keys()
            .filter(|key| !self.first.contains_key(*key))
            .copied()
            .collect();
        for key in orphans {
            if let Some(mut seqs) = self.more.remove(&key) {
                let first = seqs.remove(0);
                self.first.insert(key, first);
                if !seqs.is_empty() {
                    self.more.insert(key, seqs);
                }
            }
        }
        self.len = self.first.len() + self.more.values().map(Vec::len).sum::<usize>();
        self.prune_at = 2 * self.len + SLACK;
        self.first.shrink_to(self.first.len() * 2);
    }
}

impl Queue {
    /// The messages whose message id is `id` (JMS message id, STOMP
    /// `message-id`, Zaqar id), oldest first, wherever they are in the
    /// queue: one hash lookup, then as [`Queue::find_message`]. Expired
    /// messages waiting to be dropped are not shown. The queue's first
    /// lookup builds its index (see the module's comment).
    pub async fn find_by_message_id(&self, id: &str) -> Vec<QueuedMessage> {
        self.keep_message_ids().await;
        let st = self.state.lock();
        let now = now_ms();
        let seqs = match &st.ids {
            IdIndex::On(ids) | IdIndex::Building(ids) => ids.seqs_of(id),
            IdIndex::Off => Vec::new(),
        };
        let mut found: Vec<QueuedMessage> = seqs
            .into_iter()
            .filter_map(|seq| self.locate(&st, seq))
            .filter(|m| m.message.message_id.as_deref() == Some(id))
            .filter(|m| {
                matches!(m.state, MessageState::InFlight { .. }) || !m.message.is_expired_at(now)
            })
            .collect();
        // The build enters paged messages after those in memory.
        found.sort_unstable_by_key(|m| m.seq);
        found
    }

    /// Builds the index unless the queue keeps one. One lookup builds it;
    /// others wait for it. A store error leaves the index off (logged): the
    /// lookup answers from the messages entered so far and the next one
    /// tries again.
    async fn keep_message_ids(&self) {
        let kept = matches!(self.state.lock().ids, IdIndex::On(_));
        if kept {
            return;
        }
        let _builder = self.id_builder.lock().await;
        let last_paged = {
            let mut st = self.state.lock();
            if matches!(st.ids, IdIndex::On(_)) {
                return;
            }
            let mut ids = MessageIds::default();
            let in_memory = st
                .ready
                .entries_after(0)
                .map(|e| (e.seq, &e.message))
                .chain(st.in_flight.iter().map(|(&seq, f)| (seq, &f.entry.message)))
                .chain(st.waiting.iter().map(|(_, e)| (e.seq, &e.message)));
            for (seq, message) in in_memory {
                if let Some(id) = message.message_id.as_deref() {
                    ids.insert(id, seq);
                }
            }
            st.ids = IdIndex::Building(ids);
            st.backlog.last_seq()
        };
        let built = match last_paged {
            Some(last) => self.enter_paged_ids(last).await,
            None => Ok(()),
        };
        let mut st = self.state.lock();
        match built {
            Ok(()) => {
                if let IdIndex::Building(ids) = std::mem::take(&mut st.ids) {
                    st.ids = IdIndex::On(ids);
                }
            }
            Err(e) => {
                tracing::error!(queue = %self.name, error = %e, "cannot read paged messages to index their ids");
                st.ids = IdIndex::Off;
            }
        }
    }

    /// Enters the ids of the messages on disk up to `last`. Records of
    /// messages that are in memory too (persistent ones) are entered again,
    /// which the index ignores.
    async fn enter_paged_ids(&self, last: u64) -> Result<(), Arc<StoreError>> {
        // A message paged just before the build may still be on its way to
        // the store: the writer applies submissions in order.
        self.store.submit(Op::Barrier).wait().await?;
        let mut from = 0;
        while from <= last {
            let records = self
                .store
                .scan_messages(self.id, from, BUILD_CHUNK)
                .map_err(Arc::new)?;
            let Some(&(newest, _)) = records.last() else {
                break;
            };
            let read: Vec<(u64, Arc<str>)> = records
                .into_iter()
                .filter(|(seq, _)| *seq <= last)
                .filter_map(|(seq, record)| {
                    let id = persist::decode(record).ok()?.message.message_id?;
                    Some((seq, id))
                })
                .collect();
            {
                let mut st = self.state.lock();
                for (seq, id) in &read {
                    st.index_id(Some(id), *seq);
                }
            }
            from = newest + 1;
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}

impl State {
    /// Enters a message placed in the queue under its id, if it has one and
    /// the queue keeps the index.
    pub(super) fn index_id(&mut self, id: Option<&str>, seq: u64) {
        let (Some(id), Some(ids)) = (id, self.ids.ids_mut()) else {
            return;
        };
        ids.insert(id, seq);
        if ids.needs_pruning() {
            self.prune_ids();
        }
    }

    /// Drops the entries of messages that left the queue. O(entries +
    /// messages in memory).
    fn prune_ids(&mut self) {
        let in_memory: FastSet<u64> = self
            .ready
            .entries_after(0)
            .map(|e| e.seq)
            .chain(self.waiting.iter().map(|(_, e)| e.seq))
            .collect();
        let mut index = std::mem::take(&mut self.ids);
        if let Some(ids) = index.ids_mut() {
            ids.retain(|seq| {
                in_memory.contains(&seq)
                    || self.in_flight.contains_key(&seq)
                    || self.backlog.contains(seq)
            });
        }
        self.ids = index;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::settings::QueueSettings;
    use crate::core::tests::open;
    use crate::core::{Broker, Message, RoutingType};

    fn kept(queue: &Queue) -> &'static str {
        match queue.state.lock().ids {
            IdIndex::Off => "off",
            IdIndex::Building(_) => "building",
            IdIndex::On(_) => "on",
        }
    }

    /// Publishes durable messages `first..end` with ids `m<i>` and bodies
    /// `<i>`, and waits until they are written.
    async fn publish(broker: &Broker, range: std::ops::Range<u32>) {
        let mut last = None;
        for i in range {
            let m = Message {
                address: Arc::from("q"),
                body: bytes::Bytes::from(i.to_string()),
                message_id: Some(Arc::from(format!("m{i}").as_str())),
                durable: true,
                ..Default::default()
            };
            last = Some(broker.publish(m, RoutingType::Anycast).unwrap());
        }
        last.unwrap().wait().await.unwrap();
    }

    async fn body_of(queue: &Queue, id: &str) -> Vec<String> {
        queue
            .find_by_message_id(id)
            .await
            .iter()
            .map(|m| String::from_utf8_lossy(&m.message.body).into_owned())
            .collect()
    }

    fn small() -> QueueSettings {
        QueueSettings {
            max_memory_messages: 5,
            ..QueueSettings::default()
        }
    }

    #[tokio::test]
    async fn a_queue_nobody_looks_up_by_id_keeps_no_index() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small());
        publish(&broker, 0..3000).await;
        let q = broker.queue("q").unwrap();
        assert!(q.stats().paged > 0, "{:?}", q.stats());
        assert_eq!(kept(&q), "off");
    }

    #[tokio::test]
    async fn the_first_lookup_builds_the_index_from_memory_and_disk() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small());
        // More than one chunk of the build's store reads is paged.
        publish(&broker, 0..(3 * BUILD_CHUNK as u32)).await;
        let q = broker.queue("q").unwrap();
        assert_eq!(body_of(&q, "m2").await, ["2"], "in memory");
        assert_eq!(kept(&q), "on");
        assert_eq!(body_of(&q, "m2500").await, ["2500"], "paged");
        assert_eq!(body_of(&q, "m3071").await, ["3071"], "the last one");
        assert!(body_of(&q, "m3072").await.is_empty());
        // Kept from now on: later messages are entered as they are placed,
        // a second message under an id is found too, oldest first.
        publish(&broker, 3072..3100).await;
        publish(&broker, 7..8).await;
        assert_eq!(body_of(&q, "m3099").await, ["3099"]);
        assert_eq!(body_of(&q, "m7").await, ["7", "7"]);
    }

    #[tokio::test]
    async fn after_a_restart_the_index_is_built_again_on_the_first_lookup() {
        let dir = tempfile::tempdir().unwrap();
        {
            let broker = open(dir.path(), small());
            publish(&broker, 0..200).await;
            let q = broker.queue("q").unwrap();
            assert_eq!(body_of(&q, "m150").await, ["150"]);
        }
        let broker = open(dir.path(), small());
        let q = broker.queue("q").unwrap();
        assert_eq!(kept(&q), "off", "recovery enters nothing");
        assert_eq!(body_of(&q, "m1").await, ["1"]);
        assert_eq!(body_of(&q, "m199").await, ["199"]);
    }

    #[tokio::test]
    async fn concurrent_first_lookups_all_find_their_message() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small());
        publish(&broker, 0..2000).await;
        let q = broker.queue("q").unwrap();
        let lookups = (0..8).map(|i| {
            let q = q.clone();
            tokio::spawn(async move { body_of(&q, &format!("m{}", i * 250)).await })
        });
        for (i, lookup) in lookups.enumerate() {
            assert_eq!(lookup.await.unwrap(), [(i * 250).to_string()]);
        }
    }

    #[test]
    fn an_id_entered_twice_names_both_messages_oldest_first() {
        let mut ids = MessageIds::default();
        ids.insert("a", 1);
        ids.insert("b", 2);
        ids.insert("a", 3);
        ids.insert("a", 3);
        assert_eq!(ids.seqs_of("a"), [1, 3]);
        assert_eq!(ids.seqs_of("b"), [2]);
        assert!(ids.seqs_of("c").is_empty());
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn pruning_keeps_live_entries_and_moves_a_later_one_up() {
        let mut ids = MessageIds::default();
        ids.insert("a", 1);
        ids.insert("a", 5);
        ids.insert("a", 7);
        ids.insert("b", 2);
        ids.insert("c", 3);
        ids.retain(|seq| seq != 1 && seq != 2);
        assert_eq!(ids.seqs_of("a"), [5, 7]);
        assert!(ids.seqs_of("b").is_empty());
        assert_eq!(ids.seqs_of("c"), [3]);
        assert_eq!(ids.len(), 3);
        assert_eq!(ids.prune_at, 2 * 3 + SLACK);
    }

    #[test]
    fn the_index_is_pruned_once_it_doubles() {
        let mut ids = MessageIds::default();
        for seq in 0..(SLACK as u64) {
            ids.insert(&format!("m{seq}"), seq);
        }
        assert!(!ids.needs_pruning());
        ids.insert("one more", SLACK as u64);
        assert!(ids.needs_pruning());
    }
}
