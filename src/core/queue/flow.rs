//! Producer flow control, like RabbitMQ's credit flow: while consumers are
//! attached and taking messages but the queue holds more than half of
//! `max_memory_messages`, a send counts as done (receipt, AMQP outcome) only
//! once the queue is down to a quarter. Producers that wait for those (a
//! window of unsettled sends, receipts) slow to the consumers' pace instead of
//! pushing the queue into paging, a disk write and read per message. It
//! throttles, it never blocks: without consumers, or when they stop taking
//! messages (a client that sends everything before it reads, on one thread),
//! held sends are let go and the queue pages to disk.

use crate::store::{Completion, Hold};

/// How long consumers may make no progress before held sends are let go.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);

#[derive(Default)]
pub struct Flow {
    /// Sends whose completion waits for the queue to drain; dropping one
    /// lets its producer go on.
    held: Vec<Hold>,
    /// Deliveries so far: the consumers' progress, which holding waits on.
    delivered: u64,
    /// A watch on the held sends is running.
    watching: bool,
    /// Consumers made no progress while sends were held (`delivered` then):
    /// nothing is held again until they do.
    stalled_at: Option<u64>,
}

/// What a watch on held sends does after a wait.
pub enum Watch {
    /// Consumers made progress: wait again.
    Again,
    /// Nothing is held any more: stop watching.
    Stop,
    /// Consumers stalled: let these go and stop watching.
    Release(Vec<Hold>),
}

impl Flow {
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn delivered(&mut self) {
        self.delivered += 1;
    }

    pub fn progress(&self) -> u64 {
        self.delivered
    }

    /// Holds `completion` back when the queue is past half its memory limit
    /// and consumers are taking messages. Returns the completion to give the
    /// producer, and whether a watch must be started.
    pub fn hold_back(
        &mut self,
        completion: Completion,
        waiting: usize,
        max_memory: usize,
        has_consumers: bool,
    ) -> (Completion, bool) {
        if waiting < max_memory / 2
            || !has_consumers
            || self.stalled_at == Some(self.delivered)
            // Senders that wait for their completions are few (a window, a
            // receipt); one that never waits is not slowed by holding, and
            // its holds must not grow with the backlog.
            || self.held.len() >= max_memory
        {
            return (completion, false);
        }
        self.stalled_at = None;
        let start_watch = !self.watching;
        self.watching = true;
        let (hold, held) = completion.held_back();
        self.held.push(hold);
        (held, start_watch)
    }

    /// The held sends to let go now that the queue drained to a quarter (or
    /// lost its consumers, or was deleted).
    pub fn drained(&mut self, waiting: usize, max_memory: usize, gone: bool, out: &mut Vec<Hold>) {
        if !self.held.is_empty() && (waiting <= max_memory / 4 || gone) {
            out.append(&mut self.held);
        }
    }

    /// One look of the watch, after waiting [`PATIENCE`] since `seen`.
    pub fn watch(&mut self, seen: &mut u64) -> Watch {
        if self.held.is_empty() {
            self.watching = false;
            return Watch::Stop;
        }
        if self.delivered != *seen {
            *seen = self.delivered;
            return Watch::Again;
        }
        self.watching = false;
        self.stalled_at = Some(self.delivered);
        Watch::Release(std::mem::take(&mut self.held))
    }

    /// Lets every held send go (no runtime to watch from, queue deleted).
    pub fn release_all(&mut self) -> Vec<Hold> {
        self.watching = false;
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_past_half_and_lets_go_at_a_quarter() {
        let mut flow = Flow::default();
        let (c, watch) = flow.hold_back(Completion::ready(), 4, 10, true);
        assert!(c.is_ready() && !watch, "under half: not held");
        let (c, watch) = flow.hold_back(Completion::ready(), 6, 10, false);
        assert!(c.is_ready() && !watch, "no consumers: not held");
        let (held, watch) = flow.hold_back(Completion::ready(), 6, 10, true);
        assert!(!held.is_ready() && watch);
        let (_held2, watch) = flow.hold_back(Completion::ready(), 7, 10, true);
        assert!(!watch, "one watch at a time");
        let mut out = Vec::new();
        flow.drained(3, 10, false, &mut out);
        assert!(out.is_empty(), "above a quarter: still held");
        flow.drained(2, 10, false, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(flow.len(), 0);
    }

    #[test]
    fn stalled_consumers_release_and_stop_holding_until_they_move() {
        let mut flow = Flow::default();
        let (_held, _) = flow.hold_back(Completion::ready(), 6, 10, true);
        let mut seen = flow.progress();
        flow.delivered();
        assert!(matches!(flow.watch(&mut seen), Watch::Again));
        match flow.watch(&mut seen) {
            Watch::Release(held) => assert_eq!(held.len(), 1),
            _ => panic!("no progress: the held sends go"),
        }
        let (c, _) = flow.hold_back(Completion::ready(), 6, 10, true);
        assert!(
            c.is_ready(),
            "not held again while the consumers stay stalled"
        );
        flow.delivered();
        let (c, _) = flow.hold_back(Completion::ready(), 6, 10, true);
        assert!(!c.is_ready(), "held again once they move");
        assert!(matches!(Flow::default().watch(&mut 0), Watch::Stop));
    }
}
