//! The stored schedule the schedule benches fill: delayed messages due 1 ms
//! apart from 2100 on (so nothing falls due), spread over ten queues, with one
//! of every thousand in a rare queue.

// Each bench uses a part of it.
#![allow(dead_code)]

use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weir::core::message::now_ms;
use weir::core::persist;
use weir::core::Message;
use weir::store::ScheduleKey;

/// 2100-01-01: the stores' messages never fall due.
pub const FAR_AHEAD_MS: u64 = 4_102_444_800_000;
/// Due times 1 ms apart, so the middle of the store is a due time too.
pub const STEP_MS: u64 = 1;
/// Messages in the common queues; one of every `RARE` goes to the rare queue.
pub const QUEUES: u64 = 10;
pub const RARE: u64 = 1_000;

/// How many messages a bench stores: `var` from the environment, ten million
/// without it.
pub fn size(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000_000)
}

/// The common queue (0 to `QUEUES - 1`) message `i` goes to; None for the rare one.
pub fn common_queue(i: u64) -> Option<u64> {
    (!i.is_multiple_of(RARE)).then_some(i % QUEUES)
}

/// A store kept in the target dir under `name`, written by `fill` the first
/// time (and again if that was cut short).
pub fn kept(name: &str, fill: impl FnOnce(&Path)) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let done = dir.join("weir-bench-filled");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        fill(&dir);
        std::fs::write(&done, b"").unwrap();
    }
    dir
}

/// Message `i` of queue `queue` (id) named `name`: its key and stored record.
pub fn entry(i: u64, queue: u32, name: &str) -> (ScheduleKey, Bytes) {
    let due_ms = FAR_AHEAD_MS + i * STEP_MS;
    let message = Message {
        address: Arc::from(name),
        body: Bytes::from(format!("message {i} {}", "x".repeat(100))),
        due_at: Some(due_ms),
        timestamp: now_ms(),
        durable: true,
        priority: 4,
        ..Default::default()
    };
    let key = ScheduleKey {
        due_ms,
        queue,
        seq: i + 1,
    };
    (key, persist::encode(&message, 0))
}
