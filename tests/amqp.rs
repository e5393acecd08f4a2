//! The broker as an independent AMQP 1.0 client sees it: the real binary, driven by
//! fe2o3-amqp, so our reading of the spec is checked against someone else's.

mod common;

use common::{BrokerProcess, Stomp};
use fe2o3_amqp::connection::{ConnectionHandle, OpenError};
use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::link::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Header, Message, Modified, Outcome,
};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::types::sasl::SaslCode;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use std::time::Duration;

const USERS: &str = "[[users]]\nname = \"u\"\npassword = \"p\"\n";
const WAIT: Duration = Duration::from_secs(10);

/// One connection with one session; dropped at the end of a test.
struct Client {
    session: SessionHandle<()>,
    _connection: ConnectionHandle<()>,
}

/// Opens a connection: SASL PLAIN with `credentials`, SASL ANONYMOUS without.
async fn connect(
    broker: &BrokerProcess,
    credentials: Option<(&str, &str)>,
) -> Result<Client, OpenError> {
    let addr = broker.amqp.expect("broker started with AMQP");
    let profile = match credentials {
        Some((user, password)) => SaslProfile::Plain {
            username: user.to_owned(),
            password: password.to_owned(),
        },
        None => SaslProfile::Anonymous,
    };
    let mut connection = Connection::builder()
        .container_id("weir-test")
        .sasl_profile(profile)
        .open(format!("amqp://{addr}").as_str())
        .await?;
    let session = Session::begin(&mut connection)
        .await
        .expect("session begins");
    Ok(Client {
        session,
        _connection: connection,
    })
}

fn text_message(body: &str, props: &[(&str, &str)]) -> Message<AmqpValue<String>> {
    let mut app = ApplicationProperties::builder();
    for (k, v) in props {
        app = app.insert(*k, *v);
    }
    Message::builder()
        .application_properties(app.build())
        .value(body.to_owned())
        .build()
}

async fn recv(receiver: &mut Receiver) -> Delivery<Body<Value>> {
    tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("a delivery within the timeout")
        .expect("recv")
}

/// Nothing arrives within a short wait.
async fn assert_empty(receiver: &mut Receiver) {
    let next = tokio::time::timeout(Duration::from_millis(500), receiver.recv::<Body<Value>>());
    if let Ok(got) = next.await {
        panic!(
            "expected no delivery, got {:?}",
            got.map(|d| body_text(d.body()))
        );
    }
}

/// The body as text, whether sent as an amqp-value string or as data sections (STOMP).
fn body_text(body: &Body<Value>) -> String {
    match body {
        Body::Value(AmqpValue(Value::String(s))) => s.clone(),
        Body::Data(sections) => sections
            .iter()
            .map(|d| String::from_utf8_lossy(&d.0).into_owned())
            .collect(),
        other => panic!("unexpected body {other:?}"),
    }
}

fn app_prop<'a>(delivery: &'a Delivery<Body<Value>>, key: &str) -> Option<&'a SimpleValue> {
    delivery.message().application_properties.as_ref()?.get(key)
}

fn delivery_count(delivery: &Delivery<Body<Value>>) -> u32 {
    delivery
        .message()
        .header
        .as_ref()
        .map_or(0, |h| h.delivery_count)
}

/// A sender whose every transfer waits for the broker's outcome.
async fn unsettled_sender(c: &mut Client, name: &str, address: &str) -> Sender {
    Sender::builder()
        .name(name)
        .target(address)
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut c.session)
        .await
        .expect("sender attaches")
}

async fn send_accepted<T>(sender: &mut Sender, message: Message<T>)
where
    T: fe2o3_amqp::types::messaging::SerializableBody,
{
    let outcome = sender.send(message).await.expect("send");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
}

