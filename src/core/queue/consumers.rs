//! The consumers of a queue: their credit, priority and filter, who is next
//! in round robin, and which one is the exclusive consumer of an exclusive
//! queue.

use super::browse::BrowseCursor;
use crate::core::consumer::{ConsumerId, CreditMode, DeliverySink, MessageFilter};
use std::sync::Arc;

pub struct Slot {
    pub id: ConsumerId,
    pub sink: DeliverySink,
    pub credit: u32,
    pub mode: CreditMode,
    pub priority: i32,
    pub filter: Option<Arc<dyn MessageFilter>>,
    /// Set for a browser: where it is in the queue.
    pub browse: Option<BrowseCursor>,
    /// With a filter: ungrouped messages on disk below this sequence were
    /// read and did not match it.
    pub scanned_to: u64,
}

impl Slot {
    pub fn is_browser(&self) -> bool {
        self.browse.is_some()
    }
}

#[derive(Default)]
pub struct Consumers {
    /// Highest priority first; equal priorities in order of arrival.
    slots: Vec<Slot>,
    next_rr: usize,
    /// Consumers that take messages (not browsers).
    active: usize,
    /// On an exclusive queue, the consumer that gets everything until it leaves.
    exclusive: Option<ConsumerId>,
}

impl Consumers {
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    pub fn slots_mut(&mut self) -> &mut [Slot] {
        &mut self.slots
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Consumers that take messages (browsers do not).
    pub fn active(&self) -> usize {
        self.active
    }

    pub fn get_mut(&mut self, id: ConsumerId) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == id)
    }

    pub fn index_of(&self, id: ConsumerId) -> Option<usize> {
        self.slots.iter().position(|s| s.id == id)
    }

    /// Adds a consumer. On an exclusive queue the first one to arrive becomes
    /// the exclusive consumer; later ones wait, whatever their priority.
    pub fn add(&mut self, slot: Slot, exclusive_queue: bool) {
        if !slot.is_browser() {
            self.active += 1;
            if exclusive_queue && self.exclusive.is_none() {
                self.exclusive = Some(slot.id);
            }
        }
        self.slots.push(slot);
        // Stable: equal priorities keep their order of arrival.
        self.slots.sort_by_key(|s| std::cmp::Reverse(s.priority));
    }

    /// Removes a consumer. If it was the exclusive one, the remaining consumer
    /// with the highest priority (the earliest among equals) takes over.
    pub fn remove(&mut self, id: ConsumerId) -> bool {
        let Some(index) = self.index_of(id) else {
            return false;
        };
        let slot = self.slots.remove(index);
        if !slot.is_browser() {
            self.active -= 1;
        }
        if self.exclusive == Some(id) {
            self.exclusive = self.slots.iter().find(|s| !s.is_browser()).map(|s| s.id);
        }
        true
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
        self.next_rr = index + 1;
    }

    /// The next consumer with credit: the exclusive one on an exclusive
    /// queue; else the highest priority first, round robin among equals.
    pub fn next(&self, starved: &[bool]) -> Option<usize> {
        let eligible = |i: usize| {
            let s = &self.slots[i];
            !starved[i] && s.credit > 0 && !s.is_browser()
        };
        if let Some(ex) = self.exclusive {
            let index = self.index_of(ex)?;
            return eligible(index).then_some(index);
        }
        let n = self.slots.len();
        let top = (0..n)
            .filter(|&i| eligible(i))
            .map(|i| self.slots[i].priority)
            .max()?;
        (0..n)
            .map(|k| (self.next_rr + k) % n)
            .find(|&i| eligible(i) && self.slots[i].priority == top)
    }

    /// Credit that consumers allowed to receive have left.
    pub fn idle_credit(&self) -> usize {
        self.slots
            .iter()
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
            scanned_to: 0,
        }
    }

    #[test]
    fn an_exclusive_consumer_keeps_the_queue_against_higher_priorities() {
        let mut c = Consumers::default();
        c.add(slot(1, 0), true);
        c.add(slot(2, 10), true);
        c.add(slot(3, 5), true);
        let starved = vec![false; 3];
        assert_eq!(c.exclusive(), Some(1));
        assert_eq!(c.next(&starved).map(|i| c.slots()[i].id), Some(1));
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
        let starved = vec![false; 3];
        let first = c.next(&starved).unwrap();
        assert_eq!(c.slots()[first].id, 2);
        c.served(first);
        let second = c.next(&starved).unwrap();
        assert_eq!(c.slots()[second].id, 3);
        assert_eq!(c.exclusive(), None);
    }
}
