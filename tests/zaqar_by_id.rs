//! Zaqar messages addressed by id in a queue deeper than its memory limit,
//! over real sockets (a broker process, reqwest): got and deleted by id
//! while paged to disk and after kill -9, and listed page by page with the
//! delayed ones; delayed messages got and deleted by id before they are
//! due, after kill -9 too.

mod common;

use common::zaqar::{Zaqar, CLIENT};
use common::BrokerProcess;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// `deep` and `slow` page past five messages.
const CONFIG: &str = r#"
[[queues]]
name = "deep"
max_memory_messages = 5

[[queues]]
name = "slow"
max_memory_messages = 5
"#;

impl Zaqar {
    /// The body of message `id` of `deep`, or `None` on 404.
    fn body_of(&self, id: &str) -> Option<Value> {
        let r = self.send("GET", &format!("/v2/queues/deep/messages/{id}"), None);
        match r.status() {
            StatusCode::NOT_FOUND => None,
            StatusCode::OK => {
                let m: Value = r.json().unwrap();
                assert_eq!(m["id"], id);
                Some(m["body"].clone())
            }
            other => panic!("GET message {id}: {other}"),
        }
    }

    fn delete(&self, path: &str) {
        let r = self.send("DELETE", path, None);
        assert_eq!(r.status(), StatusCode::NO_CONTENT, "DELETE {path}");
    }

    /// Every message of `queue` listed `limit` a page with `query`, following
    /// the `next` links; the bodies and the number of pages.
    fn list_all(&self, queue: &str, limit: usize, query: &str) -> (Vec<Value>, usize) {
        let mut path = format!("/v2/queues/{queue}/messages?limit={limit}&{query}");
        let (mut bodies, mut pages) = (Vec::new(), 0);
        loop {
            let page = self.json("GET", &path, None, StatusCode::OK);
            let messages = page["messages"].as_array().unwrap();
            if messages.is_empty() {
                return (bodies, pages);
            }
            assert!(messages.len() <= limit, "{page}");
            pages += 1;
            assert!(pages < 100, "the listing does not end");
            bodies.extend(messages.iter().map(|m| m["body"].clone()));
            match page["links"][0]["href"].as_str() {
                Some(next) => path = next.to_owned(),
                None => return (bodies, pages),
            }
        }
    }
}

fn paged(z: &Zaqar, queue: &str) -> u64 {
    let q = z.json("GET", &format!("/api/queues/{queue}"), None, StatusCode::OK);
    q["messages"]["paged"].as_u64().unwrap()
}

#[test]
fn a_paged_message_is_got_and_deleted_by_id_after_kill_9_too() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(CONFIG));
    let z = Zaqar::new(&broker);
    let mut ids = Vec::new();
    for batch in 0..3 {
        let messages: Vec<Value> = (0..10)
            .map(|i| json!({"body": batch * 10 + i, "ttl": 3600}))
            .collect();
        ids.extend(z.post_messages("deep", json!(messages)));
    }
    assert!(paged(&z, "deep") >= 20, "most of them are on disk");

    assert_eq!(z.body_of(&ids[25]), Some(json!(25)), "paged, got by id");
    let both = z.json(
        "GET",
        &format!("/v2/queues/deep/messages?ids={},{}", ids[1], ids[27]),
        None,
        StatusCode::OK,
    );
    let bodies: Vec<&Value> = both["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["body"])
        .collect();
    assert_eq!(bodies, [&json!(1), &json!(27)]);

    z.delete(&format!("/v2/queues/deep/messages/{}", ids[25]));
    assert_eq!(z.body_of(&ids[25]), None, "a paged message deleted by id");
    z.delete(&format!(
        "/v2/queues/deep/messages?ids={},{}",
        ids[26], ids[2]
    ));
    assert_eq!(z.body_of(&ids[26]), None);
    assert_eq!(z.body_of(&ids[2]), None);

    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    assert!(paged(&z, "deep") >= 20, "paged again after the restart");
    assert_eq!(z.body_of(&ids[28]), Some(json!(28)), "found after kill -9");
    assert_eq!(z.body_of(&ids[0]), Some(json!(0)));
    for gone in [25, 26, 2] {
        assert_eq!(z.body_of(&ids[gone]), None, "deleted for good: {gone}");
    }
    z.delete(&format!("/v2/queues/deep/messages/{}", ids[29]));
    z.delete(&format!("/v2/queues/deep/messages?ids={}", ids[3]));

    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    assert_eq!(z.body_of(&ids[29]), None);
    assert_eq!(z.body_of(&ids[3]), None);
    let (listed, _) = z.list_all("deep", 7, "echo=true");
    let expected: Vec<Value> = (0..30)
        .filter(|i| ![2, 3, 25, 26, 29].contains(i))
        .map(|i| json!(i))
        .collect();
    assert_eq!(listed, expected);
}