#[tokio::test]
async fn plain_login_send_unsettled_receive_and_accept() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(USERS));
    let mut c = connect(&broker, Some(("u", "p"))).await.expect("login");

    let mut sender = unsettled_sender(&mut c, "s", "amqp.basic").await;
    send_accepted(&mut sender, text_message("hello", &[("color", "blue")])).await;

    let mut receiver = Receiver::attach(&mut c.session, "r", "amqp.basic")
        .await
        .unwrap();
    let d = recv(&mut receiver).await;
    assert_eq!(body_text(d.body()), "hello");
    assert_eq!(
        app_prop(&d, "color"),
        Some(&SimpleValue::String("blue".into()))
    );
    receiver.accept(&d).await.unwrap();
    receiver.close().await.unwrap();

    // Accepted means gone: a new receiver finds the queue empty.
    let mut again = Receiver::attach(&mut c.session, "r2", "amqp.basic")
        .await
        .unwrap();
    assert_empty(&mut again).await;
}

#[tokio::test]
async fn a_window_of_unsettled_sends_is_accepted_one_by_one() {
    // The broker answers a window of transfers read together with ranged
    // dispositions: every delivery must still get its own outcome.
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), None);
    let mut c = connect(&broker, None).await.expect("connect");
    let mut sender = unsettled_sender(&mut c, "s", "amqp.window").await;
    let mut outcomes = Vec::new();
    for i in 0..200 {
        let fut = sender
            .send_batchable(text_message(&format!("m{i}"), &[]))
            .await
            .expect("send");
        outcomes.push(fut);
    }
    for fut in outcomes {
        let outcome = tokio::time::timeout(WAIT, fut)
            .await
            .expect("settled in time")
            .expect("outcome");
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }
    let mut receiver = Receiver::attach(&mut c.session, "r", "amqp.window")
        .await
        .unwrap();
    for i in 0..200 {
        let d = recv(&mut receiver).await;
        assert_eq!(body_text(d.body()), format!("m{i}"));
        receiver.accept(&d).await.unwrap();
    }
}

#[tokio::test]
async fn sends_read_together_keep_their_order_and_their_own_outcomes() {
    // Transfers that one read brings in are published together, a queue at a
    // time: sends to two queues interleaved, delayed ones and refused ones
    // among them must still each get their own outcome, in their own order.
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), None);
    let mut c = connect(&broker, None).await.expect("connect");
    let mut to_a = unsettled_sender(&mut c, "sa", "amqp.batch.a").await;
    let mut to_b = unsettled_sender(&mut c, "sb", "amqp.batch.b").await;
    let refused = |i: u32| i % 30 == 7;
    let delayed = |i: u32| i % 30 == 13;
    let mut outcomes = Vec::new();
    for i in 0..300u32 {
        let mut props = ApplicationProperties::builder();
        if refused(i) {
            // Over the default maximum delay (900 s): refused.
            props = props.insert("x-delay", 10_000_000i64);
        } else if delayed(i) {
            props = props.insert("x-delay", 300i64);
        }
        let message = Message::builder()
            .application_properties(props.build())
            .value(format!("m{i}"))
            .build();
        let sender = if i % 3 == 0 { &mut to_b } else { &mut to_a };
        outcomes.push((i, sender.send_batchable(message).await.expect("send")));
    }
    for (i, fut) in outcomes {
        let outcome = tokio::time::timeout(WAIT, fut)
            .await
            .expect("settled in time")
            .expect("outcome");
        if refused(i) {
            assert!(matches!(outcome, Outcome::Rejected(_)), "m{i}: {outcome:?}");
        } else {
            assert!(matches!(outcome, Outcome::Accepted(_)), "m{i}: {outcome:?}");
        }
    }
    for (address, on_this) in [("amqp.batch.a", 1u32), ("amqp.batch.b", 0)] {
        let expected: Vec<u32> = (0..300)
            .filter(|i| (i % 3 == 0) == (on_this == 0) && !refused(*i))
            .collect();
        let mut receiver = Receiver::attach(&mut c.session, address, address)
            .await
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..expected.len() {
            let d = recv(&mut receiver).await;
            let text = body_text(d.body());
            got.push(text[1..].parse::<u32>().expect("mN"));
            receiver.accept(&d).await.unwrap();
        }
        assert_empty(&mut receiver).await;
        // Those not delayed arrive in the order sent; the delayed ones later.
        let undelayed: Vec<u32> = got.iter().copied().filter(|i| !delayed(*i)).collect();
        let expected_undelayed: Vec<u32> =
            expected.iter().copied().filter(|i| !delayed(*i)).collect();
        assert_eq!(undelayed, expected_undelayed, "{address}");
        got.sort_unstable();
        assert_eq!(got, expected, "{address}");
    }
}

