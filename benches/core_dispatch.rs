//! The core's cost per message without sockets: publish into a queue with four
//! consumers, hand each delivery out, ack it in per-consumer batches (as a STOMP
//! session in auto-ack mode does after each write). Grouped over 1,000 groups
//! vs ungrouped shows what grouping itself costs the core (issue 5).
//!
//!   cargo bench --bench core_dispatch

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::sync::Arc;
use weir::core::deliveries::{channel, Deliveries};
use weir::core::settings::QueueSettings;
use weir::core::{Broker, BrokerOptions, ConsumerOptions, CreditMode, Message, RoutingType};
use weir::store::{Store, StoreOptions};

const BATCH: usize = 1_000;
const CONSUMERS: usize = 4;

struct Rig {
    broker: Broker,
    receivers: Vec<Deliveries>,
    messages: Vec<Message>,
    _subscriptions: Vec<weir::core::Subscription>,
    _dir: tempfile::TempDir,
}

fn rig(groups: usize) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), StoreOptions::default()).expect("store");
    let broker = Broker::open(
        store,
        BrokerOptions::with_queue_settings(QueueSettings::default()),
    )
    .expect("broker");
    let mut receivers = Vec::new();
    let mut subscriptions = Vec::new();
    for _ in 0..CONSUMERS {
        let (tx, rx) = channel();
        subscriptions.push(
            broker
                .subscribe(
                    "bench",
                    RoutingType::Anycast,
                    ConsumerOptions {
                        credit: CreditMode::Window(BATCH as u32),
                        ..Default::default()
                    },
                    tx,
                )
                .expect("subscribe"),
        );
        receivers.push(rx);
    }
    let names: Vec<Arc<str>> = (0..groups.max(1))
        .map(|g| Arc::from(format!("g-{g}")))
        .collect();
    let messages = (0..BATCH)
        .map(|i| Message {
            address: Arc::from("bench"),
            body: bytes::Bytes::from(vec![b'x'; 256]),
            group_id: (groups > 0).then(|| names[i % groups].clone()),
            priority: 4,
            ..Default::default()
        })
        .collect();
    Rig {
        broker,
        receivers,
        messages,
        _subscriptions: subscriptions,
        _dir: dir,
    }
}

fn round(rig: &mut Rig) {
    for message in &rig.messages {
        rig.broker
            .publish(message.clone(), RoutingType::Anycast)
            .expect("publish");
    }
    let mut seqs = Vec::with_capacity(BATCH);
    for rx in &mut rig.receivers {
        seqs.clear();
        let mut last = None;
        while let Ok(d) = rx.try_recv() {
            seqs.push(d.seq);
            last = Some((d.queue, d.consumer));
        }
        if let Some((queue, consumer)) = last {
            let _ = queue.ack(consumer, &seqs);
        }
    }
}

fn dispatch(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = runtime.enter();
    let mut group = c.benchmark_group("core_dispatch");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, groups) in [("ungrouped", 0), ("groups_1000", 1000)] {
        let mut rig = rig(groups);
        group.bench_function(name, |b| {
            b.iter_batched(|| (), |_| round(&mut rig), BatchSize::SmallInput)
        });
    }
    group.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
