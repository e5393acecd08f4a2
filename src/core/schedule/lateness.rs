//! How late delayed messages reach their queues: moved in minus due, in a histogram
//! of fixed buckets kept in atomics, so the timer adds three relaxed increments per
//! message and a metrics scrape reads it without a lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in milliseconds; one more bucket holds the rest.
pub const BOUNDS_MS: [u64; 12] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 5_000, 30_000];

#[derive(Debug, Default)]
pub struct Lateness {
    buckets: [AtomicU64; BOUNDS_MS.len() + 1],
    sum_ms: AtomicU64,
    count: AtomicU64,
}

/// The histogram at one moment, buckets cumulative as Prometheus writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatenessSnapshot {
    /// `(bound in ms, messages at most that late)`, then the total as `u64::MAX`.
    pub cumulative: Vec<(u64, u64)>,
    pub sum_ms: u64,
    pub count: u64,
}

impl Lateness {
    pub fn observe(&self, late_ms: u64) {
        let bucket = BOUNDS_MS
            .iter()
            .position(|&bound| late_ms <= bound)
            .unwrap_or(BOUNDS_MS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(late_ms, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatenessSnapshot {
        let mut running = 0;
        let bounds = BOUNDS_MS.iter().copied().chain([u64::MAX]);
        let cumulative = bounds
            .zip(&self.buckets)
            .map(|(bound, count)| {
                running += count.load(Ordering::Relaxed);
                (bound, running)
            })
            .collect();
        LatenessSnapshot {
            cumulative,
            sum_ms: self.sum_ms.load(Ordering::Relaxed),
            // The buckets' total, so `+Inf` and `_count` always agree.
            count: running,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lateness_falls_in_the_first_bucket_that_holds_it() {
        let lateness = Lateness::default();
        for ms in [0, 1, 2, 3, 30, 30_000, 30_001, u64::MAX / 4] {
            lateness.observe(ms);
        }
        let s = lateness.snapshot();
        let at = |bound: u64| s.cumulative.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(1), 2);
        assert_eq!(at(2), 3);
        assert_eq!(at(5), 4);
        assert_eq!(at(25), 4);
        assert_eq!(at(50), 5);
        assert_eq!(at(30_000), 6);
        assert_eq!(at(u64::MAX), 8);
        assert_eq!(s.count, 8);
    }
}
