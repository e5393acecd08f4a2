//! The management API's message, group and consumer endpoints over real sockets: a
//! broker process, an HTTP client (reqwest), and STOMP clients on the same broker that
//! see what the API did (a dead letter moved back and received, a group reset handing the
//! group to another consumer).

mod common;

use common::http::{assert_error, Api};
use common::{users_config, BrokerProcess, Stomp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// admin (ops) may manage; auditor (audit) may only view; dev (dev) may send and consume
/// but not look. `orders` gives up on a message after one failed delivery, to
/// `orders.dlq`; `deep` and `orders.dlq` page past five messages.
const PERMISSIONS: &str = r##"
[security.permissions."#"]
send = ["ops", "dev"]
consume = ["ops", "dev"]
browse = ["ops", "dev"]
create_address = ["ops", "dev"]
create_durable_queue = ["ops", "dev"]
manage = ["ops"]
view = ["audit"]

[[queues]]
name = "orders"
max_delivery_attempts = 1
dead_letter_address = "orders.dlq"

[[queues]]
name = "orders.dlq"
max_memory_messages = 5

[[queues]]
name = "deep"
max_memory_messages = 5
"##;

/// The users (password `pw`, one role each) and [`PERMISSIONS`].
fn config() -> String {
    users_config(&[("admin", "ops"), ("auditor", "audit"), ("dev", "dev")]) + PERMISSIONS
}

fn start() -> (tempfile::TempDir, BrokerProcess, Api) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(&config()));
    let api = Api::new(broker.http.expect("HTTP listener"), "auditor");
    (dir, broker, api)
}

fn login(broker: &BrokerProcess, client_id: &str) -> Stomp {
    let s = Stomp::connect(
        broker.stomp,
        &[
            ("login", "dev"),
            ("passcode", "pw"),
            ("client-id", client_id),
        ],
    );
    assert_eq!(s.connected.command, "CONNECTED");
    s
}

fn subscribe(client: &mut Stomp, id: &str, queue: &str, prefetch: &str, extra: &[(&str, &str)]) {
    let dest = format!("/queue/{queue}");
    let mut headers = vec![
        ("id", id),
        ("destination", dest.as_str()),
        ("ack", "client-individual"),
        ("activemq.prefetchSize", prefetch),
        ("receipt", "sub"),
    ];
    headers.extend_from_slice(extra);
    client.send_frame("SUBSCRIBE", &headers, b"");
    assert_eq!(client.recv().expect("RECEIPT").command, "RECEIPT");
}

fn bodies(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["body"].as_str().unwrap().to_owned())
        .collect()
}

