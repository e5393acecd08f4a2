//! Keeping the process's memory close to what it uses.
//!
//! mimalloc returns free pages to the OS only after a delay (1 s) and only
//! while the thread that freed them keeps allocating: a burst (16 KiB
//! messages, a million delayed ones) leaves its pages resident long after the
//! broker has gone idle. A worker thread that runs out of work collects its
//! own heap, at most once a second, so the cost under load stays negligible.
//!
//! Two more things hold memory nobody uses. mimalloc asks for transparent
//! huge pages on its arenas, so a 1 MiB message touching the start of a
//! 2 MiB page makes all of it resident: 3 GiB of 1 MiB messages paged past
//! `global_max_size = "512MiB"` held 564 MiB of huge pages for 526 MiB of
//! live data; and mimalloc keeps freed memory for a second before returning
//! it, 20-50 MiB more in that flood (see [`tune_allocator`]).

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

/// mimalloc's `mi_option_purge_delay` (its position in mimalloc 3's
/// `mi_option_t`, which libmimalloc-sys does not name).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// Called first thing in `weir serve`, before the broker allocates much.
///
/// Transparent huge pages off for the process: a huge page is resident whole
/// once any byte of it is touched, so large blocks that end mid-page (a
/// 1 MiB message is 1 MiB and a few bytes) and freed space between live
/// blocks count in full.
///
/// Freed memory mimalloc hands back to its arenas is returned to the OS
/// after 100 ms instead of 1 s (unless `MIMALLOC_PURGE_DELAY` says
/// otherwise): a queue paging 1 MiB messages in and out frees a hundred MiB
/// or more a second, all of it resident for that second. No delay at all
/// cost the 256-byte hot path 15-20% more CPU (pages freed and taken again
/// at once are purged and faulted in each time); 100 ms costs nothing
/// measurable.
pub fn tune_allocator() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process's
        // memory map, checked at later page faults; no pointers involved.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "transparent huge pages stay on");
        }
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: options are plain integers mimalloc reads when it purges;
        // it allows setting them at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // mimalloc 3's default purge delay is 1000 ms; no other option has it.
        // SAFETY: reading an option has no preconditions.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            delay, 1000,
            "mi_option_t changed: fix MI_OPTION_PURGE_DELAY"
        );
    }
}
