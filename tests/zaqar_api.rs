//! The Zaqar v2 API over real sockets: a broker process, an independent HTTP client
//! (reqwest), and STOMP on the same broker for what crosses between the two.

mod common;

use common::zaqar::Zaqar;
use common::BrokerProcess;
use reqwest::blocking::Response;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const OTHER_CLIENT: &str = "5f2c6f1e-0b7a-4d0e-9a43-1e2f3a4b5c6d";

impl Zaqar {
    fn list(&self, queue: &str, query: &str) -> Vec<Value> {
        let body = self.json(
            "GET",
            &format!("/v2/queues/{queue}/messages?{query}"),
            None,
            StatusCode::OK,
        );
        body["messages"].as_array().unwrap().clone()
    }
}

/// A 400 (or `status`) with Zaqar's `{"title", "description"}`; returns the description.
fn assert_zaqar_error(r: Response, status: StatusCode) -> String {
    assert_eq!(r.status(), status);
    let body: Value = r.json().unwrap();
    assert!(body["title"].is_string(), "{body}");
    let description = body["description"].as_str().expect("a description");
    assert!(!description.is_empty());
    description.to_owned()
}

fn start() -> (tempfile::TempDir, BrokerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), None);
    (dir, broker)
}

fn bodies(messages: &[Value]) -> Vec<Value> {
    messages.iter().map(|m| m["body"].clone()).collect()
}

/// `metadata` as a GET of its queue shows it: Zaqar's reserved keys with a
/// default value that it leaves unset at their defaults (Weir's limits,
/// which are Zaqar's).
fn with_defaults(metadata: Value) -> Value {
    let mut shown = json!({
        "_max_messages_post_size": 262_144,
        "_default_message_ttl": 3600,
        "_default_message_delay": 0,
        "_enable_encrypt_messages": false,
    });
    for (key, value) in metadata.as_object().unwrap() {
        shown[key] = value.clone();
    }
    shown
}

fn patch(z: &Zaqar, queue: &str, ops: Value) -> Response {
    z.req("PATCH", &format!("/v2/queues/{queue}"))
        .header(
            "Content-Type",
            "application/openstack-messaging-v2.0-json-patch",
        )
        .body(ops.to_string())
        .send()
        .unwrap()
}

#[test]
fn queues_are_created_listed_patched_and_deleted() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    let r = z.send("PUT", "/v2/queues/orders", Some(json!({"colour": "blue"})));
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["location"], "/v2/queues/orders");
    assert_eq!(
        z.send("PUT", "/v2/queues/orders", None).status(),
        StatusCode::NO_CONTENT,
        "already there"
    );
    z.send("PUT", "/v2/queues/billing", None);
    let page = z.json(
        "GET",
        "/v2/queues?limit=1&detailed=true",
        None,
        StatusCode::OK,
    );
    assert_eq!(page["queues"][0]["name"], "billing");
    let next = page["links"][0]["href"].as_str().unwrap().to_owned();
    let page = z.json("GET", &next, None, StatusCode::OK);
    assert_eq!(page["queues"][0]["name"], "orders");
    let r = z
        .req("PATCH", "/v2/queues/orders")
        .header(
            "Content-Type",
            "application/openstack-messaging-v2.0-json-patch",
        )
        .body(r#"[{"op":"replace","path":"/metadata/colour","value":"red"},{"op":"add","path":"/metadata/_default_message_ttl","value":120}]"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let meta = z.json("GET", "/v2/queues/orders", None, StatusCode::OK);
    assert_eq!(
        meta,
        with_defaults(json!({"colour": "red", "_default_message_ttl": 120}))
    );
    let r = z.send("PATCH", "/v2/queues/orders", Some(json!([])));
    assert!(assert_zaqar_error(r, StatusCode::BAD_REQUEST).contains("json-patch"));
    z.post_messages("orders", json!([{"body": 1}, {"body": 2}]));
    let stats = z.json("GET", "/v2/queues/orders/stats", None, StatusCode::OK);
    assert_eq!(stats["messages"]["free"], 2);
    assert_eq!(stats["messages"]["total"], 2);
    let r = z.send(
        "POST",
        "/v2/queues/orders/purge",
        Some(json!({"resource_types": ["messages"]})),
    );
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let stats = z.json("GET", "/v2/queues/orders/stats", None, StatusCode::OK);
    assert_eq!(stats["messages"]["total"], 0);
    assert_eq!(
        z.send("DELETE", "/v2/queues/orders", None).status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        z.send("GET", "/v2/queues/orders", None).status(),
        StatusCode::NOT_FOUND
    );
}