/// Polls `check` for up to five seconds.
/// A consumer's rates are listed, as numbers no less than zero.
fn assert_rates_listed(consumer: &Value) {
    for rate in ["delivered_per_second", "acked_per_second"] {
        let value = consumer["rates"][rate].as_f64();
        assert!(value.is_some_and(|r| r >= 0.0), "{rate}: {consumer}");
    }
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_paging_queue_is_browsed_viewed_and_its_messages_deleted() {
    let (_dir, broker, api) = start();
    let mut producer = login(&broker, "producer");
    for i in 0..20 {
        let n = i.to_string();
        let headers = [("persistent", "true"), ("n", n.as_str())];
        producer.send_receipted("/queue/deep", &format!("m{i}"), &headers, &format!("r{i}"));
    }
    let q = api.json("/api/queues/deep");
    assert!(q["messages"]["paged"].as_u64().unwrap() >= 10, "{q}");

    let all = api.browse_all("deep", 7);
    let expected: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&all), expected);
    assert!(all.iter().any(|m| m["state"] == "paged"));
    assert!(all.iter().any(|m| m["state"] == "ready"));
    let last = &all[19];
    assert_eq!(last["size"], 3);
    assert_eq!(last["durable"], true);
    assert_eq!(last["body_encoding"], "text");
    let n = last["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "n")
        .expect("the STOMP header n");
    assert_eq!(n["value"]["value"], "19");
    let preview = api.json("/api/queues/deep/messages?limit=1&preview=1");
    assert_eq!(preview["items"][0]["body"], "m");
    assert_eq!(preview["items"][0]["body_truncated"], true);

    let id = last["id"].as_u64().unwrap();
    let one = api.json(&format!("/api/queues/deep/messages/{id}"));
    assert_eq!(
        (one["body"].as_str(), one["state"].as_str()),
        (Some("m19"), Some("paged"))
    );

    // Deleting needs manage; the auditor may only look.
    let path = format!("/api/queues/deep/messages/{id}");
    assert_error(
        api.call("DELETE", &path, Some("auditor")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call("DELETE", &path, None),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_eq!(
        api.call("DELETE", &path, Some("admin")).status(),
        StatusCode::NO_CONTENT
    );
    assert_error(
        api.call("DELETE", &path, Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        api.call("GET", &path, Some("auditor")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let first = all[0]["id"].as_u64().unwrap();
    let path = format!("/api/queues/deep/messages/{first}");
    assert_eq!(
        api.call("DELETE", &path, Some("admin")).status(),
        StatusCode::NO_CONTENT
    );

    // A consumer gets what is left, in order; one it holds is marked and cannot be deleted.
    let mut consumer = login(&broker, "consumer");
    subscribe(&mut consumer, "1", "deep", "1", &[]);
    let held = consumer.recv().expect("a message");
    assert_eq!(held.body_text(), "m1");
    let page = api.json("/api/queues/deep/messages?limit=2");
    assert_eq!(page["items"][0]["state"], "in_flight");
    assert!(page["items"][0]["consumer"].is_u64());
    let path = format!("/api/queues/deep/messages/{}", page["items"][0]["id"]);
    assert_error(
        api.call("DELETE", &path, Some("admin")),
        StatusCode::CONFLICT,
        "conflict",
    );
    let mut got = vec![held.body_text()];
    consumer.ack(&held);
    while got.len() < 18 {
        let f = consumer.recv().expect("a message");
        got.push(f.body_text());
        consumer.ack(&f);
    }
    let expected: Vec<String> = (1..19).map(|i| format!("m{i}")).collect();
    assert_eq!(got, expected);

    // Who may look, and what is bad input.
    let browse = "/api/queues/deep/messages";
    assert_error(
        api.call("GET", browse, Some("dev")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call("GET", browse, None),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_error(
        api.call("GET", "/api/queues/nope/messages", Some("auditor")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    for bad in [
        "?limit=0",
        "?limit=x",
        "?cursor=x",
        "?preview=70000",
        "?colour=red",
    ] {
        assert_error(
            api.call("GET", &format!("{browse}{bad}"), Some("auditor")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }
    assert_error(
        api.call("GET", "/api/queues/deep/messages/abc", Some("auditor")),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
}

#[test]
fn dead_letters_are_moved_back_and_received_and_copies_leave_the_source() {
    let (_dir, broker, api) = start();
    let mut producer = login(&broker, "producer");
    for i in 0..8 {
        let kind = if i % 2 == 0 { "even" } else { "odd" };
        let headers = [("persistent", "true"), ("kind", kind)];
        producer.send_receipted(
            "/queue/orders",
            &format!("o{i}"),
            &headers,
            &format!("r{i}"),
        );
    }
    // A consumer fails every one of them: after one attempt each goes to orders.dlq.
    let mut failing = login(&broker, "failing");
    subscribe(&mut failing, "1", "orders", "100", &[]);
    for _ in 0..8 {
        let f = failing.recv().expect("a message");
        let id = f.header("ack").unwrap().to_owned();
        failing.send_frame("NACK", &[("id", &id)], b"");
    }
    failing.send_frame("DISCONNECT", &[("receipt", "bye")], b"");
    eventually("8 dead letters", || {
        api.json("/api/queues/orders.dlq")["messages"]["ready"] == 8
    });
    let dead = api.browse_all("orders.dlq", 3);
    assert_eq!(bodies(&dead).len(), 8);

    // Errors first: nothing moves.
    let path = "/api/queues/orders.dlq/messages/move";
    for (body, status, code) in [
        (
            json!({"to": "orders", "ids": [1], "selector": "a = 1"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"to": "orders"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"to": "orders", "selector": "kind ="}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"to": "orders.dlq", "ids": []}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"to": "orders", "ids": ["x"]}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"to": "nowhere", "ids": [1]}),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ] {
        assert_error(api.post(path, Some("admin"), body), status, code);
    }
    let r = api.post(path, Some("auditor"), json!({"to": "orders", "ids": [1]}));
    assert_error(r, StatusCode::FORBIDDEN, "forbidden");
    let r = api.post(path, None, json!({"to": "orders", "ids": [1]}));
    assert_error(r, StatusCode::UNAUTHORIZED, "unauthorized");
    let r = api.post(
        "/api/queues/nope/messages/move",
        Some("admin"),
        json!({"to": "orders", "ids": [1]}),
    );
    assert_error(r, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(api.json("/api/queues/orders.dlq")["messages"]["ready"], 8);

    // Copy two by id to an audit queue; the dead letters stay.
    assert_eq!(
        api.call("PUT", "/api/queues/audit", Some("admin")).status(),
        StatusCode::CREATED
    );
    let ids = json!([dead[0]["id"], dead[1]["id"], 999_999]);
    let r = api.post(
        "/api/queues/orders.dlq/messages/copy",
        Some("admin"),
        json!({"to": "audit", "ids": ids}),
    );
    assert_eq!(r.status(), StatusCode::OK);
    let copied: Value = r.json().unwrap();
    assert_eq!(copied["copied"], 2);
    assert_eq!(
        copied["skipped"],
        json!([{"id": 999_999, "reason": "not_found"}])
    );
    assert_eq!(bodies(&api.browse_all("audit", 10)), ["o0", "o1"]);
    assert_eq!(api.json("/api/queues/orders.dlq")["messages"]["ready"], 8);

    // Retry: the even ones by selector, then one odd one by id.
    let r = api.post(
        path,
        Some("admin"),
        json!({"to": "orders", "selector": "kind = 'even'"}),
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap()["moved"], 4);
    let r = api.post(
        path,
        Some("admin"),
        json!({"to": "orders", "ids": [dead[1]["id"]]}),
    );
    assert_eq!(r.json::<Value>().unwrap()["moved"], 1);
    let left = api.browse_all("orders.dlq", 10);
    assert_eq!(bodies(&left), ["o3", "o5", "o7"]);

    let mut consumer = login(&broker, "consumer");
    subscribe(&mut consumer, "1", "orders", "100", &[]);
    let mut got = Vec::new();
    for _ in 0..5 {
        let f = consumer.recv().expect("a moved message");
        assert!(f.header("kind").is_some(), "{f:?}");
        got.push(f.body_text());
        consumer.ack(&f);
    }
    got.sort();
    assert_eq!(got, ["o0", "o1", "o2", "o4", "o6"]);
    assert!(consumer.recv_timeout(Duration::from_millis(200)).is_none());
}

#[test]
fn a_test_message_goes_through_the_publish_path() {
    let (_dir, broker, api) = start();
    assert_eq!(
        api.call("PUT", "/api/queues/tests", Some("admin")).status(),
        StatusCode::CREATED
    );
    let mut consumer = login(&broker, "consumer");
    subscribe(&mut consumer, "1", "tests", "10", &[]);
    let path = "/api/queues/tests/messages";
    let r = api.post(
        path,
        Some("admin"),
        json!({"body": "hello", "properties": {"colour": "red", "n": 3}, "priority": 7}),
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.json::<Value>().unwrap()["delayed"], false);
    let f = consumer.recv().expect("the test message");
    assert_eq!(f.body_text(), "hello");
    assert_eq!(f.header("colour"), Some("red"));
    assert_eq!(f.header("n"), Some("3"));
    assert_eq!(f.header("priority"), Some("7"));
    consumer.ack(&f);

    let sent = Instant::now();
    let r = api.post(
        path,
        Some("admin"),
        json!({"body_base64": "QUI=", "delay_ms": 300}),
    );
    assert_eq!(r.json::<Value>().unwrap()["delayed"], true);
    let f = consumer.recv().expect("the delayed test message");
    assert!(
        sent.elapsed() >= Duration::from_millis(250),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(f.body_text(), "AB");
    consumer.ack(&f);

    // On a queue with a default delay: a message without delay_ms waits it out, and
    // says so; delay_ms 0 overrides it as a producer's own delay would.
    let r = api.patch(
        "/api/queues/tests",
        Some("admin"),
        r#"{"default_message_delay": "400ms"}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    let sent = Instant::now();
    let r = api.post(path, Some("admin"), json!({"body": "by default"}));
    assert_eq!(r.json::<Value>().unwrap()["delayed"], true);
    let r = api.post(path, Some("admin"), json!({"body": "now", "delay_ms": 0}));
    assert_eq!(r.json::<Value>().unwrap()["delayed"], false);
    let f = consumer.recv().expect("the undelayed one");
    assert_eq!(f.body_text(), "now");
    assert!(sent.elapsed() < Duration::from_millis(400));
    consumer.ack(&f);
    let f = consumer.recv().expect("the one the queue delayed");
    assert_eq!(f.body_text(), "by default");
    assert!(sent.elapsed() >= Duration::from_millis(350));
    consumer.ack(&f);

    for bad in [
        json!({"priority": 10}),
        json!({"body": "a", "body_base64": "YQ=="}),
        json!({"properties": {"x": {"y": 1}}}),
        json!({"delay_ms": 86_400_000u64 * 365}),
        json!({"colour": "red"}),
    ] {
        assert_error(
            api.post(path, Some("admin"), bad),
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }
    let r = api.post(path, Some("auditor"), json!({"body": "x"}));
    assert_error(r, StatusCode::FORBIDDEN, "forbidden");
    let r = api.post(path, None, json!({"body": "x"}));
    assert_error(r, StatusCode::UNAUTHORIZED, "unauthorized");
    let r = api.post(
        "/api/queues/nope/messages",
        Some("admin"),
        json!({"body": "x"}),
    );
    assert_error(r, StatusCode::NOT_FOUND, "not_found");
    assert!(consumer.recv_timeout(Duration::from_millis(200)).is_none());
}

#[test]
fn groups_are_listed_and_a_reset_hands_the_group_to_another_consumer() {
    let (_dir, broker, api) = start();
    let mut producer = login(&broker, "producer");
    let mut a = login(&broker, "worker-a");
    subscribe(&mut a, "1", "work", "1", &[]);
    producer.send_receipted("/queue/work", "g1", &[("JMSXGroupID", "g")], "r1");
    let g1 = a.recv().expect("g1");
    assert_eq!(g1.body_text(), "g1");

    let groups = api.json("/api/queues/work/groups");
    assert_eq!(groups["buckets"], false);
    let g = &groups["groups"][0];
    assert_eq!(
        (g["group"].as_str(), g["unacked"].as_u64()),
        (Some("g"), Some(1))
    );
    let consumers = api.json("/api/queues/work/consumers");
    let of_a = &consumers[0];
    assert_eq!(of_a["client_id"], "worker-a");
    assert_eq!(of_a["user"], "dev");
    assert_eq!(of_a["window"], 1);
    assert_eq!(of_a["in_flight"], 1);
    assert_eq!(of_a["groups"], 1);
    assert_eq!(of_a["connection"]["protocol"], "stomp");
    assert_eq!(g["consumer"], of_a["id"]);
    assert_eq!(g["connection"]["id"], of_a["connection"]["id"]);
    assert_eq!(
        (of_a["delivered"].as_u64(), of_a["acked"].as_u64()),
        (Some(1), Some(0))
    );
    assert_rates_listed(of_a);
    // Bound by its first delivery: active since then.
    let bound_ms = g["owned_since_ms"].as_u64().unwrap();
    assert_eq!(g["last_activity_ms"].as_u64(), Some(bound_ms));

    // A settles g1 and takes an ungrouped message it keeps: it has no credit left.
    // Later than the binding by more than a coarse clock's tick.
    std::thread::sleep(Duration::from_millis(60));
    a.ack_receipted(&g1, "a1");
    assert_eq!(a.recv().unwrap().command, "RECEIPT");
    let groups = api.json("/api/queues/work/groups");
    let g = &groups["groups"][0];
    let acked_ms = g["last_activity_ms"].as_u64().unwrap();
    assert!(acked_ms >= bound_ms + 40, "{g}");
    assert_eq!(g["owned_since_ms"].as_u64(), Some(bound_ms));
    producer.send_receipted("/queue/work", "u1", &[], "r2");
    assert_eq!(a.recv().expect("u1").body_text(), "u1");
    let consumers = api.json("/api/queues/work/consumers");
    let of_a = &consumers[0];
    assert_eq!(
        (of_a["delivered"].as_u64(), of_a["acked"].as_u64()),
        (Some(2), Some(1))
    );
    // An ungrouped message is none of the group's activity.
    let groups = api.json("/api/queues/work/groups");
    let g = &groups["groups"][0];
    assert_eq!(g["last_activity_ms"].as_u64(), Some(acked_ms));
    let mut b = login(&broker, "worker-b");
    subscribe(
        &mut b,
        "1",
        "work",
        "10",
        &[("selector", "JMSPriority >= 0")],
    );
    producer.send_receipted("/queue/work", "g2", &[("JMSXGroupID", "g")], "r3");
    // g is A's: B does not get g2 while A cannot take it.
    assert!(b.recv_timeout(Duration::from_millis(200)).is_none());
    let consumers = api.json("/api/queues/work/consumers");
    assert_eq!(consumers[1]["selector"], "JMSPriority >= 0");

    let path = "/api/queues/work/groups/g";
    assert_error(
        api.call("DELETE", path, Some("auditor")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call("DELETE", path, None),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_error(
        api.call("DELETE", "/api/queues/work/groups/nope", Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        api.call("DELETE", "/api/queues/nope/groups", Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let r = api.call("DELETE", path, Some("admin"));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap()["reset"], 1);
    let g2 = b.recv().expect("g2 after the reset");
    assert_eq!(g2.body_text(), "g2");
    b.ack(&g2);
    eventually("g owned by B", || {
        let groups = api.json("/api/queues/work/groups");
        groups["groups"][0]["consumer"] == api.json("/api/queues/work/consumers")[1]["id"]
    });
    eventually("B's ack counted", || {
        api.json("/api/queues/work/consumers")[1]["acked"] == 1
    });
    let consumers = api.json("/api/queues/work/consumers");
    let counts = |c: &Value| (c["delivered"].as_u64(), c["acked"].as_u64());
    assert_eq!(counts(&consumers[0]), (Some(2), Some(1)), "A keeps u1");
    assert_eq!(counts(&consumers[1]), (Some(1), Some(1)));
    assert_rates_listed(&consumers[1]);
    let groups = api.json("/api/queues/work/groups");
    let g = &groups["groups"][0];
    assert!(
        g["last_activity_ms"].as_u64().unwrap() >= g["owned_since_ms"].as_u64().unwrap(),
        "{g}"
    );
    let r = api.call("DELETE", "/api/queues/work/groups", Some("admin"));
    assert_eq!(r.json::<Value>().unwrap()["reset"], 1);
    assert_eq!(api.json("/api/queues/work/groups")["groups"], json!([]));
    assert_error(
        api.call("GET", "/api/queues/work/groups", Some("dev")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call("GET", "/api/queues/nope/consumers", Some("auditor")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
}
