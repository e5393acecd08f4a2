//! `weir admin` against a running broker: the real binary on both sides, STOMP traffic
//! to look at, and the CLI's tables and `--json` checked against what was done.

mod common;

use common::{users_config, BrokerProcess, Stomp};
use serde_json::Value;
use std::process::{Command, Output};

const PERMISSIONS: &str = r##"
[security.permissions."#"]
send = ["ops"]
consume = ["ops"]
browse = ["ops"]
create_address = ["ops"]
create_durable_queue = ["ops"]
manage = ["ops"]
view = ["audit"]
"##;

/// The users (password `pw`, one role each) and [`PERMISSIONS`].
fn config() -> String {
    users_config(&[("admin", "ops"), ("auditor", "audit")]) + PERMISSIONS
}

/// Runs `weir admin ARGS` as `user` against the broker.
fn admin(broker: &BrokerProcess, user: &str, args: &[&str]) -> Output {
    weir(broker, "admin", user, args)
}

/// Runs `weir COMMAND ARGS` as `user` against the broker's management API.
fn weir(broker: &BrokerProcess, command: &str, user: &str, args: &[&str]) -> Output {
    let url = format!("http://{}", broker.http.expect("HTTP listener"));
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg(command)
        .args(["--url", &url, "--user", user])
        .args(args)
        .env("WEIR_PASSWORD", "pw")
        .env_remove("WEIR_URL")
        .env_remove("WEIR_USER")
        .output()
        .expect("run weir admin")
}

/// Stdout of a run that must succeed.
fn ok(output: Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// Stderr of a run that must fail.
fn fails(output: Output) -> String {
    assert!(!output.status.success(), "should have failed");
    String::from_utf8(output.stderr).unwrap()
}

/// The whitespace-separated cells of the table line starting with `first`.
fn row(table: &str, first: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(first))
        .unwrap_or_else(|| panic!("no row {first} in\n{table}"))
}

/// The cell under column `name` of the table line starting with `first`: the columns
/// are left-aligned under their names, and a cell before it may hold spaces
/// (`stomp 1.2`).
fn column(table: &str, first: &str, name: &str) -> String {
    let header = table.lines().next().unwrap_or_default();
    let start = header
        .split(' ')
        .scan(0, |at, token| {
            let here = *at;
            *at += token.len() + 1;
            Some((here, token))
        })
        .find(|(_, token)| *token == name)
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("no column {name} in\n{table}"));
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no row {first} in\n{table}"));
    line.get(start..)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("row {first} has no {name} in\n{table}"))
        .to_owned()
}

