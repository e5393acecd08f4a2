//! The line from the connections to the writer thread.
//!
//! A submission takes its ticket as it joins the line, under the same lock, so
//! the writer meets tickets in order and answers them in that order (see
//! `release`). One number then answers every submission (see `answers`): a
//! send costs a short lock and a push, not a channel of its own, and the
//! writer takes the whole line at once instead of one message at a time.

use super::answers::Answers;
use super::release::Ticket;
use super::writer::OpList;
use super::StoreError;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Instant;

/// One submission on its way to the writer: applied atomically, answered by ticket.
pub(super) struct Submission {
    pub ops: OpList,
    pub ticket: Ticket,
}

impl Submission {
    pub fn op_count(&self) -> usize {
        self.ops.len()
    }
}

pub(super) struct Inbox {
    line: Mutex<Line>,
    /// The writer sleeps here while the line is empty.
    writer: Condvar,
    /// Submitters wait here while the line is full.
    room: Condvar,
    /// Submissions waiting before submitters are made to wait (flow control).
    depth: usize,
    answers: Arc<Answers>,
}

#[derive(Default)]
struct Line {
    queued: Vec<Submission>,
    next_ticket: u64,
    writer_asleep: bool,
    submitters_waiting: usize,
    /// The store is going away: nothing more joins the line.
    closed: bool,
}

/// How long the writer waits for a submission.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    Until(Instant),
    Forever,
}

/// What the writer found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Taken {
    /// At least one submission.
    Some,
    /// Nothing came in time.
    Nothing,
    /// Nothing, and nothing ever will: the store closed and the line is empty.
    Closed,
}

impl Inbox {
    pub fn new(depth: usize) -> Self {
        Inbox {
            line: Mutex::new(Line::default()),
            writer: Condvar::new(),
            room: Condvar::new(),
            depth: depth.max(1),
            answers: Arc::new(Answers::default()),
        }
    }

    pub fn answers(&self) -> &Arc<Answers> {
        &self.answers
    }

    /// Puts `ops` in line; their ticket says when they are answered. Waits
    /// (blocking the thread, as a full channel would) while `depth`
    /// submissions are already waiting.
    pub fn submit(&self, ops: OpList) -> Result<Ticket, StoreError> {
        let mut line = self.line.lock();
        while line.queued.len() >= self.depth && !line.closed {
            line.submitters_waiting += 1;
            self.room.wait(&mut line);
            line.submitters_waiting -= 1;
        }
        if line.closed {
            return Err(StoreError::Closed);
        }
        let ticket = Ticket::new(line.next_ticket);
        line.next_ticket += 1;
        line.queued.push(Submission { ops, ticket });
        let wake = std::mem::take(&mut line.writer_asleep);
        drop(line);
        if wake {
            self.writer.notify_one();
        }
        Ok(ticket)
    }

    /// Lets the writer finish the line and stop; later submissions fail.
    pub fn close(&self) {
        let mut line = self.line.lock();
        line.closed = true;
        line.writer_asleep = false;
        drop(line);
        self.writer.notify_one();
        self.room.notify_all();
    }

