//! Core behaviour over a real store: dispatch, acks, grouping, redelivery, recovery.

use super::*;
use crate::core::deliveries::{self, Deliveries};
use crate::core::settings::QueueSettings;
use crate::store::{Store, StoreOptions};
use std::sync::Arc;

/// A broker over a fresh store in `dir` (also used by protocol unit tests).
pub(crate) fn open(dir: &std::path::Path, settings: QueueSettings) -> Broker {
    open_with_store(dir, settings, StoreOptions::default())
}

fn open_with_store(dir: &std::path::Path, settings: QueueSettings, store: StoreOptions) -> Broker {
    let store = Store::open(dir, store).unwrap();
    Broker::open(store, BrokerOptions::with_queue_settings(settings)).unwrap()
}

fn msg(address: &str, body: &str, group: Option<&str>) -> Message {
    Message {
        address: Arc::from(address),
        body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        group_id: group.map(Arc::from),
        priority: 4,
        ..Default::default()
    }
}

fn drain(rx: &mut Deliveries) -> Vec<Delivery> {
    let mut out = Vec::new();
    while let Ok(d) = rx.try_recv() {
        out.push(d);
    }
    out
}

/// Acknowledges a delivery and waits until that is done.
async fn ack_now(d: &Delivery) {
    d.queue
        .ack(d.consumer, &[d.seq])
        .unwrap()
        .wait()
        .await
        .unwrap();
}

fn body(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.message.body).into_owned()
}

#[tokio::test]
async fn anycast_shares_and_acks() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe("q", RoutingType::Anycast, window(1), tx.clone())
        .unwrap();
    let b = broker
        .subscribe("q", RoutingType::Anycast, window(1), tx)
        .unwrap();
    for i in 0..3 {
        broker
            .publish(msg("q", &i.to_string(), None), RoutingType::Anycast)
            .unwrap();
    }
    let got = drain(&mut rx);
    assert_eq!(got.len(), 2, "window of one each");
    assert_ne!(got[0].consumer, got[1].consumer);
    let first = &got[0];
    first
        .queue
        .ack(first.consumer, &[first.seq])
        .unwrap()
        .wait()
        .await
        .unwrap();
    let more = drain(&mut rx);
    assert_eq!(more.len(), 1);
    assert_eq!(body(&more[0]), "2");
    drop((a, b));
}

#[tokio::test]
async fn groups_stick_and_move_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let opts = || ConsumerOptions {
        credit: CreditMode::Window(100),
        ..Default::default()
    };
    let a = broker
        .subscribe("g", RoutingType::Anycast, opts(), tx.clone())
        .unwrap();
    let b = broker
        .subscribe("g", RoutingType::Anycast, opts(), tx.clone())
        .unwrap();
    for i in 0..20 {
        let group = format!("G{}", i % 4);
        broker
            .publish(msg("g", &i.to_string(), Some(&group)), RoutingType::Anycast)
            .unwrap();
    }
    let got = drain(&mut rx);
    assert_eq!(got.len(), 20);
    let mut owner = std::collections::HashMap::new();
    for d in &got {
        let g = d.message.group_id.clone().unwrap();
        assert_eq!(
            *owner.entry(g).or_insert(d.consumer),
            d.consumer,
            "group split"
        );
    }
    let owners: std::collections::HashSet<_> = owner.values().collect();
    assert_eq!(owners.len(), 2, "groups spread over both consumers");
    // Close A: its unacked group messages go to B, first, in order.
    let a_id = a.consumer();
    let a_groups: Vec<_> = owner
        .iter()
        .filter(|(_, c)| **c == a_id)
        .map(|(g, _)| g.clone())
        .collect();
    drop(a);
    let moved = drain(&mut rx);
    assert_eq!(moved.len(), 10);
    assert!(moved
        .iter()
        .all(|d| d.consumer == b.consumer() && d.redelivered()));
    for g in a_groups {
        let seqs: Vec<u64> = moved
            .iter()
            .filter(|d| d.message.group_id.as_ref() == Some(&g))
            .map(|d| d.seq)
            .collect();
        let mut sorted = seqs.clone();
        sorted.sort();
        assert_eq!(seqs, sorted);
    }
}

