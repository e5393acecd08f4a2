//! Memory limits in bytes over real sockets, both protocols: `global_max_size`
//! and `max_size_bytes` with each `address_full_policy` (PAGE keeps every
//! message in order with memory bounded, FAIL refuses, DROP discards, BLOCK
//! stops producers without receipts while consumers go on, then resumes).

mod common;

use common::{BrokerProcess, Stomp};
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Body, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[broker]
global_max_size = "4MiB"

[address_settings."paged"]
max_size_bytes = "1MiB"

[address_settings."failing.#"]
max_size_bytes = "64KiB"
address_full_policy = "FAIL"

[address_settings."dropping"]
max_size_bytes = "64KiB"
address_full_policy = "DROP"

[address_settings."blocked.#"]
max_size_bytes = "64KiB"
address_full_policy = "BLOCK"
"#;

/// A body that says its index, padded to `size`.
fn body(i: usize, size: usize) -> String {
    let mut text = format!("{i:08}:");
    text.extend(std::iter::repeat_n('x', size.saturating_sub(9)));
    text
}

fn index(body: &[u8]) -> usize {
    std::str::from_utf8(&body[..8])
        .ok()
        .and_then(|t| t.parse().ok())
        .expect("an index")
}

/// Takes `n` messages from `queue` (auto-ack) and checks they come in order.
fn receive_in_order(stomp: &mut Stomp, queue: &str, n: usize) {
    stomp.subscribe("in-order", queue, "auto");
    for want in 0..n {
        let f = stomp
            .recv()
            .unwrap_or_else(|| panic!("message {want} of {n}"));
        assert_eq!(f.command, "MESSAGE", "{f:?}");
        assert_eq!(index(&f.body), want, "order kept");
    }
    assert!(
        stomp.recv_timeout(Duration::from_millis(300)).is_none(),
        "nothing more"
    );
}

fn start() -> (tempfile::TempDir, BrokerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp_and_http(&dir.path().join("data"), Some(CONFIG));
    (dir, broker)
}

#[test]
fn page_keeps_every_message_in_order_and_memory_bounded() {
    let (_dir, broker) = start();
    let before = broker.rss_bytes();
    let mut producer = broker.client();
    // 96 MiB of non-persistent messages, no consumer: 24 times global_max_size.
    const N: usize = 1536;
    const SIZE: usize = 64 * 1024;
    for i in 0..N {
        producer.send("unlimited", &body(i, SIZE), &[]);
    }
    producer.send_receipted("unlimited", &body(N, SIZE), &[], "last");
    let grown = broker.rss_bytes().saturating_sub(before);
    // RocksDB's memtables (48 MiB at most) hold what was paged until flushed.
    assert!(
        grown < 64 << 20,
        "RSS grew {} MiB for 96 MiB sent with global_max_size 4MiB",
        grown >> 20
    );
    // max_size_bytes pages a queue on its own, well before the global limit.
    for i in 0..200 {
        producer.send("paged", &body(i, 16 * 1024), &[]);
    }
    producer.send_receipted("paged", &body(200, 16 * 1024), &[], "paged");
    let mut consumer = broker.client();
    receive_in_order(&mut consumer, "paged", 201);
    receive_in_order(&mut broker.client(), "unlimited", N + 1);
}

/// A consumer with a deep window (the default 1,000) on a queue paged far past
/// the limit: what it is sent and has not acknowledged stays bounded in bytes,
/// not only in messages, so large messages cannot bring the whole queue back
/// into memory; acknowledging lets the rest come, in order.
#[test]
fn a_deep_window_on_large_paged_messages_keeps_memory_bounded() {
    let (_dir, broker) = start();
    let mut producer = broker.client();
    // 96 MiB of 256 KiB messages with global_max_size 4MiB: almost all paged.
    const N: usize = 384;
    const SIZE: usize = 256 * 1024;
    for i in 0..N {
        producer.send("deep", &body(i, SIZE), &[]);
    }
    producer.send_receipted("deep", &body(N, SIZE), &[], "last");
    let before = broker.rss_bytes();
    let mut consumer = broker.client();
    consumer.subscribe("deep", "/queue/deep", "client-individual");
    // Unacknowledged, the window would take every message; memory must not.
    let mut held = Vec::new();
    while let Some(f) = consumer.recv_timeout(Duration::from_millis(700)) {
        assert_eq!(f.command, "MESSAGE", "{f:?}");
        held.push(f);
    }
    let grown = broker.rss_bytes().saturating_sub(before);
    assert!(
        held.len() < N / 4,
        "{} of {N} messages sent to a consumer that acknowledged none",
        held.len()
    );
    assert!(
        grown < 32 << 20,
        "RSS grew {} MiB while a consumer held {} messages of 256 KiB",
        grown >> 20,
        held.len()
    );
    let mut next = 0;
    for f in held {
        assert_eq!(index(&f.body), next, "order kept");
        next += 1;
        consumer.ack(&f);
    }
    while next <= N {
        let f = consumer
            .recv()
            .unwrap_or_else(|| panic!("message {next} of {}", N + 1));
        assert_eq!(index(&f.body), next, "order kept");
        next += 1;
        consumer.ack(&f);
    }
}

