//! The disk backlog of a deep queue, kept per lane: which sequence numbers of
//! each group (and of the ungrouped messages) wait on disk, in runs of
//! consecutive sequences. A lane is read back only when someone can take its
//! messages, so a group whose consumer is stalled never fills memory with
//! messages nobody may take while others wait on disk behind it.
//!
//! Runs keep the cost small: a deep queue of one group, or of ungrouped
//! messages, is one run however deep; only interleaved groups cost a run per
//! message (two small map entries, never the message).

use crate::core::consumer::ConsumerId;
use crate::core::fast_map::FastMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// A lane: a group's lane, or `None` for ungrouped messages.
pub type LaneKey = Option<Arc<str>>;

/// Consecutive sequences `start..start + len`, all of one lane, all on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub start: u64,
    pub len: u64,
}

impl Run {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

#[derive(Debug)]
struct DiskLane {
    runs: VecDeque<Run>,
    owner: Option<ConsumerId>,
}

impl DiskLane {
    fn first(&self) -> u64 {
        self.runs.front().map_or(u64::MAX, |r| r.start)
    }
}

#[derive(Debug, Default)]
pub struct Backlog {
    lanes: FastMap<LaneKey, DiskLane>,
    /// Lanes anyone may take from (ungrouped, and groups without an owner),
    /// by their oldest sequence on disk.
    unowned: BTreeSet<(u64, LaneKey)>,
    /// Lanes of bound groups, per owner, by their oldest sequence on disk.
    owned: FastMap<ConsumerId, BTreeSet<(u64, LaneKey)>>,
    /// Every run by its start: whether a sequence is on disk (browsing).
    runs: BTreeMap<u64, u64>,
    count: usize,
    /// A read found nothing yet (the writer is behind) and a retry is set.
    pub retry_scheduled: bool,
}

impl Backlog {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether this lane has messages on disk: a newer message of it must go
    /// there too, behind them.
    pub fn has_lane(&self, lane: &LaneKey) -> bool {
        self.count != 0 && self.lanes.contains_key(lane)
    }

    /// Records that `seq` of `lane` is on disk; `owner` owns the lane now.
    /// Sequences of one lane arrive in increasing order.
    pub fn push(&mut self, lane: LaneKey, seq: u64, owner: Option<ConsumerId>) {
        self.count += 1;
        match self.lanes.get_mut(&lane) {
            Some(disk) => match disk.runs.back_mut() {
                Some(last) if last.end() == seq => {
                    last.len += 1;
                    if let Some(len) = self.runs.get_mut(&last.start) {
                        *len += 1;
                    }
                }
                _ => {
                    disk.runs.push_back(Run { start: seq, len: 1 });
                    self.runs.insert(seq, 1);
                }
            },
            None => {
                self.runs.insert(seq, 1);
                self.set_of(owner).insert((seq, lane.clone()));
                self.lanes.insert(
                    lane,
                    DiskLane {
                        runs: VecDeque::from([Run { start: seq, len: 1 }]),
                        owner,
                    },
                );
            }
        }
    }

    /// The group's lane changed hands.
    pub fn rebind(&mut self, lane: &Arc<str>, to: Option<ConsumerId>) {
        if self.count == 0 {
            return;
        }
        let key: LaneKey = Some(lane.clone());
        let Some(disk) = self.lanes.get_mut(&key) else {
            return;
        };
        let (from, first) = (disk.owner, disk.first());
        if from == to {
            return;
        }
        disk.owner = to;
        self.remove_from_set(from, &(first, key.clone()));
        self.set_of(to).insert((first, key));
    }

    /// The lane `consumer` should read next: its oldest among the ungrouped
    /// messages, unbound groups and its own groups, skipping lanes `skip`
    /// rules out (held back). `None` as consumer: unowned lanes only.
    pub fn next_lane(
        &self,
        consumer: Option<ConsumerId>,
        skip: impl Fn(&LaneKey) -> bool,
    ) -> Option<LaneKey> {
        let unowned = self.unowned.iter().find(|(_, l)| !skip(l));
        let owned = consumer
            .and_then(|c| self.owned.get(&c))
            .and_then(|set| set.iter().find(|(_, l)| !skip(l)));
        [unowned, owned]
            .into_iter()
            .flatten()
            .min_by_key(|(first, _)| *first)
            .map(|(_, lane)| lane.clone())
    }

