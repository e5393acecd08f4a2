//! Answers leave the writer in the order their submissions came in.
//!
//! The writer may keep a stored message back for its consumer's acknowledgement
//! (see `holding`) while later submissions are written or cancelled out. Callers
//! rely on order all the same: a STOMP session keeps only its newest write and
//! takes it being done as proof that every earlier one is, and `answers` keeps
//! one number for all of them. So an answer is only given once every earlier
//! one can be.

use super::answers::{Answers, Outcome};
use super::StoreError;
use std::collections::VecDeque;
use std::sync::Arc;

/// A submission's place in the release order, taken as it joins the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket(u64);

impl Ticket {
    pub fn new(number: u64) -> Self {
        Ticket(number)
    }

    pub fn number(self) -> u64 {
        self.0
    }
}

#[derive(Default)]
pub(super) struct Releases {
    /// Ticket of the front slot.
    front: u64,
    slots: VecDeque<Option<Outcome>>,
    /// Failures among the slots just released (kept to reuse the allocation).
    failures: Vec<(Ticket, Arc<StoreError>)>,
}

impl Releases {
    /// Takes in a submission; tickets arrive in order, one after another.
    pub fn enqueue(&mut self, ticket: Ticket) {
        debug_assert_eq!(ticket.0, self.front + self.slots.len() as u64);
        self.slots.push_back(None);
    }

    /// Records the outcome of a submission; given once everything before it is.
    pub fn resolve(&mut self, ticket: Ticket, outcome: Outcome) {
        let index = ticket.0.wrapping_sub(self.front) as usize;
        if let Some(slot) = self.slots.get_mut(index) {
            *slot = Some(outcome);
        }
    }

    /// Answers every outcome that no earlier unresolved submission holds up.
    pub fn release(&mut self, answers: &Answers) {
        let before = self.front;
        while let Some(Some(_)) = self.slots.front() {
            if let Some(Some(Err(e))) = self.slots.pop_front() {
                self.failures.push((Ticket(self.front), e));
            }
            self.front += 1;
        }
        if self.front != before {
            answers.advance(self.front, &self.failures);
            self.failures.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_outcome_waits_for_an_earlier_one() {
        let answers = Answers::default();
        let mut releases = Releases::default();
        let (first, second) = (Ticket(0), Ticket(1));
        releases.enqueue(first);
        releases.enqueue(second);
        releases.resolve(second, Ok(()));
        releases.release(&answers);
        assert!(
            answers.answer(1).is_none(),
            "answered before the earlier one"
        );
        releases.resolve(first, Err(Arc::new(StoreError::Closed)));
        releases.release(&answers);
        assert!(matches!(answers.answer(0), Some(Err(_))));
        assert!(matches!(answers.answer(1), Some(Ok(()))));
        // Tickets keep counting after the line empties.
        let third = Ticket(2);
        releases.enqueue(third);
        releases.resolve(third, Ok(()));
        releases.release(&answers);
        assert!(matches!(answers.answer(2), Some(Ok(()))));
    }
}
