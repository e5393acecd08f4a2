//! Transactions over a real store: whole or nothing, and bounded.

use super::*;
use crate::core::deliveries::{self, Deliveries};
use crate::core::message::now_ms;
use crate::core::settings::QueueSettings;
use crate::core::tests::open;
use crate::core::{ConsumerOptions, CreditMode, Delivery, Subscription};
use std::time::Duration;

fn msg(address: &str, body: &str) -> Message {
    Message {
        address: Arc::from(address),
        body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        priority: 4,
        durable: true,
        ..Default::default()
    }
}

fn delayed(address: &str, body: &str, delay: Duration) -> Message {
    Message {
        due_at: Some(now_ms() + delay.as_millis() as u64),
        ..msg(address, body)
    }
}

fn consumer(broker: &Broker, queue: &str) -> (Subscription, Deliveries) {
    let (tx, rx) = deliveries::channel();
    let options = ConsumerOptions {
        credit: CreditMode::Window(100),
        ..Default::default()
    };
    let sub = broker
        .subscribe(queue, RoutingType::Anycast, options, tx)
        .unwrap();
    (sub, rx)
}

fn drain(rx: &mut Deliveries) -> Vec<Delivery> {
    let mut out = Vec::new();
    while let Ok(d) = rx.try_recv() {
        out.push(d);
    }
    out
}

fn bodies(ds: &[Delivery]) -> Vec<String> {
    ds.iter()
        .map(|d| String::from_utf8_lossy(&d.message.body).into_owned())
        .collect()
}

fn settings() -> QueueSettings {
    QueueSettings {
        max_message_delay: Duration::from_secs(1),
        ..QueueSettings::default()
    }
}

fn anycast() -> Target {
    Target::Routed(RoutingType::Anycast)
}

/// One message published and delivered to a fresh consumer, not yet settled.
fn delivered(broker: &Broker, queue: &str, body: &str) -> (Subscription, Deliveries, Delivery) {
    let (sub, mut rx) = consumer(broker, queue);
    let _ = broker
        .publish(msg(queue, body), RoutingType::Anycast)
        .unwrap();
    let d = drain(&mut rx).pop().expect("delivered");
    (sub, rx, d)
}

#[tokio::test]
async fn commit_applies_sends_and_acks_together() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let (sub, mut rx, d) = delivered(&broker, "in", "request");
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("out", "reply"), anycast())
        .unwrap();
    txns.settle("t", &d.queue, d.consumer, d.seq, Settlement::Ack)
        .unwrap();
    assert!(
        broker.queue("out").is_none(),
        "nothing happens before commit"
    );
    txns.commit(&broker, "t", &Principal::unrestricted())
        .unwrap()
        .wait()
        .await
        .unwrap();
    let (_out, mut out_rx) = consumer(&broker, "out");
    assert_eq!(bodies(&drain(&mut out_rx)), ["reply"]);
    drop(sub);
    let (_again, mut again) = consumer(&broker, "in");
    assert!(drain(&mut again).is_empty(), "the request was acknowledged");
    assert!(drain(&mut rx).is_empty());
}

#[tokio::test]
async fn a_refused_send_dooms_the_whole_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let (_sub, mut rx, d) = delivered(&broker, "in", "held");
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("q", "m1"), anycast()).unwrap();
    txns.settle("t", &d.queue, d.consumer, d.seq, Settlement::Ack)
        .unwrap();
    let refused = txns.send(
        &broker,
        "t",
        delayed("q", "m2", Duration::from_secs(60)),
        anycast(),
    );
    assert!(matches!(
        refused,
        Err(TransactionError::Core(CoreError::DelayTooLong { .. }))
    ));
    // Later operations report the same refusal.
    let later = txns.send(&broker, "t", msg("q", "m3"), anycast());
    assert!(matches!(
        later,
        Err(TransactionError::Core(CoreError::DelayTooLong { .. }))
    ));
    let committed = txns.commit(&broker, "t", &Principal::unrestricted());
    assert!(matches!(
        committed,
        Err(TransactionError::Core(CoreError::DelayTooLong { .. }))
    ));
    assert!(!txns.is_open("t"));
    let (_q, mut q_rx) = consumer(&broker, "q");
    assert!(drain(&mut q_rx).is_empty(), "no send was published");
    let back = drain(&mut rx);
    assert_eq!(bodies(&back), ["held"], "the held ack was rolled back");
    assert!(back[0].redelivered());
}

