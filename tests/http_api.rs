//! The management HTTP API over real sockets: a broker process, an independent HTTP
//! client (reqwest), and STOMP traffic on the same broker to cross-check what the API
//! reports.

mod common;

use common::http::{assert_error, Api};
use common::{free_port, users_config, BrokerProcess, Frame, Stomp};
use reqwest::StatusCode;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// admin (ops) may manage; auditor (audit) may only view; dev (dev) may send and consume
/// but not look.
const PERMISSIONS: &str = r##"
[security.permissions."#"]
send = ["ops", "dev"]
consume = ["ops", "dev"]
browse = ["ops", "dev"]
create_address = ["ops", "dev"]
create_durable_queue = ["ops", "dev"]
delete_durable_queue = ["ops"]
delete_non_durable_queue = ["ops"]
manage = ["ops"]
view = ["audit"]
"##;

/// The users (password `pw`, one role each) and [`PERMISSIONS`].
fn config() -> String {
    users_config(&[("admin", "ops"), ("auditor", "audit"), ("dev", "dev")]) + PERMISSIONS
}

fn start(config: Option<&str>) -> (tempfile::TempDir, BrokerProcess, Api) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), config);
    let api = Api::new(broker.http.expect("HTTP listener"), "admin");
    (dir, broker, api)
}

fn login(broker: &BrokerProcess, user: &str) -> Stomp {
    let s = Stomp::connect(broker.stomp, &[("login", user), ("passcode", "pw")]);
    assert_eq!(s.connected.command, "CONNECTED");
    s
}

#[test]
fn health_answers_without_a_login() {
    let (_dir, _broker, api) = start(Some(&config()));
    for path in ["/health/live", "/health/ready"] {
        assert_eq!(api.get(path, None).status(), StatusCode::OK, "{path}");
    }
}

/// `/health/ready` tells a recovering broker from a hung one: its body carries how far
/// recovery came, and after a restart it counts exactly the messages the store held.
#[test]
fn readiness_reports_how_far_recovery_came() {
    let (_dir, broker, api) = start(Some(&config()));
    let body = api.get("/health/ready", None).json::<Value>().unwrap();
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["recovery"]["done"], true, "{body}");
    assert_eq!(body["recovery"]["messages_read"], 0, "{body}");
    let mut producer = login(&broker, "dev");
    for i in 0..300 {
        let receipt = (i == 299).then_some("last");
        let mut headers = vec![("persistent", "true")];
        headers.extend(receipt.map(|r| ("receipt", r)));
        producer.send("/queue/kept", &format!("m{i}"), &headers);
    }
    assert_eq!(producer.recv().expect("RECEIPT").command, "RECEIPT");
    drop(producer);
    let broker = broker.restart_after_kill();
    let api = Api::new(broker.http.expect("HTTP listener"), "admin");
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let r = api.get("/health/ready", None);
        let code = r.status();
        let body = r.json::<Value>().unwrap();
        if code == StatusCode::OK {
            break body;
        }
        // Before it is ready it says why: still recovering, or starting its listeners.
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        let status = body["status"].as_str().unwrap_or_default();
        assert!(["recovering", "not_ready"].contains(&status), "{body}");
        assert!(Instant::now() < deadline, "never ready: {body}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let recovery = &body["recovery"];
    assert_eq!(recovery["done"], true, "{body}");
    assert_eq!(recovery["messages_read"], 300, "{body}");
    assert!(recovery["queues"].as_u64() >= Some(1), "{body}");
    assert_eq!(recovery["queues_read"], 1, "only kept had messages: {body}");
    assert_eq!(recovery["eta_seconds"], Value::Null, "{body}");
}

