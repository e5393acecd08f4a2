//! Sharing the runtime fairly between connections. Frames already buffered
//! decode without touching the socket, so Tokio's cooperative budget (spent
//! only on I/O) never makes a connection yield while its buffer holds work:
//! one client sending 100,000 SUBSCRIBEs could hold a worker thread for
//! seconds and stall every connection queued behind it. Connections take
//! frames in batches of [`MAX_READ_BATCH`] and yield after a full one; a
//! connection that ends releases what it held in chunks, yielding between.

/// Frames a connection takes per wake-up at most.
pub const MAX_READ_BATCH: usize = 256;

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