#[tokio::test]
async fn an_unknown_destination_dooms_it_and_a_rollback_creates_no_queue() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(
        dir.path(),
        QueueSettings {
            auto_create: false,
            ..settings()
        },
    );
    broker.queue_or_create("known", true).unwrap();
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("known", "m1"), anycast())
        .unwrap();
    let refused = txns.send(&broker, "t", msg("nowhere", "m2"), anycast());
    assert!(matches!(
        refused,
        Err(TransactionError::Core(CoreError::NotFound(_)))
    ));
    assert!(txns
        .commit(&broker, "t", &Principal::unrestricted())
        .is_err());
    assert_eq!(broker.queue("known").unwrap().stats().ready, 0);

    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    txns.begin("u").unwrap();
    txns.send(&broker, "u", msg("fresh", "m"), anycast())
        .unwrap();
    txns.rollback("u").unwrap();
    assert!(broker.queue("fresh").is_none());
}

#[tokio::test]
async fn an_ack_no_longer_outstanding_at_commit_dooms_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let (sub, _rx, d) = delivered(&broker, "in", "taken back");
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("q", "m1"), anycast()).unwrap();
    txns.settle("t", &d.queue, d.consumer, d.seq, Settlement::Ack)
        .unwrap();
    // Its consumer leaves: the delivery goes back to the queue.
    drop(sub);
    let committed = txns.commit(&broker, "t", &Principal::unrestricted());
    assert!(matches!(
        committed,
        Err(TransactionError::Core(CoreError::UnknownDelivery(_)))
    ));
    assert!(broker.queue("q").is_none(), "the send did not happen");
    let (_again, mut again) = consumer(&broker, "in");
    assert_eq!(bodies(&drain(&mut again)), ["taken back"]);
}

#[tokio::test]
async fn a_refusal_from_the_protocol_dooms_it_too() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("q", "m1"), anycast()).unwrap();
    let why: Box<dyn std::error::Error + Send + Sync> = "no such message id".into();
    txns.refuse("t", TransactionError::Protocol(Arc::from(why)))
        .unwrap();
    let committed = txns.commit(&broker, "t", &Principal::unrestricted());
    assert_eq!(committed.err().unwrap().to_string(), "no such message id");
    assert!(broker.queue("q").is_none());
    assert!(matches!(
        txns.refuse("t", TransactionError::AlreadyOpen),
        Err(TransactionError::Unknown)
    ));
}

#[tokio::test]
async fn each_limit_dooms_with_an_error_naming_its_setting() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let limits = TransactionLimits {
        max_ops: 3,
        max_bytes: 64 << 10,
        max_open: 2,
    };
    let mut txns = Transactions::new(limits);

    txns.begin("ops").unwrap();
    for i in 0..3 {
        txns.send(&broker, "ops", msg("q", &i.to_string()), anycast())
            .unwrap();
    }
    let over = txns.send(&broker, "ops", msg("q", "3"), anycast());
    assert!(matches!(over, Err(TransactionError::TooManyOps { max: 3 })));
    let e = txns
        .commit(&broker, "ops", &Principal::unrestricted())
        .err()
        .unwrap();
    assert!(e.to_string().contains("max_transaction_ops"), "{e}");

    txns.begin("bytes").unwrap();
    let big = Message {
        body: bytes::Bytes::from(vec![b'x'; 40 << 10]),
        ..msg("q", "")
    };
    txns.send(&broker, "bytes", big.clone(), anycast()).unwrap();
    let over = txns.send(&broker, "bytes", big, anycast());
    assert!(matches!(over, Err(TransactionError::TooManyBytes { .. })));
    let e = txns
        .commit(&broker, "bytes", &Principal::unrestricted())
        .err()
        .unwrap();
    assert!(e.to_string().contains("max_transaction_bytes"), "{e}");

    txns.begin("a").unwrap();
    txns.begin("b").unwrap();
    let e = txns.begin("c").err().unwrap();
    assert!(e.to_string().contains("max_open_transactions"), "{e}");
    assert!(matches!(
        txns.begin("a"),
        Err(TransactionError::AlreadyOpen)
    ));

    assert!(broker.queue("q").is_none(), "no doomed send was published");
}

