//! Sharing the runtime fairly between connections. Frames already buffered
//! decode without touching the socket, so Tokio's cooperative budget (spent
//! only on I/O) never makes a connection yield while its buffer holds work:
//! one client sending 100,000 SUBSCRIBEs could hold a worker thread for
//! seconds and stall every connection queued behind it. Connections take
//! frames in batches of [`MAX_READ_BATCH`] and yield once full batches have
//! held the worker for a [`TimeSlice`]; a connection that ends releases what
//! it held in chunks, yielding between.

use std::time::Duration;
use tokio::time::Instant;

/// Frames a connection takes per wake-up at most.
pub const MAX_READ_BATCH: usize = 256;

/// How long a connection may go on taking full batches before it lets the
/// others run. Yielding after every full batch instead cost a fast producer a
/// tenth of its throughput: each yield is a trip through the I/O driver (an
/// `epoll_wait`), every 256 cheap frames.
const SLICE: Duration = Duration::from_micros(500);

/// A connection's time on the worker while its read buffer stays full.
#[derive(Debug, Default)]
pub struct TimeSlice {
    since: Option<Instant>,
}

impl TimeSlice {
    /// A full batch was taken in the wake-up that started at `woke`: true when
    /// the slice is spent and the connection should yield (the slice starts over).
    pub fn full_batch(&mut self, woke: Instant) -> bool {
        let since = *self.since.get_or_insert(woke);
        if woke.duration_since(since) >= SLICE {
            self.since = None;
            return true;
        }
        false
    }

    /// The buffer ran dry: the next full batch starts a new slice.
    pub fn drained(&mut self) {
        self.since = None;
    }
}

/// Subscriptions (or links) released between two yields when a connection ends.
const RELEASE_CHUNK: usize = 256;

/// Drops `items` (subscriptions: each detaches from its queue as it drops)
/// a chunk at a time, letting other tasks run between chunks.
pub async fn release_in_chunks<T>(items: impl IntoIterator<Item = T>) {
    let mut released = 0;
    for item in items {
        drop(item);
        released += 1;
        if released % RELEASE_CHUNK == 0 {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_is_spent_after_its_time_and_starts_over_when_drained() {
        let start = Instant::now();
        let mut slice = TimeSlice::default();
        assert!(!slice.full_batch(start));
        assert!(!slice.full_batch(start + SLICE / 2));
        assert!(slice.full_batch(start + SLICE), "spent");
        assert!(!slice.full_batch(start + SLICE + SLICE / 2), "a new slice");
        slice.drained();
        assert!(!slice.full_batch(start + SLICE * 3), "drained: a new slice");
        assert!(slice.full_batch(start + SLICE * 4));
    }
}
