//! The queue semantics of `spec/queue-semantics.md`, as a client sees them: the real
//! binary, raw STOMP over TCP (and fe2o3-amqp where a case needs AMQP outcomes), with
//! settings that force the less-travelled paths: a small `max_memory_messages`, a
//! `redelivery_delay`, an exclusive queue, dispatch gates, browsers, selectors.

mod common;

use common::{encode_frame, BrokerProcess, Frame, Stomp};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a message that is free to go may take to arrive.
const PROMPT: Duration = Duration::from_secs(3);

/// One `[[queues]]` table: the queue's name and its settings, each value as TOML
/// writes it (`"500ms"` quoted, `100` not).
fn queue(name: &str, settings: &[(&str, &str)]) -> String {
    let mut toml = format!("[[queues]]\nname = \"{name}\"\n");
    for (key, value) in settings {
        toml.push_str(&format!("{key} = {value}\n"));
    }
    toml
}

/// A queue with a `redelivery_delay` when one is given, and otherwise nothing set.
fn queue_redelivering(name: &str, delay: Option<&str>) -> String {
    match delay {
        Some(d) => queue(name, &[("redelivery_delay", &format!("\"{d}\""))]),
        None => queue(name, &[]),
    }
}

fn start(config: &str) -> (tempfile::TempDir, BrokerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), Some(config));
    (dir, broker)
}

/// One STOMP connection. Frames read while waiting for a receipt are kept for later.
struct Client {
    stomp: Stomp,
    pending: VecDeque<Frame>,
    receipts: u64,
}

impl Client {
    fn new(broker: &BrokerProcess) -> Client {
        Client {
            stomp: broker.client(),
            pending: VecDeque::new(),
            receipts: 0,
        }
    }

    /// Sends a frame with a receipt and waits for it.
    fn receipted(&mut self, command: &str, headers: &[(&str, &str)]) {
        self.receipts += 1;
        let receipt = format!("rc-{}", self.receipts);
        let mut all = headers.to_vec();
        all.push(("receipt", &receipt));
        self.stomp.send_frame(command, &all, b"");
        self.wait_receipt(&receipt);
    }

    fn wait_receipt(&mut self, receipt: &str) {
        loop {
            let f = self
                .stomp
                .recv()
                .unwrap_or_else(|| panic!("no RECEIPT {receipt}"));
            match f.command.as_str() {
                "RECEIPT" if f.header("receipt-id") == Some(receipt) => return,
                "MESSAGE" => self.pending.push_back(f),
                "ERROR" => panic!("ERROR: {f:?}"),
                _ => {}
            }
        }
    }

    /// Subscribes `id` to `dest` with extra SUBSCRIBE headers.
    fn subscribe(&mut self, id: &str, dest: &str, headers: &[(&str, &str)]) {
        let mut all = vec![("id", id), ("destination", dest)];
        all.extend_from_slice(headers);
        self.receipted("SUBSCRIBE", &all);
    }

    fn unsubscribe(&mut self, id: &str) {
        self.receipted("UNSUBSCRIBE", &[("id", id)]);
    }

    /// The next MESSAGE within `timeout`.
    fn message(&mut self, timeout: Duration) -> Option<Frame> {
        if let Some(f) = self.pending.pop_front() {
            return Some(f);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let f = self
                .stomp
                .recv_timeout(left.max(Duration::from_millis(1)))?;
            match f.command.as_str() {
                "MESSAGE" => return Some(f),
                "ERROR" => panic!("ERROR: {f:?}"),
                _ => {}
            }
        }
    }

