//! The broker as a client sees it: real binary, real sockets, real RocksDB.

mod common;

use common::{BrokerProcess, Stomp};
use std::collections::HashSet;
use std::time::Duration;

#[test]
fn receipted_persistent_messages_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    let n = 500;
    {
        let mut c = broker.client();
        for i in 0..n {
            let receipt = format!("r{i}");
            c.send_receipted(
                "/queue/durable",
                &format!("m{i}"),
                &[("persistent", "true")],
                &receipt,
            );
        }
        // A few acknowledged ones must not come back.
        c.send_frame(
            "SUBSCRIBE",
            &[
                ("id", "s"),
                ("destination", "/queue/durable"),
                ("ack", "client-individual"),
                ("prefetch", "10"),
            ],
            b"",
        );
        let first: Vec<_> = (0..10).map(|_| c.recv().expect("message")).collect();
        for f in &first {
            c.ack_receipted(f, &format!("ack-{}", f.body_text()));
        }
        let mut receipts = 0;
        while receipts < 10 {
            let f = c.recv().expect("ack receipt");
            if f.command == "RECEIPT" {
                receipts += 1;
            }
        }
    }
    let broker = broker.restart_after_kill();
    let mut c = broker.client();
    c.subscribe("s", "/queue/durable", "client-individual");
    let mut seen = Vec::new();
    while let Some(f) = c.recv_timeout(Duration::from_secs(2)) {
        assert_eq!(f.command, "MESSAGE");
        seen.push(f.body_text());
        c.ack(&f);
    }
    let expected: Vec<String> = (10..n).map(|i| format!("m{i}")).collect();
    assert_eq!(
        seen, expected,
        "every receipted, unacked message exactly once, in order"
    );
}

#[test]
fn non_persistent_messages_are_gone_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    {
        let mut c = broker.client();
        c.send_receipted("/queue/np", "volatile", &[], "r1");
        c.send_receipted("/queue/np", "kept", &[("persistent", "true")], "r2");
    }
    let broker = broker.restart_after_kill();
    let mut c = broker.client();
    c.subscribe("s", "/queue/np", "auto");
    let f = c
        .recv_timeout(Duration::from_secs(2))
        .expect("durable message");
    assert_eq!(f.body_text(), "kept");
    assert!(c.recv_timeout(Duration::from_millis(300)).is_none());
}

#[test]
fn malformed_input_gets_error_and_others_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[limits]\nmax_frame_size = 4096\n";
    let broker = BrokerProcess::start(&dir.path().join("data"), Some(config));
    let mut good = broker.client();
    good.subscribe("s", "/queue/ok", "auto");

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown command", b"FROB\n\n\0".to_vec()),
        ("header without colon", b"SEND\ndestination\n\nx\0".to_vec()),
        ("missing destination", b"SEND\nreceipt:77\n\nx\0".to_vec()),
        ("oversized frame", {
            let mut f = b"SEND\ndestination:/queue/ok\n\n".to_vec();
            f.extend(std::iter::repeat_n(b'x', 10_000));
            f.push(0);
            f
        }),
        ("ack of unknown id", b"ACK\nid:999.999\n\n\0".to_vec()),
        (
            "bad escape",
            b"SEND\ndestination:/queue/ok\nx:a\\tb\n\n\0".to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        let mut bad = broker.client();
        bad.raw(&bytes);
        let f = bad
            .recv()
            .unwrap_or_else(|| panic!("{what}: expected ERROR"));
        assert_eq!(f.command, "ERROR", "{what}: {f:?}");
        assert!(f.header("message").is_some_and(|m| !m.is_empty()), "{what}");
        if what == "missing destination" {
            assert_eq!(f.header("receipt-id"), Some("77"));
        }
        assert!(
            bad.recv_timeout(Duration::from_secs(2)).is_none(),
            "{what}: connection closed"
        );
        // The well-behaved client is unaffected.
        good.send("/queue/ok", what, &[]);
        let m = good.recv().expect("good client still served");
        assert_eq!(m.body_text(), what);
    }
}

#[test]
fn wrong_credentials_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[[users]]\nname = \"admin\"\npassword = \"secret\"\n";
    let broker = BrokerProcess::start(&dir.path().join("data"), Some(config));
    let ok = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "secret")]);
    assert_eq!(ok.connected.command, "CONNECTED");
    let bad = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "nope")]);
    assert_eq!(bad.connected.command, "ERROR");
    let anon = Stomp::connect(broker.stomp, &[]);
    assert_eq!(anon.connected.command, "ERROR");
}

