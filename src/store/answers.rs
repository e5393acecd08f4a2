//! What the writer tells submitters: every ticket below one number is answered.
//!
//! The writer answers submissions in ticket order (see `release`), so a single
//! counter says which are done; the rare failed write is remembered by ticket
//! range. A submitter checks its ticket against the counter, and registers a
//! waker only when it has to wait. Before this, each durable send carried a
//! oneshot channel: an allocation, freed on the other thread, and a wake-up
//! each, several per cent of a persistent run's CPU.

use super::release::Ticket;
use super::StoreError;
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

pub(super) type Outcome = Result<(), Arc<StoreError>>;

#[derive(Default)]
pub(super) struct Answers {
    /// Every ticket below this has its answer.
    answered_below: AtomicU64,
    /// Whether `failed` holds anything: the common case reads no lock.
    any_failed: AtomicBool,
    /// Tickets whose write failed, as [from, to) ranges; neighbours merge, so a
    /// disk that keeps failing adds to the last range rather than the list.
    failed: Mutex<Vec<(u64, u64, Arc<StoreError>)>>,
    /// Submitters waiting for their ticket, with the ticket.
    /// Always taken by the writer after it advances (once per commit): the
    /// lock orders a registration against the advance, so no wake-up is lost.
    waiters: Mutex<Vec<(u64, Waker)>>,
    /// The writer stopped: tickets it did not answer never will be.
    writer_gone: AtomicBool,
}

impl Answers {
    /// The answer for `ticket`, if it has come.
    pub fn answer(&self, ticket: u64) -> Option<Outcome> {
        let gone = self.writer_gone.load(Ordering::Acquire);
        if ticket < self.answered_below.load(Ordering::Acquire) {
            if self.any_failed.load(Ordering::Acquire) {
                let failed = self.failed.lock();
                if let Some((_, _, e)) = failed
                    .iter()
                    .find(|(from, to, _)| (*from..*to).contains(&ticket))
                {
                    return Some(Err(e.clone()));
                }
            }
            return Some(Ok(()));
        }
        gone.then(|| Err(Arc::new(StoreError::Closed)))
    }

    /// The writer's side: `failures` (ascending) failed, and everything else
    /// below `below` succeeded. Wakes whoever waits for one of them.
    pub fn advance(&self, below: u64, failures: &[(Ticket, Arc<StoreError>)]) {
        if !failures.is_empty() {
            let mut failed = self.failed.lock();
            for (ticket, e) in failures {
                let t = ticket.number();
                match failed.last_mut() {
                    Some((_, to, last)) if *to == t && Arc::ptr_eq(last, e) => *to = t + 1,
                    _ => failed.push((t, t + 1, e.clone())),
                }
            }
            self.any_failed.store(true, Ordering::Release);
        }
        self.answered_below.store(below, Ordering::Release);
        self.wake(|ticket| ticket < below);
    }

    /// The writer ended (or unwound): nobody is left to answer.
    pub fn writer_gone(&self) {
        self.writer_gone.store(true, Ordering::Release);
        self.wake(|_| true);
    }

    fn wait_for(&self, ticket: u64, waker: Waker) {
        self.waiters.lock().push((ticket, waker));
    }

    fn wake(&self, answered: impl Fn(u64) -> bool) {
        let mut woken = Vec::new();
        {
            let mut waiters = self.waiters.lock();
            waiters.retain(|(ticket, waker)| {
                let done = answered(*ticket);
                if done {
                    woken.push(waker.clone());
                }
                !done
            });
        }
        for waker in woken {
            waker.wake();
        }
    }
}

/// One submission's answer, to poll or to wait for.
pub(super) struct TicketAnswer {
    ticket: u64,
    answers: Arc<Answers>,
    /// The waker last registered, so a pending answer is not registered again
    /// on every poll of a busy task.
    registered: Option<Waker>,
}

impl TicketAnswer {
    pub fn new(ticket: Ticket, answers: Arc<Answers>) -> Self {
        TicketAnswer {
            ticket: ticket.number(),
            answers,
            registered: None,
        }
    }

    pub fn answered(&self) -> Option<Outcome> {
        self.answers.answer(self.ticket)
    }
}

impl Future for TicketAnswer {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        if let Some(outcome) = self.answered() {
            return Poll::Ready(outcome);
        }
        if !self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.answers.wait_for(self.ticket, cx.waker().clone());
            self.registered = Some(cx.waker().clone());
            // The writer may have answered between the check and the registration.
            if let Some(outcome) = self.answered() {
                return Poll::Ready(outcome);
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(answer: &mut TicketAnswer, waker: &Waker) -> Poll<Outcome> {
        Pin::new(answer).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_ticket_is_answered_once_the_writer_passes_it() {
        let answers = Arc::new(Answers::default());
        let mut third = TicketAnswer::new(Ticket::new(2), answers.clone());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        assert!(poll(&mut third, &waker).is_pending());
        assert!(poll(&mut third, &waker).is_pending());
        answers.advance(2, &[]);
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "not its turn yet");
        answers.advance(3, &[]);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "woken once, registered once"
        );
        assert!(matches!(poll(&mut third, &waker), Poll::Ready(Ok(()))));
    }

    #[test]
    fn failed_tickets_fail_and_their_neighbours_do_not() {
        let answers = Answers::default();
        let e = Arc::new(StoreError::Closed);
        let failures: Vec<_> = [3, 4, 5].map(|t| (Ticket::new(t), e.clone())).into();
        answers.advance(8, &failures);
        for t in 0..8 {
            let failed = matches!(answers.answer(t), Some(Err(_)));
            assert_eq!(failed, (3..6).contains(&t), "ticket {t}");
        }
        assert_eq!(answers.failed.lock().len(), 1, "one range");
        assert!(answers.answer(8).is_none());
    }

    #[test]
    fn when_the_writer_is_gone_unanswered_tickets_fail() {
        let answers = Arc::new(Answers::default());
        answers.advance(1, &[]);
        let mut later = TicketAnswer::new(Ticket::new(1), answers.clone());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        assert!(poll(&mut later, &waker).is_pending());
        answers.writer_gone();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(matches!(poll(&mut later, &waker), Poll::Ready(Err(_))));
        assert!(matches!(answers.answer(0), Some(Ok(()))), "answered before");
    }
}
