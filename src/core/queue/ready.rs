//! The ready side of a queue, split into lanes so a busy group never blocks
//! anything else: ungrouped messages in one lane ordered by priority then
//! arrival, each group in a lane of its own ordered by arrival. Dispatch for a
//! consumer looks only at the heads it may take — the ungrouped head, unbound
//! group heads, and the heads of groups it owns — so it costs O(log n) however
//! many messages wait behind busy groups.

use super::priority_fifo::PriorityFifo;
use crate::core::consumer::{ConsumerId, MessageFilter};
use crate::core::fast_map::FastMap;
use crate::core::memory::{Charge, QueueMemory};
use crate::core::message::Message;
use crate::core::persist::StoredMessage;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// A message waiting in a queue.
#[derive(Debug)]
pub struct Entry {
    pub seq: u64,
    pub message: Arc<Message>,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// Whether a record of it is in the store (durable, or paged out).
    pub persisted: bool,
    /// Its group's lane, when grouped.
    pub lane: Option<Arc<str>>,
    /// A consumer that declared it cannot take this message (AMQP
    /// undeliverable-here); it goes to any other.
    pub avoid: Option<ConsumerId>,
    /// Its bytes, charged to the queue's memory budget while the entry lives.
    pub charge: Charge,
}

impl Entry {
    /// A message read back from the store (paged, or found at start): it has
    /// a record, so settling it deletes one.
    pub fn stored(
        seq: u64,
        stored: StoredMessage,
        lane: Option<Arc<str>>,
        memory: &Arc<QueueMemory>,
    ) -> Self {
        let charge = memory.charge(&stored.message);
        Entry {
            seq,
            charge,
            message: Arc::new(stored.message),
            delivery_count: stored.delivery_count,
            persisted: true,
            lane,
            avoid: None,
        }
    }

    /// An ungrouped message of normal priority, for tests.
    #[cfg(test)]
    pub fn plain(seq: u64, delivery_count: u32) -> Self {
        Entry {
            seq,
            message: Arc::new(Message::default()),
            delivery_count,
            persisted: false,
            lane: None,
            avoid: None,
            charge: Charge::none(),
        }
    }
}

/// Higher priority first, then arrival.
pub type Key = (u8, u64);

fn key_of(entry: &Entry) -> Key {
    (9u8.saturating_sub(entry.message.priority.min(9)), entry.seq)
}

/// Which lane a candidate came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    Ungrouped(Key),
    /// A group's head; `true` when the picking consumer owns the group, `false`
    /// when the group is unbound — so dispatch need not look the owner up.
    Lane(Arc<str>, bool),
}

#[derive(Debug, Default)]
pub struct ReadySet {
    ungrouped: PriorityFifo,
    /// Each group's messages by sequence. Nearly always appended at the back;
    /// only a message sent back (release, consumer gone) is inserted earlier.
    /// A deque, not a tree: a lane usually holds one or two messages, and a
    /// tree node per lane per message showed in profiles.
    lanes: FastMap<Arc<str>, VecDeque<Entry>>,
    unbound_heads: BTreeSet<(Key, Arc<str>)>,
    owned_heads: FastMap<ConsumerId, BTreeSet<(Key, Arc<str>)>>,
    /// Lanes held back while a returned message of theirs waits out its
    /// redelivery delay, with the number of such messages: their heads are
    /// in neither head set, so nobody takes a newer message of the group.
    held: FastMap<Arc<str>, u32>,
    len: usize,
}

impl ReadySet {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether messages of this lane are waiting.
    pub fn has_lane(&self, lane: &str) -> bool {
        self.lanes.contains_key(lane)
    }

    /// Adds a message; `owner` is the current owner of its lane, if any.
    pub fn push(&mut self, entry: Entry, owner: Option<ConsumerId>) {
        self.len += 1;
        let Some(lane) = entry.lane.clone() else {
            self.ungrouped.insert(key_of(&entry), entry);
            return;
        };
        let new_key = key_of(&entry);
        let held = !self.held.is_empty() && self.held.contains_key(&lane);
        // One lookup of the lane per message: a hot path with many groups.
        let entries = self.lanes.entry(lane.clone()).or_default();
        let old_head = entries.front().map(key_of);
        match entries.back() {
            Some(last) if last.seq > entry.seq => {
                let at = entries.partition_point(|e| e.seq < entry.seq);
                entries.insert(at, entry);
            }
            _ => entries.push_back(entry),
        }
        if !held && old_head.is_none_or(|old| new_key.1 < old.1) {
            let heads = self.heads_mut(owner);
            if let Some(old) = old_head {
                heads.remove(&(old, lane.clone()));
            }
            heads.insert((new_key, lane));
        }
    }