#[tokio::test]
async fn settlements_count_towards_the_operation_limit() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let (_sub, mut rx) = consumer(&broker, "in");
    for i in 0..3 {
        let _ = broker
            .publish(msg("in", &i.to_string()), RoutingType::Anycast)
            .unwrap();
    }
    let ds = drain(&mut rx);
    let mut txns = Transactions::new(TransactionLimits {
        max_ops: 2,
        ..TransactionLimits::default()
    });
    txns.begin("t").unwrap();
    let results: Vec<_> = ds
        .iter()
        .map(|d| txns.settle("t", &d.queue, d.consumer, d.seq, Settlement::Ack))
        .collect();
    assert!(results[..2].iter().all(Result::is_ok));
    assert!(matches!(
        results[2],
        Err(TransactionError::TooManyOps { max: 2 })
    ));
    assert!(txns
        .commit(&broker, "t", &Principal::unrestricted())
        .is_err());
    // Every one of them, even the one over the limit, comes back.
    assert_eq!(bodies(&drain(&mut rx)).len(), 3);
}

#[tokio::test]
async fn dropping_the_transactions_rolls_back_what_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let (_sub, mut rx, d) = delivered(&broker, "in", "held");
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin(String::from("t")).unwrap();
    txns.send(&broker, "t", msg("q", "m"), anycast()).unwrap();
    txns.settle("t", &d.queue, d.consumer, d.seq, Settlement::Ack)
        .unwrap();
    drop(txns);
    assert_eq!(bodies(&drain(&mut rx)), ["held"]);
    assert!(broker.queue("q").is_none());
}

#[tokio::test]
async fn topics_and_known_queues_are_committed_too() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    let (tx, mut topic_rx) = deliveries::channel();
    let _topic = broker
        .subscribe(
            "news",
            RoutingType::Multicast,
            ConsumerOptions::default(),
            tx,
        )
        .unwrap();
    let queue = broker.queue_or_create("direct", true).unwrap();
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(
        &broker,
        "t",
        msg("news", "n"),
        Target::Routed(RoutingType::Multicast),
    )
    .unwrap();
    txns.send(&broker, "t", msg("direct", "d"), Target::Queue(queue))
        .unwrap();
    assert!(drain(&mut topic_rx).is_empty());
    txns.commit(&broker, "t", &Principal::unrestricted())
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(bodies(&drain(&mut topic_rx)), ["n"]);
    let (_d, mut direct) = consumer(&broker, "direct");
    assert_eq!(bodies(&drain(&mut direct)), ["d"]);
}

#[tokio::test]
async fn queues_created_at_commit_count_against_the_queue_limit() {
    use crate::core::security::{Authorizer, Permissions, RoleSet};
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), settings());
    // Two queues per user, no permissions.
    let authorizer = Arc::new(Authorizer::new(
        Permissions::default(),
        HashMap::new(),
        RoleSet::default(),
        2,
    ));
    let alice = Principal::new(&authorizer, Some("alice"), None, None);
    let (_sub, mut rx, d) = delivered(&broker, "in", "held");
    let mut txns = Transactions::new(TransactionLimits::default());
    // Two sends to one new queue take one place.
    txns.begin("one").unwrap();
    txns.send(&broker, "one", msg("a", "1"), anycast()).unwrap();
    txns.send(&broker, "one", msg("a", "2"), anycast()).unwrap();
    txns.commit(&broker, "one", &alice)
        .unwrap()
        .wait()
        .await
        .unwrap();
    // Two more new queues do not fit: none is created, nothing is sent or settled.
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("b", "3"), anycast()).unwrap();
    txns.send(&broker, "t", msg("a", "4"), anycast()).unwrap();
    txns.send(&broker, "t", msg("c", "5"), anycast()).unwrap();
    txns.settle("t", &d.queue, d.consumer, d.seq, Settlement::Ack)
        .unwrap();
    let committed = txns.commit(&broker, "t", &alice);
    assert!(
        matches!(
            committed,
            Err(TransactionError::Core(CoreError::QueueLimit(_)))
        ),
        "{:?}",
        committed.err()
    );
    assert!(broker.queue("b").is_none() && broker.queue("c").is_none());
    let (_a, mut a_rx) = consumer(&broker, "a");
    assert_eq!(bodies(&drain(&mut a_rx)), ["1", "2"]);
    assert_eq!(bodies(&drain(&mut rx)), ["held"], "the ack was rolled back");
    // The refused commit gave back the place it took for "b": one more still fits,
    // and the queue made counts.
    txns.begin("two").unwrap();
    txns.send(&broker, "two", msg("b", "6"), anycast()).unwrap();
    assert!(txns.commit(&broker, "two", &alice).is_ok());
    assert!(alice.claim_queue().is_err(), "two queues made, two allowed");
    broker
        .delete_queue_as("b", &Principal::unrestricted())
        .unwrap();
    assert!(
        alice.claim_queue().is_ok(),
        "a deleted queue frees its place"
    );
}

