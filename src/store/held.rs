//! The messages the writer keeps back for now (see `holding` for which and
//! for how long).
//!
//! They stay in one map across commits, so a commit costs what it brings in,
//! not what is waiting: four producers with deep windows keep thousands back
//! at once, and rebuilding them into every commit was a tenth of a
//! persistent run's CPU.

use super::holding::Holding;
use super::keys::MessageKey;
use super::record::Record;
use super::release::Ticket;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

type FastHash = foldhash::fast::RandomState;

/// A put kept back, and the confirmation waiting for it.
pub(super) struct HeldPut {
    pub record: Record,
    pub ticket: Ticket,
}

#[derive(Default)]
pub(super) struct Held {
    puts: HashMap<MessageKey, HeldPut, FastHash>,
    /// Per queue, its held sequences in the order they were kept back, with
    /// when. One window applies to all of a queue's messages, so the front is
    /// due first. Sequences cancelled meanwhile are skipped at the front.
    order: HashMap<u32, VecDeque<(u64, Instant)>, FastHash>,
}

impl Held {
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty()
    }

    pub fn keep(&mut self, key: MessageKey, put: HeldPut, now: Instant) {
        self.puts.insert(key, put);
        self.order
            .entry(key.queue)
            .or_default()
            .push_back((key.seq, now));
    }

    /// Takes a held put back out: its message was acknowledged in time.
    pub fn cancel(&mut self, key: &MessageKey) -> Option<HeldPut> {
        self.puts.remove(key)
    }

    /// When the first held put must be written.
    pub fn next_due(&mut self, holding: &Holding) -> Option<Instant> {
        let puts = &self.puts;
        self.order
            .iter_mut()
            .filter_map(|(&queue, held)| {
                drop_cancelled(queue, held, puts);
                held.front()
                    .map(|&(_, since)| holding.deadline(queue, since))
            })
            .min()
    }

    /// Takes out every held put that is due at `now` (`all`: every one),
    /// each with whether its time ran out.
    pub fn take(
        &mut self,
        holding: &Holding,
        now: Instant,
        all: bool,
        mut out: impl FnMut(MessageKey, HeldPut, bool),
    ) {
        for (&queue, held) in self.order.iter_mut() {
            while let Some(&(seq, since)) = held.front() {
                let due = !holding.within_window(queue, since, now);
                if !due && !all {
                    break;
                }
                held.pop_front();
                let key = MessageKey { queue, seq };
                if let Some(put) = self.puts.remove(&key) {
                    out(key, put, due);
                }
            }
        }
        self.order.retain(|_, held| !held.is_empty());
    }
}

fn drop_cancelled(
    queue: u32,
    held: &mut VecDeque<(u64, Instant)>,
    puts: &HashMap<MessageKey, HeldPut, FastHash>,
) {
    while let Some(&(seq, _)) = held.front() {
        if puts.contains_key(&MessageKey { queue, seq }) {
            break;
        }
        held.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn put() -> HeldPut {
        HeldPut {
            record: Record::Encoded(Bytes::from_static(b"r")),
            ticket: Ticket::new(0),
        }
    }

    fn key(queue: u32, seq: u64) -> MessageKey {
        MessageKey { queue, seq }
    }

    #[test]
    fn puts_come_out_when_due_and_not_once_cancelled() {
        let ms = Duration::from_millis;
        let holding = Holding::new(ms(10));
        let t0 = Instant::now();
        let mut held = Held::default();
        held.keep(key(1, 1), put(), t0);
        held.keep(key(1, 2), put(), t0 + ms(2));
        held.keep(key(2, 1), put(), t0 + ms(1));
        assert_eq!(held.next_due(&holding), Some(t0 + ms(10)));
        assert!(held.cancel(&key(1, 1)).is_some());
        assert!(held.cancel(&key(1, 1)).is_none(), "only once");
        assert_eq!(held.next_due(&holding), Some(t0 + ms(11)), "queue 2 next");
        let mut out = Vec::new();
        held.take(&holding, t0 + ms(11), false, |k, _, due| out.push((k, due)));
        assert_eq!(out, vec![(key(2, 1), true)]);
        assert_eq!(held.next_due(&holding), Some(t0 + ms(12)));
        out.clear();
        held.take(&holding, t0 + ms(11), true, |k, _, due| out.push((k, due)));
        assert_eq!(out, vec![(key(1, 2), false)], "all, before they are due");
        assert!(held.is_empty());
        assert_eq!(held.next_due(&holding), None);
    }
}