#[test]
fn messages_are_posted_listed_fetched_and_deleted() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    let ids = z.post_messages(
        "q",
        json!([{"body": {"n": 1}, "ttl": 300}, {"body": "two"}, {"body": [3]}]),
    );
    assert_eq!(ids.len(), 3);
    assert!(z.list("q", "").is_empty(), "no echo of our own messages");
    let all = z.list("q", "echo=true");
    assert_eq!(bodies(&all), [json!({"n": 1}), json!("two"), json!([3])]);
    assert_eq!(all[0]["ttl"], 300);
    assert_eq!(all[1]["ttl"], 3600, "Zaqar's default ttl");
    let other = Zaqar {
        client_id: OTHER_CLIENT,
        ..Zaqar::new(&broker)
    };
    assert_eq!(
        other.list("q", "limit=2").len(),
        2,
        "another client sees them"
    );
    let one = z.json(
        "GET",
        &format!("/v2/queues/q/messages/{}", ids[1]),
        None,
        StatusCode::OK,
    );
    assert_eq!(one["body"], "two");
    let some = z.json(
        "GET",
        &format!("/v2/queues/q/messages?ids={},{}", ids[0], ids[2]),
        None,
        StatusCode::OK,
    );
    assert_eq!(some["messages"].as_array().unwrap().len(), 2);
    let r = z.send("DELETE", &format!("/v2/queues/q/messages/{}", ids[1]), None);
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        z.send("GET", &format!("/v2/queues/q/messages/{}", ids[1]), None)
            .status(),
        StatusCode::NOT_FOUND
    );
    let r = z.send(
        "DELETE",
        &format!("/v2/queues/q/messages?ids={}", ids[0]),
        None,
    );
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let popped = z.json(
        "DELETE",
        "/v2/queues/q/messages?pop=5",
        None,
        StatusCode::OK,
    );
    assert_eq!(bodies(popped["messages"].as_array().unwrap()), [json!([3])]);
    assert!(z.list("q", "echo=true").is_empty());
}

