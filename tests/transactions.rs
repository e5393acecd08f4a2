//! Transactions as clients see them, over real sockets: STOMP BEGIN/COMMIT and
//! AMQP local transactions take effect whole or not at all, within limits.

mod common;

use common::{BrokerProcess, Frame, Stomp};
use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::transaction::{
    Controller, ControllerSendError, Transaction, TransactionDischarge, TransactionPosting,
    TransactionRetirement,
};
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Message, Outcome, Properties, Rejected, Target,
};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use std::time::Duration;

/// Delays longer than a second are refused.
const SHORT_DELAYS: &str = "[queue_defaults]\nmax_message_delay = \"1s\"\n";
/// Clients may have made two queues (anonymous clients count together).
const TWO_QUEUES: &str = "[limits]\nmax_queues_per_user = 2\n";
/// Topics under `full.` refuse new messages once a subscriber queue holds
/// 16 KiB; under `drops.` such a subscriber's copy is dropped.
const FULL_TOPICS: &str = r#"
[address_settings."full.#"]
max_size_bytes = "16KiB"
address_full_policy = "FAIL"

[address_settings."drops.#"]
max_size_bytes = "16KiB"
address_full_policy = "DROP"
"#;
/// A body that fills a 16 KiB queue on its own.
const FILLER: usize = 20 * 1024;
const QUIET: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_secs(10);

fn start(config: &str) -> (tempfile::TempDir, BrokerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(config));
    (dir, broker)
}

/// The ERROR a COMMIT (or another frame) with `receipt` ends in.
fn expect_error_for(c: &mut Stomp, receipt: &str) -> Frame {
    let f = c.recv().expect("a frame");
    assert_eq!(f.command, "ERROR", "{f:?}");
    assert_eq!(f.header("receipt-id"), Some(receipt), "{f:?}");
    f
}

/// Everything `dest` holds for a new consumer (auto ack), until it goes quiet.
fn drain(broker: &BrokerProcess, dest: &str) -> Vec<String> {
    let mut c = broker.client();
    c.subscribe("drain", dest, "auto");
    let mut got = Vec::new();
    while let Some(f) = c.recv_timeout(QUIET) {
        assert_eq!(f.command, "MESSAGE", "{f:?}");
        got.push(f.body_text());
    }
    // Leave before returning: a consumer still attached when the connection
    // closes would take (and auto-ack) what the test sends next.
    c.send_frame("UNSUBSCRIBE", &[("id", "drain"), ("receipt", "gone")], b"");
    loop {
        let f = c.recv().expect("RECEIPT for UNSUBSCRIBE");
        match f.command.as_str() {
            "MESSAGE" => got.push(f.body_text()),
            "RECEIPT" => break,
            other => panic!("unexpected {other}: {f:?}"),
        }
    }
    got
}

#[test]
fn stomp_a_refused_send_rolls_back_every_send() {
    let (_dir, broker) = start(SHORT_DELAYS);
    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    c.send("/queue/tx", "m1", &[("transaction", "t")]);
    c.send(
        "/queue/tx",
        "m2",
        &[("transaction", "t"), ("AMQ_SCHEDULED_DELAY", "60000")],
    );
    c.send("/queue/tx", "m3", &[("transaction", "t")]);
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let f = expect_error_for(&mut c, "c");
    let message = f.header("message").unwrap_or_default();
    assert!(message.contains("rolled back"), "{message}");
    assert!(
        message.contains("60000") || message.contains("exceeds"),
        "{message}"
    );
    assert!(c.recv_timeout(QUIET).is_none(), "the connection closes");
    assert_eq!(drain(&broker, "/queue/tx"), Vec::<String>::new());
}

#[test]
fn stomp_an_unknown_ack_rolls_back_every_ack() {
    let (_dir, broker) = start(SHORT_DELAYS);
    let mut producer = broker.client();
    producer.send_receipted("/queue/acks", "keep", &[], "p");
    let mut c = broker.client();
    c.subscribe("s", "/queue/acks", "client-individual");
    let f = c.recv().expect("MESSAGE");
    assert_eq!(f.body_text(), "keep");
    let id = f.header("ack").unwrap().to_owned();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    c.send_frame("ACK", &[("id", &id), ("transaction", "t")], b"");
    c.send_frame("ACK", &[("id", "999.999"), ("transaction", "t")], b"");
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let f = expect_error_for(&mut c, "c");
    assert!(
        f.header("message").unwrap_or_default().contains("999.999"),
        "{f:?}"
    );
    drop(c);
    assert_eq!(drain(&broker, "/queue/acks"), ["keep"], "not acknowledged");
}

