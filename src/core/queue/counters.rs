//! What happened to a queue's messages since the broker started, for the management API
//! and metrics. Relaxed atomics: each event costs one uncontended add on a line the
//! queue touches anyway, nothing is allocated, and readers need no lock (a reading may
//! be a few events behind another, which a rate or a dashboard does not mind).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct Counters {
    enqueued: AtomicU64,
    acked: AtomicU64,
    expired: AtomicU64,
    dead_lettered: AtomicU64,
    redelivered: AtomicU64,
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
