//! Each queue's waiting messages by message id, for lookups by id (Zaqar's
//! get and delete by id find a delayed message too), kept as the queue's own
//! index is (`core/queue/ids.rs`): only the Zaqar API looks messages up by
//! id, so a queue has none until its first lookup, and scheduling for
//! queues nobody looked up by id costs one atomic load while no queue has
//! one. The first lookup builds it (see `by_id.rs`); from then on entries
//! are entered as they are scheduled and removed as they leave (due,
//! expired, cancelled, rescheduled), so a lookup reads only the entries its
//! ids name and a miss reads nothing. A restart forgets it.
//!
//! It keeps a 64-bit hash of each id (seeded per process) with the key of
//! each entry under it: two ids may share a hash, so a lookup checks the
//! message id of what it finds. While a build runs, entries that leave are
//! remembered, so the build does not enter one it read before it left.

use crate::core::fast_map::FastMap;
use crate::store::ScheduleKey;
use parking_lot::Mutex;
use std::collections::hash_map::Entry;
use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

#[derive(Default)]
pub(super) struct ScheduleIds {
    /// Queues with an index (built or building): none, and nothing is entered.
    kept: AtomicUsize,
    queues: Mutex<FastMap<u32, IdIndex>>,
    hasher: foldhash::fast::RandomState,
    /// Serialises builds: concurrent first lookups wait for one build.
    pub builder: tokio::sync::Mutex<()>,
    /// Records read from disk by builds and lookups (what a miss must not add to).
    pub records_read: AtomicU64,
}

enum IdIndex {
    /// Being built: entries that left meanwhile are not entered by the build.
    Building {
        keys: KeysById,
        left: BTreeSet<ScheduleKey>,
    },
    On(KeysById),
}

#[derive(Default)]
struct KeysById(FastMap<u64, Keys>);

/// The entries under one hash: nearly always one.
enum Keys {
    One(ScheduleKey),
    Many(Vec<ScheduleKey>),
}

impl KeysById {
    fn insert(&mut self, hash: u64, key: ScheduleKey) {
        match self.0.entry(hash) {
            Entry::Vacant(slot) => {
                slot.insert(Keys::One(key));
            }
            Entry::Occupied(mut slot) => match slot.get_mut() {
                Keys::One(one) if *one == key => {}
                Keys::One(one) => {
                    let first = *one;
                    slot.insert(Keys::Many(vec![first, key]));
                }
                Keys::Many(keys) if keys.contains(&key) => {}
                Keys::Many(keys) => keys.push(key),
            },
        }
    }

    fn remove(&mut self, hash: u64, key: ScheduleKey) {
        let Entry::Occupied(mut slot) = self.0.entry(hash) else {
            return;
        };
        match slot.get_mut() {
            Keys::One(one) if *one == key => {
                slot.remove();
            }
            Keys::One(_) => {}
            Keys::Many(keys) => {
                keys.retain(|k| *k != key);
                match keys.as_slice() {
                    [] => {
                        slot.remove();
                    }
                    [one] => {
                        let one = *one;
                        slot.insert(Keys::One(one));
                    }
                    _ => {}
                }
            }
        }
    }

    fn get(&self, hash: u64) -> Vec<ScheduleKey> {
        match self.0.get(&hash) {
            None => Vec::new(),
            Some(Keys::One(key)) => vec![*key],
            Some(Keys::Many(keys)) => keys.clone(),
        }
    }
}

impl IdIndex {
    fn keys_mut(&mut self) -> &mut KeysById {
        match self {
            IdIndex::Building { keys, .. } | IdIndex::On(keys) => keys,
        }
    }
}

impl ScheduleIds {
    pub fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// Whether some queue has an index: when not, nothing need be entered.
    #[inline]
    pub fn kept(&self) -> bool {
        self.kept.load(Ordering::Acquire) > 0
    }

    pub fn is_on(&self, queue: u32) -> bool {
        self.kept() && matches!(self.queues.lock().get(&queue), Some(IdIndex::On(_)))
    }

    /// Enters a scheduled entry, if its queue has an index. Call after its
    /// record was submitted and it is in the window, so a build that starts
    /// meanwhile finds it in one or the other.
    #[inline]
    pub fn entered(&self, queue: u32, id: Option<&str>, key: ScheduleKey) {
        let (true, Some(id)) = (self.kept(), id) else {
            return;
        };
        let hash = self.hash(id);
        if let Some(index) = self.queues.lock().get_mut(&queue) {
            index.keys_mut().insert(hash, key);
        }
    }