#[test]
fn claims_lease_messages_and_deleting_with_the_claim_acknowledges() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.post_messages("jobs", json!([{"body": 1}, {"body": 2}, {"body": 3}]));
    let r = z.send(
        "POST",
        "/v2/queues/jobs/claims?limit=2",
        Some(json!({"ttl": 60, "grace": 60})),
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let claimed: Value = r.json().unwrap();
    let claimed = claimed["messages"].as_array().unwrap().clone();
    assert_eq!(bodies(&claimed), [json!(1), json!(2)]);
    let href = claimed[0]["href"].as_str().unwrap();
    assert!(href.contains("?claim_id="), "{href}");
    let claim_id = location.rsplit('/').next().unwrap().to_owned();

    let view = z.json("GET", &location, None, StatusCode::OK);
    assert_eq!(view["ttl"], 60);
    assert_eq!(view["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        bodies(&z.list("jobs", "echo=true")),
        [json!(3)],
        "claimed ones are hidden"
    );
    assert_eq!(
        z.list("jobs", "echo=true&include_claimed=true").len(),
        3,
        "unless asked for"
    );
    let second = z.json("POST", "/v2/queues/jobs/claims", None, StatusCode::CREATED);
    assert_eq!(bodies(second["messages"].as_array().unwrap()), [json!(3)]);
    assert_eq!(
        z.send("POST", "/v2/queues/jobs/claims", None).status(),
        StatusCode::NO_CONTENT,
        "nothing left to claim"
    );

    let id = claimed[0]["id"].as_str().unwrap();
    let r = z.send("DELETE", &format!("/v2/queues/jobs/messages/{id}"), None);
    assert!(assert_zaqar_error(r, StatusCode::FORBIDDEN).contains("claim"));
    let r = z.send(
        "DELETE",
        &format!("/v2/queues/jobs/messages/{id}?claim_id=nope"),
        None,
    );
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    let r = z.send("DELETE", claimed[0]["href"].as_str().unwrap(), None);
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    let r = z.send("PATCH", &location, Some(json!({"ttl": 120})));
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(z.json("GET", &location, None, StatusCode::OK)["ttl"], 120);
    assert_eq!(
        z.send("DELETE", &location, None).status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        z.send("GET", &location, None).status(),
        StatusCode::NOT_FOUND
    );
    assert!(!claim_id.is_empty());
    let again = z.json("POST", "/v2/queues/jobs/claims", None, StatusCode::CREATED);
    assert_eq!(
        bodies(again["messages"].as_array().unwrap()),
        [json!(2)],
        "released: available again; the deleted one is gone"
    );
    assert_eq!(again["messages"][0]["claim_count"], 2);
}

#[test]
fn delay_counts_only_on_queues_with_a_default_delay() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    // Scenario 3 of the seed: a normal queue ignores a message's delay.
    z.post_messages("plain", json!([{"body": "now", "delay": 60}]));
    assert_eq!(bodies(&z.list("plain", "echo=true")), [json!("now")]);

    z.send(
        "PUT",
        "/v2/queues/slow",
        Some(json!({"_default_message_delay": 2})),
    );
    z.post_messages(
        "slow",
        json!([{"body": "default"}, {"body": "own", "delay": 30}]),
    );
    assert!(
        z.list("slow", "echo=true").is_empty(),
        "not listed before due"
    );
    let delayed = z.list("slow", "echo=true&include_delayed=true");
    assert_eq!(delayed.len(), 2, "unless asked for");
    assert_eq!(
        z.send("POST", "/v2/queues/slow/claims", None).status(),
        StatusCode::NO_CONTENT,
        "not claimable before due"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let claimed = z.json("POST", "/v2/queues/slow/claims", None, StatusCode::CREATED);
    assert_eq!(
        bodies(claimed["messages"].as_array().unwrap()),
        [json!("default")],
        "the message's own delay overrides the default"
    );
    let r = z.send(
        "POST",
        "/v2/queues/slow/messages",
        Some(json!({"messages": [{"body": 1, "delay": 901}]})),
    );
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
}

#[test]
fn too_many_claims_move_a_message_to_the_dead_letter_queue() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.send(
        "PUT",
        "/v2/queues/work",
        Some(json!({"_max_claim_count": 1, "_dead_letter_queue": "dead", "_dead_letter_queue_messages_ttl": 3600})),
    );
    z.post_messages("work", json!([{"body": "poison"}]));
    let first = z.send("POST", "/v2/queues/work/claims", None);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    z.send("DELETE", &location, None);
    assert_eq!(
        z.send("POST", "/v2/queues/work/claims", None).status(),
        StatusCode::NO_CONTENT,
        "claimed once already: moved, not claimed again"
    );
    assert_eq!(bodies(&z.list("dead", "echo=true")), [json!("poison")]);
}

#[test]
fn bad_input_gets_zaqar_errors() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    let r = z
        .client
        .get(format!("{}/v2/queues", z.base))
        .send()
        .unwrap();
    assert!(assert_zaqar_error(r, StatusCode::BAD_REQUEST).contains("Client-ID"));
    let r = z
        .client
        .get(format!("{}/v2/queues", z.base))
        .header("Client-ID", "not-a-uuid")
        .send()
        .unwrap();
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    let r = z
        .req("POST", "/v2/queues/q/messages")
        .body("{not json")
        .send()
        .unwrap();
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    let r = z.send(
        "POST",
        "/v2/queues/q/messages",
        Some(json!({"messages": [{"ttl": 60}]})),
    );
    assert!(assert_zaqar_error(r, StatusCode::BAD_REQUEST).contains("body"));
    let r = z.send(
        "POST",
        "/v2/queues/q/messages",
        Some(json!({"messages": [{"body": 1, "ttl": 5}]})),
    );
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    let r = z.send("PUT", "/v2/queues/q2", Some(json!({"_bogus": 1})));
    assert!(assert_zaqar_error(r, StatusCode::BAD_REQUEST).contains("_bogus"));
    let r = z.send("PUT", "/v2/queues/bad.name", None);
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    z.send(
        "PUT",
        "/v2/queues/small",
        Some(json!({"_max_messages_post_size": 100})),
    );
    let r = z.send(
        "POST",
        "/v2/queues/small/messages",
        Some(json!({"messages": [{"body": "x".repeat(200)}]})),
    );
    assert!(assert_zaqar_error(r, StatusCode::BAD_REQUEST).contains("too large"));
    for (query, body) in [
        ("limit=21", json!({})),
        ("limit=0", json!({})),
        ("", json!({"ttl": 10})),
        ("", json!({"grace": 50000})),
        ("", json!({"grace": 30})),
    ] {
        let r = z.send(
            "POST",
            &format!("/v2/queues/small/claims?{query}"),
            Some(body),
        );
        assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    }
    let r = z.send("DELETE", "/v2/queues/small/messages", None);
    assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    for path in [
        "/v2/queues/small/subscriptions",
        "/v2/pools",
        "/v2/flavors/f",
    ] {
        let r = z.send("GET", path, None);
        assert!(assert_zaqar_error(r, StatusCode::NOT_IMPLEMENTED).contains("not"));
    }
    assert_eq!(
        z.send("GET", "/v2/ping", None).status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(z.send("GET", "/v2", None).status(), StatusCode::OK);
}