    /// Up to `n` messages, as many as arrive within `within`.
    fn messages(&mut self, n: usize, within: Duration) -> Vec<Frame> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        while out.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.message(left) {
                Some(f) => out.push(f),
                None => break,
            }
        }
        out
    }

    /// Everything that arrives within `d`.
    fn quiet_for(&mut self, d: Duration) -> Vec<Frame> {
        self.messages(usize::MAX, d)
    }

    fn ack(&mut self, f: &Frame) {
        let id = f.header("ack").expect("ack header").to_owned();
        self.stomp.send_frame("ACK", &[("id", &id)], b"");
    }

    fn nack(&mut self, f: &Frame) {
        let id = f.header("ack").expect("ack header").to_owned();
        self.stomp.send_frame("NACK", &[("id", &id)], b"");
    }

    /// Sends every message in one write, a receipt on the last, and waits for it.
    fn send_all(&mut self, dest: &str, messages: &[(String, Vec<(&str, String)>)]) {
        let mut out = Vec::new();
        self.receipts += 1;
        let receipt = format!("rc-{}", self.receipts);
        for (i, (body, headers)) in messages.iter().enumerate() {
            let mut all: Vec<(&str, &str)> = vec![("destination", dest)];
            all.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
            if i + 1 == messages.len() {
                all.push(("receipt", &receipt));
            }
            encode_frame(&mut out, "SEND", &all, body.as_bytes());
        }
        self.stomp.raw(&out);
        self.wait_receipt(&receipt);
    }

    /// Closes the TCP connection without DISCONNECT.
    fn drop_connection(self) {
        drop(self.stomp);
    }
}

fn plain(body: impl Into<String>) -> (String, Vec<(&'static str, String)>) {
    (body.into(), Vec::new())
}

fn grouped(group: &str, body: impl Into<String>) -> (String, Vec<(&'static str, String)>) {
    (body.into(), vec![("JMSXGroupID", group.to_owned())])
}

fn bodies(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(Frame::body_text).collect()
}

/// Asserts a long sequence, saying where it first goes wrong rather than printing it.
fn assert_sequence(got: &[String], want: &[String], what: &str) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).position(|(g, w)| g != w);
    panic!(
        "{what}: got {} of {} messages; first difference at {at:?} \
         (got {:?}, want {:?}); got ends with {:?}",
        got.len(),
        want.len(),
        at.map(|i| &got[i]),
        at.map(|i| &want[i]),
        &got[got.len().saturating_sub(3)..],
    );
}

fn redelivered(f: &Frame) -> bool {
    f.header("redelivered") == Some("true")
}

// 1. No head-of-line blocking, at any depth ------------------------------------------

/// Consumer S (prefetch 1, never acks) owns group G; `depth` messages of G are sent,
/// then 10 ungrouped and one delayed 500 ms. A second consumer must get all 11 promptly.
fn no_head_of_line_blocking(depth: usize) {
    let (_dir, broker) = start(&queue("hol", &[("max_memory_messages", "100")]));
    let mut stalled = Client::new(&broker);
    stalled.subscribe("s", "/queue/hol", &[("ack", "client"), ("prefetch", "1")]);
    let mut producer = Client::new(&broker);
    let group: Vec<_> = (1..=depth)
        .map(|i| grouped("G", format!("G-{i}")))
        .collect();
    producer.send_all("/queue/hol", &group);
    let first = stalled.message(PROMPT).expect("S takes G-1 and owns G");
    assert_eq!(first.body_text(), "G-1");
    let mut free: Vec<_> = (1..=10).map(|i| plain(format!("U-{i}"))).collect();
    free.push((
        "D".to_owned(),
        vec![("AMQ_SCHEDULED_DELAY", "500".to_owned())],
    ));
    producer.send_all("/queue/hol", &free);

    let mut second = Client::new(&broker);
    let subscribed = Instant::now();
    second.subscribe("t", "/queue/hol", &[("ack", "auto")]);
    let got = second.messages(11, PROMPT);
    let got = bodies(&got);
    let mut want: Vec<String> = (1..=10).map(|i| format!("U-{i}")).collect();
    want.push("D".to_owned());
    assert_eq!(
        got,
        want,
        "the second consumer gets the 10 ungrouped and the delayed one in {:?}, \
         whatever the depth ({depth}) of the stalled group",
        subscribed.elapsed()
    );
    assert!(
        stalled.quiet_for(Duration::from_millis(200)).is_empty(),
        "S has no credit"
    );
}

#[test]
fn no_head_of_line_blocking_at_3x_the_memory_limit() {
    no_head_of_line_blocking(300);
}

#[test]
fn no_head_of_line_blocking_at_10x_the_memory_limit() {
    no_head_of_line_blocking(1_000);
}

#[test]
fn no_head_of_line_blocking_at_100x_the_memory_limit() {
    no_head_of_line_blocking(10_000);
}

// 2. Group order survives every kind of return ---------------------------------------

