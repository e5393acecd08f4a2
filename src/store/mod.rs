//! RocksDB persistence: the core hands it opaque records keyed by queue and
//! sequence; it never interprets a message.

mod answers;
mod disk;
mod held;
mod holding;
mod inbox;
mod keys;
mod memory;
mod record;
mod release;
mod rocks;
mod scheduled;
mod stats;
mod writer;

pub use disk::{DiskLimits, DiskRefusal};
pub use keys::{MessageKey, ScheduleKey};
pub use memory::StoreMemory;
pub use record::{MessageRecord, Record};
pub use rocks::{RecoveredQueue, Store, StoreOptions};
pub use stats::{HistogramSnapshot, StoreStats, BATCH_BOUNDS, SYNC_BOUNDS_US};
pub use writer::{Completion, FsyncPolicy, Hold, Op, Written};

/// Everything that can go wrong below the core.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage error: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("{0}")]
    DiskFull(#[from] DiskRefusal),
    #[error("storage is shut down")]
    Closed,
    #[error("corrupt record under key {0:02x?}")]
    Corrupt(Vec<u8>),
}