#[test]
fn projects_namespace_queues_and_the_default_project_is_weirs() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    let p = Zaqar::new(&broker).in_project("tenant1");
    z.post_messages("shared", json!([{"body": "default"}]));
    p.post_messages("shared", json!([{"body": "tenant"}]));
    assert_eq!(bodies(&z.list("shared", "echo=true")), [json!("default")]);
    assert_eq!(bodies(&p.list("shared", "echo=true")), [json!("tenant")]);
    let names = |zq: &Zaqar| -> Vec<Value> {
        let page = zq.json("GET", "/v2/queues", None, StatusCode::OK);
        page["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["name"].clone())
            .collect()
    };
    assert_eq!(names(&z), [json!("shared")]);
    assert_eq!(names(&p), [json!("shared")]);
    let mut stomp = broker.client();
    stomp.subscribe("1", "/queue/tenant1/shared", "client");
    let got = stomp.recv().expect("the project's message over STOMP");
    assert_eq!(got.body_text(), "\"tenant\"");
}

#[test]
fn posted_over_http_consumed_over_stomp_and_back() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.post_messages("x", json!([{"body": {"hello": "stomp"}}]));
    let mut stomp = broker.client();
    stomp.subscribe("1", "/queue/x", "client");
    let got = stomp.recv().expect("MESSAGE");
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(
        serde_json::from_slice::<Value>(&got.body).unwrap(),
        json!({"hello": "stomp"})
    );
    stomp.ack_receipted(&got, "acked");
    assert_eq!(stomp.recv().unwrap().command, "RECEIPT");

    let mut sender = broker.client();
    sender.send_receipted("/queue/y", "plain text", &[], "sent");
    let claimed = z.json("POST", "/v2/queues/y/claims", None, StatusCode::CREATED);
    assert_eq!(claimed["messages"][0]["body"], "plain text");
    let href = claimed["messages"][0]["href"].as_str().unwrap().to_owned();
    assert_eq!(
        z.send("DELETE", &href, None).status(),
        StatusCode::NO_CONTENT
    );
}

#[test]
fn posted_bodies_reach_stomp_as_serde_json_writes_them_while_the_queue_pages() {
    // Two in memory: the rest of each post is paged on the way in.
    let dir = tempfile::tempdir().unwrap();
    let config = "[[queues]]\nname = \"paged\"\nmax_memory_messages = 2\n";
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(config));
    let z = Zaqar::new(&broker);
    // As a client that is not serde_json writes them: spaces, keys unsorted,
    // escapes; and bodies already in serde_json's form, kept as they came.
    let posts = [
        r#"{"messages": [{"body": {"b": 1, "a": [true, null]}, "ttl": 300}, {"body": "caf\u00e9"}, {"body": 7}]}"#,
        r#"{"messages":[{"body":{"a":"x","b":2}},{"body":[1,"two"]},{"body":null,"delay":5}]}"#,
    ];
    for post in posts {
        let r = z
            .req("POST", "/v2/queues/paged/messages")
            .header("Content-Type", "application/json")
            .body(post)
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let mut stomp = broker.client();
    stomp.subscribe("1", "/queue/paged", "auto");
    // The delay is ignored: the queue has no default delay (the seed's scenario 3).
    let got: Vec<String> = (0..6)
        .map(|_| String::from_utf8(stomp.recv().expect("MESSAGE").body.to_vec()).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            r#"{"a":[true,null],"b":1}"#,
            "\"café\"",
            "7",
            r#"{"a":"x","b":2}"#,
            r#"[1,"two"]"#,
            "null",
        ]
    );
}

