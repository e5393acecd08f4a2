//! Delayed delivery end to end: the built broker over real sockets, raw STOMP,
//! and kill -9 with a restart on the same data dir.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A broker process; killed with SIGKILL when dropped.
struct Broker {
    child: Child,
    addr: SocketAddr,
}

impl Broker {
    /// Starts a broker on a free port; a port taken between our probe and the
    /// broker's bind (tests run in parallel) makes the broker exit, and we retry.
    fn start(data: &Path, config: Option<&Path>) -> Broker {
        for _ in 0..5 {
            if let Some(broker) = Self::try_start(data, config) {
                return broker;
            }
        }
        panic!("broker did not start");
    }

    fn try_start(data: &Path, config: Option<&Path>) -> Option<Broker> {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(data)
            .arg("--stomp")
            .arg(addr.to_string())
            .arg("--amqp")
            .arg("off")
            .arg("--http")
            .arg("off")
            .arg("--log")
            .arg("warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        let mut child = cmd.spawn().expect("broker starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "broker did not listen on {addr}");
            if matches!(child.try_wait(), Ok(Some(_))) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whoever answered, make sure it is our broker that holds the port.
        std::thread::sleep(Duration::from_millis(100));
        if matches!(child.try_wait(), Ok(Some(_))) {
            return None;
        }
        Some(Broker { child, addr })
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Frame {
    command: String,
    headers: HashMap<String, String>,
    body: String,
}

impl Frame {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

struct Stomp {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Stomp {
    fn connect(addr: SocketAddr) -> Stomp {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut c = Stomp {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        };
        c.frame(
            "CONNECT",
            &[("accept-version", "1.2"), ("host", "localhost")],
            "",
        );
        let f = c.read(Duration::from_secs(5)).expect("CONNECTED");
        assert_eq!(f.command, "CONNECTED");
        c
    }

    fn frame(&mut self, command: &str, headers: &[(&str, &str)], body: &str) {
        let mut out = format!("{command}\n");
        for (k, v) in headers {
            out.push_str(&format!("{k}:{v}\n"));
        }
        out.push('\n');
        out.push_str(body);
        out.push('\0');
        self.writer.write_all(out.as_bytes()).unwrap();
    }

    /// SEND with a receipt; returns the broker's answer (RECEIPT or ERROR).
    fn send(&mut self, dest: &str, headers: &[(&str, &str)], body: &str) -> Frame {
        let receipt = format!("r-{body}");
        let mut all = vec![("destination", dest), ("receipt", receipt.as_str())];
        all.extend_from_slice(headers);
        self.frame("SEND", &all, body);
        loop {
            let f = self
                .read(Duration::from_secs(10))
                .expect("an answer to SEND");
            if f.command == "RECEIPT" || f.command == "ERROR" {
                return f;
            }
        }
    }

    fn subscribe(&mut self, dest: &str, ack: &str) {
        self.frame(
            "SUBSCRIBE",
            &[("id", "0"), ("destination", dest), ("ack", ack)],
            "",
        );
    }

    /// The next frame, or None after `timeout` of silence.
    fn read(&mut self, timeout: Duration) -> Option<Frame> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout))
            .unwrap();
        let mut command = String::new();
        loop {
            command.clear();
            match self.reader.read_line(&mut command) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return None
                }
                Err(e) => panic!("read: {e}"),
            }
            let trimmed = command.trim_matches(|c| c == '\0' || c == '\r' || c == '\n');
            if !trimmed.is_empty() {
                command = trimmed.to_owned();
                break;
            }
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.entry(k.to_owned()).or_insert_with(|| v.to_owned());
            }
        }
        let mut body = Vec::new();
        match headers
            .get("content-length")
            .and_then(|l| l.parse::<usize>().ok())
        {
            Some(len) => {
                body.resize(len, 0);
                self.reader.read_exact(&mut body).unwrap();
                let mut nul = [0u8];
                self.reader.read_exact(&mut nul).unwrap();
            }
            None => {
                self.reader.read_until(0, &mut body).unwrap();
                body.pop();
            }
        }
        Some(Frame {
            command,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    /// MESSAGE frames until `n` arrived or `timeout` of silence, with arrival times.
    fn messages(&mut self, n: usize, timeout: Duration) -> Vec<(Frame, u64)> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.read(timeout) {
                Some(f) if f.command == "MESSAGE" => out.push((f, now_ms())),
                Some(_) => {}
                None => break,
            }
        }
        out
    }
}