/// A rate cell: messages per second to one decimal.
fn rate(cell: &str) -> f64 {
    let value: f64 = cell
        .parse()
        .unwrap_or_else(|_| panic!("'{cell}' is not a rate"));
    assert!(value.is_finite() && value >= 0.0, "{cell}");
    value
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn queues_are_listed_moved_purged_and_clients_seen() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(&config()));
    let mut client = Stomp::connect(
        broker.stomp,
        &[
            ("login", "admin"),
            ("passcode", "pw"),
            ("client-id", "cli-test"),
        ],
    );
    assert_eq!(client.connected.command, "CONNECTED");
    for i in 0..3 {
        client.send_receipted("/queue/orders", &format!("o{i}"), &[], &format!("r{i}"));
    }
    client.send_receipted("/queue/archive", "a", &[], "ra");
    client.send_receipted(
        "/queue/orders",
        "later",
        &[("AMQ_SCHEDULED_DELAY", "600000")],
        "rl",
    );

    let list = ok(admin(&broker, "auditor", &["queues"]));
    assert!(list.starts_with("NAME"), "{list}");
    let header: Vec<&str> = list.lines().next().unwrap().split_whitespace().collect();
    let orders = row(&list, "orders");
    assert_eq!(orders[1], "3", "READY: {list}");
    let delayed = header
        .iter()
        .position(|h| *h == "DELAYED")
        .expect("a DELAYED column");
    assert_eq!(orders[delayed], "1", "{list}");

    let json: Value =
        serde_json::from_str(&ok(admin(&broker, "auditor", &["queues", "--json"]))).unwrap();
    let orders = json
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "orders")
        .expect("orders listed");
    assert_eq!(orders["messages"]["ready"], 3);
    assert!(orders["rates"]["enqueued_per_second"].is_number());
    let filtered = ok(admin(&broker, "auditor", &["queues", "--name", "arch"]));
    assert_eq!(filtered.lines().count(), 2, "{filtered}");

    let stat = ok(admin(&broker, "auditor", &["stat", "orders"]));
    assert_eq!(row(&stat, "messages.ready")[1], "3");
    assert_eq!(row(&stat, "totals.enqueued")[1], "3");

    // Move the first message of orders to archive by id.
    let url = format!("http://{}", broker.http.unwrap());
    let page: Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/queues/orders/messages"))
        .basic_auth("auditor", Some("pw"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let first = page["items"][0]["id"].to_string();
    let refused = fails(admin(
        &broker,
        "auditor",
        &["move", "orders", "archive", "--ids", &first],
    ));
    assert!(refused.contains("403"), "{refused}");
    let moved = ok(admin(
        &broker,
        "admin",
        &[
            "move",
            "orders",
            "archive",
            "--ids",
            &format!("{first},999"),
        ],
    ));
    assert_eq!(moved, "moved 1\nskipped 999 (not_found)\n");
    let copied = ok(admin(
        &broker,
        "admin",
        &[
            "copy",
            "archive",
            "orders",
            "--selector",
            "JMSPriority >= 0",
            "--json",
        ],
    ));
    let copied: Value = serde_json::from_str(&copied).unwrap();
    assert_eq!(copied["copied"], 2);

    let purged = ok(admin(&broker, "admin", &["purge", "orders"]));
    assert_eq!(purged, "removed 4\n");
    let missing = fails(admin(&broker, "admin", &["purge", "nope"]));
    assert!(
        missing.contains("404") && missing.contains("nope"),
        "{missing}"
    );
    let wrong = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "admin",
            "--url",
            &url,
            "--user",
            "admin",
            "--password",
            "wrong",
            "queues",
        ])
        .output()
        .unwrap();
    assert!(fails(wrong).contains("401"));

    // A grouped message held by a consumer: its group, the consumer and its connection.
    client.send_frame(
        "SUBSCRIBE",
        &[
            ("id", "1"),
            ("destination", "/queue/work"),
            ("ack", "client-individual"),
            ("receipt", "sub"),
        ],
        b"",
    );
    assert_eq!(client.recv().unwrap().command, "RECEIPT");
    let before_ms = epoch_ms();
    client.send("/queue/work", "w", &[("JMSXGroupID", "customer-7")]);
    assert_eq!(client.recv().expect("the grouped message").body_text(), "w");

    // A first reading: rates count from here, so the second reading has some.
    let connections = ok(admin(&broker, "auditor", &["connections"]));
    let line = connections
        .lines()
        .find(|l| l.contains("cli-test"))
        .unwrap_or_else(|| panic!("{connections}"));
    let connection_id = line.split_whitespace().next().unwrap().to_owned();
    assert!(line.contains("stomp 1.2"), "{line}");
    ok(admin(&broker, "auditor", &["consumers", "work"]));
    client.send("/queue/work", "w2", &[("JMSXGroupID", "customer-7")]);
    let second = client.recv().expect("the second grouped message");
    client.ack_receipted(&second, "acked");
    assert_eq!(client.recv().expect("the ack's receipt").command, "RECEIPT");
    std::thread::sleep(std::time::Duration::from_millis(1100));

    let connections = ok(admin(&broker, "auditor", &["connections"]));
    let of_connection = |name: &str| column(&connections, &connection_id, name);
    // Sent to orders, archive and later, then the two grouped ones.
    assert_eq!(of_connection("RECEIVED"), "7", "{connections}");
    assert_eq!(of_connection("SENT"), "2", "{connections}");
    assert!(rate(&of_connection("RECV/S")) > 0.0, "{connections}");
    assert!(rate(&of_connection("SENT/S")) > 0.0, "{connections}");

    let groups = ok(admin(&broker, "auditor", &["groups", "work"]));
    let group = row(&groups, "customer-7");
    assert_eq!(
        (group[2].as_str(), group[3].as_str()),
        (connection_id.as_str(), "1")
    );
    let owned_since: u64 = column(&groups, "customer-7", "OWNED_SINCE_MS")
        .parse()
        .unwrap();
    let last_activity: u64 = column(&groups, "customer-7", "LAST_ACTIVITY_MS")
        .parse()
        .unwrap_or_else(|_| panic!("{groups}"));
    assert!(
        before_ms <= owned_since && owned_since <= last_activity && last_activity <= epoch_ms(),
        "the second message and its ack came after the group was bound: {groups}"
    );
    let consumers = ok(admin(&broker, "auditor", &["consumers", "work"]));
    let consumer = row(&consumers, &group[1]);
    assert_eq!(
        &consumer[1..5],
        [connection_id.as_str(), "stomp", "admin", "cli-test"]
    );
    let of_consumer = |name: &str| column(&consumers, &group[1], name);
    assert_eq!(
        (of_consumer("DELIVERED"), of_consumer("ACKED")),
        ("2".to_owned(), "1".to_owned()),
        "{consumers}"
    );
    assert!(rate(&of_consumer("DLV/S")) > 0.0, "{consumers}");
    assert!(rate(&of_consumer("ACK/S")) > 0.0, "{consumers}");
    let reset = ok(admin(
        &broker,
        "admin",
        &["groups", "work", "--reset", "customer-7"],
    ));
    assert_eq!(reset, "reset 1\n");
    let reset = ok(admin(&broker, "admin", &["groups", "work", "--reset"]));
    assert_eq!(
        reset, "reset 0\n",
        "the group waits for its message: nobody owns it now"
    );

    let closing = ok(admin(
        &broker,
        "admin",
        &["connections", "--close", &connection_id],
    ));
    assert_eq!(closing, format!("closing connection {connection_id}\n"));
    let goodbye = client.recv().expect("an ERROR frame");
    assert_eq!(goodbye.command, "ERROR");
}

