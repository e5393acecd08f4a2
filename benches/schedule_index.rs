//! Opening a data dir written before the schedule's per-queue index
//! (`scheduled_by_queue`) existed: `Store::open` builds the index before the
//! broker starts, so its time is added to that restart.
//!
//!     cargo bench --bench schedule_index            # 10 million delayed messages
//!     WEIR_SCHEDULE_INDEX_N=1000000 cargo bench --bench schedule_index
//!
//! The old-layout store (the four families of that time, no index) is
//! written once, straight through RocksDB, and kept in the target dir; each
//! run opens a checkpoint of it (hard links), so the template stays unindexed.
//! Prints the open time, the peak RSS while opening (the process's high-water
//! mark is reset first) and the store's size before and after.

#[path = "common/schedule_store.rs"]
mod schedule_store;

use schedule_store::{common_queue, entry, kept, size, FAR_AHEAD_MS, RARE};
use std::path::Path;
use std::time::Instant;
use weir::store::{FsyncPolicy, ScheduleKey, Store, StoreOptions};

/// The families of a store from before the index, in their order then.
const OLD_FAMILIES: [&str; 4] = ["messages", "scheduled", "queues", "claims"];
/// The rare queue's id (the common ones are 0 to 9).
const RARE_QUEUE: u32 = 1_000;

fn options() -> rocksdb::Options {
    let mut options = rocksdb::Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options
}

/// `n` delayed messages in ten queues and a rare one, as the broker of that
/// time stored them: key = due ms ++ queue ++ seq, value = the record.
fn write_old_layout(dir: &Path, n: u64) {
    let started = Instant::now();
    let db = rocksdb::DB::open_cf(&options(), dir, OLD_FAMILIES).unwrap();
    let scheduled = db.cf_handle("scheduled").unwrap();
    let mut unlogged = rocksdb::WriteOptions::default();
    unlogged.disable_wal(true);
    let mut batch = rocksdb::WriteBatch::default();
    for i in 0..n {
        let queue = common_queue(i).map_or(RARE_QUEUE, |q| q as u32);
        let (key, record) = entry(i, queue, &format!("q{queue}"));
        batch.put_cf(scheduled, key.encode(), record);
        if batch.len() >= 100_000 {
            db.write_opt(std::mem::take(&mut batch), &unlogged).unwrap();
        }
    }
    db.write_opt(batch, &unlogged).unwrap();
    db.flush_cf(scheduled).unwrap();
    db.compact_range_cf(scheduled, None::<&[u8]>, None::<&[u8]>);
    eprintln!(
        "schedule index: wrote {n} delayed messages in the old layout in {:?}",
        started.elapsed()
    );
}

fn bytes_in(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum()
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn main() {
    // `cargo bench` passes `--bench`; nothing here is filtered.
    let n = size("WEIR_SCHEDULE_INDEX_N");
    let template = kept(&format!("schedule-old-layout-{n}"), |dir| {
        write_old_layout(dir, n)
    });
    let run = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("schedule-index-run-{n}"));
    let _ = std::fs::remove_dir_all(&run);
    {
        let db = rocksdb::DB::open_cf(&options(), &template, OLD_FAMILIES).unwrap();
        assert!(
            db.cf_handle("scheduled_by_queue").is_none(),
            "the template is of the old layout"
        );
        rocksdb::checkpoint::Checkpoint::new(&db)
            .unwrap()
            .create_checkpoint(&run)
            .unwrap();
    }
    let before = bytes_in(&run);
    // Linux: 5 resets the peak resident set size to the current one.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let rss_at_start = status_kib("VmRSS:");
    let started = Instant::now();
    let store = Store::open(
        &run,
        StoreOptions {
            fsync: FsyncPolicy::Never,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let opened = started.elapsed();
    let peak = status_kib("VmHWM:");
    // The index is whole: one rare-queue page is a seek, not a walk over all.
    let listed = Instant::now();
    let all = ScheduleKey {
        due_ms: FAR_AHEAD_MS,
        queue: 0,
        seq: 0,
    }..ScheduleKey {
        due_ms: FAR_AHEAD_MS + n,
        queue: 0,
        seq: 0,
    };
    let page = store
        .scan_scheduled_range(all, Some(RARE_QUEUE), 100)
        .unwrap();
    let listed = listed.elapsed();
    assert_eq!(page.len() as u64, (n / RARE).min(100));
    drop(store);
    let after = bytes_in(&run);
    println!(
        "schedule index of {n} delayed messages: opened (index built) in {:.2} s; \
         peak RSS {} MiB (at start {} MiB); store {} MiB before, {} MiB after; \
         a page of the rare queue then read in {:?}",
        opened.as_secs_f64(),
        peak / 1024,
        rss_at_start / 1024,
        before >> 20,
        after >> 20,
        listed
    );
    let _ = std::fs::remove_dir_all(&run);
}