#[test]
fn delayed_and_ready_messages_are_listed_page_by_page_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(CONFIG));
    let z = Zaqar::new(&broker);
    // `slow` is configured, so it is there already: its metadata is patched.
    let r = z
        .client
        .patch(format!("{}/v2/queues/slow", z.base))
        .header("Client-ID", CLIENT)
        .header(
            "Content-Type",
            "application/openstack-messaging-v2.0-json-patch",
        )
        .body(r#"[{"op": "add", "path": "/metadata/_default_message_delay", "value": 60}]"#)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // 12 due now (6 of them paged), 9 not due for a minute, interleaved.
    for batch in [0..10, 10..21] {
        let messages: Vec<Value> = batch
            .map(|i| json!({"body": i, "delay": if i % 7 < 4 { 0 } else { 60 }}))
            .collect();
        z.post_messages("slow", json!(messages));
    }
    assert!(paged(&z, "slow") > 0);

    let (ready, _) = z.list_all("slow", 5, "echo=true");
    assert_eq!(ready.len(), 12, "{ready:?}");

    for limit in [1, 4, 5, 12, 20] {
        let (all, pages) = z.list_all("slow", limit, "echo=true&include_delayed=true");
        let distinct: BTreeSet<i64> = all.iter().map(|b| b.as_i64().unwrap()).collect();
        assert_eq!(all.len(), 21, "limit {limit}: {all:?}");
        assert_eq!(distinct, (0..21).collect(), "limit {limit}");
        assert_eq!(pages, 21usize.div_ceil(limit), "limit {limit}");
        // The queue's own first, in order, then the delayed ones.
        assert_eq!(all[..12], ready[..], "limit {limit}");
    }

    let bad = z.send(
        "GET",
        "/v2/queues/slow/messages?include_delayed=true&marker=dnot-a-marker",
        None,
    );
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

/// The message `id` of `queue`, or `None` on 404.
fn message(z: &Zaqar, queue: &str, id: &str) -> Option<Value> {
    let r = z.send("GET", &format!("/v2/queues/{queue}/messages/{id}"), None);
    match r.status() {
        StatusCode::NOT_FOUND => None,
        StatusCode::OK => Some(r.json().unwrap()),
        other => panic!("GET message {id}: {other}"),
    }
}

#[test]
fn a_delayed_message_is_got_and_deleted_by_id_after_kill_9_too() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(CONFIG));
    let z = Zaqar::new(&broker);
    let r = z.send(
        "PUT",
        "/v2/queues/later",
        Some(json!({"_default_message_delay": 900})),
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    // Five due in a quarter of an hour; two due in a few seconds.
    let ids = z.post_messages(
        "later",
        json!([
            {"body": 0, "ttl": 1200}, {"body": 1}, {"body": 2}, {"body": 3}, {"body": 4},
            {"body": "soon", "delay": 4}, {"body": "cancelled", "delay": 4},
        ]),
    );
    let posted = Instant::now();
    assert!(
        z.list_all("later", 10, "echo=true").0.is_empty(),
        "none due"
    );

    let got = message(&z, "later", &ids[0]).expect("a delayed message by id");
    assert_eq!(got["id"], ids[0]);
    assert_eq!(got["body"], 0);
    assert_eq!(got["ttl"], 1200);
    assert_eq!(got["href"], format!("/v2/queues/later/messages/{}", ids[0]));
    assert!(got.get("claim_id").is_none(), "{got}");
    let some = z.json(
        "GET",
        &format!(
            "/v2/queues/later/messages?ids={},{},{}",
            ids[2], "0123456789abcdef01234567", ids[1]
        ),
        None,
        StatusCode::OK,
    );
    let bodies: Vec<&Value> = some["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["body"])
        .collect();
    assert_eq!(bodies, [&json!(2), &json!(1)], "{some}");

    // A delete by id cancels it: gone, and never delivered.
    z.delete(&format!("/v2/queues/later/messages/{}", ids[6]));
    assert_eq!(message(&z, "later", &ids[6]), None);
    z.delete(&format!(
        "/v2/queues/later/messages?ids={},{}",
        ids[1], ids[2]
    ));
    assert_eq!(message(&z, "later", &ids[1]), None);
    assert_eq!(message(&z, "later", &ids[2]), None);
    let r = z.send(
        "DELETE",
        &format!(
            "/v2/queues/later/messages/{}?claim_id=0123456789abcdef01234567",
            ids[3]
        ),
        None,
    );
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "a delayed message is not claimed"
    );

    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    assert_eq!(
        message(&z, "later", &ids[0]).unwrap()["body"],
        0,
        "after kill -9"
    );
    for gone in [1, 2, 6] {
        assert_eq!(
            message(&z, "later", &ids[gone]),
            None,
            "cancelled for good: {gone}"
        );
    }
    z.delete(&format!("/v2/queues/later/messages/{}", ids[3]));

    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    assert_eq!(message(&z, "later", &ids[3]), None);
    assert_eq!(message(&z, "later", &ids[4]).unwrap()["body"], 4);

    // Due: the one not cancelled arrives, by id from the queue now; the
    // cancelled one does not.
    let due = posted + Duration::from_secs(4);
    while Instant::now() < due + Duration::from_secs(10) {
        if !z.list_all("later", 10, "echo=true").0.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(z.list_all("later", 10, "echo=true").0, [json!("soon")]);
    assert_eq!(message(&z, "later", &ids[5]).unwrap()["body"], "soon");
    assert_eq!(message(&z, "later", &ids[6]), None);
    let (all, _) = z.list_all("later", 10, "echo=true&include_delayed=true");
    assert_eq!(all, [json!("soon"), json!(0), json!(4)]);
}
