//! How many messages wait in the schedule for each queue, for the management API and
//! metrics: counted as they are scheduled and as they leave (moved into their queue,
//! cancelled, dropped), and from the stored keys when the broker starts.

use super::{FIRST_KEY, MAX_KEY};
use crate::core::fast_map::FastMap;
use crate::store::{Store, StoreError};
use parking_lot::Mutex;

#[derive(Debug, Default)]
pub(super) struct DelayedCounts(Mutex<FastMap<u32, u64>>);

impl DelayedCounts {
    /// Counts every stored entry: a scan of keys only, once at start.
    pub fn of_store(store: &Store) -> Result<Self, StoreError> {
        let mut counts: FastMap<u32, u64> = FastMap::default();
        store.for_each_scheduled_key(FIRST_KEY..MAX_KEY, None, |key| {
            *counts.entry(key.queue).or_default() += 1;
            true
        })?;
        Ok(DelayedCounts(Mutex::new(counts)))
    }

    pub fn add(&self, queue: u32) {
        *self.0.lock().entry(queue).or_default() += 1;
    }

    pub fn remove(&self, queue: u32, n: u64) {
        let mut counts = self.0.lock();
        if let Some(count) = counts.get_mut(&queue) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                counts.remove(&queue);
            }
        }
    }

    pub fn of(&self, queue: u32) -> u64 {
        self.0.lock().get(&queue).copied().unwrap_or(0)
    }
}
