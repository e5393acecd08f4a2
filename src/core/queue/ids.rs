//! A queue's messages by their message id (a JMS `JMSMessageID`, a STOMP
//! `message-id`, a Zaqar message id): a client that names a message by the
//! id it gave or was given finds its sequence in one hash lookup, wherever
//! the message waits (in memory, paged to disk, in flight).
//!
//! Every message placed in the queue with an id is entered, and every one
//! found at start (recovery reads each record anyway), so the index holds
//! after a restart. It keeps a 64-bit hash of each id (seeded per process),
//! not the id: about 24 bytes a message whether it is in memory or paged,
//! where the id itself would keep ~60 more alive for a paged one. Two ids
//! may share a hash; a lookup tells them apart by the message's id. It is not updated when a message leaves (acknowledged,
//! expired, moved: many paths, some on the dispatch path): an entry may name
//! a sequence that is gone, so a lookup checks the message it finds. Entries whose message left are pruned once the index
//! has grown to twice what it held after the last pruning (plus
//! [`SLACK`]): amortised O(1) per message, and the index never holds more
//! than about twice the queue's messages.

use super::State;
use crate::core::fast_map::{FastMap, FastSet};
use std::hash::BuildHasher;

/// Entries added past twice the last pruned size before pruning again: a
/// small queue is not pruned on every message.
const SLACK: usize = 4096;

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

impl State {
    /// Enters a message placed in the queue under its id, if it has one.
    pub(super) fn index_id(&mut self, id: Option<&str>, seq: u64) {
        let Some(id) = id else { return };
        self.ids.insert(id, seq);
        if self.ids.needs_pruning() {
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
        let mut ids = std::mem::take(&mut self.ids);
        ids.retain(|seq| {
            in_memory.contains(&seq)
                || self.in_flight.contains_key(&seq)
                || self.backlog.contains(seq)
        });
        self.ids = ids;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