#[test]
fn stomp_a_dropped_connection_rolls_back_its_transactions() {
    let (_dir, broker) = start(SHORT_DELAYS);
    let mut producer = broker.client();
    producer.send_receipted("/queue/drop", "keep", &[], "p");
    let mut c = broker.client();
    c.subscribe("s", "/queue/drop", "client-individual");
    let f = c.recv().expect("MESSAGE");
    let id = f.header("ack").unwrap().to_owned();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    c.send_frame("ACK", &[("id", &id), ("transaction", "t")], b"");
    c.send("/queue/drop-out", "never", &[("transaction", "t")]);
    drop(c);
    assert_eq!(drain(&broker, "/queue/drop"), ["keep"]);
    assert_eq!(drain(&broker, "/queue/drop-out"), Vec::<String>::new());
}

#[test]
fn stomp_a_transaction_commits_its_sends_and_acks() {
    let (_dir, broker) = start(SHORT_DELAYS);
    let mut producer = broker.client();
    producer.send_receipted("/queue/in", "request", &[], "p");
    let mut c = broker.client();
    c.subscribe("s", "/queue/in", "client-individual");
    let f = c.recv().expect("MESSAGE");
    let id = f.header("ack").unwrap().to_owned();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    c.send("/queue/out", "reply 1", &[("transaction", "t")]);
    c.send(
        "/queue/out",
        "reply 2",
        &[("transaction", "t"), ("persistent", "true")],
    );
    c.send_frame("ACK", &[("id", &id), ("transaction", "t")], b"");
    assert_eq!(drain(&broker, "/queue/out"), Vec::<String>::new());
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let r = c.recv().expect("RECEIPT");
    assert_eq!(r.command, "RECEIPT", "{r:?}");
    assert_eq!(r.header("receipt-id"), Some("c"));
    drop(c);
    assert_eq!(drain(&broker, "/queue/out"), ["reply 1", "reply 2"]);
    assert_eq!(drain(&broker, "/queue/in"), Vec::<String>::new(), "acked");
}

#[test]
fn stomp_each_limit_fails_with_an_error_naming_it() {
    let config = "[limits]\nmax_transaction_ops = 3\nmax_transaction_bytes = \"4KiB\"\n\
                  max_open_transactions = 2\n";
    let (_dir, broker) = start(config);

    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    for i in 0..4 {
        c.send("/queue/ops", &format!("m{i}"), &[("transaction", "t")]);
    }
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let f = expect_error_for(&mut c, "c");
    assert!(f.body_text().contains("max_transaction_ops"), "{f:?}");
    assert_eq!(drain(&broker, "/queue/ops"), Vec::<String>::new());

    let mut c = broker.client();
    let big = "x".repeat(2048);
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    for _ in 0..2 {
        c.send("/queue/bytes", &big, &[("transaction", "t")]);
    }
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let f = expect_error_for(&mut c, "c");
    assert!(f.body_text().contains("max_transaction_bytes"), "{f:?}");
    assert_eq!(drain(&broker, "/queue/bytes"), Vec::<String>::new());

    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "a")], b"");
    c.send_frame("BEGIN", &[("transaction", "b")], b"");
    c.send_frame("BEGIN", &[("transaction", "c"), ("receipt", "r")], b"");
    let f = expect_error_for(&mut c, "r");
    assert!(f.body_text().contains("max_open_transactions"), "{f:?}");
}

