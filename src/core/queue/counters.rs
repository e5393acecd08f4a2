//! What happened to a queue's messages since the broker started, for the management API
//! and metrics. Relaxed atomics: each event costs one uncontended add on a line the
//! queue touches anyway, nothing is allocated, and readers need no lock (a reading may
//! be a few events behind another, which a rate or a dashboard does not mind).

use crate::core::rates::RateWindow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

#[derive(Debug, Default)]
pub struct Counters {
    enqueued: AtomicU64,
    acked: AtomicU64,
    expired: AtomicU64,
    dead_lettered: AtomicU64,
    redelivered: AtomicU64,
    /// The last reading of enqueued and acked, for their rates; only management reads it.
    rates: parking_lot::Mutex<RateWindow<2>>,
}

/// Messages per second, averaged since the previous reading at least
/// [`crate::core::rates::RATE_WINDOW`] earlier (see [`Counters::rates`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rates {
    pub enqueued: f64,
    pub acked: f64,
}

/// The counters read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Messages that entered the queue (a delayed one when it fell due).
    pub enqueued: u64,
    /// Deliveries acknowledged by consumers.
    pub acked: u64,
    /// Messages that expired in the queue (or before they fell due).
    pub expired: u64,
    /// Messages given up on: rejected, or past `max_delivery_attempts`.
    pub dead_lettered: u64,
    /// Deliveries that failed and came back to be delivered again (a NACK, a
    /// consumer gone with them unacknowledged).
    pub redelivered: u64,
}

impl Counters {
    #[inline]
    pub fn enqueued(&self) {
        self.enqueued.fetch_add(1, Relaxed);
    }

    #[inline]
    pub fn acked(&self, n: u64) {
        if n > 0 {
            self.acked.fetch_add(n, Relaxed);
        }
    }

    pub fn expired(&self) {
        self.expired.fetch_add(1, Relaxed);
    }

    pub fn dead_lettered(&self) {
        self.dead_lettered.fetch_add(1, Relaxed);
    }

    pub fn redelivered(&self) {
        self.redelivered.fetch_add(1, Relaxed);
    }

    /// The rates since the previous reading (zero at the first): computed from
    /// the totals when read, so counting costs nothing more per message.
    pub fn rates(&self) -> Rates {
        self.rates_at(Instant::now())
    }

    fn rates_at(&self, now: Instant) -> Rates {
        let totals = self.totals();
        let [enqueued, acked] = self
            .rates
            .lock()
            .rates_at(now, [totals.enqueued, totals.acked]);
        Rates { enqueued, acked }
    }

    pub fn totals(&self) -> Totals {
        Totals {
            enqueued: self.enqueued.load(Relaxed),
            acked: self.acked.load(Relaxed),
            expired: self.expired.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            redelivered: self.redelivered.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rates::RATE_WINDOW;

    #[test]
    fn rates_are_averaged_over_at_least_a_window() {
        let counters = Counters::default();
        let start = Instant::now();
        assert_eq!(counters.rates_at(start), Rates::default());
        for _ in 0..30 {
            counters.enqueued();
        }
        counters.acked(10);
        // Within the window: the last rates again.
        assert_eq!(counters.rates_at(start + RATE_WINDOW / 2), Rates::default());
        let rates = counters.rates_at(start + 2 * RATE_WINDOW);
        assert_eq!((rates.enqueued, rates.acked), (15.0, 5.0));
        assert_eq!(
            counters.rates_at(start + 2 * RATE_WINDOW + RATE_WINDOW / 2),
            rates
        );
        let idle = counters.rates_at(start + 4 * RATE_WINDOW);
        assert_eq!((idle.enqueued, idle.acked), (0.0, 0.0));
    }
}
