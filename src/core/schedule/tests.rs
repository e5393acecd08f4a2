//! The schedule over a real store: due-time order, paging through a tiny
//! window, auditor operations, restart recovery.

use super::*;
use crate::core::deliveries::{self, Deliveries};
use crate::core::settings::QueueSettings;
use crate::core::{BrokerOptions, ConsumerOptions, Delivery, RoutingType};
use crate::store::StoreOptions;
use std::collections::HashSet;

mod by_id;
mod edit;
mod expiry;

fn open(dir: &std::path::Path, window: usize) -> (Broker, Arc<Schedule>) {
    open_with(
        dir,
        ScheduleOptions {
            window,
            ..ScheduleOptions::default()
        },
    )
}

fn open_with(dir: &std::path::Path, window: ScheduleOptions) -> (Broker, Arc<Schedule>) {
    open_full(dir, QueueSettings::default(), window)
}

fn open_full(
    dir: &std::path::Path,
    queues: QueueSettings,
    window: ScheduleOptions,
) -> (Broker, Arc<Schedule>) {
    let options = StoreOptions {
        fsync: crate::store::FsyncPolicy::Never,
        ..StoreOptions::default()
    };
    let store = Store::open(dir, options).unwrap();
    let broker = Broker::open(store, BrokerOptions::with_queue_settings(queues)).unwrap();
    let schedule = Schedule::open(&broker, window).unwrap();
    broker.set_scheduler(schedule.clone());
    (broker, schedule)
}

fn delayed(body: &str, due_ms: u64, durable: bool) -> Message {
    Message {
        address: Arc::from("q"),
        body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        due_at: Some(due_ms),
        durable,
        priority: 4,
        ..Default::default()
    }
}

/// Publishes `message` and waits until it is written.
async fn send_message(broker: &Broker, message: Message) {
    broker
        .publish(message, RoutingType::Anycast)
        .unwrap()
        .wait()
        .await
        .unwrap();
}

fn consume(broker: &Broker) -> (crate::core::Subscription, Deliveries) {
    consume_window(broker, "q", 100_000)
}

/// Receives `n` deliveries (or fewer on timeout), noting when each arrived.
async fn receive(rx: &mut Deliveries, n: usize) -> Vec<(Delivery, u64)> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
            Ok(Some(d)) => out.push((d, now_ms())),
            _ => break,
        }
    }
    out
}

fn body(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.message.body).into_owned()
}

fn assert_on_time_in_order(got: &[(Delivery, u64)]) {
    let mut last = 0;
    for (d, at) in got {
        // No due time: it was already due when published.
        let Some(due) = d.message.due_at else {
            continue;
        };
        assert!(*at >= due, "{} delivered {} ms early", body(d), due - at);
        assert!(due >= last, "out of due order at {}", body(d));
        last = due;
    }
}

#[tokio::test]
async fn delivers_in_due_order_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 1024);
    let (_sub, mut rx) = consume(&broker);
    let now = now_ms();
    for (i, delay) in [320u64, 240, 280, 210, 260].iter().enumerate() {
        broker
            .publish(
                delayed(&i.to_string(), now + delay, i % 2 == 0),
                RoutingType::Anycast,
            )
            .unwrap()
            .wait()
            .await
            .unwrap();
    }
    assert!(rx.try_recv().is_err(), "nothing is due yet");
    let got = receive(&mut rx, 5).await;
    let order: Vec<String> = got.iter().map(|(d, _)| body(d)).collect();
    assert_eq!(order, ["3", "1", "4", "2", "0"]);
    assert_on_time_in_order(&got);
    schedule.shutdown().await;
}