    /// The oldest run of a lane, to read from.
    pub fn front(&self, lane: &LaneKey) -> Option<Run> {
        self.lanes.get(lane).and_then(|d| d.runs.front().copied())
    }

    /// The first `n` sequences of the lane's oldest run were read back.
    pub fn consumed(&mut self, lane: &LaneKey, n: u64) {
        let Some(disk) = self.lanes.get_mut(lane) else {
            return;
        };
        let Some(run) = disk.runs.front_mut() else {
            return;
        };
        let n = n.min(run.len);
        if n == 0 {
            return;
        }
        let old_first = run.start;
        self.runs.remove(&run.start);
        run.start += n;
        run.len -= n;
        if run.len == 0 {
            disk.runs.pop_front();
        } else {
            self.runs.insert(run.start, run.len);
        }
        self.count -= n as usize;
        let owner = disk.owner;
        let new_first = disk.first();
        let empty = disk.runs.is_empty();
        self.remove_from_set(owner, &(old_first, lane.clone()));
        if empty {
            self.lanes.remove(lane);
        } else {
            self.set_of(owner).insert((new_first, lane.clone()));
        }
    }

    /// Takes one sequence out of a lane's runs (a consumer with a selector
    /// read it past older ones it cannot take). Returns whether it was there.
    pub fn remove(&mut self, lane: &LaneKey, seq: u64) -> bool {
        let Some(disk) = self.lanes.get_mut(lane) else {
            return false;
        };
        let at = disk.runs.partition_point(|r| r.end() <= seq);
        let Some(run) = disk.runs.get(at).copied() else {
            return false;
        };
        if seq < run.start {
            return false;
        }
        let old_first = disk.first();
        self.runs.remove(&run.start);
        let before = Run {
            start: run.start,
            len: seq - run.start,
        };
        let after = Run {
            start: seq + 1,
            len: run.end() - seq - 1,
        };
        disk.runs.remove(at);
        for piece in [after, before] {
            if piece.len > 0 {
                disk.runs.insert(at, piece);
                self.runs.insert(piece.start, piece.len);
            }
        }
        self.count -= 1;
        let owner = disk.owner;
        let new_first = disk.first();
        let empty = disk.runs.is_empty();
        if empty || new_first != old_first {
            self.remove_from_set(owner, &(old_first, lane.clone()));
            if empty {
                self.lanes.remove(lane);
            } else {
                self.set_of(owner).insert((new_first, lane.clone()));
            }
        }
        true
    }

    /// The ungrouped messages' runs on disk, oldest first.
    pub fn runs_of(&self, lane: &LaneKey) -> impl Iterator<Item = Run> + '_ {
        self.lanes
            .get(lane)
            .into_iter()
            .flat_map(|d| d.runs.iter().copied())
    }

