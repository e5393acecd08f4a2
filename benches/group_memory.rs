//! Memory per group binding (issue 5, benchmark 3): binds one million distinct
//! groups in a queue's group table and in a live queue, counting the heap bytes
//! the allocator hands out. A counting allocator makes the figure exact and
//! repeatable, unlike RSS.
//!
//!   cargo bench --bench group_memory

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use weir::core::grouping::GroupTable;
use weir::core::settings::QueueSettings;
use weir::core::{Broker, BrokerOptions, ConsumerOptions, CreditMode, Message, RoutingType};
use weir::store::{Store, StoreOptions};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const GROUPS: usize = 1_000_000;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn main() {
    // The group table alone: what a binding costs.
    let names: Vec<Arc<str>> = (0..GROUPS)
        .map(|i| Arc::from(format!("group-{i:07}")))
        .collect();
    let before = live();
    let mut table = GroupTable::new(-1);
    for (i, name) in names.iter().enumerate() {
        table.bind(name.clone(), (i % 4) as u64);
    }
    let table_bytes = live() - before;
    println!(
        "group table: {GROUPS} bindings, {:.1} bytes per binding (group id text shared with the message)",
        table_bytes as f64 / GROUPS as f64
    );
    drop(table);
    drop(names);

    // A live queue: one message per group, four consumers, every message acked,
    // so only the bindings remain.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), StoreOptions::default()).expect("store");
        let broker = Broker::open(
            store,
            BrokerOptions::with_queue_settings(QueueSettings::default()),
        )
        .expect("broker");
        let (tx, mut rx) = weir::core::deliveries::channel();
        let subs: Vec<_> = (0..4)
            .map(|_| {
                broker
                    .subscribe(
                        "groups",
                        RoutingType::Anycast,
                        ConsumerOptions {
                            credit: CreditMode::Window(1000),
                            ..Default::default()
                        },
                        tx.clone(),
                    )
                    .expect("subscribe")
            })
            .collect();
        let before = live();
        for i in 0..GROUPS {
            let message = Message {
                address: Arc::from("groups"),
                group_id: Some(Arc::from(format!("group-{i:07}"))),
                priority: 4,
                ..Default::default()
            };
            broker
                .publish(message, RoutingType::Anycast)
                .expect("publish");
            while let Ok(d) = rx.try_recv() {
                let _ = d.queue.ack(d.consumer, &[d.seq]);
            }
        }
        let queue = broker.queue("groups").expect("queue");
        let stats = queue.stats();
        let bytes = live() - before;
        println!(
            "live queue: {} groups bound, {} ready, {} in flight; {:.1} bytes per binding",
            stats.groups,
            stats.ready,
            stats.in_flight,
            bytes as f64 / stats.groups.max(1) as f64
        );
        drop(subs);
    });
}