#[test]
fn transactions_commit_and_abort() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    let mut c = broker.client();
    c.send_frame("BEGIN", &[("transaction", "t1")], b"");
    c.send("/queue/tx", "aborted", &[("transaction", "t1")]);
    c.send_frame("ABORT", &[("transaction", "t1"), ("receipt", "a")], b"");
    assert_eq!(c.recv().unwrap().command, "RECEIPT");
    c.send_frame("BEGIN", &[("transaction", "t2")], b"");
    c.send("/queue/tx", "committed", &[("transaction", "t2")]);
    c.subscribe("s", "/queue/tx", "auto");
    assert!(
        c.recv_timeout(Duration::from_millis(300)).is_none(),
        "nothing before COMMIT"
    );
    c.send_frame("COMMIT", &[("transaction", "t2")], b"");
    let f = c.recv().unwrap();
    assert_eq!(f.body_text(), "committed");
}

#[test]
fn queue_shares_and_topic_copies() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    let mut a = broker.client();
    let mut b = broker.client();
    a.subscribe("q", "/queue/work", "auto");
    b.subscribe("q", "/queue/work", "auto");
    a.subscribe("t", "/topic/news", "auto");
    b.subscribe("t", "/topic/news", "auto");
    let mut p = broker.client();
    for i in 0..10 {
        p.send("/queue/work", &format!("w{i}"), &[]);
    }
    p.send_receipted("/topic/news", "hello", &[], "r");
    let mut work = HashSet::new();
    let mut news = 0;
    for client in [&mut a, &mut b] {
        while let Some(f) = client.recv_timeout(Duration::from_millis(500)) {
            if f.header("destination") == Some("/topic/news") {
                news += 1;
            } else {
                assert!(work.insert(f.body_text()), "duplicate {}", f.body_text());
            }
        }
    }
    assert_eq!(work.len(), 10, "each queue message exactly once");
    assert_eq!(news, 2, "each topic subscriber gets a copy");
}

#[test]
fn sends_alternating_between_queues_each_reach_their_own() {
    // A connection keeps the queue it last sent to: switching must not
    // send a message to the queue before.
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    let mut p = broker.client();
    for i in 0..10 {
        let dest = if i % 3 == 0 { "/queue/alt.b" } else { "alt.a" };
        p.send(dest, &format!("m{i}"), &[]);
    }
    p.send_receipted("/queue/alt.a", "end", &[], "r");
    for (dest, expected) in [
        (
            "/queue/alt.a",
            vec!["m1", "m2", "m4", "m5", "m7", "m8", "end"],
        ),
        ("/queue/alt.b", vec!["m0", "m3", "m6", "m9"]),
    ] {
        let mut c = broker.client();
        c.subscribe("s", dest, "auto");
        let got: Vec<String> = (0..expected.len())
            .map(|_| c.recv().expect("message").body_text())
            .collect();
        assert_eq!(got, expected, "{dest}");
        assert!(c.recv_timeout(Duration::from_millis(300)).is_none());
    }
}

#[test]
fn every_frame_of_a_long_burst_is_taken() {
    // More frames in one write than the broker takes per wake-up: the one at
    // the limit must be handled, not dropped, and every receipt must come.
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    let mut p = broker.client();
    let mut burst = Vec::new();
    for i in 0..1000 {
        burst.extend_from_slice(
            format!("SEND\ndestination:/queue/burst\nreceipt:r{i}\n\nm{i}\0").as_bytes(),
        );
    }
    p.raw(&burst);
    for i in 0..1000 {
        let frame = p.recv().expect("receipt");
        assert_eq!(frame.header("receipt-id"), Some(format!("r{i}").as_str()));
    }
    let mut c = broker.client();
    c.subscribe("s", "/queue/burst", "auto");
    for i in 0..1000 {
        assert_eq!(c.recv().expect("message").body_text(), format!("m{i}"));
    }
    assert!(c.recv_timeout(Duration::from_millis(300)).is_none());
}

#[test]
fn groups_stick_to_one_subscriber_and_autogroup_by_virtual_host() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[connection_factories.orders]\nautogroup = true\n\n[connection_factories.fixed]\ngroup_id = \"Group-0\"\n";
    let broker = BrokerProcess::start(&dir.path().join("data"), Some(config));
    let mut a = broker.client();
    let mut b = broker.client();
    a.subscribe("s", "/queue/grouped", "auto");
    b.subscribe("s", "/queue/grouped", "auto");
    // Two producers through the autogrouping factory: each gets its own group.
    let mut p1 = Stomp::connect(broker.stomp, &[("host", "orders")]);
    let mut p2 = Stomp::connect(broker.stomp, &[("host", "orders")]);
    for i in 0..20 {
        p1.send("/queue/grouped", &format!("p1-{i}"), &[]);
        p2.send("/queue/grouped", &format!("p2-{i}"), &[]);
    }
    p1.send_receipted("/queue/grouped", "p1-end", &[], "r1");
    p2.send_receipted("/queue/grouped", "p2-end", &[], "r2");
    let mut by_producer: std::collections::HashMap<String, (usize, Vec<String>)> =
        Default::default();
    for (who, client) in [(0usize, &mut a), (1, &mut b)] {
        while let Some(f) = client.recv_timeout(Duration::from_millis(500)) {
            let body = f.body_text();
            let producer = body.split('-').next().unwrap().to_owned();
            assert!(
                f.header("JMSXGroupID").is_some(),
                "autogroup stamped a group id"
            );
            let entry = by_producer.entry(producer).or_insert((who, Vec::new()));
            assert_eq!(entry.0, who, "a producer's group split over subscribers");
            entry.1.push(body);
        }
    }
    assert_eq!(by_producer.len(), 2);
    for (producer, (_, bodies)) in by_producer {
        let mut expected: Vec<String> = (0..20).map(|i| format!("{producer}-{i}")).collect();
        expected.push(format!("{producer}-end"));
        assert_eq!(bodies, expected, "order within the group");
    }
    // The fixed factory stamps its group id.
    let mut p3 = Stomp::connect(broker.stomp, &[("host", "fixed")]);
    p3.send_receipted("/queue/grouped", "fixed", &[], "r3");
    let got = a
        .recv_timeout(Duration::from_millis(500))
        .or_else(|| b.recv_timeout(Duration::from_millis(500)))
        .expect("message");
    assert_eq!(got.header("JMSXGroupID"), Some("Group-0"));
}