#[test]
fn logins_are_required_and_checked() {
    let (_dir, _broker, api) = start(Some(&config()));
    let r = api.call("PUT", "/api/queues/q", Some("admin"));
    assert_eq!(r.status(), StatusCode::CREATED);
    // A list shows only the queues the caller may view: none for dev.
    let list: Value = api.get("/api/queues", Some("dev")).json().unwrap();
    assert_eq!(list["total"], 0);
    assert_eq!(api.json("/api/queues")["total"], 1);
    assert_error(
        api.get("/api/queues/q", Some("dev")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    for path in ["/api/broker", "/api/queues", "/metrics"] {
        let r = api.get(path, None);
        assert_eq!(
            r.headers()["www-authenticate"].to_str().unwrap(),
            "Basic realm=\"weir\""
        );
        assert_error(r, StatusCode::UNAUTHORIZED, "unauthorized");
        let wrong = api
            .client
            .get(format!("{}{path}", api.base))
            .basic_auth("admin", Some("not the password"))
            .send()
            .unwrap();
        assert_error(wrong, StatusCode::UNAUTHORIZED, "unauthorized");
        // dev logs in fine but may not view.
        if path != "/api/queues" {
            let r = api.get(path, Some("dev"));
            let message = assert_error(r, StatusCode::FORBIDDEN, "forbidden");
            assert!(message.contains("view"), "{message}");
        }
        for viewer in ["admin", "auditor"] {
            assert_eq!(api.get(path, Some(viewer)).status(), StatusCode::OK);
        }
    }
}

#[test]
fn the_broker_describes_itself() {
    let (_dir, broker, api) = start(Some(&config()));
    let info = api.json("/api/broker");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert!(info["uptime_seconds"].as_f64().unwrap() > 0.0);
    let listeners = info["listeners"].as_array().unwrap();
    assert!(listeners
        .iter()
        .any(|l| l["address"] == broker.stomp.to_string()
            && l["protocols"] == serde_json::json!(["stomp"])
            && l["tls"] == false));
    let http = broker.http.expect("HTTP listener").to_string();
    assert!(
        listeners
            .iter()
            .any(|l| l["name"] == "http" && l["address"] == http.as_str()),
        "the management listener itself: {listeners:?}"
    );
    assert!(info["memory"]["limit_bytes"].as_u64().unwrap() > 0);
    assert!(info["memory"]["process_resident_bytes"].as_u64().unwrap() > 0);
    assert_eq!(info["disk"]["refusing"], false);
    assert_eq!(info["flow"]["blocking_queues"], 0);
}

#[test]
fn queue_counts_follow_stomp_traffic() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut producer = login(&broker, "dev");
    for i in 0..5 {
        producer.send_receipted("/queue/orders", &format!("m{i}"), &[], &format!("r{i}"));
    }
    let q = api.json("/api/queues/orders");
    assert_eq!(q["messages"]["ready"], 5);
    assert_eq!(q["messages"]["in_memory"], 5);
    assert_eq!(q["totals"]["enqueued"], 5);
    assert_eq!(q["consumers"], 0);

    let mut consumer = login(&broker, "dev");
    consumer.send_frame(
        "SUBSCRIBE",
        &[
            ("id", "1"),
            ("destination", "/queue/orders"),
            ("ack", "client-individual"),
            ("activemq.prefetchSize", "2"),
            ("receipt", "sub"),
        ],
        b"",
    );
    assert_eq!(consumer.recv().unwrap().command, "RECEIPT");
    let first = consumer.recv().expect("a message");
    let second = consumer.recv().expect("a message");
    consumer.ack_receipted(&first, "a1");
    // The acknowledgement opens the window: a third message may come before the receipt.
    while consumer.recv().expect("frames").command != "RECEIPT" {}
    let id = second.header("ack").unwrap().to_owned();
    consumer.send_frame("NACK", &[("id", &id), ("receipt", "n1")], b"");
    let deadline = Instant::now() + Duration::from_secs(5);
    let q = loop {
        let q = api.json("/api/queues/orders");
        let settled = q["totals"]["redelivered"] == 1 && q["messages"]["in_flight"] == 2;
        if settled || Instant::now() > deadline {
            break q;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(q["totals"]["acked"], 1);
    assert_eq!(q["totals"]["redelivered"], 1);
    assert_eq!(q["consumers"], 1);
    // One acked, the rest ready or in flight to the consumer (its window of two).
    let m = &q["messages"];
    assert_eq!(
        m["ready"].as_u64().unwrap() + m["in_flight"].as_u64().unwrap(),
        4,
        "{q}"
    );
    assert_eq!(m["in_flight"], 2, "{q}");

    let metrics = api.get("/metrics", Some("auditor")).text().unwrap();
    assert!(metrics.contains("weir_queue_enqueued_messages_total{queue=\"orders\"} 5"));
    assert!(metrics.contains("weir_queue_acked_messages_total{queue=\"orders\"} 1"));
    assert!(metrics.contains("weir_queue_consumers{queue=\"orders\"} 1"));
}

/// The value of an unlabelled sample in Prometheus text.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
        .parse()
        .unwrap()
}

#[test]
fn durable_sends_show_in_the_store_metrics() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut producer = login(&broker, "dev");
    for i in 0..3 {
        producer.send_receipted(
            "/queue/kept",
            &format!("m{i}"),
            &[("persistent", "true")],
            &format!("r{i}"),
        );
    }
    let metrics = api.get("/metrics", Some("auditor")).text().unwrap();
    // Each receipt waited for a commit of its own (fsync = "always").
    assert!(
        sample(&metrics, "weir_store_sync_seconds_count") >= 3.0,
        "{metrics}"
    );
    assert!(
        sample(&metrics, "weir_store_sync_seconds_sum") > 0.0,
        "{metrics}"
    );
    assert!(
        sample(&metrics, "weir_store_commit_batch_size_sum") >= 3.0,
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "weir_store_commit_batch_size_count"),
        sample(&metrics, "weir_store_commit_batch_size_bucket{le=\"+Inf\"}"),
    );
    assert!(sample(&metrics, "weir_store_bytes") > 0.0, "{metrics}");
    assert!(sample(&metrics, "weir_store_pending_compaction_bytes") >= 0.0);
    assert_eq!(sample(&metrics, "weir_store_running_compactions"), 0.0);
}