/// A broker whose every queue, topic subscribers' too, is full from its first
/// message on, with `policy`.
fn tiny_queues(dir: &std::path::Path, policy: AddressFullPolicy) -> Broker {
    open(
        dir,
        QueueSettings {
            max_size_bytes: Some(1),
            address_full_policy: policy,
            ..settings()
        },
    )
}

fn topic_consumer(broker: &Broker, topic: &str) -> (Subscription, Deliveries) {
    let (tx, rx) = deliveries::channel();
    let options = ConsumerOptions {
        credit: CreditMode::Window(100),
        ..Default::default()
    };
    let sub = broker
        .subscribe(topic, RoutingType::Multicast, options, tx)
        .unwrap();
    (sub, rx)
}

fn multicast() -> Target {
    Target::Routed(RoutingType::Multicast)
}

#[tokio::test]
async fn a_full_fail_subscriber_refuses_a_topic_send_when_it_is_added() {
    let dir = tempfile::tempdir().unwrap();
    let broker = tiny_queues(dir.path(), AddressFullPolicy::Fail);
    let (_sub, mut rx) = topic_consumer(&broker, "news");
    // Delivered and not settled: it still fills the subscriber's queue.
    let _ = broker.publish(msg("news", "first"), RoutingType::Multicast);
    assert_eq!(bodies(&drain(&mut rx)), ["first"]);
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("q", "m1"), anycast()).unwrap();
    let refused = txns.send(&broker, "t", msg("news", "m2"), multicast());
    assert!(
        matches!(
            refused,
            Err(TransactionError::Core(CoreError::AddressFull { .. }))
        ),
        "{refused:?}"
    );
    let committed = txns.commit(&broker, "t", &Principal::unrestricted());
    assert!(matches!(
        committed,
        Err(TransactionError::Core(CoreError::AddressFull { .. }))
    ));
    assert!(drain(&mut rx).is_empty(), "nothing reached the topic");
    assert!(broker.queue("q").is_none(), "nothing reached the queue");
}

#[tokio::test]
async fn a_subscriber_that_fills_before_the_commit_refuses_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = tiny_queues(dir.path(), AddressFullPolicy::Fail);
    let (_sub, mut rx) = topic_consumer(&broker, "news");
    let queue = broker.queue_or_create("direct", true).unwrap();
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("direct", "d"), Target::Queue(queue))
        .unwrap();
    txns.send(&broker, "t", msg("news", "n"), multicast())
        .unwrap();
    let _ = broker.publish(msg("news", "outside"), RoutingType::Multicast);
    let committed = txns.commit(&broker, "t", &Principal::unrestricted());
    assert!(
        matches!(
            committed,
            Err(TransactionError::Core(CoreError::AddressFull { .. }))
        ),
        "{:?}",
        committed.map(|_| ())
    );
    assert_eq!(bodies(&drain(&mut rx)), ["outside"]);
    let (_d, mut direct) = consumer(&broker, "direct");
    assert!(
        drain(&mut direct).is_empty(),
        "the queue send was not applied"
    );
}

#[tokio::test]
async fn a_full_drop_subscriber_drops_its_copy_of_a_committed_topic_send() {
    let dir = tempfile::tempdir().unwrap();
    let broker = tiny_queues(dir.path(), AddressFullPolicy::Drop);
    let (_full, mut full_rx) = topic_consumer(&broker, "news");
    let (_settled, mut settled_rx) = topic_consumer(&broker, "news");
    let _ = broker.publish(msg("news", "first"), RoutingType::Multicast);
    let first = drain(&mut full_rx).pop().expect("delivered");
    // One subscriber settles its copy: its queue has room again.
    let d = drain(&mut settled_rx).pop().expect("delivered");
    d.queue.ack(d.consumer, &[d.seq]).unwrap();
    let mut txns = Transactions::new(TransactionLimits::default());
    txns.begin("t").unwrap();
    txns.send(&broker, "t", msg("news", "n"), multicast())
        .unwrap();
    txns.commit(&broker, "t", &Principal::unrestricted())
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(bodies(&drain(&mut settled_rx)), ["n"]);
    assert!(drain(&mut full_rx).is_empty(), "dropped for the full one");
    assert_eq!(first.queue.memory().dropped(), 1, "counted as dropped");
}