#[derive(Debug, Clone, Copy)]
enum Return {
    Unsubscribe,
    ConnectionDrop,
    /// NACK both, then leave.
    Nack,
}

/// G-1..G-5 sent; the owner (prefetch 2) takes G-1, G-2 and gives them back; the
/// next consumer gets G-1..G-5 in order, 1 and 2 marked redelivered.
fn group_order_survives(how: Return, redelivery_delay: Option<&str>) {
    let (_dir, broker) = start(&queue_redelivering("ord", redelivery_delay));
    let mut owner = Client::new(&broker);
    owner.subscribe(
        "o",
        "/queue/ord",
        &[("ack", "client-individual"), ("prefetch", "2")],
    );
    let mut producer = Client::new(&broker);
    let group: Vec<_> = (1..=5).map(|i| grouped("G", format!("G-{i}"))).collect();
    producer.send_all("/queue/ord", &group);
    let held = owner.messages(2, PROMPT);
    assert_eq!(bodies(&held), ["G-1", "G-2"]);

    let mut next = Client::new(&broker);
    next.subscribe("n", "/queue/ord", &[("ack", "client-individual")]);
    assert!(
        next.quiet_for(Duration::from_millis(200)).is_empty(),
        "G is bound to its owner"
    );
    match how {
        Return::Unsubscribe => owner.unsubscribe("o"),
        Return::ConnectionDrop => owner.drop_connection(),
        Return::Nack => {
            // Newest first, the harder order to keep.
            owner.nack(&held[1]);
            owner.nack(&held[0]);
            owner.unsubscribe("o");
        }
    }
    let got = next.messages(5, PROMPT + Duration::from_secs(2));
    assert_eq!(
        bodies(&got),
        ["G-1", "G-2", "G-3", "G-4", "G-5"],
        "{how:?}, redelivery_delay {redelivery_delay:?}"
    );
    let marks: Vec<bool> = got.iter().map(redelivered).collect();
    assert_eq!(marks, [true, true, false, false, false], "{how:?}");
}

#[test]
fn group_order_survives_unsubscribe() {
    group_order_survives(Return::Unsubscribe, None);
}

#[test]
fn group_order_survives_connection_drop() {
    group_order_survives(Return::ConnectionDrop, None);
}

#[test]
fn group_order_survives_nack() {
    group_order_survives(Return::Nack, None);
}

#[test]
fn group_order_survives_unsubscribe_with_redelivery_delay() {
    group_order_survives(Return::Unsubscribe, Some("500ms"));
}

#[test]
fn group_order_survives_connection_drop_with_redelivery_delay() {
    group_order_survives(Return::ConnectionDrop, Some("500ms"));
}

#[test]
fn group_order_survives_nack_with_redelivery_delay() {
    group_order_survives(Return::Nack, Some("500ms"));
}

/// With a redelivery delay, a NACKed ungrouped message waits alone: ungrouped messages
/// sent after it go first.
#[test]
fn a_nacked_ungrouped_message_waits_alone() {
    let (_dir, broker) = start(&queue("alone", &[("redelivery_delay", "\"500ms\"")]));
    let mut c = Client::new(&broker);
    c.subscribe("c", "/queue/alone", &[("ack", "client-individual")]);
    let mut producer = Client::new(&broker);
    producer.send_all("/queue/alone", &[plain("U-1")]);
    let first = c.message(PROMPT).expect("U-1");
    assert_eq!(first.body_text(), "U-1");
    c.nack(&first);
    producer.send_all("/queue/alone", &[plain("U-2"), plain("U-3")]);
    let got = c.messages(3, PROMPT);
    assert_eq!(bodies(&got), ["U-2", "U-3", "U-1"]);
    assert!(redelivered(&got[2]));
}

// 3. Exclusive -----------------------------------------------------------------------