#[tokio::test]
async fn busy_group_does_not_block_ungrouped() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let opts = || ConsumerOptions {
        credit: CreditMode::Window(1),
        ..Default::default()
    };
    let _a = broker
        .subscribe("h", RoutingType::Anycast, opts(), tx.clone())
        .unwrap();
    for i in 0..5 {
        broker
            .publish(msg("h", &format!("g{i}"), Some("G")), RoutingType::Anycast)
            .unwrap();
    }
    let first = drain(&mut rx);
    assert_eq!(first.len(), 1);
    let _b = broker
        .subscribe("h", RoutingType::Anycast, opts(), tx.clone())
        .unwrap();
    broker
        .publish(msg("h", "free", None), RoutingType::Anycast)
        .unwrap();
    let next = drain(&mut rx);
    assert_eq!(next.len(), 1);
    assert_eq!(
        body(&next[0]),
        "free",
        "ungrouped message passes the busy group"
    );
}

#[tokio::test]
async fn nack_redelivers_then_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        max_delivery_attempts: 2,
        ..Default::default()
    };
    let broker = open(dir.path(), settings);
    let (tx, mut rx) = deliveries::channel();
    let _s = broker
        .subscribe(
            "n",
            RoutingType::Anycast,
            ConsumerOptions::default(),
            tx.clone(),
        )
        .unwrap();
    broker
        .publish(msg("n", "x", None), RoutingType::Anycast)
        .unwrap();
    for attempt in 1..=2 {
        let d = drain(&mut rx).pop().unwrap();
        assert_eq!(d.delivery_count, attempt);
        d.queue.release(d.consumer, d.seq, Release::Failed).unwrap();
    }
    assert!(drain(&mut rx).is_empty());
    let dlq = broker.queue("DLQ").expect("DLQ created");
    assert_eq!(dlq.stats().ready, 1);
}

#[tokio::test]
async fn durable_messages_survive_reopen_and_deep_queue_pages() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        max_memory_messages: 10,
        ..Default::default()
    };
    {
        let broker = open(dir.path(), settings.clone());
        let mut last = None;
        for i in 0..100 {
            let mut m = msg("d", &i.to_string(), None);
            m.durable = i % 2 == 0;
            last = Some(broker.publish(m, RoutingType::Anycast).unwrap());
        }
        last.unwrap().wait().await.unwrap();
        let q = broker.queue("d").unwrap();
        let stats = q.stats();
        assert!(stats.ready <= 10, "memory bounded: {stats:?}");
        assert_eq!(stats.ready + stats.paged, 100);
        // Before reopening, read back everything in order through paging.
        let (tx, mut rx) = deliveries::channel();
        let s = broker
            .subscribe("d", RoutingType::Anycast, window(5), tx)
            .unwrap();
        let mut seen = Vec::new();
        while seen.len() < 50 {
            let d = rx.recv().await.unwrap();
            seen.push(body(&d).parse::<u32>().unwrap());
            ack_now(&d).await;
        }
        assert_eq!(seen, (0..50).collect::<Vec<_>>());
        drop(s);
    }
    let broker = open(dir.path(), settings);
    let (tx, mut rx) = deliveries::channel();
    let _s = broker
        .subscribe("d", RoutingType::Anycast, ConsumerOptions::default(), tx)
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(Some(d)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), rx.recv()).await
    {
        seen.push(body(&d).parse::<u32>().unwrap());
        d.queue.ack(d.consumer, &[d.seq]).unwrap();
    }
    // Only unacked durable (even) messages come back, in order.
    assert_eq!(seen, (50..100).filter(|i| i % 2 == 0).collect::<Vec<_>>());
}

#[tokio::test]
async fn topics_copy_to_every_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe(
            "t",
            RoutingType::Multicast,
            ConsumerOptions::default(),
            tx.clone(),
        )
        .unwrap();
    let b = broker
        .subscribe(
            "t",
            RoutingType::Multicast,
            ConsumerOptions::default(),
            tx.clone(),
        )
        .unwrap();
    broker
        .publish(msg("t", "hello", None), RoutingType::Multicast)
        .unwrap();
    let got = drain(&mut rx);
    assert_eq!(got.len(), 2);
    assert_ne!(got[0].consumer, got[1].consumer);
    drop(a);
    broker
        .publish(msg("t", "again", None), RoutingType::Multicast)
        .unwrap();
    assert_eq!(drain(&mut rx).len(), 1);
    drop(b);
}

#[tokio::test]
async fn expired_messages_are_never_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let mut m = msg("e", "old", None);
    m.expires_at = Some(1);
    broker.publish(m, RoutingType::Anycast).unwrap();
    broker
        .publish(msg("e", "new", None), RoutingType::Anycast)
        .unwrap();
    let (tx, mut rx) = deliveries::channel();
    let _s = broker
        .subscribe("e", RoutingType::Anycast, ConsumerOptions::default(), tx)
        .unwrap();
    let got = drain(&mut rx);
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), vec!["new"]);
}