    /// The best message for a consumer without a filter.
    pub fn pick_for(&self, consumer: ConsumerId) -> Option<Pick> {
        if self.lanes.is_empty() {
            // No group has anything waiting (so no lane heads): the common
            // ungrouped case skips the owner lookup.
            return self.ungrouped.first_key().map(Pick::Ungrouped);
        }
        let ungrouped = self.ungrouped.first_key().map(|k| (k, Pick::Ungrouped(k)));
        let unbound = self
            .unbound_heads
            .iter()
            .next()
            .map(|(k, lane)| (*k, Pick::Lane(lane.clone(), false)));
        let owned = self
            .owned_heads
            .get(&consumer)
            .and_then(|heads| heads.iter().next())
            .map(|(k, lane)| (*k, Pick::Lane(lane.clone(), true)));
        [ungrouped, unbound, owned]
            .into_iter()
            .flatten()
            .min_by_key(|(key, _)| *key)
            .map(|(_, pick)| pick)
    }

    /// The best message for a consumer with a filter: the slow path, a scan.
    pub fn pick_filtered(&self, consumer: ConsumerId, filter: &dyn MessageFilter) -> Option<Pick> {
        self.pick_where(consumer, |e| filter.matches(&e.message))
    }

    /// The best message for a consumer among those `wanted` accepts (a
    /// selector, or not one the consumer declared undeliverable): a scan.
    pub fn pick_where(
        &self,
        consumer: ConsumerId,
        wanted: impl Fn(&Entry) -> bool,
    ) -> Option<Pick> {
        let ungrouped = self
            .ungrouped
            .iter()
            .find(|(_, e)| wanted(e))
            .map(|(k, _)| (k, Pick::Ungrouped(k)));
        let lane_heads = self
            .unbound_heads
            .iter()
            .map(|head| (head, false))
            .chain(
                self.owned_heads
                    .get(&consumer)
                    .into_iter()
                    .flatten()
                    .map(|head| (head, true)),
            )
            .filter(|((_, lane), _)| self.lane_head(lane).is_some_and(&wanted))
            .min_by_key(|((k, _), _)| *k)
            .map(|((k, lane), owned)| (*k, Pick::Lane(lane.clone(), owned)));
        [ungrouped, lane_heads]
            .into_iter()
            .flatten()
            .min_by_key(|(key, _)| *key)
            .map(|(_, pick)| pick)
    }

    pub fn lane_head(&self, lane: &str) -> Option<&Entry> {
        self.lanes.get(lane).and_then(|l| l.front())
    }

    fn lane_head_key(&self, lane: &str) -> Option<Key> {
        self.lane_head(lane).map(key_of)
    }

    /// Removes the picked message; `owner` is its lane's owner before the take.
    pub fn take(&mut self, pick: &Pick, owner: Option<ConsumerId>) -> Option<Entry> {
        let entry = match pick {
            Pick::Ungrouped(key) => self.ungrouped.remove(key)?,
            Pick::Lane(lane, _) => {
                let entries = self.lanes.get_mut(lane)?;
                let entry = entries.pop_front()?;
                let next = entries.front().map(key_of);
                if next.is_none() {
                    self.lanes.remove(lane);
                }
                let heads = self.heads_mut(owner);
                heads.remove(&(key_of(&entry), lane.clone()));
                if let Some(next) = next {
                    heads.insert((next, lane.clone()));
                }
                entry
            }
        };
        self.len -= 1;
        Some(entry)
    }

    /// Removes the message `seq` wherever it waits (management deletes or
    /// moves it); `owner` is its lane's owner. A lane held back by a
    /// redelivery delay stays held.
    pub fn remove(&mut self, seq: u64, owner: Option<ConsumerId>) -> Option<Entry> {
        let (lane, key) = self.get(seq).map(|e| (e.lane.clone(), key_of(e)))?;
        let entry = match lane {
            None => self.ungrouped.remove(&key)?,
            Some(lane) => {
                let entries = self.lanes.get_mut(&lane)?;
                let at = entries.iter().position(|e| e.seq == seq)?;
                let entry = entries.remove(at)?;
                let next = entries.front().map(key_of);
                if next.is_none() {
                    self.lanes.remove(&lane);
                }
                let held = self.is_held(&lane);
                if at == 0 {
                    let heads = self.heads_mut(owner);
                    heads.remove(&(key, lane.clone()));
                    if let (Some(next), false) = (next, held) {
                        heads.insert((next, lane));
                    }
                }
                entry
            }
        };
        self.len -= 1;
        Some(entry)
    }