#[test]
fn the_schedule_of_a_running_broker_is_listed_cancelled_and_rescheduled() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(&config()));
    let mut producer = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    for body in ["a", "b", "c"] {
        producer.send_receipted(
            "/queue/later",
            body,
            &[("persistent", "true"), ("AMQ_SCHEDULED_DELAY", "600000")],
            body,
        );
    }
    let schedule = |user: &str, args: &[&str]| weir(&broker, "schedule", user, args);

    // Paged: two, then the rest after the last one shown.
    let first = ok(schedule(
        "auditor",
        &["list", "--queue", "later", "--limit", "2"],
    ));
    let keys: Vec<String> = first
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("(more"))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 2, "{first}");
    assert_eq!(row(&first, &keys[0])[1], "later", "{first}");
    // A due-time range: none of them is due within a minute, all three within 20.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let until = |ms: u64| {
        let listed = ok(schedule(
            "auditor",
            &["list", "--queue", "later", "--to", &ms.to_string()],
        ));
        listed.lines().skip(1).count()
    };
    assert_eq!(until(now_ms + 60_000), 0);
    assert_eq!(until(now_ms + 1_200_000), 3);
    let more = first
        .lines()
        .find_map(|l| l.strip_prefix("(more: --after "))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap_or_else(|| panic!("a next page in {first}"));
    let rest = ok(schedule(
        "auditor",
        &["list", "--queue", "later", "--after", more],
    ));
    let last = rest.lines().nth(1).expect("the third message");
    assert_eq!(rest.lines().count(), 2, "{rest}");
    assert!(!keys.iter().any(|k| last.starts_with(k.as_str())), "{rest}");

    // Changing needs manage: the API's refusal is the CLI's error.
    let refused = fails(schedule("auditor", &["cancel", &keys[0]]));
    assert!(refused.contains("403"), "{refused}");
    let cancelled = ok(schedule("admin", &["cancel", &keys[0]]));
    assert_eq!(cancelled.trim(), format!("cancelled {}", keys[0]));
    let gone = fails(schedule("admin", &["cancel", &keys[0]]));
    assert!(gone.contains("404"), "cancelled twice: {gone}");
    let moved = ok(schedule("admin", &["reschedule", &keys[1], "--in", "0s"]));
    assert!(
        moved.starts_with(&format!("rescheduled {} -> ", keys[1])),
        "{moved}"
    );

    let mut consumer = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    consumer.subscribe("s", "/queue/later", "auto");
    let due = consumer
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the rescheduled message arrives");
    assert_eq!(due.body_text(), "b");
    assert!(
        consumer
            .recv_timeout(std::time::Duration::from_millis(500))
            .is_none(),
        "the cancelled one never arrives, the third is not due"
    );
    let page: Value = serde_json::from_str(&ok(schedule(
        "auditor",
        &["list", "--queue", "later", "--json"],
    )))
    .unwrap();
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["body_preview"], "", "listed without bodies");
}