#[test]
fn claimed_messages_wait_for_the_claim_before_stomp_gets_them() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.post_messages("leased", json!([{"body": 1}]));
    let r = z.send("POST", "/v2/queues/leased/claims", Some(json!({"ttl": 60})));
    assert_eq!(r.status(), StatusCode::CREATED);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let mut stomp = broker.client();
    stomp.subscribe("1", "/queue/leased", "client");
    assert!(
        stomp.recv_timeout(Duration::from_millis(500)).is_none(),
        "claimed: not dispatched"
    );
    assert_eq!(
        z.send("DELETE", &location, None).status(),
        StatusCode::NO_CONTENT
    );
    let got = stomp.recv().expect("released: delivered to STOMP");
    assert_eq!(got.body_text(), "1");
}

#[test]
fn a_post_answered_survives_kill_9_and_an_ack_by_claim_too() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.post_messages("durable", json!([{"body": "a"}, {"body": "b"}]));
    let claimed = z.json(
        "POST",
        "/v2/queues/durable/claims?limit=1",
        None,
        StatusCode::CREATED,
    );
    let href = claimed["messages"][0]["href"].as_str().unwrap().to_owned();
    assert_eq!(
        z.send("DELETE", &href, None).status(),
        StatusCode::NO_CONTENT
    );
    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    assert_eq!(bodies(&z.list("durable", "echo=true")), [json!("b")]);
}