fn window(n: u32) -> ConsumerOptions {
    ConsumerOptions {
        credit: CreditMode::Window(n),
        ..Default::default()
    }
}

#[tokio::test]
async fn rebalance_with_pause_never_splits_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        group_rebalance: true,
        group_rebalance_pause_dispatch: true,
        ..Default::default()
    };
    let broker = open(dir.path(), settings);
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe("r", RoutingType::Anycast, window(100), tx.clone())
        .unwrap();
    for i in 0..4 {
        broker
            .publish(
                msg("r", &format!("a{i}"), Some(&format!("G{i}"))),
                RoutingType::Anycast,
            )
            .unwrap();
    }
    let held = drain(&mut rx);
    assert_eq!(held.len(), 4);
    // B joins: groups are rebalanced, but each waits until A settles its message.
    let b = broker
        .subscribe("r", RoutingType::Anycast, window(100), tx.clone())
        .unwrap();
    for i in 0..4 {
        broker
            .publish(
                msg("r", &format!("b{i}"), Some(&format!("G{i}"))),
                RoutingType::Anycast,
            )
            .unwrap();
    }
    assert!(
        drain(&mut rx).is_empty(),
        "moved groups paused while A holds their messages"
    );
    for d in &held {
        d.queue.ack(d.consumer, &[d.seq]).unwrap();
    }
    let after = drain(&mut rx);
    assert_eq!(after.len(), 4);
    let consumers: std::collections::HashSet<_> = after.iter().map(|d| d.consumer).collect();
    assert_eq!(
        consumers.len(),
        2,
        "groups spread over A and B after the rebalance"
    );
    drop((a, b));
}

#[tokio::test]
async fn group_sequence_minus_one_releases_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe("c", RoutingType::Anycast, window(10), tx.clone())
        .unwrap();
    let mut last = msg("c", "close", Some("G"));
    last.group_seq = Some(-1);
    broker.publish(last, RoutingType::Anycast).unwrap();
    let first = drain(&mut rx);
    assert_eq!(first[0].consumer, a.consumer());
    // A is now full; B joins and the next message of G may go to B.
    let _b = broker
        .subscribe("c", RoutingType::Anycast, window(10), tx.clone())
        .unwrap();
    a.queue().set_credit(a.consumer(), 0);
    broker
        .publish(msg("c", "again", Some("G")), RoutingType::Anycast)
        .unwrap();
    let next = drain(&mut rx);
    assert_eq!(next.len(), 1);
    assert_ne!(
        next[0].consumer,
        a.consumer(),
        "closed group bound elsewhere"
    );
    assert!(next[0].group_first);
}

#[tokio::test]
async fn exclusive_queue_feeds_one_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        exclusive: true,
        ..Default::default()
    };
    let broker = open(dir.path(), settings);
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe("x", RoutingType::Anycast, window(100), tx.clone())
        .unwrap();
    let b = broker
        .subscribe("x", RoutingType::Anycast, window(100), tx.clone())
        .unwrap();
    for i in 0..5 {
        broker
            .publish(msg("x", &i.to_string(), None), RoutingType::Anycast)
            .unwrap();
    }
    assert!(drain(&mut rx).iter().all(|d| d.consumer == a.consumer()));
    drop(a);
    let moved = drain(&mut rx);
    assert_eq!(moved.len(), 5);
    assert!(moved.iter().all(|d| d.consumer == b.consumer()));
}

#[tokio::test]
async fn consumers_before_dispatch_holds_messages() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        consumers_before_dispatch: 2,
        delay_before_dispatch: Some(std::time::Duration::from_millis(200)),
        ..Default::default()
    };
    let broker = open(dir.path(), settings);
    broker
        .publish(msg("w", "1", None), RoutingType::Anycast)
        .unwrap();
    let (tx, mut rx) = deliveries::channel();
    let _a = broker
        .subscribe("w", RoutingType::Anycast, window(10), tx.clone())
        .unwrap();
    assert!(drain(&mut rx).is_empty(), "held: one consumer of two");
    let d = tokio::time::timeout(std::time::Duration::from_secs(2), rx.recv()).await;
    assert!(
        matches!(d, Ok(Some(_))),
        "released after delay_before_dispatch"
    );
}