/// `weir schedule view` shows one waiting message in full, the same from the running
/// broker and from its stopped data dir; a key that names nothing is an error in both.
#[test]
fn a_waiting_message_is_viewed_live_and_offline() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(&config()));
    let mut producer = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    producer.send_receipted(
        "/queue/later",
        "hello\nsecond line",
        &[
            ("persistent", "true"),
            ("AMQ_SCHEDULED_DELAY", "600000"),
            ("colour", "red"),
            ("correlation-id", "corr-1"),
        ],
        "text",
    );
    producer.send_frame(
        "SEND",
        &[
            ("destination", "/queue/later"),
            ("persistent", "true"),
            ("AMQ_SCHEDULED_DELAY", "700000"),
            ("receipt", "binary"),
        ],
        &[0xff, 0x00, 0x10, 0x80],
    );
    assert_eq!(producer.recv().expect("RECEIPT").command, "RECEIPT");
    let schedule = |args: &[&str]| weir(&broker, "schedule", "auditor", args);
    let listed = ok(schedule(&["list", "--queue", "later"]));
    let keys: Vec<String> = listed
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect();
    let [text_key, binary_key] = keys.as_slice() else {
        panic!("two waiting messages in\n{listed}");
    };
    let due_ms: u64 = text_key.split(':').next().unwrap().parse().unwrap();

    let check_text = |shown: &str| {
        assert_eq!(row(shown, "key")[1], *text_key, "{shown}");
        assert_eq!(row(shown, "queue")[1], "later", "{shown}");
        assert_eq!(row(shown, "due_ms")[1], due_ms.to_string(), "{shown}");
        assert_eq!(row(shown, "kept")[1], "yes", "{shown}");
        assert_eq!(row(shown, "header.correlation_id")[1], "corr-1", "{shown}");
        assert_eq!(row(shown, "property.colour")[1], "red", "{shown}");
        assert!(
            shown.ends_with("\nbody (17 bytes):\nhello\nsecond line\n"),
            "{shown}"
        );
    };
    let check_binary = |shown: &str| {
        assert_eq!(row(shown, "key")[1], *binary_key, "{shown}");
        assert!(
            shown.ends_with("\nbody (4 bytes, not UTF-8; the first 4 in hex):\nff 00 10 80\n"),
            "{shown}"
        );
    };
    check_text(&ok(schedule(&["view", text_key])));
    check_binary(&ok(schedule(&["view", binary_key])));
    let json: Value = serde_json::from_str(&ok(schedule(&["view", text_key, "--json"]))).unwrap();
    assert_eq!(json["id"], text_key.as_str());
    assert_eq!(json["body_text"], "hello\nsecond line");
    assert_eq!(json["headers"]["correlation_id"], "corr-1");
    let unknown = format!("{due_ms}:999:1");
    let missing = fails(schedule(&["view", &unknown]));
    assert!(
        missing.contains("404") && missing.contains(&unknown),
        "{missing}"
    );

    let (data_dir, _, _) = broker.kill9();
    let offline = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["schedule", "--data-dir"])
            .arg(&data_dir)
            .args(args)
            .output()
            .expect("run weir schedule")
    };
    check_text(&ok(offline(&["view", text_key])));
    check_binary(&ok(offline(&["view", binary_key])));
    let missing = fails(offline(&["view", &unknown]));
    assert!(
        missing.contains("no scheduled message") && missing.contains(&unknown),
        "{missing}"
    );
    let bad = fails(offline(&["view", "not-a-key"]));
    assert!(bad.contains("not a key"), "{bad}");
}