#[test]
fn selectors_filter_and_bad_selectors_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), None);
    let mut red = broker.client();
    red.send_frame(
        "SUBSCRIBE",
        &[
            ("id", "r"),
            ("destination", "/queue/sel"),
            ("selector", "color = 'red' AND weight > 2"),
            ("receipt", "s"),
        ],
        b"",
    );
    assert_eq!(red.recv().unwrap().command, "RECEIPT");
    let mut p = broker.client();
    p.send("/queue/sel", "blue", &[("color", "blue"), ("weight", "5")]);
    p.send(
        "/queue/sel",
        "light-red",
        &[("color", "red"), ("weight", "1")],
    );
    p.send_receipted(
        "/queue/sel",
        "heavy-red",
        &[("color", "red"), ("weight", "3")],
        "r",
    );
    let f = red.recv().unwrap();
    assert_eq!(f.body_text(), "heavy-red");
    assert!(red.recv_timeout(Duration::from_millis(300)).is_none());

    let mut bad = broker.client();
    bad.send_frame(
        "SUBSCRIBE",
        &[
            ("id", "b"),
            ("destination", "/queue/sel"),
            ("selector", "color = = 'x'"),
        ],
        b"",
    );
    let e = bad.recv().unwrap();
    assert_eq!(e.command, "ERROR");
    assert!(e.header("message").unwrap().contains("selector"), "{e:?}");
}

/// `x-delay` and `delay` are ordinary header names in many applications: which ones
/// a queue reads as a delay is its `delay_headers` setting, a value that is not a
/// delay travels as a plain header (no ERROR, the connection stays), and a header
/// read as a delay still reaches the consumer.
#[test]
fn delay_headers_are_a_queue_setting_and_a_bad_value_is_a_plain_header() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[[queues]]\nname = \"plain\"\ndelay_headers = []\n";
    let broker = BrokerProcess::start(&dir.path().join("data"), Some(config));
    let mut consumer = broker.client();
    consumer.subscribe("timed", "/queue/timed", "auto");
    consumer.subscribe("plain", "/queue/plain", "auto");
    let mut producer = broker.client();

    // The default list still delays x-delay (ms).
    let sent = std::time::Instant::now();
    producer.send_receipted("/queue/timed", "later", &[("x-delay", "300")], "r1");
    assert!(
        consumer.recv_timeout(Duration::from_millis(150)).is_none(),
        "x-delay: 300 delivered early"
    );
    let f = consumer.recv().expect("the delayed message");
    assert_eq!(f.body_text(), "later");
    assert!(
        sent.elapsed() >= Duration::from_millis(280),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(
        f.header("x-delay"),
        Some("300"),
        "a delay header travels too"
    );

    // Not a delay: a plain header, and the connection stays open.
    let sent = std::time::Instant::now();
    producer.send_receipted("/queue/timed", "bad", &[("delay", "abc")], "r2");
    producer.send_receipted("/queue/timed", "after", &[], "r3");
    let f = consumer.recv().expect("bad delay, delivered at once");
    assert_eq!(f.body_text(), "bad");
    assert_eq!(f.header("delay"), Some("abc"));
    assert_eq!(consumer.recv().expect("next").body_text(), "after");
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );

    // A queue that reads no delay headers: `delay: 2` is an ordinary header.
    let sent = std::time::Instant::now();
    producer.send_receipted("/queue/plain", "now", &[("delay", "2")], "r4");
    let f = consumer
        .recv_timeout(Duration::from_secs(1))
        .expect("delivered at once on a queue with delay_headers = []");
    assert_eq!(f.body_text(), "now");
    assert_eq!(f.header("delay"), Some("2"));
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );
}