#[test]
fn stomp_queues_made_at_commit_count_against_the_queue_limit() {
    let (_dir, broker) = start(TWO_QUEUES);
    let mut c = broker.client();
    c.send_receipted("/queue/made.a", "outside", &[], "p");
    // Two new queues where one place is left: refused whole.
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    for (dest, body) in [("made.a", "m1"), ("made.b", "m2"), ("made.c", "m3")] {
        c.send(&format!("/queue/{dest}"), body, &[("transaction", "t")]);
    }
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let f = expect_error_for(&mut c, "c");
    let message = f.header("message").unwrap_or_default();
    assert!(message.contains("rolled back"), "{message}");
    assert!(message.contains("max_queues_per_user"), "{message}");
    assert_eq!(drain(&broker, "/queue/made.a"), ["outside"]);
    // Nothing was made: one new queue still fits, and then counts.
    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "t1")], b"");
    c.send("/queue/made.b", "m4", &[("transaction", "t1")]);
    c.send_frame("COMMIT", &[("transaction", "t1"), ("receipt", "c1")], b"");
    let f = c.recv().expect("a frame");
    assert_eq!(f.command, "RECEIPT", "{f:?}");
    c.send_frame("BEGIN", &[("transaction", "t2")], b"");
    c.send("/queue/made.c", "m5", &[("transaction", "t2")]);
    c.send_frame("COMMIT", &[("transaction", "t2"), ("receipt", "c2")], b"");
    let f = expect_error_for(&mut c, "c2");
    assert!(
        f.header("message")
            .unwrap_or_default()
            .contains("max_queues_per_user"),
        "{f:?}"
    );
    assert_eq!(drain(&broker, "/queue/made.b"), ["m4"]);
}

#[test]
fn stomp_a_topic_send_to_a_full_fail_subscriber_rolls_back_every_send() {
    let (_dir, broker) = start(FULL_TOPICS);
    let mut held = broker.client();
    held.subscribe("s", "/topic/full.news", "client-individual");
    let mut producer = broker.client();
    producer.send_receipted("/topic/full.news", &"x".repeat(FILLER), &[], "p");
    // Delivered, never acknowledged: the subscriber's queue stays full.
    assert_eq!(held.recv().expect("MESSAGE").command, "MESSAGE");
    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    c.send("/queue/side", "m1", &[("transaction", "t")]);
    c.send("/topic/full.news", "m2", &[("transaction", "t")]);
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let f = expect_error_for(&mut c, "c");
    let message = f.header("message").unwrap_or_default();
    assert!(message.contains("rolled back"), "{message}");
    assert!(message.contains("max_size_bytes"), "{message}");
    assert!(
        held.recv_timeout(QUIET).is_none(),
        "the topic send was not applied"
    );
    assert_eq!(drain(&broker, "/queue/side"), Vec::<String>::new());
}

#[test]
fn stomp_a_full_drop_subscriber_loses_only_its_copy_of_a_committed_topic_send() {
    let (_dir, broker) = start(FULL_TOPICS);
    let mut held = broker.client();
    held.subscribe("s", "/topic/drops.news", "client-individual");
    let mut taker = broker.client();
    taker.subscribe("s", "/topic/drops.news", "auto");
    let mut producer = broker.client();
    producer.send_receipted("/topic/drops.news", &"x".repeat(FILLER), &[], "p");
    assert_eq!(held.recv().expect("MESSAGE").command, "MESSAGE");
    assert_eq!(taker.recv().expect("MESSAGE").command, "MESSAGE");
    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "t")], b"");
    c.send("/queue/side", "m1", &[("transaction", "t")]);
    c.send("/topic/drops.news", "m2", &[("transaction", "t")]);
    c.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let r = c.recv().expect("RECEIPT");
    assert_eq!(r.command, "RECEIPT", "{r:?}");
    assert_eq!(taker.recv().expect("MESSAGE").body_text(), "m2");
    assert!(
        held.recv_timeout(QUIET).is_none(),
        "dropped for the full one"
    );
    assert_eq!(drain(&broker, "/queue/side"), ["m1"]);
}

// ---- AMQP -------------------------------------------------------------------------

struct Amqp {
    session: fe2o3_amqp::session::SessionHandle<()>,
    _connection: fe2o3_amqp::connection::ConnectionHandle<()>,
}

async fn connect(broker: &BrokerProcess) -> Amqp {
    let addr = broker.amqp.expect("broker started with AMQP");
    let mut connection = Connection::builder()
        .container_id("weir-txn-test")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(format!("amqp://{addr}").as_str())
        .await
        .expect("connection opens");
    let session = Session::begin(&mut connection)
        .await
        .expect("session begins");
    Amqp {
        session,
        _connection: connection,
    }
}

async fn sender(c: &mut Amqp, address: &str) -> Sender {
    Sender::builder()
        .name(format!("sender-{address}"))
        .target(address)
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut c.session)
        .await
        .expect("sender attaches")
}