/// `weir schedule edit`, with cancel and reschedule, on a running broker and then on its
/// stopped data dir, each change surviving a kill -9: the edited messages arrive edited,
/// the rescheduled one at its new time, the cancelled one never.
#[test]
fn the_schedule_is_edited_from_the_cli_and_the_edits_are_kept() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(&config()));
    let mut producer = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    let sent = Instant::now();
    for (name, delay) in [
        ("edited", "8000"),
        ("cancelled", "3000"),
        ("moved", "600000"),
        ("offline", "600000"),
    ] {
        producer.send_receipted(
            "/queue/later",
            &format!("{name} as sent"),
            &[
                ("persistent", "true"),
                ("AMQ_SCHEDULED_DELAY", delay),
                ("name", name),
                ("colour", "red"),
                ("tag", "x"),
            ],
            name,
        );
    }
    let schedule = |user: &str, args: &[&str]| weir(&broker, "schedule", user, args);
    let page: Value = serde_json::from_str(&ok(schedule(
        "auditor",
        &["list", "--queue", "later", "--json"],
    )))
    .unwrap();
    let key = |name: &str| -> String {
        let item = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| {
                item["properties"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == "name" && p["value"]["value"] == name)
            })
            .unwrap_or_else(|| panic!("{name} listed in {page}"));
        item["id"].as_str().unwrap().to_owned()
    };
    let (edited, cancelled, moved, offline) = (
        key("edited"),
        key("cancelled"),
        key("moved"),
        key("offline"),
    );

    let edit = [
        "edit",
        edited.as_str(),
        "--set",
        "colour=blue",
        "--set-int",
        "size=2",
        "--unset",
        "tag",
        "--body",
        "edited live",
    ];
    let refused = fails(schedule("auditor", &edit));
    assert!(refused.contains("403"), "edit needs manage: {refused}");
    assert_eq!(ok(schedule("admin", &edit)), format!("edited {edited}\n"));
    let bad = fails(schedule(
        "admin",
        &["edit", &edited, "--set-int", "size=two"],
    ));
    assert!(bad.contains("whole number"), "{bad}");
    let nothing = fails(schedule("admin", &["edit", &edited]));
    assert!(
        nothing.contains("required"),
        "an edit that changes nothing: {nothing}"
    );
    let shown: Value = serde_json::from_str(&ok(schedule(
        "auditor",
        &["list", "--queue", "later", "--json"],
    )))
    .unwrap();
    let listed = shown["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["id"] == edited.as_str())
        .unwrap_or_else(|| panic!("{edited} keeps its key: {shown}"));
    assert_eq!(listed["size"], "edited live".len(), "{listed}");

    assert_eq!(
        ok(schedule("admin", &["cancel", &cancelled])),
        format!("cancelled {cancelled}\n")
    );
    let rescheduled_at = Instant::now();
    let answer = ok(schedule("admin", &["reschedule", &moved, "--in", "5s"]));
    assert!(
        answer.starts_with(&format!("rescheduled {moved} -> ")),
        "{answer}"
    );

    // Every change above was answered once it was written: a kill -9 keeps them.
    // Stopped, the data dir is edited offline: properties replaced, a binary-safe
    // body from a file, and due now.
    let body_file = dir.path().join("body.bin");
    std::fs::write(&body_file, b"edited offline").unwrap();
    let broker = broker.kill9_and_restart_after(|data_dir| {
        let offline_cli = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_weir"))
                .args(["schedule", "--data-dir"])
                .arg(data_dir)
                .args(args)
                .output()
                .expect("run weir schedule")
        };
        let answer = ok(offline_cli(&[
            "edit",
            &offline,
            "--clear-properties",
            "--set",
            "name=offline",
            "--set-bool",
            "flag=true",
            "--body-file",
            body_file.to_str().unwrap(),
        ]));
        assert_eq!(answer, format!("edited {offline}\n"));
        // Offline too, --to ends the list at a due time.
        let listed = |to: &str| ok(offline_cli(&["list", "--to", to])).lines().count() - 1;
        let due = offline.split(':').next().unwrap().parse::<u64>().unwrap();
        assert_eq!(listed("0"), 0);
        assert!(
            listed(&(due + 1).to_string()) > listed(&due.to_string()),
            "a message due at --to is left out"
        );
        ok(offline_cli(&["reschedule", &offline, "--in", "0s"]));
    });
    let mut consumer = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    consumer.subscribe("s", "/queue/later", "auto");
    let mut arrived = Vec::new();
    let until = sent + Duration::from_secs(12);
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        if let Some(frame) = consumer.recv_timeout(left.min(Duration::from_millis(200))) {
            arrived.push((Instant::now(), frame));
        }
    }
    let names: Vec<&str> = arrived
        .iter()
        .map(|(_, f)| f.header("name").unwrap_or("-"))
        .collect();
    assert_eq!(
        names,
        ["offline", "moved", "edited"],
        "in due order, once each"
    );

    let (_, offline_frame) = &arrived[0];
    assert_eq!(offline_frame.body_text(), "edited offline");
    assert_eq!(offline_frame.header("flag"), Some("true"));
    assert_eq!(offline_frame.header("colour"), None, "properties cleared");

    let (moved_at, moved_frame) = &arrived[1];
    assert_eq!(moved_frame.body_text(), "moved as sent");
    assert!(
        *moved_at >= rescheduled_at + Duration::from_millis(4990),
        "rescheduled 5 s ahead, came after {:?}",
        moved_at.duration_since(rescheduled_at)
    );

    let (edited_at, edited_frame) = &arrived[2];
    assert_eq!(edited_frame.body_text(), "edited live");
    assert_eq!(edited_frame.header("colour"), Some("blue"));
    assert_eq!(edited_frame.header("size"), Some("2"));
    assert_eq!(edited_frame.header("tag"), None);
    assert!(
        *edited_at >= sent + Duration::from_millis(7990),
        "an edit keeps the due time"
    );
}
