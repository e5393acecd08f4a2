//! The consumers of a queue: their credit, priority and filter, who is next
//! in round robin, and which one is the exclusive consumer of an exclusive
//! queue.
//!
//! A queue may have a hundred thousand consumers (one connection subscribing
//! again and again), so attaching and detaching one costs O(log n): slots
//! live at stable indices (a detached consumer's index is reused), found by
//! id through a map, and the dispatch order (priority, then arrival) is an
//! ordered index beside them rather than the order of a vector kept sorted.

use super::browse::BrowseCursor;
use crate::core::consumer::{ConsumerId, CreditMode, DeliverySink, MessageFilter};
use crate::core::fast_map::{FastMap, FastSet};
use crate::core::rates::RateWindow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

pub use crate::core::consumer::ConsumerOwner;

pub struct Slot {
    pub id: ConsumerId,
    pub sink: DeliverySink,
    pub credit: u32,
    pub mode: CreditMode,
    pub priority: i32,
    pub filter: Option<Arc<dyn MessageFilter>>,
    /// Set for a browser: where it is in the queue.
    pub browse: Option<BrowseCursor>,
    /// Bytes (as charged to memory) of the messages delivered to it and not
    /// yet settled.
    pub in_flight_bytes: u64,
    /// With a filter: ungrouped messages on disk below this sequence were
    /// read and did not match it.
    pub scanned_to: u64,
    /// With a filter: group heads on disk (sequences of messages that
    /// cannot expire) it was found not to match, so a consumer starved for
    /// many passes does not read them again each pass.
    pub passed_heads: FastSet<u64>,
    /// Who attached it, for management; set after it is added.
    pub owner: Option<Arc<ConsumerOwner>>,
    /// What it was given and acknowledged, for management.
    pub activity: Activity,
}

impl Slot {
    pub fn is_browser(&self) -> bool {
        self.browse.is_some()
    }
}

/// A consumer's messages since it attached. Plain counts, not atomics: the
/// hand-over and the acknowledgement hold the queue lock anyway and touch the
/// slot beside them (its credit), so counting costs an add on a line already
/// in cache; management reads them under the same lock.
#[derive(Debug, Default)]
pub struct Activity {
    /// Messages handed to it (a browser: shown to it).
    pub delivered: u64,
    /// Of those, acknowledged.
    pub acked: u64,
    /// The previous reading of both, for their rates.
    window: RateWindow<2>,
}

impl Activity {
    /// Delivered and acknowledged per second since the previous reading at least
    /// [`crate::core::rates::RATE_WINDOW`] before `now`.
    pub fn rates_at(&mut self, now: std::time::Instant) -> (f64, f64) {
        let [delivered, acked] = self.window.rates_at(now, [self.delivered, self.acked]);
        (delivered, acked)
    }
}

/// Dispatch order: highest priority first, equal priorities in order of arrival.
type OrderKey = (Reverse<i32>, u64);

struct Place {
    slot: Slot,
    key: OrderKey,
}

#[derive(Default)]
pub struct Consumers {
    /// Indexed by a consumer's place, stable while it is attached. Boxed:
    /// growing the vector then moves 8 bytes a consumer, not the whole
    /// slot (tens of MiB at once for 100,000 consumers, every other
    /// connection waiting meanwhile).
    places: Vec<Option<Box<Place>>>,
    /// Places freed by detached consumers, reused first.
    free: Vec<usize>,
    by_id: FastMap<ConsumerId, usize>,
    order: BTreeMap<OrderKey, usize>,
    browsers: BTreeSet<usize>,
    arrivals: u64,
    /// Round robin continues after this consumer (in dispatch order).
    last_served: Option<OrderKey>,
    /// Consumers that take messages (not browsers).
    active: usize,
    /// On an exclusive queue, the consumer that gets everything until it leaves.
    exclusive: Option<ConsumerId>,
}

