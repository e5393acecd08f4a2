//! Completions leave the writer in the order their submissions came in.
//!
//! The writer may keep a stored message back for its consumer's acknowledgement
//! (see `holding`) while later submissions are written or cancelled out. Callers
//! rely on order all the same: a STOMP session keeps only its newest write and
//! takes it being done as proof that every earlier one is. So a completion is
//! only sent once every earlier one can be.

use super::StoreError;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::oneshot;

pub(super) type Done = oneshot::Sender<Result<(), Arc<StoreError>>>;
pub(super) type Outcome = Result<(), Arc<StoreError>>;

/// A place in the release order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket(u64);

#[derive(Default)]
pub(super) struct Releases {
    /// Ticket of the front slot.
    front: u64,
    slots: VecDeque<(Done, Option<Outcome>)>,
}

impl Releases {
    /// Takes a completion's place at the back of the line.
    pub fn enqueue(&mut self, done: Done) -> Ticket {
        let ticket = Ticket(self.front + self.slots.len() as u64);
        self.slots.push_back((done, None));
        ticket
    }

    /// Records the outcome of a submission; sent once everything before it is.
    pub fn resolve(&mut self, ticket: Ticket, outcome: Outcome) {
        let index = ticket.0.wrapping_sub(self.front) as usize;
        if let Some(slot) = self.slots.get_mut(index) {
            slot.1 = Some(outcome);
        }
    }

    /// Sends every outcome that no earlier unresolved submission holds up.
    pub fn release(&mut self) {
        while self
            .slots
            .front()
            .is_some_and(|(_, outcome)| outcome.is_some())
        {
            if let Some((done, Some(outcome))) = self.slots.pop_front() {
                let _ = done.send(outcome);
            }
            self.front += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_outcome_waits_for_an_earlier_one() {
        let mut releases = Releases::default();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        let first = releases.enqueue(tx1);
        let second = releases.enqueue(tx2);
        releases.resolve(second, Ok(()));
        releases.release();
        assert!(rx2.try_recv().is_err(), "sent before the earlier one");
        releases.resolve(first, Err(Arc::new(StoreError::Closed)));
        releases.release();
        assert!(matches!(rx1.try_recv(), Ok(Err(_))));
        assert!(matches!(rx2.try_recv(), Ok(Ok(()))));
        // Tickets keep counting after the line empties.
        let (tx3, mut rx3) = oneshot::channel();
        let third = releases.enqueue(tx3);
        releases.resolve(third, Ok(()));
        releases.release();
        assert!(matches!(rx3.try_recv(), Ok(Ok(()))));
    }
}