#[tokio::test]
async fn wrong_password_is_refused_by_sasl() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(USERS));
    match connect(&broker, Some(("u", "wrong"))).await {
        Err(OpenError::SaslError { code, .. }) => assert_eq!(code, SaslCode::Auth),
        Err(other) => panic!("expected a SASL auth failure, got {other:?}"),
        Ok(_) => panic!("a wrong password was accepted"),
    }
    // Anonymous is off once users are configured.
    assert!(connect(&broker, None).await.is_err());
    assert!(connect(&broker, Some(("u", "p"))).await.is_ok());
}

#[tokio::test]
async fn topic_fans_out_to_every_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), None);
    let mut c = connect(&broker, None).await.expect("anonymous");

    let mut a = Receiver::attach(&mut c.session, "a", "topic://amqp.news")
        .await
        .unwrap();
    let mut b = Receiver::attach(&mut c.session, "b", "topic://amqp.news")
        .await
        .unwrap();
    let mut sender = unsettled_sender(&mut c, "s", "topic://amqp.news").await;
    for i in 0..3 {
        send_accepted(&mut sender, text_message(&format!("n{i}"), &[])).await;
    }
    for receiver in [&mut a, &mut b] {
        for i in 0..3 {
            let d = recv(receiver).await;
            assert_eq!(body_text(d.body()), format!("n{i}"));
            receiver.accept(&d).await.unwrap();
        }
        assert_empty(receiver).await;
    }
}

#[tokio::test]
async fn release_modify_and_reject_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), None);
    let mut c = connect(&broker, None).await.expect("anonymous");

    let mut sender = unsettled_sender(&mut c, "s", "amqp.retry").await;
    send_accepted(&mut sender, text_message("m1", &[])).await;

    let mut receiver = Receiver::builder()
        .name("r")
        .source("amqp.retry")
        .credit_mode(CreditMode::Auto(5))
        .attach(&mut c.session)
        .await
        .unwrap();

    let first = recv(&mut receiver).await;
    assert_eq!(body_text(first.body()), "m1");
    assert_eq!(delivery_count(&first), 0);

    // Released: comes back, and (AMQP 3.4.4) does not count as a failed attempt.
    receiver.release(&first).await.unwrap();
    let second = recv(&mut receiver).await;
    assert_eq!(body_text(second.body()), "m1");
    assert_eq!(delivery_count(&second), 0);

    // Modified with delivery-failed: comes back with the delivery count raised.
    let failed = Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    };
    receiver.modify(&second, failed).await.unwrap();
    let third = recv(&mut receiver).await;
    assert_eq!(body_text(third.body()), "m1");
    assert_eq!(delivery_count(&third), 1);
    assert_eq!(
        third.message().header.as_ref().map(|h| h.first_acquirer),
        Some(false)
    );

    // Rejected: dead-lettered, not redelivered here.
    receiver.reject(&third, None).await.unwrap();
    assert_empty(&mut receiver).await;
    let mut dlq = Receiver::attach(&mut c.session, "dlq", "DLQ")
        .await
        .unwrap();
    let dead = recv(&mut dlq).await;
    assert_eq!(body_text(dead.body()), "m1");
    dlq.accept(&dead).await.unwrap();
}

#[tokio::test]
async fn stomp_message_reaches_an_amqp_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), None);
    let mut stomp = Stomp::connect(broker.stomp, &[]);
    stomp.send_receipted(
        "/queue/amqp.bridge",
        "from stomp",
        &[("color", "green"), ("JMSXGroupID", "g-7")],
        "r1",
    );

    let mut c = connect(&broker, None).await.expect("anonymous");
    let mut receiver = Receiver::attach(&mut c.session, "r", "amqp.bridge")
        .await
        .unwrap();
    let d = recv(&mut receiver).await;
    assert_eq!(body_text(d.body()), "from stomp");
    assert_eq!(
        app_prop(&d, "color"),
        Some(&SimpleValue::String("green".into()))
    );
    let group = d
        .message()
        .properties
        .as_ref()
        .and_then(|p| p.group_id.clone());
    assert_eq!(group.as_deref(), Some("g-7"));
    receiver.accept(&d).await.unwrap();
}