fn message(body: &str, delay_ms: Option<u64>) -> Message<AmqpValue<String>> {
    let mut app = ApplicationProperties::builder();
    if let Some(ms) = delay_ms {
        app = app.insert("AMQ_SCHEDULED_DELAY", ms.to_string());
    }
    Message::builder()
        .application_properties(app.build())
        .value(body.to_owned())
        .build()
}

fn text(delivery: &Delivery<Body<Value>>) -> String {
    match delivery.body() {
        Body::Value(AmqpValue(Value::String(s))) => s.clone(),
        other => panic!("unexpected body {other:?}"),
    }
}

/// Bodies `address` delivers to a new receiver until it goes quiet (accepted).
async fn amqp_drain(c: &mut Amqp, address: &str) -> Vec<String> {
    let mut receiver = Receiver::attach(&mut c.session, format!("drain-{address}"), address)
        .await
        .expect("receiver attaches");
    let mut got = Vec::new();
    while let Ok(next) = tokio::time::timeout(QUIET, receiver.recv::<Body<Value>>()).await {
        let delivery = next.expect("recv");
        got.push(text(&delivery));
        receiver.accept(&delivery).await.expect("accept");
    }
    receiver.close().await.expect("receiver closes");
    got
}

/// The condition and description of a refused discharge.
fn rollback_of(result: Result<(), ControllerSendError>) -> String {
    match result {
        Err(ControllerSendError::Rejected(Rejected { error: Some(e) })) => {
            let condition = format!("{:?}", e.condition);
            assert!(
                condition.contains("Rollback"),
                "condition amqp:transaction:rollback, got {condition}"
            );
            e.description.unwrap_or_default()
        }
        other => panic!("expected the discharge refused, got {other:?}"),
    }
}

#[tokio::test]
async fn amqp_a_refused_send_rolls_back_every_send() {
    let (_dir, broker) = start(SHORT_DELAYS);
    let mut c = connect(&broker).await;
    let controller = Controller::attach(&mut c.session, "controller")
        .await
        .expect("controller attaches");
    let mut sender = sender(&mut c, "amqp.tx").await;
    let txn = Transaction::declare(&controller, None)
        .await
        .expect("declared");
    let first = txn.post(&mut sender, message("m1", None)).await.unwrap();
    assert!(matches!(first, Outcome::Accepted(_)), "{first:?}");
    let refused = txn
        .post(&mut sender, message("m2", Some(60_000)))
        .await
        .unwrap();
    assert!(matches!(refused, Outcome::Rejected(_)), "{refused:?}");
    let _ = txn.post(&mut sender, message("m3", None)).await.unwrap();
    let description = rollback_of(txn.commit().await);
    assert!(description.contains("exceeds"), "{description}");
    assert_eq!(amqp_drain(&mut c, "amqp.tx").await, Vec::<String>::new());
}

#[tokio::test]
async fn amqp_a_transaction_commits_its_sends_and_acceptances() {
    let (_dir, broker) = start(SHORT_DELAYS);
    let mut c = connect(&broker).await;
    let mut plain = sender(&mut c, "amqp.in").await;
    let outcome = plain.send(message("request", None)).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let mut receiver = Receiver::attach(&mut c.session, "r", "amqp.in")
        .await
        .unwrap();
    let request = tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("a delivery")
        .unwrap();
    let controller = Controller::attach(&mut c.session, "controller")
        .await
        .unwrap();
    let mut out = sender(&mut c, "amqp.out").await;
    let txn = Transaction::declare(&controller, None).await.unwrap();
    txn.post(&mut out, message("reply 1", None)).await.unwrap();
    txn.post(&mut out, message("reply 2", None)).await.unwrap();
    txn.accept(&mut receiver, &request).await.unwrap();
    txn.commit().await.expect("committed");
    receiver.close().await.unwrap();
    assert_eq!(amqp_drain(&mut c, "amqp.out").await, ["reply 1", "reply 2"]);
    assert_eq!(amqp_drain(&mut c, "amqp.in").await, Vec::<String>::new());
}