fn config_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("weir.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_header_form_delays_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), None);
    let mut producer = Stomp::connect(broker.addr);
    let mut consumer = Stomp::connect(broker.addr);
    consumer.subscribe("/queue/forms", "auto");
    let at = (now_ms() + 700).to_string();
    let forms: [(&str, &str); 5] = [
        ("AMQ_SCHEDULED_DELAY", "600"),
        ("x-delay", "600"),
        ("delay", "1"),
        ("AMQ_SCHEDULED_TIME", &at),
        ("_AMQ_SCHED_DELIVERY", &at),
    ];
    let mut due = HashMap::new();
    for (header, value) in forms {
        let sent = now_ms();
        let r = producer.send("/queue/forms", &[(header, value)], header);
        assert_eq!(r.command, "RECEIPT", "{header}: {r:?}");
        let expected = match header {
            "AMQ_SCHEDULED_TIME" | "_AMQ_SCHED_DELIVERY" => at.parse().unwrap(),
            "delay" => sent + 1000,
            _ => sent + 600,
        };
        due.insert(header.to_owned(), expected);
    }
    let early = consumer.messages(1, Duration::from_millis(400));
    assert!(early.is_empty(), "delivered early: {:?}", early[0].0);
    let got = consumer.messages(5, Duration::from_secs(5));
    assert_eq!(got.len(), 5);
    for (f, at) in got {
        let expected = due[&f.body];
        assert!(
            at + 5 >= expected,
            "{} arrived {} ms early",
            f.body,
            expected - at
        );
        let shown: u64 = f.header("delivery-time").unwrap().parse().unwrap();
        assert!(shown + 5 >= expected, "{} shows due {shown}", f.body);
    }
}

#[test]
fn queue_default_delay_zero_override_and_max() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        &format!(
            "[broker]\ndata_dir = {:?}\n\n[[queues]]\nname = \"slow\"\ndefault_message_delay = \"1s\"\nmax_message_delay = \"5s\"\n",
            dir.path().join("data")
        ),
    );
    let broker = Broker::start(&dir.path().join("data"), Some(&config));
    let mut producer = Stomp::connect(broker.addr);
    let mut consumer = Stomp::connect(broker.addr);
    consumer.subscribe("/queue/slow", "auto");

    let sent = now_ms();
    assert_eq!(
        producer.send("/queue/slow", &[], "default").command,
        "RECEIPT"
    );
    assert_eq!(
        producer
            .send("/queue/slow", &[("x-delay", "0")], "zero")
            .command,
        "RECEIPT"
    );
    let first = consumer.messages(1, Duration::from_millis(500));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0.body, "zero", "explicit 0 overrides the default");
    let second = consumer.messages(1, Duration::from_secs(3));
    assert_eq!(second[0].0.body, "default");
    assert!(second[0].1 >= sent + 1000, "default delay honoured");

    let refused = producer.send("/queue/slow", &[("delay", "6")], "toolong");
    assert_eq!(refused.command, "ERROR");
    assert_eq!(refused.header("receipt-id"), Some("r-toolong"));
    assert!(consumer.messages(1, Duration::from_millis(300)).is_empty());
}

#[test]
fn ttl_shorter_than_delay_is_never_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), None);
    let mut producer = Stomp::connect(broker.addr);
    let mut consumer = Stomp::connect(broker.addr);
    consumer.subscribe("/queue/short", "auto");
    let r = producer.send(
        "/queue/short",
        &[("x-delay", "300"), ("ttl", "100"), ("persistent", "true")],
        "expired",
    );
    assert_eq!(r.command, "RECEIPT");
    producer.send("/queue/short", &[("x-delay", "400")], "kept");
    let got = consumer.messages(2, Duration::from_secs(2));
    let bodies: Vec<&str> = got.iter().map(|(f, _)| f.body.as_str()).collect();
    assert_eq!(bodies, ["kept"]);
}

#[test]
fn nack_waits_for_redelivery_delay() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        &format!(
            "[broker]\ndata_dir = {:?}\n\n[[queues]]\nname = \"retry\"\nredelivery_delay = \"500ms\"\n",
            dir.path().join("data")
        ),
    );
    let broker = Broker::start(&dir.path().join("data"), Some(&config));
    let mut producer = Stomp::connect(broker.addr);
    let mut consumer = Stomp::connect(broker.addr);
    consumer.subscribe("/queue/retry", "client-individual");
    producer.send("/queue/retry", &[("persistent", "true")], "again");
    let first = consumer.messages(1, Duration::from_secs(2));
    assert_eq!(first.len(), 1);
    let ack = first[0].0.header("ack").unwrap().to_owned();
    let nacked = now_ms();
    consumer.frame("NACK", &[("id", &ack)], "");
    let again = consumer.messages(1, Duration::from_secs(3));
    assert_eq!(again.len(), 1, "redelivered");
    assert!(again[0].1 >= nacked + 450, "after the redelivery delay");
    assert_eq!(again[0].0.header("redelivered"), Some("true"));
}

