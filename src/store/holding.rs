//! Which new messages the writer keeps back, hoping they are consumed first.
//!
//! A durable message acknowledged before it is written never needs writing:
//! its put and its delete cancel out (RabbitMQ does the same with messages
//! acknowledged before they reach its message store). Within one group commit
//! that happens by itself; across commits the writer keeps a new message back
//! for at most `window`, and confirms it to its sender once it is consumed or
//! written, whichever comes first. Nothing is confirmed before it is safe.
//!
//! How long depends on the queue: its window starts at the configured one and
//! doubles (up to [`WIDEST`] times it) while held messages are acknowledged
//! only after their window ran out: large messages in a deep client pipeline
//! are acknowledged 10-30 ms after they arrive, and writing each of them
//! costs far more than a few milliseconds of confirmation latency.
//!
//! Keeping back only pays while a queue's consumers keep up. A queue whose
//! held messages all had to be written after all, even with the widest window
//! (no consumer, or one far behind), is not held for a while, so its producers
//! see no added latency; now and then one batch is tried again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a queue is not held after holding it failed at its widest window.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// How many times the configured window a queue's window may grow to.
const WIDEST: u32 = 8;

pub(super) struct Holding {
    window: Duration,
    widest: Duration,
    /// Queues whose window has grown beyond `window`.
    widened: HashMap<u32, Duration>,
    /// Queues not held until the given time.
    paused: HashMap<u32, Instant>,
}

impl Holding {
    /// `window` zero: nothing is ever held.
    pub fn new(window: Duration) -> Self {
        Holding {
            window,
            widest: (window * WIDEST).min(Duration::from_secs(1)).max(window),
            widened: HashMap::new(),
            paused: HashMap::new(),
        }
    }

    fn window_of(&self, queue: u32) -> Duration {
        self.widened.get(&queue).copied().unwrap_or(self.window)
    }

    /// Whether a new message of `queue` may be kept back.
    pub fn may_hold(&self, queue: u32, now: Instant) -> bool {
        !self.window.is_zero() && self.paused.get(&queue).is_none_or(|until| now >= *until)
    }

    /// Whether a message of `queue` first kept back at `since` may stay back.
    pub fn within_window(&self, queue: u32, since: Instant, now: Instant) -> bool {
        now < self.deadline(queue, since)
    }

    /// When a message of `queue` first kept back at `since` must be written.
    pub fn deadline(&self, queue: u32, since: Instant) -> Instant {
        since + self.window_of(queue)
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
        }
        if written == 0 {
            return;
        }
        let window = self.window_of(queue);
        if window < self.widest {
            // Acknowledged too late for this window (or not at all yet): try a wider one.
            self.widened.insert(queue, (window * 2).min(self.widest));
        } else if consumed == 0 {
            self.widened.remove(&queue);
            self.paused.insert(queue, now + RETRY_AFTER);
        }
    }

    /// A purged or deleted queue starts afresh.
    pub fn forget(&mut self, queue: u32) {
        self.paused.remove(&queue);
        self.widened.remove(&queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_whose_held_messages_are_not_consumed_is_left_alone_for_a_while() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let mut holding = Holding::new(ms(2));
        assert!(holding.may_hold(1, now));
        // Too late for 2 ms: the window doubles up to 8 times the configured one...
        for wider in [4, 8, 16] {
            holding.learn(1, 0, 10, now);
            assert!(holding.may_hold(1, now));
            assert_eq!(holding.deadline(1, now), now + ms(wider));
        }
        assert_eq!(
            holding.deadline(2, now),
            now + ms(2),
            "other queues keep theirs"
        );
        // ...and failing at the widest, the queue is left alone for a while.
        holding.learn(1, 0, 10, now);
        assert!(!holding.may_hold(1, now));
        assert!(holding.may_hold(2, now), "other queues are not affected");
        assert!(holding.may_hold(1, now + RETRY_AFTER), "tried again later");
        assert_eq!(
            holding.deadline(1, now),
            now + ms(2),
            "from the configured window"
        );
        holding.learn(1, 3, 7, now + RETRY_AFTER);
        assert!(holding.may_hold(1, now + RETRY_AFTER));
        assert_eq!(
            holding.deadline(1, now),
            now + ms(4),
            "some came late: wider"
        );
        holding.learn(1, 5, 0, now + RETRY_AFTER);
        assert_eq!(holding.deadline(1, now), now + ms(4), "all in time: kept");
        holding.forget(1);
        assert_eq!(holding.deadline(1, now), now + ms(2));
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
        assert!(holding.within_window(1, now, now + Duration::from_millis(1)));
        assert!(!holding.within_window(1, now, now + Duration::from_millis(2)));
        assert_eq!(holding.deadline(1, now), now + Duration::from_millis(2));
    }
}