// The broker restart blocks this thread; the client's tasks need another one meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_durable_messages_survive_kill_9() {
    const N: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), None);
    {
        let mut c = connect(&broker, None).await.expect("anonymous");
        let mut sender = unsettled_sender(&mut c, "s", "amqp.durable").await;
        for i in 0..N {
            let mut message = text_message(&format!("m{i}"), &[]);
            message.header = Some(Header {
                durable: true,
                ..Header::default()
            });
            send_accepted(&mut sender, message).await;
        }
    }

    let broker = broker.restart_after_kill();
    let mut c = connect(&broker, None)
        .await
        .expect("anonymous after restart");
    let mut receiver = Receiver::attach(&mut c.session, "r", "amqp.durable")
        .await
        .unwrap();
    for i in 0..N {
        let d = recv(&mut receiver).await;
        assert_eq!(body_text(d.body()), format!("m{i}"));
        receiver.accept(&d).await.unwrap();
    }
    assert_empty(&mut receiver).await;
}

/// `queue`'s producers as `/api/queues/{queue}` and `/metrics` show them, once both say
/// `expected` (a detach or a disconnect reaches the broker a little after the client
/// returns); panics after a few seconds otherwise.
fn await_producers(http: std::net::SocketAddr, queue: &str, expected: u64) {
    let queue = queue.to_owned();
    // reqwest's blocking client on a thread of its own, outside the test's runtime.
    std::thread::spawn(move || {
        let client = reqwest::blocking::Client::new();
        let series = format!("weir_queue_producers{{queue=\"{queue}\"}} {expected}");
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let info: serde_json::Value = client
                .get(format!("http://{http}/api/queues/{queue}"))
                .send()
                .and_then(|r| r.json())
                .expect("queue detail");
            let metrics = client
                .get(format!("http://{http}/metrics"))
                .send()
                .and_then(|r| r.text())
                .expect("metrics");
            if info["producers"] == expected && metrics.contains(&series) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "want {expected} producers of {queue}: {} in the API; metrics:\n{metrics}",
                info["producers"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .join()
    .expect("producers as expected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_are_counted_while_links_stay_attached_and_connections_open() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp_and_http(&dir.path().join("data"), None);
    let http = broker.http.expect("management listener");
    // One STOMP connection is one producer of a queue however many messages it sends.
    let mut first = Stomp::connect(broker.stomp, &[]);
    for i in 0..3 {
        first.send("/queue/produced", &format!("m{i}"), &[]);
    }
    first.send_receipted("/queue/produced", "last", &[], "r1");
    await_producers(http, "produced", 1);
    // A second connection, which sends elsewhere too; a topic send counts for no queue.
    let mut second = Stomp::connect(broker.stomp, &[]);
    second.send("/queue/elsewhere", "x", &[]);
    second.send("/topic/produced", "to nobody", &[]);
    second.send_receipted("/queue/produced", "y", &[], "r2");
    await_producers(http, "produced", 2);
    await_producers(http, "elsewhere", 1);

    // An AMQP sender link counts from its attach to its detach.
    let mut c = connect(&broker, None).await.expect("anonymous");
    let mut sender = unsettled_sender(&mut c, "p", "produced").await;
    send_accepted(&mut sender, text_message("from amqp", &[])).await;
    await_producers(http, "produced", 3);
    sender.close().await.expect("detach");
    await_producers(http, "produced", 2);

    // A closed connection's producers go with it.
    drop(first);
    await_producers(http, "produced", 1);
    drop(second);
    await_producers(http, "produced", 0);
    await_producers(http, "elsewhere", 0);
}