#[test]
fn kill_9_then_restart_delivers_each_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let n = 500;
    let start = now_ms();
    {
        let broker = Broker::start(dir.path(), None);
        let mut producer = Stomp::connect(broker.addr);
        for i in 0..n {
            // Some fall due while the broker is down, the rest after it is back.
            let delay = (1500 + (i * 7919) % 3000).to_string();
            let body = format!("m{i}");
            let r = producer.send(
                "/queue/durable",
                &[("persistent", "true"), ("AMQ_SCHEDULED_DELAY", &delay)],
                &body,
            );
            assert_eq!(r.command, "RECEIPT", "{r:?}");
        }
        broker.kill9();
    }
    let down_until = start + 2500;
    std::thread::sleep(Duration::from_millis(down_until.saturating_sub(now_ms())));
    let broker = Broker::start(dir.path(), None);
    let mut consumer = Stomp::connect(broker.addr);
    consumer.subscribe("/queue/durable", "auto");
    let got = consumer.messages(n + 1, Duration::from_secs(4));
    let mut seen = HashSet::new();
    let mut last_due = 0;
    for (f, at) in &got {
        assert!(seen.insert(f.body.clone()), "{} delivered twice", f.body);
        let due: u64 = f.header("delivery-time").unwrap().parse().unwrap();
        assert!(*at + 5 >= due, "{} delivered {} ms early", f.body, due - at);
        assert!(due >= last_due, "out of due order");
        last_due = due;
    }
    assert_eq!(
        seen.len(),
        n,
        "every durable delayed message survived kill -9"
    );
}

/// Keys printed by `weir schedule list` (the first column of each row).
fn listed_keys(out: &str) -> Vec<String> {
    out.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|k| k.split(':').count() == 3)
        .map(str::to_owned)
        .collect()
}

/// A `kill -9` while delayed messages are being written, moved into their queue
/// and cancelled leaves the per-queue index exactly matching the schedule: a
/// listing by queue (through the index) finds the same entries as a listing of
/// everything picked by queue, and never an index entry without its message.
#[test]
fn kill_9_mid_traffic_leaves_the_per_queue_index_whole() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let broker = Broker::start(dir.path(), None);
    let mut producer = Stomp::connect(broker.addr);
    for i in 0..4000u32 {
        let queue = if i % 3 == 0 {
            "/queue/idx-a"
        } else {
            "/queue/idx-b"
        };
        // Half fall due at once (their entries are deleted as they move into the
        // queue), half wait.
        let delay = if i % 2 == 0 { "50" } else { "600000" };
        producer.frame(
            "SEND",
            &[
                ("destination", queue),
                ("persistent", "true"),
                ("AMQ_SCHEDULED_DELAY", delay),
            ],
            "m",
        );
    }
    // Let some be written and fall due, then kill while the rest are in flight.
    std::thread::sleep(Duration::from_millis(60));
    broker.kill9();

    let (ok, all, err) = weir_schedule(&["list", "--data-dir", data, "--limit", "100000"]);
    assert!(ok, "{err}");
    let all = listed_keys(&all);
    assert!(!all.is_empty(), "some delayed messages were written");
    let mut by_queue = 0;
    for name in ["idx-a", "idx-b"] {
        let (ok, out, err) = weir_schedule(&[
            "list",
            "--data-dir",
            data,
            "--queue",
            name,
            "--limit",
            "100000",
        ]);
        assert!(ok, "{name}: {err}");
        let listed = listed_keys(&out);
        let queue_id = listed
            .first()
            .map(|k| k.split(':').nth(1).unwrap().to_owned());
        let want: Vec<&String> = all
            .iter()
            .filter(|k| Some(k.split(':').nth(1).unwrap().to_owned()) == queue_id)
            .collect();
        assert_eq!(listed.iter().collect::<Vec<_>>(), want, "{name}");
        by_queue += listed.len();
    }
    assert_eq!(by_queue, all.len(), "every entry is in its queue's index");
}

fn weir_schedule(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("schedule")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_lists_cancels_and_reschedules_on_a_stopped_broker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let broker = Broker::start(dir.path(), None);
    let mut producer = Stomp::connect(broker.addr);
    for body in ["a", "b", "c"] {
        let r = producer.send(
            "/queue/audit",
            &[("persistent", "true"), ("delay", "600")],
            body,
        );
        assert_eq!(r.command, "RECEIPT");
    }
    let (ok, _, err) = weir_schedule(&["list", "--data-dir", data]);
    assert!(!ok);
    assert!(err.contains("in use"), "clear message while running: {err}");
    broker.kill9();

    let (ok, out, err) = weir_schedule(&["list", "--data-dir", data, "--queue", "audit"]);
    assert!(ok, "{err}");
    let keys: Vec<String> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert_eq!(keys.len(), 3, "{out}");
    let (ok, _, err) = weir_schedule(&["cancel", "--data-dir", data, &keys[0]]);
    assert!(ok, "{err}");
    let (ok, _, err) = weir_schedule(&["reschedule", "--data-dir", data, &keys[1], "--in", "0s"]);
    assert!(ok, "{err}");
    let (ok, _, _) = weir_schedule(&["cancel", "--data-dir", data, &keys[0]]);
    assert!(!ok, "cancelled twice");

    let broker = Broker::start(dir.path(), None);
    let mut consumer = Stomp::connect(broker.addr);
    consumer.subscribe("/queue/audit", "auto");
    let got = consumer.messages(2, Duration::from_secs(2));
    let bodies: Vec<&str> = got.iter().map(|(f, _)| f.body.as_str()).collect();
    assert_eq!(bodies, ["b"], "a cancelled, b now, c still waiting");
}