    /// Every sequence on disk above `after`, in order.
    pub fn seqs_after(&self, after: u64) -> impl Iterator<Item = u64> + '_ {
        let first_run = self
            .runs
            .range(..=after)
            .next_back()
            .filter(|(start, len)| after < *start + *len)
            .map(|(start, len)| (*start, *len));
        first_run
            .into_iter()
            .chain(self.runs.range(after + 1..).map(|(s, l)| (*s, *l)))
            .flat_map(move |(start, len)| (start.max(after + 1))..start + len)
    }

    /// Lanes with messages on disk that `consumer` may take: ungrouped,
    /// unbound groups, and its own.
    pub fn lanes_for(&self, consumer: ConsumerId) -> impl Iterator<Item = &LaneKey> + '_ {
        self.unowned
            .iter()
            .chain(self.owned.get(&consumer).into_iter().flatten())
            .map(|(_, lane)| lane)
    }

    /// Whether `seq` waits on disk.
    pub fn contains(&self, seq: u64) -> bool {
        self.runs
            .range(..=seq)
            .next_back()
            .is_some_and(|(start, len)| seq < start + len)
    }

    /// The newest sequence on disk.
    pub fn last_seq(&self) -> Option<u64> {
        self.runs
            .iter()
            .next_back()
            .map(|(start, len)| start + len - 1)
    }

    pub fn clear(&mut self) {
        *self = Backlog::default();
    }

    fn set_of(&mut self, owner: Option<ConsumerId>) -> &mut BTreeSet<(u64, LaneKey)> {
        match owner {
            None => &mut self.unowned,
            Some(c) => self.owned.entry(c).or_default(),
        }
    }

    fn remove_from_set(&mut self, owner: Option<ConsumerId>, item: &(u64, LaneKey)) {
        match owner {
            None => {
                self.unowned.remove(item);
            }
            Some(c) => {
                if let Some(set) = self.owned.get_mut(&c) {
                    set.remove(item);
                    if set.is_empty() {
                        self.owned.remove(&c);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(name: &str) -> LaneKey {
        Some(Arc::from(name))
    }

    #[test]
    fn consecutive_sequences_of_a_lane_share_a_run() {
        let mut b = Backlog::default();
        for seq in 10..20 {
            b.push(None, seq, None);
        }
        assert_eq!(b.len(), 10);
        assert_eq!(b.front(&None), Some(Run { start: 10, len: 10 }));
        b.consumed(&None, 4);
        assert_eq!(b.front(&None), Some(Run { start: 14, len: 6 }));
        assert!(b.contains(14) && !b.contains(13) && !b.contains(20));
        b.consumed(&None, 6);
        assert!(b.is_empty());
        assert!(!b.has_lane(&None));
        assert_eq!(b.next_lane(Some(1), |_| false), None);
    }

    #[test]
    fn a_stalled_group_does_not_hide_other_lanes() {
        let mut b = Backlog::default();
        // Group g owned by consumer 1 is oldest on disk; ungrouped after it.
        for seq in 1..=300 {
            b.push(lane("g"), seq, Some(1));
        }
        for seq in 301..=310 {
            b.push(None, seq, None);
        }
        assert_eq!(b.next_lane(Some(2), |_| false), Some(None));
        assert_eq!(b.next_lane(Some(1), |_| false), Some(lane("g")));
        assert_eq!(b.next_lane(None, |_| false), Some(None));
        // Consumer 1 leaves: the group is anyone's, and oldest.
        b.rebind(&Arc::from("g"), None);
        assert_eq!(b.next_lane(Some(2), |_| false), Some(lane("g")));
        assert_eq!(b.next_lane(Some(2), |l| l.is_some()), Some(None));
    }

    #[test]
    fn a_sequence_taken_from_the_middle_splits_its_run() {
        let mut b = Backlog::default();
        for seq in 1..=5 {
            b.push(None, seq, None);
        }
        assert!(b.remove(&None, 3));
        assert!(!b.remove(&None, 3));
        assert_eq!(
            b.runs_of(&None).collect::<Vec<_>>(),
            [Run { start: 1, len: 2 }, Run { start: 4, len: 2 }]
        );
        assert!(!b.contains(3) && b.contains(4));
        assert!(b.remove(&None, 1));
        assert_eq!(b.next_lane(None, |_| false), Some(None));
        assert_eq!(b.front(&None), Some(Run { start: 2, len: 1 }));
        for seq in [2, 4, 5] {
            assert!(b.remove(&None, seq));
        }
        assert!(b.is_empty() && !b.has_lane(&None));
        assert_eq!(b.next_lane(None, |_| false), None);
    }

    #[test]
    fn interleaved_groups_keep_their_own_runs() {
        let mut b = Backlog::default();
        for seq in 1..=6 {
            let g = if seq % 2 == 0 { "a" } else { "b" };
            b.push(lane(g), seq, None);
        }
        assert_eq!(b.front(&lane("a")), Some(Run { start: 2, len: 1 }));
        assert_eq!(b.next_lane(None, |_| false), Some(lane("b")));
        b.consumed(&lane("b"), 1);
        assert_eq!(b.next_lane(None, |_| false), Some(lane("a")));
        assert_eq!(b.last_seq(), Some(6));
        assert!(b.contains(3) && !b.contains(1));
        assert_eq!(b.len(), 5);
    }
}