#[test]
fn queue_metadata_survives_a_restart_and_delays_stomp_sends_too() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    let r = z.send(
        "PUT",
        "/v2/queues/audited",
        Some(json!({"_default_message_delay": 2, "colour": "blue"})),
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    let metadata = z.json("GET", "/v2/queues/audited", None, StatusCode::OK);
    assert_eq!(
        metadata,
        with_defaults(json!({"_default_message_delay": 2, "colour": "blue"}))
    );
    // One queue for every protocol: a STOMP send waits out the queue's default delay,
    // and a Zaqar message posted with delay 0 does not.
    let mut sender = broker.client();
    sender.send_receipted("/queue/audited", "from stomp", &[], "sent");
    z.post_messages("audited", json!([{"body": "at once", "delay": 0}]));
    let mut consumer = broker.client();
    consumer.subscribe("1", "/queue/audited", "auto");
    let first = consumer.recv().expect("the undelayed one");
    assert_eq!(
        serde_json::from_slice::<Value>(&first.body).unwrap(),
        json!("at once")
    );
    assert!(
        consumer.recv_timeout(Duration::from_millis(1000)).is_none(),
        "the STOMP send is delayed by the queue's default"
    );
    let later = consumer
        .recv_timeout(Duration::from_secs(5))
        .expect("due after 2 s");
    assert_eq!(later.body_text(), "from stomp");

    // Patching the delay away makes it a normal queue again, after a restart too.
    let r = z
        .req("PATCH", "/v2/queues/audited")
        .header(
            "Content-Type",
            "application/openstack-messaging-v2.0-json-patch",
        )
        .body(r#"[{"op": "remove", "path": "/metadata/_default_message_delay"}]"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let broker = broker.restart_after_kill();
    let mut sender = broker.client();
    sender.send_receipted("/queue/audited", "undelayed", &[], "sent");
    let mut consumer = broker.client();
    consumer.subscribe("1", "/queue/audited", "auto");
    assert_eq!(
        consumer
            .recv_timeout(Duration::from_secs(1))
            .expect("not delayed")
            .body_text(),
        "undelayed"
    );
    let z = Zaqar::new(&broker);
    assert_eq!(
        z.json("GET", "/v2/queues/audited", None, StatusCode::OK),
        with_defaults(json!({"colour": "blue"}))
    );
}

/// Queue `name` made through the Zaqar API with `metadata`, and the two APIs to reach it
/// (the management one needs no login on a broker without users).
fn made_by_zaqar(
    broker: &BrokerProcess,
    name: &str,
    metadata: Value,
) -> (Zaqar, common::http::Api) {
    let z = Zaqar::new(broker);
    let r = z.send("PUT", &format!("/v2/queues/{name}"), Some(metadata));
    assert_eq!(r.status(), StatusCode::CREATED);
    let api = common::http::Api::new(broker.http.expect("HTTP listener"), "admin");
    (z, api)
}

/// The default delay is the queue's setting, whoever changes it: the management API's
/// change shows in Zaqar's metadata and delays Zaqar's posts as much as STOMP's sends.
#[test]
fn a_default_delay_changed_by_management_holds_for_zaqar_too() {
    let (_dir, broker) = start();
    let (z, api) = made_by_zaqar(
        &broker,
        "shared",
        json!({"_default_message_delay": 30, "colour": "blue"}),
    );
    let r = api.patch(
        "/api/queues/shared",
        None,
        r#"{"default_message_delay": "1500ms"}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        z.json("GET", "/v2/queues/shared", None, StatusCode::OK),
        with_defaults(json!({"_default_message_delay": 2, "colour": "blue"})),
        "whole seconds, rounded up"
    );
    let posted = Instant::now();
    z.post_messages("shared", json!([{"body": "waits"}]));
    let claim = |z: &Zaqar| {
        let r = z.send(
            "POST",
            "/v2/queues/shared/claims",
            Some(json!({"ttl": 60, "grace": 60})),
        );
        (r.status() == StatusCode::CREATED).then(|| r.json::<Value>().unwrap())
    };
    assert!(claim(&z).is_none(), "not due yet");
    let claimed = loop {
        if let Some(c) = claim(&z) {
            break c;
        }
        assert!(posted.elapsed() < Duration::from_secs(10), "never due");
        std::thread::sleep(Duration::from_millis(50));
    };
    let waited = posted.elapsed();
    assert!(
        (Duration::from_millis(1400)..Duration::from_secs(5)).contains(&waited),
        "due after the setting's 1.5 s, not the metadata's old 30 s: {waited:?}"
    );
    assert_eq!(claimed["messages"][0]["body"], "waits");

    // Cleared there, the queue is a normal one here: a message's own delay is ignored.
    let r = api.patch(
        "/api/queues/shared",
        None,
        r#"{"default_message_delay": "0"}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        z.json("GET", "/v2/queues/shared", None, StatusCode::OK),
        with_defaults(json!({"colour": "blue"}))
    );
    z.post_messages("shared", json!([{"body": "at once", "delay": 60}]));
    assert!(claim(&z).is_some(), "due at once");
}

/// The management API shows a queue's Zaqar metadata and replaces it, checked as the
/// Zaqar API checks it; the default delay stays the setting it is.
#[test]
fn the_management_api_shows_and_replaces_zaqar_metadata() {
    let (_dir, broker) = start();
    let (z, api) = made_by_zaqar(
        &broker,
        "meta",
        json!({"_default_message_delay": 5, "colour": "blue"}),
    );
    let detail: Value = api.get("/api/queues/meta", None).json().unwrap();
    assert_eq!(detail["metadata"], json!({"colour": "blue"}), "{detail}");
    assert_eq!(detail["settings"]["default_message_delay"], 5000);

    let r = api.patch(
        "/api/queues/meta",
        None,
        r#"{"metadata": {"colour": "green", "_max_claim_count": 3}}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    let answer: Value = r.json().unwrap();
    assert_eq!(
        answer["metadata"],
        json!({"colour": "green", "_max_claim_count": 3})
    );
    assert_eq!(
        answer["settings"]["default_message_delay"], 5000,
        "the delay is kept"
    );
    assert_eq!(
        z.json("GET", "/v2/queues/meta", None, StatusCode::OK),
        with_defaults(json!({
            "colour": "green", "_max_claim_count": 3, "_default_message_delay": 5,
        }))
    );

    for (bad, says) in [
        (r#"{"metadata": {"_unknown": 1}}"#, "metadata: "),
        (
            r#"{"metadata": {"_default_message_delay": 901}}"#,
            "_default_message_delay",
        ),
        (r#"{"metadata": 5}"#, "metadata"),
        (
            r#"{"metadata": {"_default_message_delay": 1}, "default_message_delay": "2s"}"#,
            "not both",
        ),
    ] {
        let r = api.patch("/api/queues/meta", None, bad);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        let body: Value = r.json().unwrap();
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{bad}: {body}"
        );
    }
    // null removes the metadata; the delay, a setting, stays.
    let r = api.patch("/api/queues/meta", None, r#"{"metadata": null}"#);
    assert_eq!(r.status(), StatusCode::OK);
    let detail: Value = r.json().unwrap();
    assert!(detail.get("metadata").is_none(), "{detail}");
    assert_eq!(detail["settings"]["default_message_delay"], 5000);
    assert_eq!(
        z.json("GET", "/v2/queues/meta", None, StatusCode::OK),
        with_defaults(json!({"_default_message_delay": 5}))
    );
}

#[test]
fn a_queue_shows_its_reserved_metadata_at_their_defaults_and_takes_them_back() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.send("PUT", "/v2/queues/plain", None);
    let shown = z.json("GET", "/v2/queues/plain", None, StatusCode::OK);
    assert_eq!(shown, with_defaults(json!({})));
    let listed = z.json("GET", "/v2/queues?detailed=true", None, StatusCode::OK);
    let plain = listed["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "plain");
    assert_eq!(plain.unwrap()["metadata"], shown, "a detailed listing too");

    // What python-zaqarclient's `metadata(new)` sends after such a GET: a
    // replace of a key shown with its default, removes of the others.
    let mut ops =
        vec![json!({"op": "replace", "path": "/metadata/_default_message_ttl", "value": 120})];
    for key in shown.as_object().unwrap().keys() {
        if key != "_default_message_ttl" {
            ops.push(json!({"op": "remove", "path": format!("/metadata/{key}")}));
        }
    }
    let r = patch(&z, "plain", json!(ops));
    assert_eq!(r.status(), StatusCode::OK);
    let answered: Value = r.json().unwrap();
    assert_eq!(
        answered,
        with_defaults(json!({"_default_message_ttl": 120}))
    );
    z.post_messages("plain", json!([{"body": 1}]));
    assert_eq!(
        z.list("plain", "echo=true")[0]["ttl"],
        120,
        "the ttl replaced holds"
    );

    // The whole of a GET is taken back by a PUT (for a new queue) as it is.
    let r = z.send("PUT", "/v2/queues/copy", Some(answered.clone()));
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(
        z.json("GET", "/v2/queues/copy", None, StatusCode::OK),
        answered
    );

    // A user key is no reserved one: replacing or removing it unset conflicts.
    let r = patch(
        &z,
        "plain",
        json!([{"op": "remove", "path": "/metadata/colour"}]),
    );
    assert_zaqar_error(r, StatusCode::CONFLICT);
    let r = z.send(
        "PUT",
        "/v2/queues/secret",
        Some(json!({"_enable_encrypt_messages": true})),
    );
    let why = assert_zaqar_error(r, StatusCode::BAD_REQUEST);
    assert!(why.contains("_enable_encrypt_messages"), "{why}");
}

#[test]
fn stomp_deliveries_count_toward_max_claim_count() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    let r = z.send(
        "PUT",
        "/v2/queues/retried",
        Some(json!({"_max_claim_count": 3, "_dead_letter_queue": "retried-dead"})),
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    z.post_messages("retried", json!([{"body": "flaky"}]));

    // Delivered twice over STOMP: NACKed (and so delivered again at once),
    // then left unacknowledged by a subscription that ends.
    let mut consumer = broker.client();
    consumer.subscribe("1", "/queue/retried", "client-individual");
    let first = consumer.recv().expect("delivered over STOMP");
    let ack = first.header("ack").unwrap().to_owned();
    consumer.send_frame("NACK", &[("id", &ack)], b"");
    let again = consumer.recv().expect("delivered again after the NACK");
    assert_eq!(again.header("redelivered"), Some("true"));
    consumer.send_frame("UNSUBSCRIBE", &[("id", "1"), ("receipt", "gone")], b"");
    let receipt = consumer.recv().expect("RECEIPT for UNSUBSCRIBE");
    assert_eq!(receipt.header("receipt-id"), Some("gone"), "{receipt:?}");

    // The claim is the third delivery: its count says so.
    let claimed = z.json(
        "POST",
        "/v2/queues/retried/claims",
        None,
        StatusCode::CREATED,
    );
    let message = &claimed["messages"][0];
    assert_eq!(message["body"], "flaky");
    assert_eq!(message["claim_count"], 3, "{claimed}");
    let href = message["href"].as_str().unwrap();
    let claim_id = href.split("claim_id=").nth(1).unwrap();
    let got = z.json("GET", href.split('?').next().unwrap(), None, StatusCode::OK);
    assert_eq!(got["claim_count"], 3, "{got}");
    assert_eq!(
        z.send(
            "DELETE",
            &format!("/v2/queues/retried/claims/{claim_id}"),
            None
        )
        .status(),
        StatusCode::NO_CONTENT
    );

    // Delivered as often as `_max_claim_count` allows: the next claim moves it.
    assert_eq!(
        z.send("POST", "/v2/queues/retried/claims", None).status(),
        StatusCode::NO_CONTENT
    );
    assert!(z
        .list("retried", "echo=true&include_claimed=true")
        .is_empty());
    assert_eq!(
        bodies(&z.list("retried-dead", "echo=true")),
        [json!("flaky")]
    );
}

#[test]
fn a_claim_answered_holds_its_messages_across_kill_9() {
    let (_dir, broker) = start();
    let z = Zaqar::new(&broker);
    z.post_messages("held", json!([{"body": "a"}, {"body": "b"}, {"body": "c"}]));
    let r = z.send(
        "POST",
        "/v2/queues/held/claims?limit=2",
        Some(json!({"ttl": 300, "grace": 60})),
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let claimed: Value = r.json().unwrap();
    let claimed = claimed["messages"].as_array().unwrap().clone();
    assert_eq!(bodies(&claimed), [json!("a"), json!("b")]);
    // Renewed, then killed: the renewal is what a restart finds.
    assert_eq!(
        z.send("PATCH", &location, Some(json!({"ttl": 600, "grace": 90})))
            .status(),
        StatusCode::NO_CONTENT
    );

    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    let mut stomp = broker.client();
    stomp.subscribe("1", "/queue/held", "client");
    let first = stomp.recv().expect("the unclaimed message");
    assert_eq!(first.body_text(), "\"c\"");
    assert!(
        stomp.recv_timeout(Duration::from_millis(500)).is_none(),
        "claimed before the kill: still held after it"
    );
    stomp.ack_receipted(&first, "first");
    assert_eq!(stomp.recv().unwrap().header("receipt-id"), Some("first"));
    let view = z.json("GET", &location, None, StatusCode::OK);
    assert_eq!(view["ttl"], 600);
    assert_eq!(view["grace"], 90);
    let held = view["messages"].as_array().unwrap().clone();
    assert_eq!(bodies(&held), [json!("a"), json!("b")]);
    assert_eq!(held[0]["claim_count"], 1, "the claim is still the first");
    assert_eq!(
        z.send("POST", "/v2/queues/held/claims", None).status(),
        StatusCode::NO_CONTENT,
        "nothing left to claim"
    );
    // Deleted through the restored claim: acknowledged.
    let href = held[0]["href"].as_str().unwrap();
    assert!(href.contains("claim_id="));
    assert_eq!(
        z.send("DELETE", href, None).status(),
        StatusCode::NO_CONTENT
    );
    // Released: the other goes to STOMP, and stays gone after another kill.
    assert_eq!(
        z.send("DELETE", &location, None).status(),
        StatusCode::NO_CONTENT
    );
    let got = stomp.recv().expect("released: delivered");
    assert_eq!(got.body_text(), "\"b\"");
    stomp.ack_receipted(&got, "acked");
    assert_eq!(stomp.recv().unwrap().header("receipt-id"), Some("acked"));
    drop(stomp);
    let broker = broker.restart_after_kill();
    let z = Zaqar::new(&broker);
    assert!(z.list("held", "echo=true&include_claimed=true").is_empty());
    assert_eq!(
        z.send("GET", &location, None).status(),
        StatusCode::NOT_FOUND,
        "a released claim does not come back"
    );
}