#[tokio::test]
async fn pages_through_a_tiny_window() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 4);
    let (_sub, mut rx) = consume(&broker);
    let now = now_ms();
    let n = 60;
    for i in 0..n {
        // Scattered due times, durable and not, so inserts land on both sides
        // of the window's bound and non-durable ones are spilled.
        let due = now + 200 + (i * 37 % 61) * 5;
        broker
            .publish(
                delayed(&i.to_string(), due, i % 3 != 0),
                RoutingType::Anycast,
            )
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert!(schedule.in_memory() <= 4);
    }
    let got = receive(&mut rx, n as usize + 1).await;
    assert_eq!(got.len(), n as usize, "each delivered exactly once");
    let distinct: HashSet<String> = got.iter().map(|(d, _)| body(d)).collect();
    assert_eq!(distinct.len(), n as usize);
    assert_on_time_in_order(&got);
    schedule.shutdown().await;
}

#[tokio::test]
async fn large_messages_fill_the_window_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let body = "x".repeat(4096);
    let weight = delayed(&body, 0, false).weight();
    let (broker, schedule) = open_with(
        dir.path(),
        ScheduleOptions {
            window: 1_000,
            window_bytes: 3 * weight,
        },
    );
    let (_sub, mut rx) = consume(&broker);
    let now = now_ms();
    let n = 30;
    for i in 0..n {
        let due = now + 200 + (i * 37 % 31) * 5;
        send_message(&broker, delayed(&format!("{i}-{body}"), due, i % 2 == 0)).await;
        // The byte budget, not the entry count, bounds what stays in memory.
        assert!(
            schedule.in_memory() <= 3,
            "{} in memory",
            schedule.in_memory()
        );
    }
    let got = receive(&mut rx, n as usize + 1).await;
    assert_eq!(got.len(), n as usize, "each delivered exactly once");
    assert_on_time_in_order(&got);
    schedule.shutdown().await;
}

#[tokio::test]
async fn list_cancel_and_reschedule() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 2);
    let queue = broker.queue_or_create("q", true).unwrap();
    let now = now_ms();
    for i in 0..5u64 {
        broker
            .publish(
                delayed(&i.to_string(), now + 10_000 + i, true),
                RoutingType::Anycast,
            )
            .unwrap()
            .wait()
            .await
            .unwrap();
    }
    let listed = list_all(&schedule, "q").await;
    let bodies: Vec<&str> = listed.iter().map(|e| e.body_preview.as_str()).collect();
    assert_eq!(bodies, ["0", "1", "2", "3", "4"]);
    assert_eq!(schedule.delayed(queue.id()), 5);
    // Paged by cursor: after the second entry.
    let rest = schedule
        .list_page(&ScheduleQuery {
            cursor: Some(listed[1].id.clone()),
            limit: 2,
            ..ScheduleQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 2);
    assert_eq!(rest.items[0].id, listed[2].id);
    assert_eq!(rest.next.as_deref(), Some(listed[3].id.as_str()));

    // "1" is in the window, "4" only on disk (window of 2).
    schedule.cancel(&listed[1].id).await.unwrap();
    schedule.cancel(&listed[4].id).await.unwrap();
    assert!(matches!(
        schedule.cancel(&listed[4].id).await,
        Err(ScheduleEditError::NotFound(_))
    ));
    let moved = schedule.reschedule(&listed[3].id, now_ms()).await.unwrap();
    let new_key = parse_key(&moved.id).unwrap();
    assert_eq!(new_key.seq, parse_key(&listed[3].id).unwrap().seq);

    let (_sub, mut rx) = consume(&broker);
    let got = receive(&mut rx, 1).await;
    assert_eq!(body(&got[0].0), "3", "rescheduled to now");
    let left = list_all(&schedule, "q").await;
    let bodies: Vec<&str> = left.iter().map(|e| e.body_preview.as_str()).collect();
    assert_eq!(bodies, ["0", "2"]);
    // Two cancelled, one delivered after its reschedule.
    assert_eq!(schedule.delayed(queue.id()), 2);
    let lateness = schedule.lateness();
    assert_eq!(lateness.count, 1);
    assert_eq!(queue.id(), new_key.queue);
    schedule.shutdown().await;
}

