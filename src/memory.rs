//! Giving freed memory back to the system once the broker goes quiet.
//!
//! mimalloc returns free pages to the OS only after a delay (1 s) and only
//! while the thread that freed them keeps allocating: a burst (16 KiB
//! messages, a million delayed ones) leaves its pages resident long after the
//! broker has gone idle. A worker thread that runs out of work collects its
//! own heap, at most once a second, so the cost under load stays negligible.

use std::cell::Cell;
use std::time::{Duration, Instant};

const AT_MOST_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static LAST_COLLECT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// For the runtime's `on_thread_park`: the worker has nothing to run.
pub fn on_idle() {
    let now = Instant::now();
    let due = LAST_COLLECT.with(|last| match last.get() {
        Some(at) if now.duration_since(at) < AT_MOST_EVERY => false,
        _ => {
            last.set(Some(now));
            true
        }
    });
    if due {
        // SAFETY: mi_collect only walks this thread's own heap and the shared
        // arenas under mimalloc's locks; it has no preconditions.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
}

/// Keeps idle workers parking now and then, so each collects what the last
/// burst left behind even when no connection wakes it.
pub async fn nudge_idle_workers() {
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tick.tick().await;
        tokio::task::yield_now().await;
    }
}
