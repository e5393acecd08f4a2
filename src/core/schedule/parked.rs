//! Due entries waiting for room in their queue. The schedule holds them in
//! memory already; moving them into a queue past its memory limit would page
//! them to disk only to read them back, so a burst falling due faster than
//! its consumers take it waits here instead, in due order per queue.

use super::Waiting;
use crate::core::fast_map::FastMap;
use crate::store::ScheduleKey;
use std::collections::VecDeque;

#[derive(Default)]
pub(super) struct Parked {
    queues: FastMap<u32, VecDeque<(ScheduleKey, Waiting)>>,
    len: usize,
    bytes: usize,
}

impl Parked {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn queue_ids(&self) -> Vec<u32> {
        self.queues.keys().copied().collect()
    }

    /// Appends an entry due after every entry of its queue already here.
    pub fn push(&mut self, key: ScheduleKey, w: Waiting) {
        self.len += 1;
        self.bytes += w.message.weight();
        self.queues.entry(w.queue).or_default().push_back((key, w));
    }

    /// Moves up to `limit` of `queue`'s earliest entries to `out`; returns how many.
    pub fn take_front(
        &mut self,
        queue: u32,
        limit: usize,
        out: &mut Vec<(ScheduleKey, Waiting)>,
    ) -> usize {
        let Some(waiting) = self.queues.get_mut(&queue) else {
            return 0;
        };
        let n = limit.min(waiting.len());
        for (key, w) in waiting.drain(..n) {
            self.bytes = self.bytes.saturating_sub(w.message.weight());
            out.push((key, w));
        }
        if waiting.is_empty() {
            self.queues.remove(&queue);
        }
        self.len -= n;
        n
    }

    /// Takes out the entry under `key` (an auditor's cancel or reschedule).
    pub fn remove(&mut self, key: &ScheduleKey) -> Option<Waiting> {
        let waiting = self.queues.get_mut(&key.queue)?;
        let at = waiting.iter().position(|(k, _)| k == key)?;
        let (_, w) = waiting.remove(at)?;
        if waiting.is_empty() {
            self.queues.remove(&key.queue);
        }
        self.len -= 1;
        self.bytes = self.bytes.saturating_sub(w.message.weight());
        Some(w)
    }

    pub fn get(&self, key: &ScheduleKey) -> Option<&Waiting> {
        let waiting = self.queues.get(&key.queue)?;
        waiting.iter().find(|(k, _)| k == key).map(|(_, w)| w)
    }

    /// Every entry, in due order within each queue.
    pub fn iter(&self) -> impl Iterator<Item = (&ScheduleKey, &Waiting)> {
        self.queues.values().flatten().map(|(key, w)| (key, w))
    }
}
