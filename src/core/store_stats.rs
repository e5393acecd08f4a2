//! The store's own figures (commit latency and size, RocksDB's compaction backlog) for
//! management, which reads them through the core like everything else.

pub use crate::store::{HistogramSnapshot, StoreStats};

impl super::Broker {
    /// Read fresh at each call: a few RocksDB property reads and relaxed loads.
    pub fn store_stats(&self) -> StoreStats {
        self.store().stats()
    }
}
