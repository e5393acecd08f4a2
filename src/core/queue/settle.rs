//! Settling deliveries: acknowledgements remove a message for good; every
//! other way a message comes back (NACK, released, modified, consumer gone)
//! puts it back in its place, before anything newer of its group — at once,
//! after its redelivery delay, or to the dead-letter address when its
//! attempts are used up.

use super::consumers::Slot;
use super::effects::AfterUnlock;
use super::ready::Entry;
use super::redelivery;
use super::{Diversion, InFlight, Queue, State};
use crate::core::consumer::{ConsumerId, CreditMode, Release};
use crate::core::error::CoreError;
use crate::core::message::{coarse_now_ms, now_ms, Message};
use crate::core::receipt::Receipt;
use crate::store::{Completion, MessageKey, Op};
use std::sync::{Arc, MutexGuard};

impl Queue {
    /// Acknowledges deliveries: they leave the queue for good.
    pub fn ack(self: &Arc<Self>, consumer: ConsumerId, seqs: &[u64]) -> Result<Receipt, CoreError> {
        self.ack_locked(self.state.lock(), consumer, seqs)
            .map(Receipt::from)
    }

    /// [`ack`](Self::ack) if the queue is free right now; `None` when another
    /// thread holds it. An auto-ack consumer acks after every write, and each
    /// ack used to wait on the publisher's lock (spinning, yielding the CPU);
    /// it can as well ack with its next batch.
    pub fn try_ack(
        self: &Arc<Self>,
        consumer: ConsumerId,
        seqs: &[u64],
    ) -> Option<Result<Completion, CoreError>> {
        let st = self.state.try_lock()?;
        Some(self.ack_locked(st, consumer, seqs))
    }

    fn ack_locked(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        consumer: ConsumerId,
        seqs: &[u64],
    ) -> Result<Completion, CoreError> {
        let mut after = AfterUnlock::default();
        let has_browsers = st.consumers.len() != st.consumers.active();
        if has_browsers
            && st
                .consumers
                .get_mut(consumer)
                .is_some_and(|s| s.is_browser())
        {
            // A browser took nothing; its acknowledgement only opens its window.
            refill(&mut st, consumer, seqs.len() as u32);
            self.dispatch(&mut st, &mut after);
            drop(st);
            self.finish(&mut after);
            return Ok(Completion::ready());
        }
        let mut deletes = Vec::new();
        let result = {
            let mut result = Ok(());
            let mut acked = 0;
            let mut freed = 0;
            // Read once per batch, and only for a batch with grouped messages.
            let mut now = None;
            for &seq in seqs {
                let Some(flight) = take_in_flight_of(&mut st, seq, consumer) else {
                    result = Err(CoreError::UnknownDelivery(seq));
                    continue;
                };
                if let Some(lane) = &flight.entry.lane {
                    st.groups
                        .touch(lane, *now.get_or_insert_with(coarse_now_ms));
                }
                freed += flight.entry.charge.into_bytes();
                if flight.entry.persisted {
                    deletes.push(Op::DeleteMessage {
                        key: MessageKey {
                            queue: self.id,
                            seq,
                        },
                    });
                }
                acked += 1;
            }
            self.memory.release_bytes(freed);
            settle_acked(&mut st, consumer, acked);
            self.counters.acked(u64::from(acked));
            // Submitted under the lock so the store sees this queue's changes in order.
            let completion = match deletes.len() {
                0 => Completion::ready(),
                1 => self.store.submit(deletes.remove(0)),
                _ => self.store.submit_all(deletes),
            };
            self.dispatch(&mut st, &mut after);
            drop(st);
            result.map(|()| completion)
        };
        self.finish(&mut after);
        result
    }

    /// Whether `seq` is in flight to `consumer`, so that settling it would
    /// succeed: a transaction checks every settlement before applying any.
    pub fn is_outstanding(&self, consumer: ConsumerId, seq: u64) -> bool {
        self.state
            .lock()
            .in_flight
            .get(&seq)
            .is_some_and(|f| f.consumer == consumer)
    }

    /// Settles a delivery without acknowledging it.
    pub fn release(
        self: &Arc<Self>,
        consumer: ConsumerId,
        seq: u64,
        how: Release,
    ) -> Result<(), CoreError> {
        let mut after = AfterUnlock::default();
        let result = {
            let mut st = self.state.lock();
            match take_in_flight_of(&mut st, seq, consumer) {
                Some(flight) => {
                    self.give_back(&mut st, consumer, flight.entry, how, &mut after);
                    self.dispatch(&mut st, &mut after);
                    Ok(())
                }
                None => Err(CoreError::UnknownDelivery(seq)),
            }
        };
        self.finish(&mut after);
        result
    }