    /// The writer's side: moves waiting submissions into `into`, in ticket
    /// order, up to about `max_ops` ops (at least one submission), waiting as
    /// `wait` says when there are none.
    pub fn take(&self, into: &mut Vec<Submission>, max_ops: usize, wait: Wait) -> Taken {
        let mut line = self.line.lock();
        loop {
            if !line.queued.is_empty() {
                let mut ops = 0;
                let count = line
                    .queued
                    .iter()
                    .take_while(|s| {
                        let fits = ops == 0 || ops + s.op_count() <= max_ops;
                        ops += s.op_count();
                        fits
                    })
                    .count();
                if count == line.queued.len() {
                    into.append(&mut line.queued);
                } else {
                    into.extend(line.queued.drain(..count));
                }
                let waiting = line.submitters_waiting > 0;
                drop(line);
                if waiting {
                    self.room.notify_all();
                }
                return Taken::Some;
            }
            if line.closed {
                return Taken::Closed;
            }
            line.writer_asleep = true;
            match wait {
                Wait::Forever => self.writer.wait(&mut line),
                Wait::Until(until) => {
                    if self.writer.wait_until(&mut line, until).timed_out()
                        && line.queued.is_empty()
                    {
                        line.writer_asleep = false;
                        return if line.closed {
                            Taken::Closed
                        } else {
                            Taken::Nothing
                        };
                    }
                }
            }
            line.writer_asleep = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::MessageKey;
    use crate::store::writer::Op;
    use std::time::Duration;

    fn delete(seq: u64) -> OpList {
        OpList::One(Op::DeleteMessage {
            key: MessageKey { queue: 1, seq },
        })
    }

    fn tickets(taken: &[Submission]) -> Vec<u64> {
        taken.iter().map(|s| s.ticket.number()).collect()
    }

    #[test]
    fn tickets_follow_the_order_of_the_line() {
        let inbox = Inbox::new(16);
        for seq in 0..5 {
            assert_eq!(inbox.submit(delete(seq)).unwrap().number(), seq);
        }
        let mut taken = Vec::new();
        assert_eq!(
            inbox.take(&mut taken, 3, Wait::Until(Instant::now())),
            Taken::Some
        );
        assert_eq!(tickets(&taken), [0, 1, 2], "at most max_ops ops");
        assert_eq!(
            inbox.take(&mut taken, 100, Wait::Until(Instant::now())),
            Taken::Some
        );
        assert_eq!(tickets(&taken), [0, 1, 2, 3, 4]);
        assert_eq!(
            inbox.take(&mut taken, 100, Wait::Until(Instant::now())),
            Taken::Nothing
        );
    }

    #[test]
    fn a_submission_larger_than_a_batch_still_goes() {
        let inbox = Inbox::new(16);
        let many = (0..10)
            .map(|seq| Op::DeleteMessage {
                key: MessageKey { queue: 1, seq },
            })
            .collect();
        inbox.submit(OpList::Many(many)).unwrap();
        let mut taken = Vec::new();
        assert_eq!(
            inbox.take(&mut taken, 4, Wait::Until(Instant::now())),
            Taken::Some
        );
        assert_eq!(taken.len(), 1);
    }

    #[test]
    fn the_writer_wakes_for_a_submission_and_times_out_without_one() {
        let inbox = Arc::new(Inbox::new(16));
        let mut taken = Vec::new();
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(inbox.take(&mut taken, 8, Wait::Until(soon)), Taken::Nothing);
        let submitter = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                inbox.submit(delete(1)).unwrap();
            })
        };
        assert_eq!(inbox.take(&mut taken, 8, Wait::Forever), Taken::Some);
        assert_eq!(taken.len(), 1);
        submitter.join().unwrap();
    }

    #[test]
    fn a_full_line_makes_submitters_wait_for_the_writer() {
        let inbox = Arc::new(Inbox::new(2));
        inbox.submit(delete(0)).unwrap();
        inbox.submit(delete(1)).unwrap();
        let submitter = {
            let inbox = inbox.clone();
            std::thread::spawn(move || inbox.submit(delete(2)).unwrap().number())
        };
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            !submitter.is_finished(),
            "the third submission waits for room"
        );
        let mut taken = Vec::new();
        assert_eq!(
            inbox.take(&mut taken, 8, Wait::Until(Instant::now())),
            Taken::Some
        );
        assert_eq!(submitter.join().unwrap(), 2);
    }

    #[test]
    fn closing_drains_the_line_then_refuses() {
        let inbox = Inbox::new(16);
        inbox.submit(delete(0)).unwrap();
        inbox.close();
        assert!(matches!(inbox.submit(delete(1)), Err(StoreError::Closed)));
        let mut taken = Vec::new();
        assert_eq!(inbox.take(&mut taken, 8, Wait::Forever), Taken::Some);
        assert_eq!(inbox.take(&mut taken, 8, Wait::Forever), Taken::Closed);
    }
}