#[tokio::test]
async fn durable_subscription_keeps_messages_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path(), QueueSettings::default());
        let (tx, _rx) = deliveries::channel();
        let sub = broker
            .subscribe_named("prices", "client1:sub", true, window(0), tx)
            .unwrap();
        drop(sub);
        let mut m = msg("prices", "kept", None);
        m.durable = true;
        broker
            .publish(m, RoutingType::Multicast)
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert!(broker.has_durable_subscription("prices", "client1:sub"));
    }
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let _sub = broker
        .subscribe_named("prices", "client1:sub", true, window(10), tx.clone())
        .unwrap();
    let got = drain(&mut rx);
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), vec!["kept"]);
    // Still bound to the topic after the restart.
    broker
        .publish(msg("prices", "live", None), RoutingType::Multicast)
        .unwrap();
    assert_eq!(drain(&mut rx).len(), 1);
    drop(_sub);
    assert!(broker.delete_durable_subscription("prices", "client1:sub"));
    assert!(!broker.has_durable_subscription("prices", "client1:sub"));
}

#[tokio::test]
async fn shared_volatile_subscription_and_temporary_queue() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe_named("t", "shared", false, window(10), tx.clone())
        .unwrap();
    let b = broker
        .subscribe_named("t", "shared", false, window(10), tx.clone())
        .unwrap();
    for i in 0..4 {
        broker
            .publish(msg("t", &i.to_string(), None), RoutingType::Multicast)
            .unwrap();
    }
    assert_eq!(drain(&mut rx).len(), 4, "shared: each message once");
    drop((a, b));
    assert!(
        broker.queue("t::shared::shared").is_none(),
        "gone with its last consumer"
    );

    let temp = broker.create_temporary_queue();
    let name = temp.name().to_string();
    assert!(broker.queue(&name).is_some());
    drop(temp);
    assert!(broker.queue(&name).is_none());
}

#[tokio::test]
async fn undeliverable_here_goes_to_another_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let a = broker
        .subscribe("u", RoutingType::Anycast, window(10), tx.clone())
        .unwrap();
    broker
        .publish(msg("u", "x", None), RoutingType::Anycast)
        .unwrap();
    let d = drain(&mut rx).pop().unwrap();
    d.queue
        .release(d.consumer, d.seq, Release::NotHere)
        .unwrap();
    assert!(
        drain(&mut rx).is_empty(),
        "not back to the consumer that refused it"
    );
    let b = broker
        .subscribe("u", RoutingType::Anycast, window(10), tx.clone())
        .unwrap();
    let again = drain(&mut rx);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].consumer, b.consumer());
    drop(a);
}

#[tokio::test]
async fn try_ack_acks_like_ack_when_the_queue_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), QueueSettings::default());
    let (tx, mut rx) = deliveries::channel();
    let _sub = broker
        .subscribe("t", RoutingType::Anycast, window(1), tx)
        .unwrap();
    for i in 0..2 {
        broker
            .publish(msg("t", &i.to_string(), None), RoutingType::Anycast)
            .unwrap();
    }
    let first = drain(&mut rx);
    assert_eq!(first.len(), 1, "window of one");
    let d = &first[0];
    let acked = d.queue.try_ack(d.consumer, &[d.seq]);
    assert!(matches!(acked, Some(Ok(_))), "nothing else holds the queue");
    // The ack returned the credit: the second message follows.
    let second = drain(&mut rx);
    assert_eq!(second.len(), 1);
    assert_eq!(body(&second[0]), "1");
    assert!(matches!(
        d.queue.try_ack(d.consumer, &[d.seq]),
        Some(Err(CoreError::UnknownDelivery(_)))
    ));
}

/// A broker whose queues hold producers back from 4 waiting messages (half
/// of max_memory_messages = 8) and let them go at 2 (a quarter).
fn flow_controlled(dir: &std::path::Path) -> Broker {
    open(
        dir,
        QueueSettings {
            max_memory_messages: 8,
            ..QueueSettings::default()
        },
    )
}

/// One consumer with a window of one message on `queue`, then `count` sends.
fn one_slow_consumer(
    broker: &Broker,
    queue: &str,
    count: usize,
) -> (Subscription, Deliveries, Vec<Receipt>) {
    let (tx, rx) = deliveries::channel();
    let consumer = broker
        .subscribe(queue, RoutingType::Anycast, window(1), tx)
        .unwrap();
    let sends = (0..count)
        .map(|i| {
            broker
                .publish(msg(queue, &i.to_string(), None), RoutingType::Anycast)
                .unwrap()
        })
        .collect();
    (consumer, rx, sends)
}