#[tokio::test]
async fn waiting_messages_are_counted_per_queue_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let far = now_ms() + 600_000;
    let ids = {
        let (broker, schedule) = open(dir.path(), 2);
        for (i, address) in ["a", "a", "a", "b"].into_iter().enumerate() {
            let mut message = delayed(&i.to_string(), far + i as u64, true);
            message.address = Arc::from(address);
            broker
                .publish(message, RoutingType::Anycast)
                .unwrap()
                .wait()
                .await
                .unwrap();
        }
        let ids = (
            broker.queue("a").unwrap().id(),
            broker.queue("b").unwrap().id(),
        );
        assert_eq!((schedule.delayed(ids.0), schedule.delayed(ids.1)), (3, 1));
        schedule.shutdown().await;
        ids
    };
    let (_broker, schedule) = open(dir.path(), 2);
    assert_eq!((schedule.delayed(ids.0), schedule.delayed(ids.1)), (3, 1));
    let first = list_all(&schedule, "a").await;
    schedule.cancel(&first[0].id).await.unwrap();
    schedule.reschedule(&first[1].id, far + 50).await.unwrap();
    assert_eq!((schedule.delayed(ids.0), schedule.delayed(ids.1)), (2, 1));
    schedule.shutdown().await;
}

/// Every waiting message of `queue`, one page.
async fn list_all(schedule: &Schedule, queue: &str) -> Vec<ScheduledSummary> {
    let query = ScheduleQuery {
        queue: Some(queue.to_owned()),
        limit: 100_000,
        preview_bytes: 64,
        ..ScheduleQuery::default()
    };
    schedule.list_page(&query).await.unwrap().items
}

#[tokio::test]
async fn restart_recovers_durable_entries_once() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ms();
    {
        let (broker, schedule) = open(dir.path(), 8);
        for i in 0..40u64 {
            // Half fall due while the broker is down, half after it restarts.
            let due = now + 100 + (i * 13 % 40) * 10;
            broker
                .publish(delayed(&i.to_string(), due, true), RoutingType::Anycast)
                .unwrap()
                .wait()
                .await
                .unwrap();
        }
        broker
            .publish(delayed("volatile", now + 100, false), RoutingType::Anycast)
            .unwrap()
            .wait()
            .await
            .unwrap();
        schedule.shutdown().await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (broker, schedule) = open(dir.path(), 8);
    let id = broker.queue("q").unwrap().id();
    let (_sub, mut rx) = consume(&broker);
    let got = receive(&mut rx, 41).await;
    let bodies: Vec<String> = got.iter().map(|(d, _)| body(d)).collect();
    assert_eq!(
        got.len(),
        40,
        "durable ones exactly once, not the volatile one: {bodies:?}"
    );
    assert!(!bodies.contains(&"volatile".to_owned()));
    assert_eq!(bodies.iter().collect::<HashSet<_>>().len(), 40);
    assert_on_time_in_order(&got);
    assert_eq!(schedule.delayed(id), 0);
    schedule.shutdown().await;
    drop((_sub, rx, got, schedule, broker));

    // Delivered entries left the schedule in the same write that queued them.
    let store = Store::open(dir.path(), StoreOptions::default());
    let store = store.expect("every handle on the store was dropped");
    assert!(list_stored(&store, None, FIRST_KEY, 100)
        .unwrap()
        .is_empty());
}

#[test]
fn keys_print_and_parse() {
    let key = ScheduleKey {
        due_ms: 1_700_000_000_123,
        queue: 7,
        seq: 42,
    };
    assert_eq!(parse_key(&format_key(&key)), Some(key));
    assert_eq!(parse_key("1:2"), None);
    assert_eq!(parse_key("1:2:3:4"), None);
    assert_eq!(parse_key("a:2:3"), None);
    let max_seq = ScheduleKey {
        seq: u64::MAX,
        ..key
    };
    assert!(next_key(max_seq) > max_seq);
    assert!(next_key(key) > key);
}

