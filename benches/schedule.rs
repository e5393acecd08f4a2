//! Schedule throughput: inserts beyond the in-memory window (a store write each).
//! The due-now path (timer into the queue) is measured end to end by delay_load.
//!
//! Schedule listing: one page from a store of ten million delayed messages
//! (`WEIR_SCHEDULE_LIST_N` to change), at the start, in the middle, filtered
//! by a queue holding a tenth of them and by one holding a thousandth. The
//! store is filled once through batched writes and kept in the target dir
//! for later runs; its due times lie far ahead, so nothing ever falls due.

#[path = "common/schedule_store.rs"]
mod schedule_store;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use schedule_store::{common_queue, entry, kept, size, FAR_AHEAD_MS, QUEUES, STEP_MS};
use std::sync::Arc;
use std::time::Duration;
use weir::core::broker::DelayedDelivery;
use weir::core::message::now_ms;
use weir::core::schedule::{Schedule, ScheduleOptions, ScheduleQuery};
use weir::core::settings::QueueSettings;
use weir::core::{Broker, BrokerOptions, Message};
use weir::store::{FsyncPolicy, Op, Store, StoreOptions};

const N: u64 = 10_000;

fn open(dir: &std::path::Path) -> (Broker, Arc<Schedule>) {
    let store = Store::open(
        dir,
        StoreOptions {
            fsync: FsyncPolicy::Never,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let broker = Broker::open(
        store,
        BrokerOptions::with_queue_settings(QueueSettings::default()),
    )
    .unwrap();
    let schedule = Schedule::open(&broker, ScheduleOptions::default()).unwrap();
    broker.set_scheduler(schedule.clone());
    (broker, schedule)
}

fn message(due: u64, i: u64) -> Arc<Message> {
    Arc::new(Message {
        address: Arc::from("q"),
        body: bytes::Bytes::from(vec![b'x'; 256]),
        due_at: Some(due + i % 60_000),
        durable: true,
        priority: 4,
        ..Default::default()
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path());
    let queue = broker.queue_or_create("q", true).unwrap();
    let mut group = c.benchmark_group("schedule");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("insert 10k durable, due in 10 min", |b| {
        b.iter_batched(
            || {
                let due = now_ms() + 600_000;
                (0..N).map(|i| message(due, i)).collect::<Vec<_>>()
            },
            |messages| {
                let mut last = None;
                for m in messages {
                    last = Some(schedule.schedule(&queue, m, 0, None));
                }
                if let Some(last) = last {
                    rt.block_on(last.wait()).unwrap();
                }
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    rt.block_on(schedule.shutdown());
}

/// Opens (filling it the first time) a store of `n` delayed messages.
fn filled(n: u64) -> (Broker, Arc<Schedule>) {
    let dir = kept(&format!("schedule-list-{n}"), |dir| fill(dir, n));
    let started = std::time::Instant::now();
    let opened = open(&dir);
    eprintln!(
        "schedule listing: store of {n} opened in {:?}",
        started.elapsed()
    );
    opened
}

fn fill(dir: &std::path::Path, n: u64) {
    let started = std::time::Instant::now();
    let store = Store::open(
        dir,
        StoreOptions {
            fsync: FsyncPolicy::Never,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let broker = Broker::open(
        store.clone(),
        BrokerOptions::with_queue_settings(QueueSettings::default()),
    )
    .unwrap();
    let mut ids = Vec::new();
    for q in 0..QUEUES {
        ids.push(broker.queue_or_create(&format!("q{q}"), true).unwrap().id());
    }
    let rare = broker.queue_or_create("rare", true).unwrap().id();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    const BATCH: u64 = 10_000;
    let mut last = None;
    for start in (0..n).step_by(BATCH as usize) {
        let ops = (start..(start + BATCH).min(n))
            .map(|i| {
                let (key, record) = match common_queue(i) {
                    None => entry(i, rare, "rare"),
                    Some(q) => entry(i, ids[q as usize], &format!("q{q}")),
                };
                Op::PutScheduled { key, record }
            })
            .collect();
        // A few batches in flight keep the writer busy without unbounded memory.
        if let Some(previous) = last.replace(store.submit_all(ops)) {
            rt.block_on(previous.wait()).unwrap();
        }
    }
    if let Some(last) = last {
        rt.block_on(last.wait()).unwrap();
    }
    eprintln!(
        "schedule listing: wrote {n} delayed messages in {:?}",
        started.elapsed()
    );
}

fn listing(c: &mut Criterion) {
    let n = size("WEIR_SCHEDULE_LIST_N");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let (_broker, schedule) = filled(n);
    let middle = FAR_AHEAD_MS + n / 2 * STEP_MS;
    let page = |queue: Option<&str>, from_ms: Option<u64>| ScheduleQuery {
        queue: queue.map(str::to_owned),
        from_ms,
        limit: 100,
        preview_bytes: 64,
        ..ScheduleQuery::default()
    };
    let cases = [
        ("first page", page(None, None)),
        ("middle page", page(None, Some(middle))),
        ("middle page, queue of 1/10", page(Some("q7"), Some(middle))),
        (
            "middle page, queue of 1/1000",
            page(Some("rare"), Some(middle)),
        ),
    ];
    let mut group = c.benchmark_group(format!("schedule list of {n}"));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (name, query) in cases {
        let listed = rt.block_on(schedule.list_page(&query)).unwrap();
        assert_eq!(listed.items.len(), 100, "{name}");
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(schedule.list_page(&query)).unwrap())
        });
    }
    group.finish();
    // A timeline counts keys over its whole range: timed once, not sampled.
    for (name, span) in [("an hour", 3_600_000), ("the whole store", n * STEP_MS)] {
        let started = std::time::Instant::now();
        let timeline = rt
            .block_on(schedule.timeline(None, FAR_AHEAD_MS..FAR_AHEAD_MS + span, 100))
            .unwrap();
        let counted: u64 = timeline.counts.iter().sum();
        eprintln!(
            "schedule timeline of {name}: {counted} messages in 100 buckets counted in {:?}",
            started.elapsed()
        );
    }
    rt.block_on(schedule.shutdown());
}

criterion_group!(benches, bench, listing);
criterion_main!(benches);