#[tokio::test]
async fn producers_wait_for_consumers_that_fall_behind_but_not_for_an_empty_room() {
    let dir = tempfile::tempdir().unwrap();
    let broker = flow_controlled(dir.path());
    // No consumer: nobody to wait for, the queue just grows (and pages).
    for i in 0..12 {
        let sent = broker
            .publish(msg("lonely", &i.to_string(), None), RoutingType::Anycast)
            .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), sent.wait())
            .await
            .expect("no consumer: a send is done at once")
            .unwrap();
    }

    let (consumer, mut rx, sends) = one_slow_consumer(&broker, "slow", 6);
    // One in flight, five waiting: the sends that found four or more held.
    let held: Vec<bool> = sends.iter().map(|s| !s.is_ready()).collect();
    assert_eq!(held, vec![false, false, false, false, true, true]);
    let mut held_sends: Vec<_> = sends.into_iter().skip(4).collect();
    let still_held = |c: Receipt| async move {
        tokio::time::timeout(std::time::Duration::from_millis(10), c.wait())
            .await
            .is_err()
    };
    let mut acked = 0;
    while acked < 2 {
        let d = drain(&mut rx).pop().unwrap();
        ack_now(&d).await;
        acked += 1;
    }
    // Three waiting: still above a quarter.
    assert!(
        still_held(held_sends.remove(0)).await,
        "released before the queue drained"
    );
    let d = drain(&mut rx).pop().unwrap();
    ack_now(&d).await;
    // Two waiting: every held producer goes on.
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        held_sends.remove(0).wait(),
    )
    .await
    .expect("released once the queue drained to a quarter")
    .unwrap();
    drop(consumer);
}

#[tokio::test]
async fn held_sends_go_when_consumers_stop_taking_messages() {
    let dir = tempfile::tempdir().unwrap();
    let broker = flow_controlled(dir.path());
    // A client that sends everything before it reads (one thread): its
    // consumer never acks while it sends, so holding would deadlock it.
    let (consumer, _rx, sends) = one_slow_consumer(&broker, "stuck", 6);
    assert!(
        !sends[5].is_ready(),
        "held while the consumer might catch up"
    );
    for sent in sends {
        tokio::time::timeout(std::time::Duration::from_secs(5), sent.wait())
            .await
            .expect("let go once the consumer made no progress")
            .unwrap();
    }
    let later = broker
        .publish(msg("stuck", "later", None), RoutingType::Anycast)
        .unwrap();
    assert!(later.is_ready(), "not held again until the consumer moves");
    drop(consumer);
}

#[tokio::test]
async fn holds_are_bounded_for_senders_that_never_wait() {
    let dir = tempfile::tempdir().unwrap();
    let broker = flow_controlled(dir.path());
    let (consumer, _rx, _sends) = one_slow_consumer(&broker, "firehose", 30);
    let stats = broker.queue("firehose").unwrap().stats();
    // One in flight, 29 waiting (the later ones paged); held from the fifth
    // send on, but never more holds than max_memory_messages.
    assert_eq!(stats.in_flight + stats.ready + stats.paged, 30);
    assert_eq!(stats.held_sends, 8);
    drop(consumer);
}

/// The store may keep a durable message back for its consumer's
/// acknowledgement, but only on a queue that has a consumer.
#[tokio::test]
async fn a_durable_message_waits_for_its_consumer_only_if_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open_with_store(
        dir.path(),
        QueueSettings::default(),
        StoreOptions {
            hold_for_ack: std::time::Duration::from_secs(60),
            ..StoreOptions::default()
        },
    );
    let durable = |body: &str| Message {
        durable: true,
        ..msg("held", body, None)
    };
    let in_time = std::time::Duration::from_secs(5);
    // Nobody could acknowledge it first: written and confirmed at once.
    let lonely = broker.publish(durable("0"), RoutingType::Anycast).unwrap();
    tokio::time::timeout(in_time, lonely.wait())
        .await
        .expect("confirmed without a consumer")
        .unwrap();
    let (tx, mut rx) = deliveries::channel();
    let consumer = broker
        .subscribe("held", RoutingType::Anycast, window(10), tx)
        .unwrap();
    let first = drain(&mut rx);
    assert_eq!(first.len(), 1);
    // With a consumer: kept back until the consumer acknowledges it.
    let mut sent = Box::pin(
        broker
            .publish(durable("1"), RoutingType::Anycast)
            .unwrap()
            .wait(),
    );
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(futures_util::poll!(sent.as_mut()).is_pending());
    let got = drain(&mut rx);
    assert_eq!(got.len(), 1);
    got[0].queue.ack(got[0].consumer, &[got[0].seq]).unwrap();
    tokio::time::timeout(in_time, sent)
        .await
        .expect("confirmed once consumed")
        .unwrap();
    drop((consumer, broker));
}