    /// Settles several deliveries without acknowledging them, all before
    /// anything is dispatched again, as one step (a transaction's commit or
    /// rollback): returned messages of one group then go out again oldest
    /// first, whatever order they were settled in. A delivery that is no
    /// longer outstanding (its consumer left and it came back then) is
    /// skipped; returns how many were.
    pub fn release_all(self: &Arc<Self>, releases: &[(ConsumerId, u64, Release)]) -> usize {
        let mut after = AfterUnlock::default();
        let mut skipped = 0;
        {
            let mut st = self.state.lock();
            let mut ordered: Vec<&(ConsumerId, u64, Release)> = releases.iter().collect();
            ordered.sort_unstable_by_key(|(_, seq, _)| *seq);
            for &&(consumer, seq, how) in &ordered {
                let Some(flight) = take_in_flight_of(&mut st, seq, consumer) else {
                    skipped += 1;
                    continue;
                };
                self.give_back(&mut st, consumer, flight.entry, how, &mut after);
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
        skipped
    }

    /// A delivery `consumer` settled without acknowledging goes back: its
    /// credit returns, and undeliverable-here keeps it (and, if the consumer
    /// owns it, its group) away from that consumer.
    fn give_back(
        &self,
        st: &mut State,
        consumer: ConsumerId,
        mut entry: Entry,
        how: Release,
        after: &mut AfterUnlock,
    ) {
        refill(st, consumer, 1);
        if how == Release::NotHere {
            entry.avoid = Some(consumer);
            if let Some(lane) = &entry.lane {
                if st.groups.owner(lane) == Some(consumer) {
                    st.move_group_from(lane, consumer);
                }
            }
        }
        self.return_entry(st, entry, how, after);
    }

    /// Returns everything `consumer` holds (it left), oldest first.
    pub(super) fn return_all_of(
        &self,
        st: &mut State,
        consumer: ConsumerId,
        after: &mut AfterUnlock,
    ) {
        let mut returned: Vec<u64> = st
            .in_flight
            .iter()
            .filter(|(_, f)| f.consumer == consumer)
            .map(|(seq, _)| *seq)
            .collect();
        returned.sort_unstable();
        for seq in returned {
            if let Some(flight) = take_in_flight(st, seq) {
                self.return_entry(st, flight.entry, Release::Failed, after);
            }
        }
    }

    /// Puts an unsettled message back in its place, after its redelivery
    /// delay if it failed, or gives up on it after too many attempts.
    fn return_entry(
        &self,
        st: &mut State,
        mut entry: Entry,
        how: Release,
        after: &mut AfterUnlock,
    ) {
        if how == Release::Unused || how == Release::NotHere {
            entry.delivery_count = entry.delivery_count.saturating_sub(1);
        }
        let attempts_exhausted = st.settings.max_delivery_attempts > 0
            && entry.delivery_count >= st.settings.max_delivery_attempts;
        if how == Release::Reject || (how == Release::Failed && attempts_exhausted) {
            self.forget(&entry);
            after
                .diverted
                .push((self.leave(entry), Diversion::DeadLetter));
            return;
        }
        if how == Release::Failed {
            self.counters.redelivered();
        }
        let owner = st.owner_of(&entry.lane);
        if how == Release::Failed && !st.settings.redelivery_delay.is_zero() {
            let due = now_ms() + redelivery::delay_ms(&st.settings, entry.delivery_count);
            if let Some(lane) = &entry.lane {
                st.ready.hold_lane(lane, owner);
            }
            if let Some(at) = st.waiting.add(due, entry) {
                after.redeliver_at = Some(at);
            }
            return;
        }
        st.ready.push(entry, owner);
    }

    /// Puts back the returned messages whose redelivery delay is over.
    pub(super) fn redeliver_due(self: &Arc<Self>, now: u64) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            let (due, next) = st.waiting.take_due(now);
            if due.is_empty() && next.is_none() {
                return;
            }
            for entry in due {
                let lane = entry.lane.clone();
                let owner = st.owner_of(&lane);
                st.ready.push(entry, owner);
                if let Some(lane) = &lane {
                    st.ready.unhold_lane(lane, owner);
                }
            }
            after.redeliver_at = next;
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
    }

    /// Takes a message out of the queue's memory: its bytes go back to the
    /// budgets. Every way an entry leaves other than an acknowledgement (which
    /// gives back a batch at once) goes through here.
    pub(super) fn leave(&self, entry: Entry) -> Arc<Message> {
        self.memory.release(entry.charge);
        entry.message
    }

    /// Gives the bytes of entries removed together back to the budgets at once.
    pub(super) fn free_entries(&self, entries: Vec<Entry>) {
        let bytes = entries.into_iter().map(|e| e.charge.into_bytes()).sum();
        self.memory.release_bytes(bytes);
    }

    /// Deletes a message's record, if it has one.
    pub(super) fn forget(&self, entry: &Entry) {
        if entry.persisted {
            self.store.submit_detached(Op::DeleteMessage {
                key: MessageKey {
                    queue: self.id,
                    seq: entry.seq,
                },
            });
        }
    }
}

/// Gives a window consumer back the credit of `settled` deliveries.
fn refill(st: &mut State, consumer: ConsumerId, settled: u32) {
    if settled == 0 {
        return;
    }
    if let Some(slot) = st.consumers.get_mut(consumer) {
        refill_slot(slot, settled);
    }
}

/// [`refill`] for `acked` acknowledged deliveries, counted for management with
/// the same lookup of the consumer.
fn settle_acked(st: &mut State, consumer: ConsumerId, acked: u32) {
    if acked == 0 {
        return;
    }
    if let Some(slot) = st.consumers.get_mut(consumer) {
        refill_slot(slot, acked);
        slot.activity.acked += u64::from(acked);
    }
}

fn refill_slot(slot: &mut Slot, settled: u32) {
    if let CreditMode::Window(window) = slot.mode {
        slot.credit = slot.credit.saturating_add(settled).min(window);
    }
}

/// Removes a delivery from the in-flight table, freeing a paused group when
/// its last outstanding message is settled.
fn take_in_flight(st: &mut State, seq: u64) -> Option<InFlight> {
    let flight = st.in_flight.remove(&seq)?;
    Some(st.note_taken(flight))
}

/// [`take_in_flight`] of a delivery `consumer` holds; one that is not its own
/// stays where it is. One map lookup either way: acks take every delivery
/// this way.
fn take_in_flight_of(st: &mut State, seq: u64, consumer: ConsumerId) -> Option<InFlight> {
    match st.in_flight.remove(&seq) {
        Some(flight) if flight.consumer == consumer => Some(st.note_taken(flight)),
        Some(flight) => {
            st.in_flight.insert(seq, flight);
            None
        }
        None => None,
    }
}