#[test]
fn queue_lists_page_and_filter() {
    let (_dir, _broker, api) = start(Some(&config()));
    for name in ["a.1", "a.2", "a.3", "b.1", "a.4"] {
        let r = api.call("PUT", &format!("/api/queues/{name}"), Some("admin"));
        assert_eq!(r.status(), StatusCode::CREATED, "{name}");
    }
    let page = api.json("/api/queues?name=a.&offset=1&limit=2");
    assert_eq!(page["total"], 4);
    let names: Vec<&str> = page["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.2", "a.3"]);
    assert_eq!(api.json("/api/queues")["total"], 5);
    for bad in ["limit=abc", "limit=0", "offset=x", "sort=name"] {
        let message = assert_error(
            api.get(&format!("/api/queues?{bad}"), Some("admin")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
        let key = bad.split('=').next().unwrap();
        assert!(message.contains(key), "{message}");
    }
}

#[test]
fn unknown_queues_and_paths_are_404() {
    let (_dir, _broker, api) = start(Some(&config()));
    assert_error(
        api.get("/api/queues/nope", Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    for (method, path) in [
        ("DELETE", "/api/queues/nope"),
        ("POST", "/api/queues/nope/purge"),
        ("POST", "/api/queues/nope/pause"),
    ] {
        assert_error(
            api.call(method, path, Some("admin")),
            StatusCode::NOT_FOUND,
            "not_found",
        );
    }
    assert_error(
        api.get("/api/nothing", Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[test]
fn queues_are_created_purged_and_deleted_by_managers_only() {
    let (_dir, broker, api) = start(Some(&config()));
    assert_error(
        api.call("PUT", "/api/queues/jobs", Some("auditor")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call("PUT", "/api/queues/jobs", None),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_eq!(
        api.call("PUT", "/api/queues/jobs", Some("admin")).status(),
        StatusCode::CREATED
    );
    assert_eq!(
        api.call("PUT", "/api/queues/jobs", Some("admin")).status(),
        StatusCode::OK
    );
    let mut producer = login(&broker, "dev");
    for i in 0..3 {
        producer.send_receipted("/queue/jobs", "x", &[], &format!("r{i}"));
    }
    assert_error(
        api.call("POST", "/api/queues/jobs/purge", Some("auditor")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    let r = api.call("POST", "/api/queues/jobs/purge", Some("admin"));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap()["removed"], 3);
    assert_eq!(api.json("/api/queues/jobs")["messages"]["ready"], 0);

    // Not while a consumer is attached.
    let mut consumer = login(&broker, "dev");
    consumer.subscribe("1", "/queue/jobs", "auto");
    let message = assert_error(
        api.call("DELETE", "/api/queues/jobs", Some("admin")),
        StatusCode::CONFLICT,
        "conflict",
    );
    assert!(message.contains("consumer"), "{message}");
    drop(consumer);
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.json("/api/queues/jobs")["consumers"] != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_error(
        api.call("DELETE", "/api/queues/jobs", Some("auditor")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_eq!(
        api.call("DELETE", "/api/queues/jobs", Some("admin"))
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_error(
        api.get("/api/queues/jobs", Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

/// The sample of a per-queue metric for `queue`.
fn queue_sample(metrics: &str, name: &str, queue: &str) -> f64 {
    sample(metrics, &format!("{name}{{queue=\"{queue}\"}}"))
}

#[test]
fn the_dispatch_gate_is_shown_and_exported() {
    let config = format!(
        "{}\n[[queues]]\nname = \"gated\"\nconsumers_before_dispatch = 2\ndelay_before_dispatch = \"60s\"\n",
        config()
    );
    let (_dir, broker, api) = start(Some(&config));
    let gate = || api.json("/api/queues/gated")["dispatch_gate"].clone();
    let open = || {
        let metrics = api.get("/metrics", Some("auditor")).text().unwrap();
        queue_sample(&metrics, "weir_queue_dispatch_gate_open", "gated")
    };
    // No consumer: the delay has not started.
    assert_eq!(gate()["state"], "waiting_for_consumers");
    assert_eq!(gate()["opens_in_ms"], Value::Null);
    assert_eq!(open(), 0.0);

    let mut producer = login(&broker, "dev");
    producer.send_receipted("/queue/gated", "held", &[], "r1");
    let mut first = login(&broker, "dev");
    first.subscribe("1", "/queue/gated", "auto");
    let g = gate();
    assert_eq!(g["state"], "waiting_for_delay", "{g}");
    let left = g["opens_in_ms"].as_u64().expect("a time left");
    assert!((1..=60_000).contains(&left), "{g}");
    assert_eq!(open(), 0.0);
    assert!(first.recv_timeout(Duration::from_millis(200)).is_none());

    // The second consumer opens it; it stays open when one of the two leaves.
    let mut second = login(&broker, "dev");
    second.subscribe("2", "/queue/gated", "auto");
    assert_eq!(gate()["state"], "open");
    assert_eq!(gate()["opens_in_ms"], Value::Null);
    assert_eq!(open(), 1.0);
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.json("/api/queues/gated")["consumers"] != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(api.json("/api/queues/gated")["consumers"], 1);
    assert_eq!(gate()["state"], "open");
    assert_eq!(open(), 1.0);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.json("/api/queues/gated")["consumers"] != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Everyone left: the next consumers wait again.
    assert_eq!(gate()["state"], "waiting_for_consumers");
    assert_eq!(open(), 0.0);
}

#[test]
fn a_paused_queue_keeps_its_messages_until_resumed() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut consumer = login(&broker, "dev");
    consumer.subscribe("1", "/queue/work", "auto");
    let r = api.call("POST", "/api/queues/work/pause", Some("admin"));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap()["paused"], true);
    let mut producer = login(&broker, "dev");
    producer.send_receipted("/queue/work", "held", &[], "r1");
    assert!(consumer.recv_timeout(Duration::from_millis(300)).is_none());
    assert_eq!(api.json("/api/queues/work")["messages"]["ready"], 1);
    let r = api.call("POST", "/api/queues/work/resume", Some("admin"));
    assert_eq!(r.json::<Value>().unwrap()["paused"], false);
    let got = consumer.recv().expect("delivered after resume");
    assert_eq!(got.body_text(), "held");
}

#[test]
fn anonymous_callers_are_served_where_the_broker_allows_them() {
    let (_dir, _broker, api) = start(None);
    assert_eq!(api.get("/api/broker", None).status(), StatusCode::OK);
    assert_eq!(
        api.call("PUT", "/api/queues/open", None).status(),
        StatusCode::CREATED
    );
}

#[test]
fn anonymous_access_beyond_loopback_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--stomp")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--amqp")
        .arg("off")
        .arg("--http")
        .arg(format!("0.0.0.0:{}", free_port()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(http)") && stderr.contains("allow_anonymous"),
        "{stderr}"
    );
}

/// The open connection whose client id is `client_id`, as a viewer lists it.
fn listed_connection(api: &Api, client_id: &str) -> Value {
    let r = api.get("/api/connections", Some("auditor"));
    assert_eq!(r.status(), StatusCode::OK);
    let list: Value = r.json().unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["client_id"] == client_id)
        .unwrap_or_else(|| panic!("{client_id} is not listed: {list}"))
        .clone()
}

/// Acknowledges `job` with a receipt, waits for it, and lists the connection.
/// Its receipt comes in a later wake-up than the frames before it, so the
/// counts (published at the end of each wake-up) are up to date once it is here.
fn acked_then_listed(client: &mut Stomp, job: &Frame, receipt: &str, api: &Api) -> Value {
    client.ack_receipted(job, receipt);
    assert_eq!(client.recv().expect("RECEIPT").command, "RECEIPT");
    listed_connection(api, "worker-7")
}

#[test]
fn connections_are_listed_and_closed_with_a_protocol_goodbye() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut client = Stomp::connect(
        broker.stomp,
        &[
            ("login", "dev"),
            ("passcode", "pw"),
            ("client-id", "worker-7"),
        ],
    );
    assert_eq!(client.connected.command, "CONNECTED");
    // Three messages in, three out, one acknowledged.
    for i in 0..3 {
        client.send_receipted("/queue/jobs", &format!("job-{i}"), &[], &format!("s{i}"));
    }
    client.subscribe("1", "/queue/jobs", "client-individual");
    let jobs: Vec<_> = (0..3).map(|_| client.recv().expect("a job")).collect();
    let ours = acked_then_listed(&mut client, &jobs[0], "a0", &api);
    assert_eq!(
        ours["messages"],
        serde_json::json!({"received": 3, "sent": 3})
    );
    // The first reading has nothing to compare with.
    assert_eq!(
        ours["rates"],
        serde_json::json!({"received_per_second": 0.0, "sent_per_second": 0.0})
    );
    // Two more in (to a queue it does not consume) a second or more later.
    std::thread::sleep(Duration::from_millis(1100));
    for i in 3..5 {
        client.send_receipted("/queue/other", &format!("job-{i}"), &[], &format!("s{i}"));
    }
    let ours = acked_then_listed(&mut client, &jobs[1], "a1", &api);
    assert_eq!(
        ours["messages"],
        serde_json::json!({"received": 5, "sent": 3})
    );
    let received_rate = ours["rates"]["received_per_second"].as_f64().unwrap();
    // Two messages over somewhat more than the 1.1 s slept.
    assert!(received_rate > 0.0 && received_rate < 2.0, "{ours}");
    assert_eq!(ours["rates"]["sent_per_second"].as_f64(), Some(0.0));
    assert_eq!(ours["protocol"], "stomp");
    assert_eq!(ours["version"], "1.2");
    assert_eq!(ours["user"], "dev");
    assert_eq!(ours["tls"], false);
    assert_eq!(ours["transport"], "tcp");
    let metrics = api.get("/metrics", Some("auditor")).text().unwrap();
    assert!(
        metrics.contains("weir_connections{protocol=\"stomp\",transport=\"tcp\",tls=\"false\"} 1"),
        "{metrics}"
    );

    let path = format!("/api/connections/{}", ours["id"]);
    assert_error(
        api.call("DELETE", &path, Some("auditor")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call("DELETE", "/api/connections/abc", Some("admin")),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_eq!(
        api.call("DELETE", &path, Some("admin")).status(),
        StatusCode::ACCEPTED
    );
    let goodbye = client.recv().expect("an ERROR frame before the close");
    assert_eq!(goodbye.command, "ERROR");
    assert!(goodbye.header("message").unwrap().contains("management"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !api.json("/api/connections").as_array().unwrap().is_empty() && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(api.json("/api/connections"), serde_json::json!([]));
    assert_error(
        api.call("DELETE", &path, Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

/// The live schedule: an auditor lists and charts delayed messages, a manager cancels,
/// reschedules and edits them before they are due, and a STOMP consumer sees exactly
/// that: the cancelled one never, the rescheduled ones at their new times, the edited
/// one edited.
#[test]
fn the_schedule_is_listed_and_edited_live() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut producer = login(&broker, "dev");
    for body in ["cancel-me", "now", "edit-me", "soon"] {
        producer.send_receipted(
            "/queue/later",
            body,
            &[("AMQ_SCHEDULED_DELAY", "3000")],
            body,
        );
    }
    let listed = api.get("/api/schedule?queue=later&preview=64", Some("auditor"));
    assert_eq!(listed.status(), StatusCode::OK);
    let page: Value = listed.json().unwrap();
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{page}");
    let id_of = |body: &str| -> String {
        let item = items
            .iter()
            .find(|i| i["body_preview"] == body)
            .unwrap_or_else(|| panic!("{body} listed: {page}"));
        assert_eq!(item["queue"], "later");
        item["id"].as_str().unwrap().to_owned()
    };
    let (cancel, now, edit, soon) = (
        id_of("cancel-me"),
        id_of("now"),
        id_of("edit-me"),
        id_of("soon"),
    );
    // Paged: two and two, each once.
    let first: Value = api.json("/api/schedule?queue=later&limit=2");
    let cursor = first["next"].as_str().expect("a next page").to_owned();
    let second: Value = api.json(&format!(
        "/api/schedule?queue=later&limit=2&cursor={cursor}"
    ));
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(second["items"].as_array().unwrap().len(), 2);
    assert!(second["next"].is_null(), "{second}");
    // The chart: all four fall due within the next ten seconds.
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let chart = api.json(&format!(
        "/api/schedule/timeline?queue=later&from={}&to={}&buckets=10",
        t0 - 1000,
        t0 + 9000
    ));
    let counted: u64 = chart["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(counted, 4, "{chart}");
    let one = api.json(&format!("/api/schedule/{edit}"));
    assert_eq!(one["body_text"], "edit-me");

    // Who may: dev neither views nor changes, the auditor only views.
    assert_error(
        api.get("/api/schedule?queue=later", Some("dev")),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.call(
            "DELETE",
            &format!("/api/schedule/{cancel}"),
            Some("auditor"),
        ),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    // Bad input says what was wrong.
    assert_error(
        api.get("/api/schedule/not-an-id", Some("admin")),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_error(
        api.get("/api/schedule/99999999999999:999:1", Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    // One whose time has passed was delivered: a conflict, not a mistake.
    assert_error(
        api.get("/api/schedule/1:999:1", Some("admin")),
        StatusCode::CONFLICT,
        "conflict",
    );
    assert_error(
        api.get("/api/schedule?limit=0", Some("admin")),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_error(
        api.get("/api/schedule/timeline?from=5", Some("admin")),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    let patch = |id: &str, body: &str| {
        api.request("PATCH", &format!("/api/schedule/{id}"), Some("admin"))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap()
    };
    let reschedule = |id: &str, body: &str| {
        api.request(
            "POST",
            &format!("/api/schedule/{id}/reschedule"),
            Some("admin"),
        )
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .unwrap()
    };
    assert_error(patch(&edit, "{}"), StatusCode::BAD_REQUEST, "bad_request");
    assert_error(
        patch(&edit, "{\"colour\": 1}"),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_error(
        reschedule(&soon, "{\"due_ms\": 1, \"delay_ms\": 1}"),
        StatusCode::BAD_REQUEST,
        "bad_request",
    );

    // The changes.
    let r = api.call("DELETE", &format!("/api/schedule/{cancel}"), Some("admin"));
    assert_eq!(r.status(), StatusCode::OK);
    assert_error(
        api.call("DELETE", &format!("/api/schedule/{cancel}"), Some("admin")),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let r = patch(
        &edit,
        r#"{"body": "edited", "properties": [{"name": "k", "value": {"type": "string", "value": "v"}}]}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    let r = reschedule(&now, "{\"delay_ms\": 0}");
    assert_eq!(r.status(), StatusCode::OK);
    let r = reschedule(&soon, "{\"delay_ms\": 600}");
    assert_eq!(r.status(), StatusCode::OK);
    let moved: Value = r.json().unwrap();
    assert_ne!(moved["id"], soon.as_str(), "a new due time is a new id");

    let mut consumer = login(&broker, "dev");
    consumer.subscribe("later", "/queue/later", "auto");
    let started = Instant::now();
    let next = |consumer: &mut Stomp| {
        let f = consumer
            .recv_timeout(Duration::from_secs(6))
            .expect("a delayed message");
        assert_eq!(f.command, "MESSAGE", "{f:?}");
        (
            f.body_text(),
            f.header("k").map(str::to_owned),
            started.elapsed(),
        )
    };
    let (body, _, at) = next(&mut consumer);
    assert_eq!(body, "now");
    assert!(
        at < Duration::from_millis(500),
        "rescheduled to now, came after {at:?}"
    );
    let (body, _, at) = next(&mut consumer);
    assert_eq!(body, "soon");
    assert!(
        at < Duration::from_millis(2000),
        "rescheduled to 600 ms, came after {at:?}"
    );
    let (body, header, _) = next(&mut consumer);
    assert_eq!((body.as_str(), header.as_deref()), ("edited", Some("v")));
    assert!(
        consumer.recv_timeout(Duration::from_millis(800)).is_none(),
        "the cancelled message never comes"
    );
    let left: Value = api.json("/api/schedule?queue=later");
    assert!(left["items"].as_array().unwrap().is_empty(), "{left}");
}

/// A delayed message's standard headers are edited over the API and with `weir
/// schedule edit`, survive a kill -9 and restart, and reach the consumer edited;
/// what names the message or its destination is refused with 400 naming the field.
#[test]
fn scheduled_headers_are_edited_and_fixed_ones_refused() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut producer = login(&broker, "dev");
    producer.send_receipted(
        "/queue/hdrs",
        "payload",
        &[
            ("AMQ_SCHEDULED_DELAY", "6000"),
            ("persistent", "true"),
            ("priority", "2"),
            ("correlation-id", "c-1"),
            ("content-type", "text/plain"),
        ],
        "r1",
    );
    let page: Value = api.json("/api/schedule?queue=hdrs");
    let id = page["items"][0]["id"].as_str().expect("listed").to_owned();
    let path = format!("/api/schedule/{id}");

    let r = api.patch(
        &path,
        Some("admin"),
        r#"{"headers": {"priority": 9, "correlation_id": "c-2", "reply_to": "/queue/replies",
            "content_type": null, "ttl_ms": 3600000}, "group_id": "g7"}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    let edited: Value = r.json().unwrap();
    assert_eq!(edited["id"], id.as_str(), "a header edit keeps the id");
    assert_eq!(edited["headers"]["priority"], 9);
    assert_eq!(edited["headers"]["correlation_id"], "c-2");
    assert!(edited["headers"]["content_type"].is_null(), "{edited}");
    assert!(edited["headers"]["expires_ms"].as_u64().is_some());
    assert_eq!(edited["group_id"], "g7");

    for (body, field) in [
        (r#"{"message_id": "forged"}"#, "message_id"),
        (r#"{"headers": {"queue": "elsewhere"}}"#, "queue"),
        (r#"{"destination": "/queue/elsewhere"}"#, "destination"),
        (r#"{"headers": {"user_id": "mallory"}}"#, "user_id"),
        (r#"{"priority": 12}"#, "priority"),
        (r#"{"headers": {"colour": "red"}}"#, "colour"),
        (r#"{"priority": 3, "headers": {"priority": 4}}"#, "priority"),
    ] {
        let r = api.patch(&path, Some("admin"), body);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = r.json().unwrap();
        assert_eq!(error["error"], "bad_request", "{error}");
        assert_eq!(error["field"], field, "{body}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(field),
            "{error}"
        );
    }
    let r = api.patch(&path, Some("auditor"), r#"{"priority": 1}"#);
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // The CLI against the running broker: one more header, and a refusal.
    let url = format!("http://{}", broker.http.expect("HTTP listener"));
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["schedule", "--url", &url, "--user", "admin"])
            .args(args)
            .env("WEIR_PASSWORD", "pw")
            .env_remove("WEIR_URL")
            .env_remove("WEIR_USER")
            .output()
            .unwrap()
    };
    let out = cli(&[
        "edit",
        &id,
        "--header",
        "subject=audited",
        "--header",
        "priority=8",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["edit", &id, "--header", "message_id=forged"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("message_id"), "{stderr}");

    // Durable: a kill -9 and restart finds it edited, and so it arrives.
    let broker = broker.restart();
    let api = Api::new(broker.http.expect("HTTP listener"), "admin");
    let after = api.json(&path);
    assert_eq!(after["headers"]["priority"], 8);
    assert_eq!(after["headers"]["subject"], "audited");
    assert_eq!(after["headers"]["reply_to"], "/queue/replies");
    let mut consumer = login(&broker, "dev");
    consumer.subscribe("h", "/queue/hdrs", "auto");
    let f = consumer
        .recv_timeout(Duration::from_secs(10))
        .expect("the delayed message");
    assert_eq!(f.command, "MESSAGE", "{f:?}");
    assert_eq!(f.body_text(), "payload");
    assert_eq!(f.header("priority"), Some("8"));
    assert_eq!(f.header("correlation-id"), Some("c-2"));
    assert_eq!(f.header("reply-to"), Some("/queue/replies"));
    assert_eq!(f.header("subject"), Some("audited"));
    assert_eq!(f.header("JMSXGroupID"), Some("g7"));
    assert_eq!(f.header("content-type"), None, "cleared");
    assert!(f.header("expires").is_some());
}

#[test]
fn queue_settings_change_at_run_time_and_survive_a_restart() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut producer = login(&broker, "dev");
    producer.send_receipted("/queue/orders", "first", &[], "r1");
    let before = api.json("/api/queues/orders");
    assert_eq!(before["settings"]["redelivery_delay"], 0);
    assert_eq!(before["changed_settings"], serde_json::json!([]));

    let r = api.patch(
        "/api/queues/orders",
        Some("admin"),
        r#"{"redelivery_delay": "2s", "max_delivery_attempts": 3, "dead_letter_address": "parked", "exclusive": true}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    let after: Value = r.json().unwrap();
    assert_eq!(after["settings"]["redelivery_delay"], 2000);
    assert_eq!(after["settings"]["max_delivery_attempts"], 3);
    assert_eq!(after["settings"]["dead_letter_address"], "parked");
    assert_eq!(after["settings"]["exclusive"], true);

    // The new redelivery delay applies to the message already queued: a NACKed
    // delivery comes back only after 2 s.
    let mut consumer = login(&broker, "dev");
    consumer.subscribe("1", "/queue/orders", "client-individual");
    let got = consumer.recv().expect("delivered");
    consumer.send_frame(
        "NACK",
        &[("id", got.header("ack").expect("an ack id"))],
        b"",
    );
    let nacked = Instant::now();
    let again = consumer
        .recv_timeout(Duration::from_secs(5))
        .expect("redelivered");
    assert_eq!(again.body_text(), "first");
    assert!(
        nacked.elapsed() >= Duration::from_millis(1800),
        "redelivered after {:?}",
        nacked.elapsed()
    );
    drop(consumer);

    // A pause and the settings are stored: a restart finds both.
    api.call("POST", "/api/queues/orders/pause", Some("admin"));
    let broker = broker.restart();
    let api = Api::new(broker.http.expect("HTTP listener"), "admin");
    let restarted = api.json("/api/queues/orders");
    assert_eq!(restarted["paused"], true);
    assert_eq!(restarted["settings"]["redelivery_delay"], 2000);
    assert_eq!(restarted["settings"]["dead_letter_address"], "parked");
    let mut changed: Vec<String> =
        serde_json::from_value(restarted["changed_settings"].clone()).unwrap();
    changed.sort();
    assert_eq!(
        changed,
        [
            "dead_letter_address",
            "exclusive",
            "max_delivery_attempts",
            "redelivery_delay"
        ]
    );

    // null puts one back to the config's value.
    let r = api.patch(
        "/api/queues/orders",
        Some("admin"),
        r#"{"redelivery_delay": null}"#,
    );
    assert_eq!(r.status(), StatusCode::OK);
    let back: Value = r.json().unwrap();
    assert_eq!(back["settings"]["redelivery_delay"], 0);
    assert_eq!(back["settings"]["max_delivery_attempts"], 3);
}

#[test]
fn queue_settings_changes_are_checked() {
    let (_dir, broker, api) = start(Some(&config()));
    let mut producer = login(&broker, "dev");
    producer.send_receipted("/queue/orders", "m", &[], "r1");
    let path = "/api/queues/orders";
    for (body, says) in [
        (r#"{"colour": "red"}"#, "colour"),
        (r#"{"colour": null}"#, "colour"),
        (r#"{"redelivery_delay": "soon"}"#, "redelivery_delay"),
        (r#"{"max_delivery_attempts": 0}"#, "max_delivery_attempts"),
        (r#"{"max_delivery_attempts": "3"}"#, "max_delivery_attempts"),
        (r#"{"default_message_delay": "2h"}"#, "max_message_delay"),
        (r#"{"delay_headers": ["x-wait:ms"]}"#, "x-wait"),
        (r#"[1, 2]"#, "JSON object"),
        (r#"{"#, "JSON object"),
    ] {
        let message = assert_error(
            api.patch(path, Some("admin"), body),
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
        assert!(message.contains(says), "{body}: {message}");
    }
    let message = assert_error(
        api.patch(path, Some("admin"), r#"{"group_buckets": 8}"#),
        StatusCode::CONFLICT,
        "conflict",
    );
    assert!(message.contains("group_buckets"), "{message}");
    assert_error(
        api.patch(path, Some("auditor"), r#"{"exclusive": true}"#),
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        api.patch(path, None, r#"{"exclusive": true}"#),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_error(
        api.patch("/api/queues/nope", Some("admin"), r#"{"exclusive": true}"#),
        StatusCode::NOT_FOUND,
        "not_found",
    );
    // Nothing refused was applied.
    assert_eq!(api.json(path)["changed_settings"], serde_json::json!([]));
}

/// Every route of the API and `/metrics`, as the OpenAPI description lists them (so a
/// new route is covered the day it is described): without a login or with a wrong one
/// 401, for a user with neither `view` nor `manage` 403 (a listing answers with what
/// they may view: nothing), and for a `view`-only user 403 on every route that changes
/// something.
#[test]
fn every_route_refuses_a_missing_login_and_a_missing_role() {
    const LISTINGS: [&str; 1] = ["/api/queues"];
    let (_dir, _broker, api) = start(Some(&config()));
    assert_eq!(
        api.call("PUT", "/api/queues/q", Some("admin")).status(),
        StatusCode::CREATED
    );
    // A waiting message, so the schedule's routes find one whose queue they check.
    let sent = api.post(
        "/api/queues/q/messages",
        Some("admin"),
        serde_json::json!({"body": "later", "delay_ms": 600_000}),
    );
    assert_eq!(sent.status(), StatusCode::CREATED);
    let waiting = api.json("/api/schedule?queue=q")["items"][0]["id"]
        .as_str()
        .expect("a waiting message")
        .to_owned();
    let description: Value =
        serde_json::from_str(include_str!("../src/http/openapi.json")).unwrap();
    let mut checked = 0;
    for (path, operations) in description["paths"].as_object().unwrap() {
        if !(path.starts_with("/api/") || path == "/metrics") || path == "/api/openapi.json" {
            continue;
        }
        let id = match path.starts_with("/api/schedule/") {
            true => waiting.as_str(),
            false => "1",
        };
        let concrete = path
            .replace("{name}", "q")
            .replace("{id}", id)
            .replace("{group}", "g")
            .replace("/timeline", "/timeline?from=0&to=60000");
        for method in operations.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            if !["GET", "PUT", "POST", "PATCH", "DELETE"].contains(&method.as_str()) {
                continue;
            }
            let send = |user: Option<&str>, password: &str| {
                let mut r = api
                    .client
                    .request(
                        reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                        format!("{}{concrete}", api.base),
                    )
                    .header("content-type", "application/json")
                    .body("{}");
                if let Some(u) = user {
                    r = r.basic_auth(u, Some(password));
                }
                r.send().unwrap()
            };
            let what = format!("{method} {concrete}");
            assert_error(send(None, ""), StatusCode::UNAUTHORIZED, "unauthorized");
            let wrong = send(Some("admin"), "not the password");
            assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{what}");
            let r = send(Some("dev"), "pw");
            // A listing shows what the caller may view: for dev, nothing.
            let lists = method == "GET" && LISTINGS.contains(&concrete.as_str());
            let expected = match lists {
                true => StatusCode::OK,
                false => StatusCode::FORBIDDEN,
            };
            assert_eq!(r.status(), expected, "{what} as dev");
            if method != "GET" {
                let r = send(Some("auditor"), "pw");
                assert_eq!(r.status(), StatusCode::FORBIDDEN, "{what} as auditor");
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "{checked} routes checked");
}