#[tokio::test]
async fn sends_published_together_arrive_in_order_with_their_own_results() {
    let dir = tempfile::tempdir().unwrap();
    let broker = flow_controlled(dir.path());
    let (tx, mut rx) = deliveries::channel();
    let _consumer = broker
        .subscribe("batch", RoutingType::Anycast, window(1), tx)
        .unwrap();
    let queue = broker.queue_or_create("batch", false).unwrap();
    let mut messages: Vec<Message> = (0..12)
        .map(|i| msg("batch", &i.to_string(), None))
        .collect();
    // Over the queue's maximum delay: refused, alone.
    messages[5].due_at = Some(crate::core::message::now_ms() + 100 * 24 * 3600 * 1000);
    let results = broker.publish_all_to(&queue, messages.into_iter().map(Arc::new));
    assert_eq!(results.len(), 12);
    assert!(matches!(results[5], Err(CoreError::DelayTooLong { .. })));
    // Eleven waiting for a consumer with a window of one: past the memory
    // limit (8) the rest is paged, and the senders are held back.
    assert!(queue.stats().paged > 0);
    assert!(results[0].as_ref().is_ok_and(|c| !c.is_ready()));
    let mut got = Vec::new();
    while got.len() < 11 {
        let d = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
            .await
            .expect("delivered")
            .expect("open");
        got.push(body(&d));
        ack_now(&d).await;
    }
    let expected: Vec<String> = (0..12).filter(|i| *i != 5).map(|i| i.to_string()).collect();
    assert_eq!(got, expected);
    for sent in results.into_iter().flatten() {
        tokio::time::timeout(std::time::Duration::from_secs(5), sent.wait())
            .await
            .expect("released once drained")
            .unwrap();
    }
}

/// A message marked by its protocol as carrying a delay header gets its due time
/// from the queue's `delay_headers`; unmarked, or on a queue that lists none, its
/// properties are not read. (No schedule is installed here: a delayed message is
/// delivered at once, with the due time it was given.)
#[tokio::test]
async fn delay_headers_are_read_by_the_queue_settings() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = settings::SettingsTable::new(QueueSettings::default());
    table.add(
        settings::AddressPattern::new("plain"),
        settings::QueueSettingsOverride {
            delay_headers: Some(Vec::new()),
            ..Default::default()
        },
    );
    let options = BrokerOptions {
        settings: table,
        ..BrokerOptions::with_queue_settings(QueueSettings::default())
    };
    let broker = Broker::open(
        Store::open(dir.path(), StoreOptions::default()).unwrap(),
        options,
    )
    .unwrap();
    assert!(broker.delay_header_names().contains("x-delay"));
    assert!(broker.delay_header_names().contains("delay"));
    let with_delay = |queue: &str, name: &str, value: &str, marked: bool| {
        let mut m = msg(queue, "x", None);
        m.properties
            .push((Arc::from(name), Value::String(Arc::from(value))));
        m.may_carry_delay = marked;
        m
    };
    let due_of = |queue: &str, m: Message| {
        let (tx, mut rx) = deliveries::channel();
        let _sub = broker
            .subscribe(queue, RoutingType::Anycast, window(10), tx)
            .unwrap();
        let before = message::now_ms();
        broker.publish(m, RoutingType::Anycast).unwrap();
        let got = drain(&mut rx);
        assert_eq!(got.len(), 1);
        got[0].message.due_at.map(|at| at.saturating_sub(before))
    };
    let due = due_of("q1", with_delay("q1", "x-delay", "300", true));
    assert!(due.is_some_and(|d| (300..1_000).contains(&d)), "{due:?}");
    let due = due_of("q2", with_delay("q2", "delay", "2", true));
    assert!(due.is_some_and(|d| (2_000..3_000).contains(&d)), "{due:?}");
    assert_eq!(due_of("q3", with_delay("q3", "delay", "abc", true)), None);
    assert_eq!(
        due_of("q4", with_delay("q4", "x-delay", "300", false)),
        None
    );
    assert_eq!(
        due_of("plain", with_delay("plain", "x-delay", "300", true)),
        None
    );
}