/// A broker whose queues page past `max_memory_messages`, with a schedule of `window`.
fn open_small_queues(
    dir: &std::path::Path,
    max_memory_messages: usize,
    window: usize,
) -> (Broker, Arc<Schedule>) {
    let queues = QueueSettings {
        max_memory_messages,
        ..QueueSettings::default()
    };
    let options = ScheduleOptions {
        window,
        ..ScheduleOptions::default()
    };
    open_full(dir, queues, options)
}

fn consume_window(
    broker: &Broker,
    address: &str,
    window: u32,
) -> (crate::core::Subscription, Deliveries) {
    let (tx, rx) = deliveries::channel();
    let sub = broker
        .subscribe(
            address,
            RoutingType::Anycast,
            ConsumerOptions {
                credit: crate::core::CreditMode::Window(window),
                ..Default::default()
            },
            tx,
        )
        .unwrap();
    (sub, rx)
}

async fn publish_due(broker: &Broker, address: &str, n: usize, due: u64) {
    for i in 0..n {
        let message = Message {
            address: Arc::from(address),
            ..delayed(&i.to_string(), due, false)
        };
        broker
            .publish(message, RoutingType::Anycast)
            .unwrap()
            .wait()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_burst_waits_in_the_schedule_not_in_a_paging_queue() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open_small_queues(dir.path(), 20, 1024);
    let (_sub, mut rx) = consume_window(&broker, "q", 5);
    let n = 200;
    publish_due(&broker, "q", n, now_ms() + 100).await;
    let mut got = receive(&mut rx, 5).await;
    assert_eq!(got.len(), 5, "the consumer's window is full");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queue = broker.queue("q").unwrap();
    let stats = queue.stats();
    // Up to half the memory limit moved in; the rest waits, due, in the schedule.
    assert_eq!(stats.paged, 0, "nothing due was sent to disk");
    assert_eq!(stats.ready, 10);
    assert_eq!(schedule.in_memory(), n - 15);
    // An auditor still sees (and may cancel) what waits for room.
    let waiting = list_all(&schedule, "q").await;
    assert_eq!(waiting.len(), n - 15);
    let last = &waiting[waiting.len() - 1].id;
    schedule.cancel(last).await.unwrap();
    let n = n - 1;
    while got.len() < n {
        let (d, _) = &got[got.len() - 1];
        d.queue.ack(d.consumer, &[d.seq]).unwrap();
        let more = receive(&mut rx, 1).await;
        assert_eq!(more.len(), 1, "delivery {} came", got.len());
        got.extend(more);
        assert_eq!(queue.stats().paged, 0);
    }
    let order: Vec<String> = got.iter().map(|(d, _)| body(d)).collect();
    let sent: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    assert_eq!(order, sent, "in the order sent");
    schedule.shutdown().await;
}

#[tokio::test]
async fn a_stalled_queue_cannot_hold_back_another() {
    let dir = tempfile::tempdir().unwrap();
    // Half of a 64-entry window may wait parked; past that, due entries go
    // into the stalled queue (which pages them) so others still move.
    let (broker, schedule) = open_small_queues(dir.path(), 20, 64);
    let (_stalled, _never_acked) = consume_window(&broker, "stalled", 1);
    let (_sub, mut rx) = consume_window(&broker, "q", 1000);
    let due = now_ms() + 100;
    publish_due(&broker, "stalled", 300, due).await;
    publish_due(&broker, "q", 50, due + 50).await;
    let got = receive(&mut rx, 50).await;
    assert_eq!(got.len(), 50, "the other queue's entries all came");
    assert_on_time_in_order(&got);
    let stalled = broker.queue("stalled").unwrap().stats();
    // Past the limit the stalled queue took its entries (and paged them).
    assert_eq!(
        stalled.in_flight + stalled.ready + stalled.paged,
        300,
        "{stalled:?}"
    );
    assert_eq!(schedule.in_memory(), 0);
    schedule.shutdown().await;
}
