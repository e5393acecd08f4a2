//! Which new messages the writer keeps back, hoping they are consumed first.
//!
//! A durable message acknowledged before it is written never needs writing:
//! its put and its delete cancel out (RabbitMQ does the same with messages
//! acknowledged before they reach its message store). Within one group commit
//! that happens by itself; across commits the writer keeps a new message back
//! for at most `window`, and confirms it to its sender once it is consumed or
//! written, whichever comes first. Nothing is confirmed before it is safe.
//!
//! Keeping back only pays while a queue's consumers keep up. A queue whose
//! held messages all had to be written after all (no consumer, or one far
//! behind) is not held for a while, so its producers see no added latency;
//! now and then one batch is tried again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a queue is not held after holding it failed.
const RETRY_AFTER: Duration = Duration::from_millis(100);

pub(super) struct Holding {
    window: Duration,
    /// Queues not held until the given time.
    paused: HashMap<u32, Instant>,
}

impl Holding {
    /// `window` zero: nothing is ever held.
    pub fn new(window: Duration) -> Self {
        Holding {
            window,
            paused: HashMap::new(),
        }
    }

    /// Whether a new message of `queue` may be kept back.
    pub fn may_hold(&self, queue: u32, now: Instant) -> bool {
        !self.window.is_zero() && self.paused.get(&queue).is_none_or(|until| now >= *until)
    }

    /// Whether a message first kept back at `since` may stay back.
    pub fn within_window(&self, since: Instant, now: Instant) -> bool {
        now < since + self.window
    }

    /// When a message first kept back at `since` must be written.
    pub fn deadline(&self, since: Instant) -> Instant {
        since + self.window
    }

    /// How long the writer lets submissions gather when its last commit had
    /// nothing to write: a small part of the window, so held messages still
    /// meet their acknowledgements and their deadline.
    pub fn gather_pause(&self) -> Duration {
        (self.window / 8).min(Duration::from_micros(150))
    }

    /// What became of one commit's held messages of `queue`: `consumed` of
    /// them cancelled out, `written` ran out of time.
    pub fn learn(&mut self, queue: u32, consumed: usize, written: usize, now: Instant) {
        if consumed > 0 {
            self.paused.remove(&queue);
        } else if written > 0 {
            self.paused.insert(queue, now + RETRY_AFTER);
        }
    }

    /// A purged or deleted queue starts afresh.
    pub fn forget(&mut self, queue: u32) {
        self.paused.remove(&queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_whose_held_messages_are_not_consumed_is_left_alone_for_a_while() {
        let now = Instant::now();
        let mut holding = Holding::new(Duration::from_millis(2));
        assert!(holding.may_hold(1, now));
        holding.learn(1, 0, 10, now);
        assert!(!holding.may_hold(1, now));
        assert!(holding.may_hold(2, now), "other queues are not affected");
        assert!(holding.may_hold(1, now + RETRY_AFTER), "tried again later");
        holding.learn(1, 3, 7, now + RETRY_AFTER);
        assert!(holding.may_hold(1, now + RETRY_AFTER));
    }

    #[test]
    fn a_zero_window_holds_nothing() {
        let holding = Holding::new(Duration::ZERO);
        assert!(!holding.may_hold(1, Instant::now()));
    }

    #[test]
    fn the_window_runs_from_the_first_hold() {
        let now = Instant::now();
        let holding = Holding::new(Duration::from_millis(2));
        assert!(holding.within_window(now, now + Duration::from_millis(1)));
        assert!(!holding.within_window(now, now + Duration::from_millis(2)));
        assert_eq!(holding.deadline(now), now + Duration::from_millis(2));
    }
}
