//! A message whose ttl ends before its delay does (Zaqar's ttl < delay), over
//! real sockets: it waits in the schedule until its ttl ends, listed by the
//! management API and by Zaqar with `include_delayed`, is then removed as an
//! expired message (to the queue's expiry address), and is delivered to no
//! STOMP consumer; a persistent one survives kill -9 until its ttl ends.

mod common;

use common::zaqar::Zaqar;
use common::BrokerProcess;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CONFIG: &str = r#"
[[queues]]
name = "short"
expiry_address = "short.expired"
"#;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What the management API and Zaqar show of `short` waiting: the
/// schedule's entries, the queue's delayed and expired counts, and Zaqar's
/// listing with `include_delayed`.
struct Seen {
    scheduled: Vec<Value>,
    delayed: u64,
    expired: u64,
    zaqar_listed: usize,
}

fn seen(z: &Zaqar) -> Seen {
    let schedule = z.json("GET", "/api/schedule?queue=short", None, StatusCode::OK);
    let queue = z.json("GET", "/api/queues/short", None, StatusCode::OK);
    let r = z.send(
        "GET",
        "/v2/queues/short/messages?include_delayed=true",
        None,
    );
    let zaqar_listed = match r.status() {
        StatusCode::NO_CONTENT => 0,
        StatusCode::OK => r.json::<Value>().unwrap()["messages"]
            .as_array()
            .map_or(0, Vec::len),
        other => panic!("listing: {other}"),
    };
    Seen {
        scheduled: schedule["items"].as_array().unwrap().clone(),
        delayed: queue["messages"]["delayed"].as_u64().unwrap(),
        expired: queue["totals"]["expired"].as_u64().unwrap(),
        zaqar_listed,
    }
}

fn wait_until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_message_whose_ttl_ends_first_waits_until_then_and_is_never_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(CONFIG));
    let z = Zaqar::new(&broker);
    let mut consumer = broker.client();
    consumer.subscribe("1", "/queue/short", "auto");
    let mut expired = broker.client();
    expired.subscribe("2", "/queue/short.expired", "auto");
    let mut producer = broker.client();
    let sent = now_ms();
    producer.send_receipted(
        "/queue/short",
        "short-lived",
        &[("x-delay", "4000"), ("ttl", "1000"), ("persistent", "true")],
        "r1",
    );

    let before = seen(&z);
    assert!(
        now_ms() < sent + 1000,
        "too slow to see it before its ttl ends"
    );
    assert_eq!(before.scheduled.len(), 1, "waits in the schedule");
    let due = before.scheduled[0]["due_ms"].as_u64().unwrap();
    assert!(due >= sent + 4000, "shown with its due time: {due}");
    assert_eq!((before.delayed, before.expired), (1, 0));
    assert_eq!(before.zaqar_listed, 1, "listed with include_delayed");

    let got = expired
        .recv_timeout(Duration::from_secs(3))
        .expect("expired to the expiry address");
    let at = now_ms();
    assert_eq!(got.body_text(), "short-lived");
    assert!(
        at >= sent + 1000,
        "at its ttl's end, not {} ms before",
        sent + 1000 - at
    );
    assert!(at < sent + 4000, "at its ttl's end, not when due");
    wait_until("gone from the schedule", Duration::from_secs(2), || {
        let after = seen(&z);
        after.scheduled.is_empty() && after.delayed == 0 && after.zaqar_listed == 0
    });
    assert_eq!(seen(&z).expired, 1);

    // Past its due time: still delivered to nobody.
    std::thread::sleep(Duration::from_millis(
        (sent + 4500).saturating_sub(now_ms()),
    ));
    assert!(consumer.recv_timeout(Duration::from_millis(200)).is_none());
}

#[test]
fn a_persistent_one_survives_kill_9_until_its_ttl_ends() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(CONFIG));
    let mut producer = broker.client();
    let sent = now_ms();
    let ttl = 6000;
    producer.send_receipted(
        "/queue/short",
        "survivor",
        &[
            ("x-delay", "20000"),
            ("ttl", &ttl.to_string()),
            ("persistent", "true"),
        ],
        "r1",
    );
    drop(producer);
    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    let after_restart = seen(&z);
    assert!(
        now_ms() < sent + ttl,
        "the restart took too long to test this"
    );
    assert_eq!(after_restart.scheduled.len(), 1, "recovered, waiting");
    assert_eq!(after_restart.delayed, 1);

    let mut consumer = broker.client();
    consumer.subscribe("1", "/queue/short", "auto");
    let mut expired = broker.client();
    expired.subscribe("2", "/queue/short.expired", "auto");
    let got = expired
        .recv_timeout(Duration::from_secs(8))
        .expect("expired to the expiry address");
    assert_eq!(got.body_text(), "survivor");
    assert!(now_ms() >= sent + ttl, "not before its ttl ends");
    wait_until("gone from the schedule", Duration::from_secs(2), || {
        seen(&z).scheduled.is_empty()
    });
    assert!(consumer.recv_timeout(Duration::from_millis(200)).is_none());

    // Its record went with it: the next start does not bring it back.
    drop((consumer, expired));
    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    let again = seen(&z);
    assert!(again.scheduled.is_empty() && again.delayed == 0);
}