#[test]
fn fail_refuses_sends_with_a_stomp_error() {
    let (_dir, broker) = start();
    let mut producer = broker.client();
    // One send at a time, each answered: after its ERROR the broker closes the
    // connection, and writing on into a closed socket would fail the client first.
    let mut answer = None;
    for i in 0..40 {
        let receipt = format!("r{i}");
        producer.send(
            "failing.stomp",
            &body(i, 16 * 1024),
            &[("receipt", &receipt)],
        );
        let f = producer.recv().expect("an answer");
        if f.command != "RECEIPT" {
            answer = Some(f);
            break;
        }
    }
    let f = answer.expect("refused before 40 x 16 KiB went into a 64 KiB queue");
    assert_eq!(f.command, "ERROR", "{f:?}");
    let message = f.header("message").unwrap_or_default();
    assert!(message.contains("max_size_bytes"), "{message}");
    assert!(message.contains("failing.stomp"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_rejects_amqp_transfers_with_resource_limit_exceeded() {
    let (_dir, broker) = start();
    let addr = broker.amqp.expect("amqp");
    let mut connection = Connection::open("fail", format!("amqp://{addr}").as_str())
        .await
        .expect("connection");
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::builder()
        .name("s")
        .target("failing.amqp")
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut session)
        .await
        .expect("sender");
    let mut accepted = 0;
    let mut rejection = None;
    for i in 0..40 {
        match sender.send(body(i, 16 * 1024)).await.expect("an outcome") {
            Outcome::Accepted(_) => accepted += 1,
            Outcome::Rejected(r) => {
                rejection = Some(r);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let rejection = format!("{:?}", rejection.expect("rejected once full"));
    assert!(rejection.contains("ResourceLimitExceeded"), "{rejection}");
    assert!((2..10).contains(&accepted), "{accepted} accepted of 64KiB");
    // Room again once a consumer takes them.
    let mut consumer = broker.client();
    consumer.subscribe("c", "failing.amqp", "auto");
    for _ in 0..accepted {
        assert_eq!(consumer.recv().expect("message").command, "MESSAGE");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sender.send(body(99, 16)).await.expect("an outcome") {
            Outcome::Accepted(_) => break,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("still refused after draining: {other:?}"),
        }
    }
    let _ = sender.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;
}

#[test]
fn drop_discards_silently() {
    let (_dir, broker) = start();
    let mut producer = broker.client();
    for i in 0..40 {
        producer.send("dropping", &body(i, 16 * 1024), &[]);
    }
    producer.send_receipted("dropping", &body(40, 16 * 1024), &[], "no-error");
    let mut consumer = broker.client();
    consumer.subscribe("c", "dropping", "auto");
    let mut got = Vec::new();
    while let Some(f) = consumer.recv_timeout(Duration::from_millis(500)) {
        got.push(index(&f.body));
    }
    assert!(
        (2..10).contains(&got.len()),
        "what fit in 64KiB is kept, the rest dropped: {got:?}"
    );
    assert_eq!(
        got,
        (0..got.len()).collect::<Vec<_>>(),
        "the first ones kept"
    );
}

#[test]
fn block_pauses_a_fire_and_forget_stomp_producer_until_consumers_drain() {
    let (_dir, broker) = start();
    let addr = broker.stomp;
    const N: usize = 200;
    let sent = Arc::new(AtomicUsize::new(0));
    let producer = std::thread::spawn({
        let sent = sent.clone();
        move || {
            let mut producer = Stomp::connect(addr, &[]);
            for i in 0..N {
                producer.send("blocked.stomp", &body(i, 4096), &[]);
                sent.fetch_add(1, Ordering::Relaxed);
            }
            producer.send("blocked.stomp", &body(N, 16), &[("receipt", "done")]);
            let f = producer.recv().expect("RECEIPT once resumed");
            assert_eq!(f.command, "RECEIPT", "{f:?}");
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !producer.is_finished(),
        "the producer is held: no receipt yet"
    );
    // Other producers and queues are not held.
    let mut other = broker.client();
    other.send_receipted("elsewhere", "free", &[], "elsewhere");
    // What an operator sees: the queue holds its producers, the other one does not.
    let http = broker.http.expect("HTTP listener");
    let get = |path: &str| {
        reqwest::blocking::get(format!("http://{http}{path}"))
            .and_then(|r| r.text())
            .expect(path)
    };
    let metrics = get("/metrics");
    assert!(
        metrics.contains("weir_queue_producers_blocked{queue=\"blocked.stomp\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_queue_producers_blocked{queue=\"elsewhere\"} 0"));
    assert!(metrics.contains("weir_queue_held_sends{queue=\"blocked.stomp\"} "));
    let info: serde_json::Value = serde_json::from_str(&get("/api/broker")).unwrap();
    assert_eq!(info["flow"]["blocking_queues"], 1, "{info}");
    // A consumer drains the queue; the producer resumes and finishes.
    let mut consumer = broker.client();
    consumer.subscribe("c", "blocked.stomp", "auto");
    for want in 0..=N {
        let f = consumer.recv().unwrap_or_else(|| panic!("message {want}"));
        assert_eq!(index(&f.body), want, "order kept");
    }
    producer.join().expect("the producer finished");
    assert!(get("/metrics").contains("weir_queue_producers_blocked{queue=\"blocked.stomp\"} 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_withholds_amqp_credit_while_the_same_connection_still_consumes() {
    let (_dir, broker) = start();
    let addr = broker.amqp.expect("amqp");
    let mut connection = Connection::open("block", format!("amqp://{addr}").as_str())
        .await
        .expect("connection");
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::builder()
        .name("s")
        .target("blocked.amqp")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("sender");
    let mut receiver = Receiver::attach(&mut session, "r", "free.amqp")
        .await
        .expect("receiver");
    // Far more than a credit window (1000): the sender runs out of credit.
    const N: usize = 3000;
    let sent = Arc::new(AtomicUsize::new(0));
    let sending = tokio::spawn({
        let sent = sent.clone();
        async move {
            for i in 0..N {
                sender.send(body(i, 4096)).await.expect("sent");
                sent.fetch_add(1, Ordering::Relaxed);
            }
            sender
        }
    });
    // Sending stalls: no more credit.
    let mut last = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = sent.load(Ordering::Relaxed);
        if now == last {
            break;
        }
        assert!(Instant::now() < deadline, "sending never stalled");
        last = now;
    }
    assert!(last < N, "the sender was held back: {last} of {N}");
    assert!(!sending.is_finished());
    // The same connection still receives.
    let mut stomp = broker.client();
    for i in 0..5 {
        stomp.send("free.amqp", &body(i, 16), &[]);
    }
    for want in 0..5 {
        let d = tokio::time::timeout(Duration::from_secs(5), receiver.recv::<Body<Value>>())
            .await
            .expect("delivered while the sender is blocked")
            .expect("a delivery");
        receiver.accept(&d).await.expect("settled");
        let bytes: Vec<u8> = match d.body() {
            Body::Data(sections) => sections.iter().flat_map(|s| s.0.to_vec()).collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(index(&bytes), want);
    }
    // Draining the blocked queue gives the credit back: everything arrives, in order.
    let mut consumer = broker.client();
    consumer.subscribe("c", "blocked.amqp", "auto");
    for want in 0..N {
        let f = consumer.recv().unwrap_or_else(|| panic!("message {want}"));
        assert_eq!(f.command, "MESSAGE");
        let body = f.body.clone();
        assert_eq!(index(&body), want, "order kept");
    }
    let sender = tokio::time::timeout(Duration::from_secs(10), sending)
        .await
        .expect("the sender finished")
        .expect("joined");
    let _ = sender.close().await;
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;
}