impl Consumers {
    /// Every attached consumer, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.places.iter().flatten().map(|p| &p.slot)
    }

    /// [`Consumers::iter`], to update what management reads (rates).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.places.iter_mut().flatten().map(|p| &mut p.slot)
    }

    /// The consumer at `index`, which must be attached (an index from
    /// [`Consumers::next`], [`Consumers::index_of`] or [`Consumers::browser_from`]).
    pub fn slot(&self, index: usize) -> &Slot {
        match &self.places[index] {
            Some(place) => &place.slot,
            None => unreachable!("consumer index {index} is not attached"),
        }
    }

    pub fn slot_mut(&mut self, index: usize) -> &mut Slot {
        match &mut self.places[index] {
            Some(place) => &mut place.slot,
            None => unreachable!("consumer index {index} is not attached"),
        }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// One more than the largest index in use: the size of a per-index table.
    pub fn index_bound(&self) -> usize {
        self.places.len()
    }

    /// Consumers that take messages (browsers do not).
    pub fn active(&self) -> usize {
        self.active
    }

    pub fn get_mut(&mut self, id: ConsumerId) -> Option<&mut Slot> {
        let index = *self.by_id.get(&id)?;
        Some(self.slot_mut(index))
    }

    /// The consumer at `index` if it is `id` (the place may have been
    /// given to another consumer since).
    pub fn get_at_mut(&mut self, index: usize, id: ConsumerId) -> Option<&mut Slot> {
        let place = self.places.get_mut(index)?.as_mut()?;
        (place.slot.id == id).then_some(&mut place.slot)
    }

    pub fn index_of(&self, id: ConsumerId) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The first browser at `from` or after it.
    pub fn browser_from(&self, from: usize) -> Option<usize> {
        self.browsers.range(from..).next().copied()
    }

    /// Adds a consumer. On an exclusive queue the first one to arrive becomes
    /// the exclusive consumer; later ones wait, whatever their priority.
    pub fn add(&mut self, slot: Slot, exclusive_queue: bool) {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.places.push(None);
                self.places.len() - 1
            }
        };
        if slot.is_browser() {
            self.browsers.insert(index);
        } else {
            self.active += 1;
            if exclusive_queue && self.exclusive.is_none() {
                self.exclusive = Some(slot.id);
            }
        }
        self.arrivals += 1;
        let key = (Reverse(slot.priority), self.arrivals);
        self.order.insert(key, index);
        self.by_id.insert(slot.id, index);
        self.places[index] = Some(Box::new(Place { slot, key }));
    }

    /// Removes a consumer. If it was the exclusive one, the remaining consumer
    /// with the highest priority (the earliest among equals) takes over.
    pub fn remove(&mut self, id: ConsumerId) -> bool {
        let Some(index) = self.by_id.remove(&id) else {
            return false;
        };
        let Some(place) = self.places[index].take() else {
            return false;
        };
        self.order.remove(&place.key);
        self.free.push(index);
        if place.slot.is_browser() {
            self.browsers.remove(&index);
        } else {
            self.active -= 1;
        }
        if self.exclusive == Some(id) {
            self.exclusive = self.first_active();
        }
        true
    }

    /// The consumer with the highest priority, the earliest among equals.
    fn first_active(&self) -> Option<ConsumerId> {
        self.order
            .values()
            .map(|&i| self.slot(i))
            .find(|s| !s.is_browser())
            .map(|s| s.id)
    }

    /// The queue became exclusive (the consumer an exclusive queue would move to
    /// now takes it) or stopped being exclusive (every consumer receives again).
    pub fn set_exclusive(&mut self, exclusive_queue: bool) {
        self.exclusive = match exclusive_queue {
            true => self.exclusive.or_else(|| self.first_active()),
            false => None,
        };
    }

    /// Whether `id` may be given messages now (an exclusive queue gives them
    /// to its exclusive consumer only).
    pub fn may_receive(&self, id: ConsumerId) -> bool {
        self.exclusive.is_none_or(|ex| ex == id)
    }

    #[cfg(test)]
    pub fn exclusive(&self) -> Option<ConsumerId> {
        self.exclusive
    }

    /// Round robin continues after the consumer at `index`.
    pub fn served(&mut self, index: usize) {
        self.last_served = self.places[index].as_ref().map(|p| p.key);
    }

    /// The next consumer with credit: the exclusive one on an exclusive
    /// queue; else the highest priority first, round robin among equals.
    /// `starved` is indexed like the consumers ([`Consumers::index_bound`]).
    pub fn next(&self, starved: &[bool]) -> Option<usize> {
        let eligible = |i: usize| {
            let s = self.slot(i);
            !starved[i] && s.credit > 0 && !s.is_browser()
        };
        if let Some(ex) = self.exclusive {
            let index = self.index_of(ex)?;
            return eligible(index).then_some(index);
        }
        // The first eligible consumer of the highest priority that has one.
        let (&first_key, &first) = self.order.iter().find(|(_, &i)| eligible(i))?;
        // Round robin within that band: the next eligible one after the last
        // served, else around to the first. Nobody eligible lies between the
        // band's start and `first`, so only a last served at or after `first`
        // needs a look past it, and a lone consumer never does.
        let Some(last) = self
            .last_served
            .filter(|last| last.0 == first_key.0 && *last >= first_key && self.order.len() > 1)
        else {
            return Some(first);
        };
        let band_end = Bound::Included((first_key.0, u64::MAX));
        let after_last = self
            .order
            .range((Bound::Excluded(last), band_end))
            .map(|(_, &i)| i)
            .find(|&i| eligible(i));
        Some(after_last.unwrap_or(first))
    }

    /// Credit that consumers allowed to receive have left.
    pub fn idle_credit(&self) -> usize {
        self.iter()
            .filter(|s| !s.is_browser() && self.may_receive(s.id))
            .map(|s| s.credit as usize)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::deliveries;

    fn slot(id: ConsumerId, priority: i32) -> Slot {
        let (sink, _rx) = deliveries::channel();
        Slot {
            id,
            sink,
            credit: 10,
            mode: CreditMode::Window(10),
            priority,
            filter: None,
            browse: None,
            in_flight_bytes: 0,
            scanned_to: 0,
            passed_heads: FastSet::default(),
            owner: None,
            activity: Activity::default(),
        }
    }

    #[test]
    fn an_exclusive_consumer_keeps_the_queue_against_higher_priorities() {
        let mut c = Consumers::default();
        c.add(slot(1, 0), true);
        c.add(slot(2, 10), true);
        c.add(slot(3, 5), true);
        let starved = vec![false; c.index_bound()];
        assert_eq!(c.exclusive(), Some(1));
        assert_eq!(c.next(&starved).map(|i| c.slot(i).id), Some(1));
        assert!(!c.may_receive(2));
        // It leaves: the highest priority remaining takes over.
        c.remove(1);
        assert_eq!(c.exclusive(), Some(2));
        c.remove(2);
        assert_eq!(c.exclusive(), Some(3));
        c.remove(3);
        assert_eq!(c.exclusive(), None);
        assert_eq!(c.active(), 0);
    }

    #[test]
    fn round_robin_among_the_highest_priority() {
        let mut c = Consumers::default();
        c.add(slot(1, 0), false);
        c.add(slot(2, 5), false);
        c.add(slot(3, 5), false);
        let starved = vec![false; c.index_bound()];
        let first = c.next(&starved).unwrap();
        assert_eq!(c.slot(first).id, 2);
        c.served(first);
        let second = c.next(&starved).unwrap();
        assert_eq!(c.slot(second).id, 3);
        assert_eq!(c.exclusive(), None);
    }
}
