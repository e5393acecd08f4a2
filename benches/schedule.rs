//! Schedule throughput: inserts beyond the in-memory window (a store write each).
//! The due-now path (timer into the queue) is measured end to end by delay_load.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::sync::Arc;
use std::time::Duration;
use weir::core::broker::DelayedDelivery;
use weir::core::message::now_ms;
use weir::core::schedule::{Schedule, ScheduleOptions};
use weir::core::settings::QueueSettings;
use weir::core::{Broker, BrokerOptions, Message};
use weir::store::{FsyncPolicy, Store, StoreOptions};

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

criterion_group!(benches, bench);
criterion_main!(benches);