    /// Removes entries that left the schedule: `(queue, message id, key)`.
    /// Call after their records' deletion was submitted and they left the
    /// window, so a build that starts meanwhile reads neither.
    pub fn left<'a>(&self, entries: impl IntoIterator<Item = (u32, Option<&'a str>, ScheduleKey)>) {
        if !self.kept() {
            return;
        }
        let mut queues = self.queues.lock();
        for (queue, id, key) in entries {
            let (Some(id), Some(index)) = (id, queues.get_mut(&queue)) else {
                continue;
            };
            let hash = self.hasher.hash_one(id);
            match index {
                IdIndex::Building { keys, left } => {
                    keys.remove(hash, key);
                    left.insert(key);
                }
                IdIndex::On(keys) => keys.remove(hash, key),
            }
        }
    }

    /// The keys that may be `id`'s in `queue` (some may have just left, or be
    /// another id's); `None` when the queue has no built index.
    pub fn keys_of(&self, queue: u32, id: &str) -> Option<Vec<ScheduleKey>> {
        let hash = self.hash(id);
        match self.queues.lock().get(&queue) {
            Some(IdIndex::On(keys)) => Some(keys.get(hash)),
            _ => None,
        }
    }

    /// Starts building `queue`'s index, entering from now on; false when it
    /// is built already. Call with `builder` held.
    pub fn start(&self, queue: u32) -> bool {
        let mut queues = self.queues.lock();
        if queues.contains_key(&queue) {
            return !matches!(queues.get(&queue), Some(IdIndex::On(_)));
        }
        queues.insert(
            queue,
            IdIndex::Building {
                keys: KeysById::default(),
                left: BTreeSet::new(),
            },
        );
        // Under the lock: `entered` sees the count once the entry is there.
        self.kept.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Enters what a build found, `(hash, key)`, but for entries that left
    /// since it started.
    pub fn enter_built(&self, queue: u32, found: impl IntoIterator<Item = (u64, ScheduleKey)>) {
        let mut queues = self.queues.lock();
        if let Some(IdIndex::Building { keys, left }) = queues.get_mut(&queue) {
            for (hash, key) in found {
                if !left.contains(&key) {
                    keys.insert(hash, key);
                }
            }
        }
    }

    /// Ends a build: the index is on, or, when the build failed, gone.
    pub fn finish(&self, queue: u32, built: bool) {
        let mut queues = self.queues.lock();
        match (queues.remove(&queue), built) {
            (Some(IdIndex::Building { keys, .. }), true) => {
                queues.insert(queue, IdIndex::On(keys));
            }
            (Some(IdIndex::On(keys)), _) => {
                queues.insert(queue, IdIndex::On(keys));
            }
            (Some(IdIndex::Building { .. }), false) => {
                self.kept.fetch_sub(1, Ordering::AcqRel);
            }
            (None, _) => {}
        }
    }

    /// Drops the index of a queue that is gone.
    pub fn forget(&self, queue: u32) {
        if !self.kept() {
            return;
        }
        if self.queues.lock().remove(&queue).is_some() {
            self.kept.fetch_sub(1, Ordering::AcqRel);
        }
    }

    #[cfg(test)]
    pub fn has_index(&self, queue: u32) -> bool {
        self.queues.lock().contains_key(&queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seq: u64) -> ScheduleKey {
        ScheduleKey {
            due_ms: 1_000,
            queue: 1,
            seq,
        }
    }

    #[test]
    fn keys_under_one_hash_are_kept_and_removed_one_by_one() {
        let mut keys = KeysById::default();
        keys.insert(7, key(1));
        keys.insert(7, key(1));
        keys.insert(7, key(2));
        keys.insert(8, key(3));
        assert_eq!(keys.get(7), [key(1), key(2)]);
        keys.remove(7, key(1));
        assert_eq!(keys.get(7), [key(2)]);
        keys.remove(7, key(9));
        keys.remove(7, key(2));
        assert!(keys.get(7).is_empty());
        assert_eq!(keys.get(8), [key(3)]);
        assert_eq!(keys.0.len(), 1);
    }

    #[test]
    fn a_build_does_not_enter_an_entry_that_left_while_it_ran() {
        let ids = ScheduleIds::default();
        assert!(!ids.kept());
        ids.entered(1, Some("a"), key(1));
        assert!(ids.start(1));
        assert!(ids.kept());
        assert_eq!(ids.keys_of(1, "a"), None, "not built yet");
        // Scheduled during the build: entered by itself.
        ids.entered(1, Some("b"), key(2));
        // Read by the build, then left before the build entered it.
        ids.left([(1, Some("a"), key(1))]);
        ids.enter_built(1, [(ids.hash("a"), key(1)), (ids.hash("c"), key(3))]);
        ids.finish(1, true);
        assert!(ids.keys_of(1, "a").unwrap().is_empty());
        assert_eq!(ids.keys_of(1, "b").unwrap(), [key(2)]);
        assert_eq!(ids.keys_of(1, "c").unwrap(), [key(3)]);
        assert!(!ids.start(1), "built once");
        ids.forget(1);
        assert!(!ids.kept());
    }

    #[test]
    fn a_failed_build_leaves_no_index() {
        let ids = ScheduleIds::default();
        assert!(ids.start(1));
        ids.finish(1, false);
        assert!(!ids.kept());
        assert_eq!(ids.keys_of(1, "a"), None);
        assert!(ids.start(1), "the next lookup tries again");
    }
}
