//! What the store tells about itself for metrics: how long a group commit's write and
//! WAL sync take, how many submissions one commit settles, and RocksDB's own view of
//! its size and compaction backlog.
//!
//! The writer thread records into fixed atomic buckets once per commit (one clock read
//! before and after the write, no allocation); a scrape reads them with relaxed loads.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the write-and-sync latency buckets, in microseconds (50 µs to 2.5 s).
pub const SYNC_BOUNDS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
    2_500_000,
];

/// Upper bounds of the batch-size buckets: submissions settled by one commit.
pub const BATCH_BOUNDS: [u64; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// A histogram with fixed bounds, and one more bucket past the last bound.
pub struct Histogram {
    bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Self {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self
            .bounds
            .iter()
            .position(|&bound| value <= bound)
            .unwrap_or(self.bounds.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let bounds = self.bounds.iter().copied().chain([u64::MAX]);
        let cumulative = bounds
            .zip(self.buckets.iter())
            .map(|(bound, count)| {
                running += count.load(Ordering::Relaxed);
                (bound, running)
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            sum: self.sum.load(Ordering::Relaxed),
            // The buckets' total, so `+Inf` and the count always agree.
            count: running,
        }
    }
}

/// A histogram as read at one moment, cumulative as Prometheus shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations at most that)`, the last bound `u64::MAX` (+Inf).
    pub cumulative: Vec<(u64, u64)>,
    pub sum: u64,
    pub count: u64,
}

/// What the writer thread records.
pub(super) struct WriterStats {
    /// Microseconds from the start of a commit's RocksDB write to its return, WAL sync
    /// included (only commits written with a sync).
    pub sync_us: Histogram,
    /// Submissions (sends, acknowledgements, ...) one written commit settled.
    pub batch: Histogram,
}

impl Default for WriterStats {
    fn default() -> Self {
        WriterStats {
            sync_us: Histogram::new(&SYNC_BOUNDS_US),
            batch: Histogram::new(&BATCH_BOUNDS),
        }
    }
}

/// The store's figures for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    /// SST files and memtables.
    pub bytes: u64,
    /// RocksDB's estimate of the bytes compaction must rewrite to settle the LSM tree
    /// (`rocksdb.estimate-pending-compaction-bytes`, over every column family).
    pub pending_compaction_bytes: u64,
    /// `rocksdb.num-running-compactions`.
    pub running_compactions: u64,
    /// Write-and-sync latency of group commits, in microseconds.
    pub sync_latency_us: HistogramSnapshot,
    /// Submissions settled per written group commit.
    pub batch_size: HistogramSnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_into_cumulative_buckets() {
        let h = Histogram::new(&BATCH_BOUNDS);
        for value in [1, 3, 3, 5000] {
            h.observe(value);
        }
        let s = h.snapshot();
        assert_eq!(s.cumulative.len(), BATCH_BOUNDS.len() + 1);
        assert_eq!(s.cumulative[0], (1, 1));
        assert_eq!(s.cumulative[1], (2, 1));
        assert_eq!(s.cumulative[2], (4, 3));
        assert_eq!(s.cumulative[BATCH_BOUNDS.len() - 1], (4096, 3));
        assert_eq!(s.cumulative[BATCH_BOUNDS.len()], (u64::MAX, 4));
        assert_eq!((s.sum, s.count), (5007, 4));
    }
}