#[tokio::test]
async fn amqp_limits_fail_with_errors_naming_them() {
    let config = "[limits]\nmax_transaction_ops = 2\nmax_open_transactions = 1\n";
    let (_dir, broker) = start(config);
    let mut c = connect(&broker).await;
    let controller = Controller::attach(&mut c.session, "controller")
        .await
        .unwrap();
    let mut sender = sender(&mut c, "amqp.limits").await;
    let txn = Transaction::declare(&controller, None).await.unwrap();
    let second = Transaction::declare(&controller, None).await;
    match second {
        Err(e) => assert!(format!("{e:?}").contains("max_open_transactions"), "{e:?}"),
        Ok(_) => panic!("a second open transaction was declared"),
    }
    for i in 0..3 {
        let _ = txn.post(&mut sender, message(&format!("m{i}"), None)).await;
    }
    let description = rollback_of(txn.commit().await);
    assert!(description.contains("max_transaction_ops"), "{description}");
    assert_eq!(
        amqp_drain(&mut c, "amqp.limits").await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn amqp_queues_made_at_commit_count_against_the_queue_limit() {
    let (_dir, broker) = start(TWO_QUEUES);
    let mut c = connect(&broker).await;
    // The anonymous relay: each message names its queue, made when the send takes effect.
    let mut relay = Sender::builder()
        .name("relay")
        .target(Target::builder().build())
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut c.session)
        .await
        .expect("the relay attaches");
    let to = |address: &str, body: &str| {
        Message::builder()
            .properties(Properties::builder().to(address).build())
            .value(body.to_owned())
            .build()
    };
    // A fresh controller after the refused discharge: on the same one, fe2o3's next
    // declare came back with the answer meant for something else ("unknown transaction").
    let first = Controller::attach(&mut c.session, "c1").await.unwrap();
    let txn = Transaction::declare(&first, None).await.unwrap();
    for (address, body) in [("made.a", "m1"), ("made.b", "m2"), ("made.c", "m3")] {
        let outcome = txn.post(&mut relay, to(address, body)).await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }
    let description = rollback_of(txn.commit().await);
    assert!(description.contains("max_queues_per_user"), "{description}");
    // Nothing was made: two new queues fit, and then count.
    let second = Controller::attach(&mut c.session, "c2").await.unwrap();
    let txn = Transaction::declare(&second, None).await.unwrap();
    txn.post(&mut relay, to("made.a", "m4")).await.unwrap();
    txn.post(&mut relay, to("made.b", "m5")).await.unwrap();
    txn.commit().await.expect("committed");
    let txn = Transaction::declare(&second, None).await.unwrap();
    txn.post(&mut relay, to("made.c", "m6")).await.unwrap();
    let description = rollback_of(txn.commit().await);
    assert!(description.contains("max_queues_per_user"), "{description}");
    assert_eq!(amqp_drain(&mut c, "made.a").await, ["m4"]);
    assert_eq!(amqp_drain(&mut c, "made.b").await, ["m5"]);
}

#[tokio::test]
async fn amqp_a_topic_subscriber_full_at_discharge_rolls_back_every_send() {
    let (_dir, broker) = start(FULL_TOPICS);
    let mut c = connect(&broker).await;
    let mut held = Receiver::attach(&mut c.session, "held", "topic://full.amqp")
        .await
        .expect("receiver attaches");
    let controller = Controller::attach(&mut c.session, "controller")
        .await
        .unwrap();
    let mut side = sender(&mut c, "side.amqp").await;
    let mut topic = Sender::builder()
        .name("topic")
        .target("topic://full.amqp")
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut c.session)
        .await
        .expect("sender attaches");
    let txn = Transaction::declare(&controller, None).await.unwrap();
    let posted = txn.post(&mut side, message("m1", None)).await.unwrap();
    assert!(matches!(posted, Outcome::Accepted(_)), "{posted:?}");
    let posted = txn.post(&mut topic, message("m2", None)).await.unwrap();
    assert!(matches!(posted, Outcome::Accepted(_)), "{posted:?}");
    // The subscriber's queue fills after the send was added, before the discharge.
    let filler = topic
        .send(message(&"x".repeat(FILLER), None))
        .await
        .unwrap();
    assert!(matches!(filler, Outcome::Accepted(_)), "{filler:?}");
    let first = tokio::time::timeout(WAIT, held.recv::<Body<Value>>())
        .await
        .expect("the filler arrives")
        .unwrap();
    assert_eq!(text(&first).len(), FILLER);
    let description = rollback_of(txn.commit().await);
    assert!(description.contains("max_size_bytes"), "{description}");
    let more = tokio::time::timeout(QUIET, held.recv::<Body<Value>>()).await;
    assert!(more.is_err(), "the topic send was not applied: {more:?}");
    assert_eq!(amqp_drain(&mut c, "side.amqp").await, Vec::<String>::new());
}