#[test]
fn exclusive_means_one_consumer_until_it_leaves() {
    let (_dir, broker) = start(&queue("excl", &[("exclusive", "true")]));
    let mut a = Client::new(&broker);
    a.subscribe(
        "a",
        "/queue/excl",
        &[("ack", "client-individual"), ("prefetch", "10")],
    );
    let mut producer = Client::new(&broker);
    producer.send_all("/queue/excl", &[plain("m0")]);
    let m0 = a.message(PROMPT).expect("A receives");
    assert_eq!(m0.body_text(), "m0");
    a.ack(&m0);

    let mut b = Client::new(&broker);
    b.subscribe(
        "b",
        "/queue/excl",
        &[("ack", "client-individual"), ("consumer-priority", "10")],
    );
    let twenty: Vec<_> = (1..=20).map(|i| plain(format!("m{i}"))).collect();
    producer.send_all("/queue/excl", &twenty);
    let to_a = a.messages(10, PROMPT);
    assert_eq!(
        bodies(&to_a),
        (1..=10).map(|i| format!("m{i}")).collect::<Vec<_>>(),
        "A is the exclusive consumer (prefetch 10)"
    );
    let to_b = b.quiet_for(Duration::from_millis(500));
    assert!(
        to_b.is_empty(),
        "a priority-10 newcomer does not take over: {:?}",
        bodies(&to_b)
    );

    // A leaves holding m1..m10: B gets them first, then the rest.
    a.unsubscribe("a");
    let got = b.messages(20, PROMPT);
    assert_eq!(
        bodies(&got),
        (1..=20).map(|i| format!("m{i}")).collect::<Vec<_>>()
    );
    let marks: Vec<bool> = got.iter().map(redelivered).collect();
    assert!(
        marks[..10].iter().all(|r| *r),
        "A's unacked ones: {marks:?}"
    );
    assert!(marks[10..].iter().all(|r| !*r), "{marks:?}");
}

// 4. Dispatch gates ------------------------------------------------------------------

#[test]
fn consumers_before_dispatch_without_a_time_limit_then_stays_open() {
    let (_dir, broker) = start(&queue(
        "gate",
        &[
            ("consumers_before_dispatch", "2"),
            ("delay_before_dispatch", "-1"),
        ],
    ));
    let mut producer = Client::new(&broker);
    let six: Vec<_> = (1..=6).map(|i| plain(format!("m{i}"))).collect();
    producer.send_all("/queue/gate", &six);
    let mut first = Client::new(&broker);
    first.subscribe("f", "/queue/gate", &[("ack", "auto")]);
    assert!(
        first.quiet_for(Duration::from_secs(1)).is_empty(),
        "one consumer of two: nothing, for as long as it takes"
    );
    let mut second = Client::new(&broker);
    second.subscribe("s", "/queue/gate", &[("ack", "auto")]);
    let mut got = first.quiet_for(Duration::from_millis(700));
    let to_second = second.quiet_for(Duration::from_millis(300));
    assert!(!got.is_empty() && !to_second.is_empty(), "both receive");
    got.extend(to_second);
    assert_eq!(got.len(), 6);

    // One leaves: dispatch stays on for the other.
    second.unsubscribe("s");
    let more: Vec<_> = (7..=9).map(|i| plain(format!("m{i}"))).collect();
    producer.send_all("/queue/gate", &more);
    assert_eq!(bodies(&first.messages(3, PROMPT)), ["m7", "m8", "m9"]);
}

#[test]
fn delay_before_dispatch_zero_does_not_wait() {
    let (_dir, broker) = start(&queue(
        "nowait",
        &[
            ("consumers_before_dispatch", "2"),
            ("delay_before_dispatch", "\"0\""),
        ],
    ));
    let mut producer = Client::new(&broker);
    producer.send_all("/queue/nowait", &[plain("m1")]);
    let mut only = Client::new(&broker);
    let subscribed = Instant::now();
    only.subscribe("o", "/queue/nowait", &[("ack", "auto")]);
    let got = only.message(Duration::from_millis(500));
    assert_eq!(got.map(|f| f.body_text()).as_deref(), Some("m1"));
    assert!(subscribed.elapsed() < Duration::from_millis(500));
}