    /// Moves a lane's head between owners when its binding changes.
    pub fn rebind(&mut self, lane: &Arc<str>, from: Option<ConsumerId>, to: Option<ConsumerId>) {
        if let Some(key) = self.lane_head_key(lane) {
            let item = (key, lane.clone());
            if self.heads_mut(from).remove(&item) {
                self.heads_mut(to).insert(item);
            }
        }
    }

    /// Holds a lane back: none of its messages can be picked until every
    /// hold is lifted with [`ReadySet::unhold_lane`].
    pub fn hold_lane(&mut self, lane: &Arc<str>, owner: Option<ConsumerId>) {
        let count = self.held.entry(lane.clone()).or_default();
        *count += 1;
        if *count == 1 {
            if let Some(key) = self.lane_head_key(lane) {
                self.heads_mut(owner).remove(&(key, lane.clone()));
            }
        }
    }

    /// Lifts one hold; the lane can be picked again when none is left.
    pub fn unhold_lane(&mut self, lane: &Arc<str>, owner: Option<ConsumerId>) {
        let Some(count) = self.held.get_mut(lane) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.held.remove(lane);
            if let Some(key) = self.lane_head_key(lane) {
                self.heads_mut(owner).insert((key, lane.clone()));
            }
        }
    }

    /// Whether a lane is held back by a redelivery delay.
    pub fn is_held(&self, lane: &str) -> bool {
        !self.held.is_empty() && self.held.contains_key(lane)
    }

    /// The waiting message `seq`: O(log n) when ungrouped, a walk of the
    /// groups' messages otherwise (lookups by id, not dispatch).
    pub fn get(&self, seq: u64) -> Option<&Entry> {
        self.ungrouped
            .get(seq)
            .or_else(|| self.lanes.values().flatten().find(|e| e.seq == seq))
    }

    /// Every waiting message with a sequence above `after`, in no order (browsing).
    pub fn entries_after(&self, after: u64) -> impl Iterator<Item = &Entry> + '_ {
        self.ungrouped
            .iter()
            .map(|(_, e)| e)
            .chain(self.lanes.values().flatten())
            .filter(move |e| e.seq > after)
    }

    /// When the first group head that can expire does (epoch ms): until
    /// then, a consumer whose selector passes over such a head waits for it.
    pub fn earliest_head_expiry(&self) -> Option<u64> {
        self.lanes
            .iter()
            .filter(|(lane, _)| !self.is_held(lane))
            .filter_map(|(_, entries)| entries.front()?.message.expires_at)
            .min()
    }

    /// Removes the expired messages at the heads of group lanes: a consumer
    /// whose selector passes over such a head would otherwise never reach the
    /// group's next message, and nobody else may take it.
    pub fn drop_expired_heads(&mut self, now_ms: u64) -> Vec<Entry> {
        let expired = |e: &Entry| e.message.expires_at.is_some() && e.message.is_expired_at(now_ms);
        let lanes: Vec<Arc<str>> = self
            .lanes
            .iter()
            .filter(|(lane, entries)| !self.is_held(lane) && entries.front().is_some_and(expired))
            .map(|(lane, _)| lane.clone())
            .collect();
        let mut dropped = Vec::new();
        for lane in lanes {
            let Some(old) = self.lane_head_key(&lane) else {
                continue;
            };
            let item = (old, lane.clone());
            let owner = if self.unbound_heads.contains(&item) {
                None
            } else {
                self.owned_heads
                    .iter()
                    .find(|(_, heads)| heads.contains(&item))
                    .map(|(owner, _)| *owner)
            };
            let Some(entries) = self.lanes.get_mut(&lane) else {
                continue;
            };
            while entries.front().is_some_and(expired) {
                if let Some(entry) = entries.pop_front() {
                    self.len -= 1;
                    dropped.push(entry);
                }
            }
            let next = entries.front().map(key_of);
            if next.is_none() {
                self.lanes.remove(&lane);
            }
            let heads = self.heads_mut(owner);
            heads.remove(&item);
            if let Some(next) = next {
                heads.insert((next, lane));
            }
        }
        dropped
    }

    /// Removes every waiting message (queue deletion, purge).
    pub fn drain_all(&mut self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self.ungrouped.drain().collect();
        for (_, lane) in self.lanes.drain() {
            out.extend(lane);
        }
        self.unbound_heads.clear();
        self.owned_heads.clear();
        self.held.clear();
        self.len = 0;
        out
    }

    fn heads_mut(&mut self, owner: Option<ConsumerId>) -> &mut BTreeSet<(Key, Arc<str>)> {
        match owner {
            None => &mut self.unbound_heads,
            Some(consumer) => self.owned_heads.entry(consumer).or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, lane: Option<&str>, priority: u8) -> Entry {
        Entry {
            seq,
            message: Arc::new(Message {
                priority,
                ..Default::default()
            }),
            delivery_count: 0,
            persisted: false,
            lane: lane.map(Arc::from),
            avoid: None,
            charge: Charge::none(),
        }
    }

    #[test]
    fn a_message_removed_from_the_middle_or_the_head_leaves_the_rest_in_order() {
        let mut set = ReadySet::default();
        for (seq, lane) in [
            (1, Some("g")),
            (2, None),
            (3, Some("g")),
            (4, None),
            (5, Some("g")),
        ] {
            set.push(entry(seq, lane, 4), None);
        }
        assert_eq!(set.remove(3, None).map(|e| e.seq), Some(3));
        assert_eq!(set.remove(2, None).map(|e| e.seq), Some(2));
        assert_eq!(set.remove(1, None).map(|e| e.seq), Some(1));
        assert!(set.remove(1, None).is_none());
        assert_eq!(set.len(), 2);
        let mut order = Vec::new();
        while let Some(pick) = set.pick_for(7) {
            order.push(set.take(&pick, None).map(|e| e.seq));
        }
        assert_eq!(order, [Some(4), Some(5)]);
        assert!(set.is_empty());
    }

    #[test]
    fn busy_group_does_not_block_others() {
        let mut r = ReadySet::default();
        // Group g is owned by consumer 1; consumer 2 must still find the ungrouped message.
        r.push(entry(1, Some("g"), 4), Some(1));
        r.push(entry(2, Some("g"), 4), Some(1));
        r.push(entry(3, None, 4), None);
        assert_eq!(r.pick_for(2), Some(Pick::Ungrouped((5, 3))));
        assert_eq!(r.pick_for(1), Some(Pick::Lane(Arc::from("g"), true)));
        let e = r.take(&Pick::Lane(Arc::from("g"), true), Some(1)).unwrap();
        assert_eq!(e.seq, 1);
        assert_eq!(r.lane_head("g").map(|e| e.seq), Some(2));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn returned_message_goes_back_to_the_front_of_its_group() {
        let mut r = ReadySet::default();
        r.push(entry(5, Some("g"), 4), None);
        r.push(entry(2, Some("g"), 4), None);
        assert_eq!(r.lane_head("g").map(|e| e.seq), Some(2));
        let pick = r.pick_for(9).unwrap();
        assert_eq!(r.take(&pick, None).map(|e| e.seq), Some(2));
        assert_eq!(r.take(&pick, None).map(|e| e.seq), Some(5));
        assert!(r.is_empty());
        assert!(r.pick_for(9).is_none());
    }

    #[test]
    fn priority_orders_ungrouped_messages() {
        let mut r = ReadySet::default();
        r.push(entry(1, None, 4), None);
        r.push(entry(2, None, 9), None);
        let pick = r.pick_for(1).unwrap();
        assert_eq!(r.take(&pick, None).map(|e| e.seq), Some(2));
    }

    #[test]
    fn rebind_moves_heads() {
        let mut r = ReadySet::default();
        let g: Arc<str> = Arc::from("g");
        r.push(entry(1, Some("g"), 4), Some(1));
        assert!(r.pick_for(2).is_none());
        r.rebind(&g, Some(1), None);
        assert_eq!(r.pick_for(2), Some(Pick::Lane(g.clone(), false)));
        r.rebind(&g, None, Some(2));
        assert!(r.pick_for(1).is_none());
        assert_eq!(r.pick_for(2), Some(Pick::Lane(g, true)));
    }

    #[test]
    fn a_held_lane_is_not_picked_until_every_hold_is_lifted() {
        let mut r = ReadySet::default();
        let g: Arc<str> = Arc::from("g");
        r.hold_lane(&g, None);
        r.hold_lane(&g, None);
        r.push(entry(3, Some("g"), 4), None);
        r.push(entry(4, None, 4), None);
        // Only the ungrouped message can go while the group waits.
        assert_eq!(r.pick_for(1), Some(Pick::Ungrouped((5, 4))));
        r.take(&Pick::Ungrouped((5, 4)), None);
        assert!(r.pick_for(1).is_none());
        // The returned message comes back before the newer one.
        r.push(entry(1, Some("g"), 4), None);
        r.unhold_lane(&g, None);
        assert!(r.is_held("g"));
        assert!(r.pick_for(1).is_none());
        r.unhold_lane(&g, None);
        assert!(!r.is_held("g"));
        let pick = r.pick_for(1).unwrap();
        assert_eq!(r.take(&pick, None).map(|e| e.seq), Some(1));
    }
}
