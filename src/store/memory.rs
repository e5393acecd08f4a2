//! What RocksDB may hold in memory, sized from the broker's memory budget.
//!
//! `global_max_size` bounds the whole process: the program at rest
//! ([`PROCESS_BASE`]), RocksDB's write buffers (memtables) and block cache,
//! and the messages in the queues, which get what the other two leave (see
//! [`StoreMemory::messages_share`]). A queue paging to disk then holds about
//! the limit, not the limit plus RocksDB plus the program. For a small budget
//! the store's memory would be most of the process (48 + 64 MiB against
//! 128 MiB), so both scale with the budget, between a floor that keeps paging
//! and flushes efficient and the ceiling a large broker needs.

/// RocksDB's memory: one budget for every column family's memtables, and the
/// block cache that holds index and filter blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreMemory {
    pub write_buffers: u64,
    pub block_cache: u64,
}

const MIB: u64 = 1 << 20;
const WRITE_BUFFERS: (u64, u64) = (16 * MIB, 48 * MIB);
const BLOCK_CACHE: (u64, u64) = (8 * MIB, 64 * MIB);

/// What `weir serve` holds before any message: its code and libraries
/// (librocksdb, libstdc++; 21 MiB resident), the runtime's and RocksDB's
/// bookkeeping (8 MiB). Measured at 29 MiB idle on x86-64 Linux
/// (`RssFile` + `RssAnon` of a fresh broker).
pub const PROCESS_BASE: u64 = 32 * MIB;

impl StoreMemory {
    /// Write buffers an eighth of `global_max_size`, block cache a sixteenth,
    /// each within its bounds; the ceilings when unlimited.
    pub fn for_budget(global_max_size: Option<u64>) -> Self {
        let Some(budget) = global_max_size else {
            return Self::default();
        };
        StoreMemory {
            write_buffers: (budget / 8).clamp(WRITE_BUFFERS.0, WRITE_BUFFERS.1),
            block_cache: (budget / 16).clamp(BLOCK_CACHE.0, BLOCK_CACHE.1),
        }
    }

    /// What RocksDB may hold: the write buffers and the block cache.
    pub fn total(&self) -> u64 {
        self.write_buffers + self.block_cache
    }

    /// The bytes the queues' messages may hold when `global_max_size` is the
    /// budget of the whole process: the budget less [`PROCESS_BASE`] and
    /// [`total`](Self::total), but at least half of it (the program and the
    /// store's floors exceed a tiny budget, and a budget of half still bounds
    /// the process within the budget's order).
    pub fn messages_share(global_max_size: u64) -> u64 {
        let store = Self::for_budget(Some(global_max_size)).total();
        global_max_size
            .saturating_sub(store + PROCESS_BASE)
            .max(global_max_size / 2)
    }

    /// One column family's memtable: at most 16 MiB, so most durable
    /// messages are consumed and deleted before their memtable is flushed,
    /// and half the budget, so the messages' column family may use most of
    /// it (the others see little traffic).
    pub fn write_buffer_per_family(&self) -> u64 {
        (self.write_buffers / 2).min(16 * MIB)
    }
}

impl Default for StoreMemory {
    fn default() -> Self {
        StoreMemory {
            write_buffers: WRITE_BUFFERS.1,
            block_cache: BLOCK_CACHE.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocksdb_memory_follows_the_budget_within_its_bounds() {
        let small = StoreMemory::for_budget(Some(128 * MIB));
        assert_eq!(small.write_buffers, 16 * MIB);
        assert_eq!(small.block_cache, 8 * MIB);
        let middle = StoreMemory::for_budget(Some(256 * MIB));
        assert_eq!(middle.write_buffers, 32 * MIB);
        assert_eq!(middle.block_cache, 16 * MIB);
        let large = StoreMemory::for_budget(Some(12 << 30));
        assert_eq!(large, StoreMemory::default());
        assert_eq!(large.write_buffer_per_family(), 16 * MIB);
        assert_eq!(StoreMemory::for_budget(None), StoreMemory::default());
        let tiny = StoreMemory::for_budget(Some(MIB));
        assert_eq!(tiny.write_buffers, 16 * MIB);
        assert_eq!(tiny.write_buffer_per_family(), 8 * MIB);
    }

    #[test]
    fn messages_get_what_the_program_and_the_store_leave_of_the_budget() {
        assert_eq!(PROCESS_BASE, 32 * MIB);
        assert_eq!(
            StoreMemory::messages_share(512 * MIB),
            (512 - 32 - 48 - 32) * MIB
        );
        assert_eq!(
            StoreMemory::messages_share(128 * MIB),
            (128 - 32 - 16 - 8) * MIB
        );
        assert_eq!(
            StoreMemory::messages_share(2048 * MIB),
            (2048 - 32 - 48 - 64) * MIB
        );
        // Every part fits the budget exactly while the messages get more
        // than half.
        for budget in [128 * MIB, 512 * MIB, 2048 * MIB, 64 << 30] {
            let store = StoreMemory::for_budget(Some(budget)).total();
            assert_eq!(
                PROCESS_BASE + store + StoreMemory::messages_share(budget),
                budget
            );
        }
        // The program and the store's floors are larger than a small budget:
        // half of it.
        assert_eq!(StoreMemory::messages_share(96 * MIB), 48 * MIB);
        assert_eq!(StoreMemory::messages_share(4 * MIB), 2 * MIB);
    }
}