#[test]
fn delay_before_dispatch_waits_that_long_for_the_count() {
    let (_dir, broker) = start(&queue(
        "wait",
        &[
            ("consumers_before_dispatch", "2"),
            ("delay_before_dispatch", "\"700ms\""),
        ],
    ));
    let mut producer = Client::new(&broker);
    producer.send_all("/queue/wait", &[plain("m1")]);
    let mut only = Client::new(&broker);
    let subscribed = Instant::now();
    only.subscribe("o", "/queue/wait", &[("ack", "auto")]);
    assert!(
        only.quiet_for(Duration::from_millis(550)).is_empty(),
        "not before the delay"
    );
    let got = only.message(PROMPT).expect("after the delay");
    assert_eq!(got.body_text(), "m1");
    let waited = subscribed.elapsed();
    assert!(
        waited >= Duration::from_millis(650) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}

// 5. Browsers see the whole queue ----------------------------------------------------

fn browser_sees_everything(count: usize) {
    let (_dir, broker) = start(&queue("browse", &[("max_memory_messages", "100")]));
    let mut producer = Client::new(&broker);
    let all: Vec<_> = (1..=count).map(|i| plain(format!("m{i}"))).collect();
    producer.send_all("/queue/browse", &all);
    let mut browser = Client::new(&broker);
    browser.subscribe(
        "b",
        "/queue/browse",
        &[("browser", "true"), ("ack", "auto")],
    );
    let mut seen = browser.messages(count, PROMPT + Duration::from_secs(2));
    seen.extend(browser.quiet_for(Duration::from_millis(300)));
    assert_sequence(
        &bodies(&seen),
        &(1..=count).map(|i| format!("m{i}")).collect::<Vec<_>>(),
        "the browser sees every message, in order, exactly once",
    );
    // Browsing takes nothing: a consumer still gets them all.
    let mut consumer = Client::new(&broker);
    consumer.subscribe("c", "/queue/browse", &[("ack", "auto")]);
    assert_eq!(consumer.messages(count, PROMPT).len(), count);
}

#[test]
fn a_browser_sees_a_queue_deeper_than_memory() {
    browser_sees_everything(150);
}

#[test]
fn a_browser_sees_a_queue_ten_times_deeper_than_memory() {
    browser_sees_everything(1_000);
}

// 6. A grouped message its owner's selector rejects -----------------------------------

#[test]
fn a_group_waits_for_its_owner_when_its_selector_rejects_the_next_message() {
    let (_dir, broker) = start(&queue("sel", &[]));
    let mut owner = Client::new(&broker);
    owner.subscribe(
        "o",
        "/queue/sel",
        &[("ack", "client-individual"), ("selector", "kind = 'a'")],
    );
    let mut producer = Client::new(&broker);
    let with_kind = |body: &str, kind: &str| {
        (
            body.to_owned(),
            vec![("JMSXGroupID", "G".to_owned()), ("kind", kind.to_owned())],
        )
    };
    producer.send_all("/queue/sel", &[with_kind("G-1", "a")]);
    let g1 = owner
        .message(PROMPT)
        .expect("the owner takes G-1 and owns G");
    assert_eq!(g1.body_text(), "G-1");
    owner.ack(&g1);

    let mut other = Client::new(&broker);
    other.subscribe("p", "/queue/sel", &[("ack", "auto")]);
    producer.send_all(
        "/queue/sel",
        &[
            with_kind("G-2", "b"),
            plain("U-1"),
            plain("U-2"),
            plain("U-3"),
        ],
    );
    let flowing = other.messages(3, PROMPT);
    assert_eq!(
        bodies(&flowing),
        ["U-1", "U-2", "U-3"],
        "ungrouped messages keep flowing; G-2 waits for its owner"
    );
    assert!(other.quiet_for(Duration::from_millis(300)).is_empty());
    assert!(owner.quiet_for(Duration::from_millis(100)).is_empty());

    owner.unsubscribe("o");
    let g2 = other.message(PROMPT).expect("G-2 once the owner is gone");
    assert_eq!(g2.body_text(), "G-2");
}

// AMQP outcomes ----------------------------------------------------------------------

mod amqp {
    use super::{queue_redelivering, start_amqp, Client, PROMPT};
    use fe2o3_amqp::link::delivery::Delivery;
    use fe2o3_amqp::link::CreditMode;
    use fe2o3_amqp::types::messaging::{Body, Modified};
    use fe2o3_amqp::types::primitives::Value;
    use fe2o3_amqp::{Connection, Receiver, Session};
    use std::time::Duration;

    fn text(d: &Delivery<Body<Value>>) -> String {
        match d.body() {
            Body::Value(v) => match &v.0 {
                Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            },
            Body::Data(batch) => batch
                .iter()
                .map(|d| String::from_utf8_lossy(&d.0).into_owned())
                .collect(),
            other => format!("{other:?}"),
        }
    }

    async fn recv(r: &mut Receiver) -> Delivery<Body<Value>> {
        tokio::time::timeout(PROMPT, r.recv::<Body<Value>>())
            .await
            .expect("a delivery in time")
            .expect("recv")
    }

    /// How the AMQP owner gives its messages back.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Outcome {
        Released,
        /// Modified, delivery-failed.
        Failed,
        /// Modified, delivery-failed and undeliverable-here.
        UndeliverableHere,
    }

    /// G-1..G-5 from STOMP; an AMQP owner (credit 2) takes G-1, G-2 and gives them
    /// back, newest first. Released or failed, the owner stays bound and gets them back
    /// before G-3; undeliverable-here, the group goes to a STOMP consumer, in order.
    async fn owner_returns(how: Outcome, redelivery_delay: Option<&str>) {
        let (_dir, broker) = start_amqp(&queue_redelivering("amqp.ord", redelivery_delay));
        let addr = broker.amqp.expect("AMQP listener");
        let mut connection = Connection::open("semantics", format!("amqp://{addr}").as_str())
            .await
            .expect("connect");
        let mut session = Session::begin(&mut connection).await.expect("session");
        let mut owner = Receiver::builder()
            .name("owner")
            .source("amqp.ord")
            .credit_mode(CreditMode::Manual)
            .attach(&mut session)
            .await
            .expect("attach");
        owner.set_credit(2).await.expect("credit");

        let mut producer = Client::new(&broker);
        let group: Vec<_> = (1..=5)
            .map(|i| super::grouped("G", format!("G-{i}")))
            .collect();
        producer.send_all("/queue/amqp.ord", &group);
        let first = recv(&mut owner).await;
        let second = recv(&mut owner).await;
        assert_eq!([text(&first), text(&second)], ["G-1", "G-2"]);

        let mut next = Client::new(&broker);
        next.subscribe("n", "/queue/amqp.ord", &[("ack", "client-individual")]);
        // Newest first, the harder order to keep.
        for d in [&second, &first] {
            match how {
                Outcome::Released => owner.release(d).await.expect("release"),
                Outcome::Failed | Outcome::UndeliverableHere => {
                    let modified = Modified {
                        delivery_failed: Some(true),
                        undeliverable_here: Some(how == Outcome::UndeliverableHere),
                        message_annotations: None,
                    };
                    owner.modify(d, modified).await.expect("modify")
                }
            }
        }
        let want = ["G-1", "G-2", "G-3", "G-4", "G-5"];
        if how == Outcome::UndeliverableHere {
            let got = next.messages(5, PROMPT + Duration::from_secs(2));
            assert_eq!(super::bodies(&got), want, "{how:?}, {redelivery_delay:?}");
        } else {
            owner.set_credit(5).await.expect("credit");
            let mut got = Vec::new();
            for _ in 0..5 {
                let d = recv(&mut owner).await;
                got.push(text(&d));
                owner.accept(&d).await.expect("accept");
            }
            assert_eq!(got, want, "{how:?}, {redelivery_delay:?}");
            assert!(next.quiet_for(Duration::from_millis(200)).is_empty());
        }
        let _ = owner.close().await;
        let _ = session.end().await;
        let _ = connection.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn released_keeps_group_order() {
        owner_returns(Outcome::Released, None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn released_keeps_group_order_with_redelivery_delay() {
        owner_returns(Outcome::Released, Some("500ms")).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn modified_delivery_failed_keeps_group_order() {
        owner_returns(Outcome::Failed, None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn modified_delivery_failed_keeps_group_order_with_redelivery_delay() {
        owner_returns(Outcome::Failed, Some("500ms")).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn modified_undeliverable_here_moves_the_group_in_order() {
        owner_returns(Outcome::UndeliverableHere, None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn modified_undeliverable_here_moves_the_group_in_order_with_redelivery_delay() {
        owner_returns(Outcome::UndeliverableHere, Some("500ms")).await;
    }
}

fn start_amqp(config: &str) -> (tempfile::TempDir, BrokerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(config));
    (dir, broker)
}
