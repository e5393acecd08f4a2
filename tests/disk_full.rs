//! A full disk, for real: the broker runs on a tmpfs of a few MiB (mounted by
//! the test, so it needs root, as CI has) and is pushed until a write fails.
//! It must stay up, answer with protocol errors, keep everything it
//! confirmed, and write again by itself once space returns.

mod common;

use common::{BrokerProcess, Frame, Stomp};
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Body, Data, Header, Message, Outcome};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Limits off: these tests are about the disk itself running out.
const NO_LIMITS: &str = "[store]\nmax_disk_usage = 100\nmin_free_disk = 0\n";
const BODY: usize = 32 * 1024;
/// Far more than fits: a test that never sees a refusal fails.
const MAX_SENDS: usize = 5000;

/// A tmpfs mounted for one test, unmounted when dropped. Holds a filler file
/// whose removal is "space returns".
struct SmallDisk {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl SmallDisk {
    /// `None` (with a SKIPPED line) where mounting is not allowed.
    fn mount(mib: u32, filler_mib: u32) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("SKIPPED: needs root to mount tmpfs");
            eprintln!("SKIPPED: needs root to mount tmpfs");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&root)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount -t tmpfs failed as root");
        let disk = Self { _dir: dir, root };
        std::fs::write(disk.filler(), vec![0u8; (filler_mib as usize) << 20]).expect("filler");
        Some(disk)
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    fn filler(&self) -> PathBuf {
        self.root.join("filler")
    }

    fn free_space(&self) {
        std::fs::remove_file(self.filler()).expect("remove filler");
    }

    /// Takes every byte left (after the broker refused, so RocksDB's own
    /// files cannot grow into what a restart would need).
    fn fill_up(&self) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.filler())
            .expect("open filler");
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.root).status();
    }
}

fn body(i: usize) -> Vec<u8> {
    let mut b = format!("{i:06}").into_bytes();
    b.resize(BODY, b'x');
    b
}

/// The index a [`body`] starts with; `None` for other messages.
fn index(body: &[u8]) -> Option<usize> {
    std::str::from_utf8(body.get(..6)?).ok()?.parse().ok()
}

/// Persistent receipted SENDs until one is refused; the receipted indices
/// and the ERROR frame.
fn send_until_refused(stomp: &mut Stomp, queue: &str) -> (Vec<usize>, Frame) {
    let mut receipted = Vec::new();
    for i in 0..MAX_SENDS {
        let receipt = format!("r{i}");
        stomp.send_frame(
            "SEND",
            &[
                ("destination", queue),
                ("persistent", "true"),
                ("receipt", &receipt),
            ],
            &body(i),
        );
        let frame = stomp
            .recv()
            .expect("a RECEIPT or an ERROR, not a closed connection");
        let frame = Frame {
            body: frame.body.into_iter().take(200).collect(),
            ..frame
        };
        match frame.command.as_str() {
            "RECEIPT" => receipted.push(i),
            "ERROR" => {
                assert_eq!(frame.header("receipt-id"), Some(receipt.as_str()));
                return (receipted, frame);
            }
            other => panic!("unexpected {other}"),
        }
    }
    panic!("{MAX_SENDS} sends of {BODY} bytes fit on a small disk: nothing was refused");
}

/// Every message that arrives within a short wait (left unacknowledged
/// unless `ack`).
fn drain(broker: &BrokerProcess, queue: &str, ack: bool) -> BTreeSet<usize> {
    let mut stomp = broker.client();
    stomp.subscribe("s", queue, "client-individual");
    let mut got = BTreeSet::new();
    while let Some(frame) = stomp.recv_timeout(Duration::from_secs(2)) {
        assert_eq!(frame.command, "MESSAGE", "{:?}", frame.headers);
        got.extend(index(&frame.body));
        if ack {
            stomp.ack(&frame);
        }
    }
    disconnect(stomp);
    got
}

/// Once the broker answers DISCONNECT, everything sent before is settled.
fn disconnect(mut stomp: Stomp) {
    stomp.send_frame("DISCONNECT", &[("receipt", "bye")], b"");
    let frame = stomp.recv().expect("RECEIPT for DISCONNECT");
    assert_eq!(frame.command, "RECEIPT", "{:?}", frame.headers);
}

/// Waits until a persistent send is confirmed again (Weir resumes by itself).
fn until_accepted(broker: &BrokerProcess, queue: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut stomp = broker.client();
        stomp.send_frame(
            "SEND",
            &[
                ("destination", queue),
                ("persistent", "true"),
                ("receipt", "again"),
            ],
            b"again",
        );
        let frame = stomp.recv().expect("an answer");
        if frame.command == "RECEIPT" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after space returned: {}",
            frame.body_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn assert_has_all(got: &BTreeSet<usize>, receipted: &[usize], when: &str) {
    let missing: Vec<_> = receipted.iter().filter(|i| !got.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "{when}: receipted messages missing: {missing:?}"
    );
}

#[test]
fn stomp_sends_on_a_full_disk_get_an_error_and_nothing_receipted_is_lost() {
    let Some(disk) = SmallDisk::mount(8, 2) else {
        return;
    };
    let broker = BrokerProcess::start(&disk.data(), Some(NO_LIMITS));
    let mut stomp = broker.client();
    let (receipted, error) = send_until_refused(&mut stomp, "full.stomp");
    assert!(!receipted.is_empty(), "nothing fit at all");
    assert!(
        error.body_text().contains("disk full"),
        "{}",
        error.body_text()
    );
    // Still up, and still refusing while the disk is full.
    let mut again = broker.client();
    let (more, error) = send_until_refused(&mut again, "full.stomp");
    assert!(more.is_empty(), "accepted on a full disk: {more:?}");
    assert!(error.body_text().contains("disk full"));

    disk.free_space();
    until_accepted(&broker, "other.stomp");
    let got = drain(&broker, "full.stomp", false);
    assert_has_all(&got, &receipted, "after space returned");

    let broker = broker.restart_after_kill();
    let got = drain(&broker, "full.stomp", true);
    assert_has_all(&got, &receipted, "after a restart");
}

#[test]
fn a_transaction_with_a_durable_send_on_a_full_disk_takes_no_effect() {
    let Some(disk) = SmallDisk::mount(8, 2) else {
        return;
    };
    let broker = BrokerProcess::start(&disk.data(), Some(NO_LIMITS));
    let (_, _) = send_until_refused(&mut broker.client(), "filler");

    // A plain send and a durable one, while the disk refuses: neither is
    // published, and the commit says why.
    let mut stomp = broker.client();
    stomp.send_frame("BEGIN", &[("transaction", "t")], b"");
    stomp.send_frame(
        "SEND",
        &[("destination", "txn.full"), ("transaction", "t")],
        b"plain",
    );
    stomp.send_frame(
        "SEND",
        &[
            ("destination", "txn.full"),
            ("transaction", "t"),
            ("persistent", "true"),
        ],
        b"durable",
    );
    stomp.send_frame("COMMIT", &[("transaction", "t"), ("receipt", "c")], b"");
    let error = stomp.recv().expect("an ERROR for the COMMIT");
    assert_eq!(error.command, "ERROR", "{:?}", error.headers);
    assert_eq!(error.header("receipt-id"), Some("c"), "{:?}", error.headers);
    let said = format!("{:?} {}", error.headers, error.body_text());
    assert!(said.contains("disk full"), "{said}");

    disk.free_space();
    until_accepted(&broker, "other");
    let mut consumer = broker.client();
    consumer.subscribe("s", "txn.full", "auto");
    let got = consumer.recv_timeout(Duration::from_secs(2));
    assert!(got.is_none(), "a refused transaction published {got:?}");
}

#[test]
fn acknowledgements_on_a_full_disk_do_not_come_back() {
    const N: usize = 200;
    let Some(disk) = SmallDisk::mount(8, 2) else {
        return;
    };
    let broker = BrokerProcess::start(&disk.data(), Some(NO_LIMITS));
    let mut stomp = broker.client();
    for i in 0..N {
        stomp.send_frame(
            "SEND",
            &[("destination", "acked"), ("persistent", "true")],
            format!("{i:06}").as_bytes(),
        );
    }
    stomp.send_receipted("acked", "", &[], "last");
    let (_, _) = send_until_refused(&mut broker.client(), "filler");

    // Acknowledged while nothing can be written.
    let mut consumer = broker.client();
    consumer.subscribe("s", "acked", "client-individual");
    let mut acked = 0;
    while let Some(frame) = consumer.recv_timeout(Duration::from_secs(2)) {
        assert_eq!(frame.command, "MESSAGE", "{:?}", frame.headers);
        consumer.ack(&frame);
        acked += 1;
    }
    assert_eq!(acked, N + 1);
    disconnect(consumer);
    // In memory they are gone at once.
    let got = drain(&broker, "acked", false);
    assert!(got.is_empty(), "redelivered while running: {got:?}");

    disk.free_space();
    until_accepted(&broker, "other");
    let broker = broker.restart_after_kill();
    let mut consumer = broker.client();
    consumer.subscribe("s", "acked", "client-individual");
    let mut back = 0;
    while let Some(frame) = consumer.recv_timeout(Duration::from_secs(2)) {
        assert_eq!(frame.command, "MESSAGE", "{:?}", frame.headers);
        back += 1;
    }
    assert_eq!(back, 0, "acknowledged on a full disk, back after a restart");
}

#[test]
fn a_broker_killed_on_a_full_disk_restarts_on_it_and_consumers_drain() {
    let Some(disk) = SmallDisk::mount(8, 2) else {
        return;
    };
    let broker = BrokerProcess::start(&disk.data(), Some(NO_LIMITS));
    let (receipted, _) = send_until_refused(&mut broker.client(), "killed");
    disk.fill_up();
    let broker = broker.restart_after_kill();
    let got = drain(&broker, "killed", true);
    assert_has_all(&got, &receipted, "restarted on a full disk");
    // Sends are refused, not taken: the disk is still full.
    let mut stomp = broker.client();
    let (more, _) = send_until_refused(&mut stomp, "killed");
    assert!(more.is_empty(), "accepted on a full disk: {more:?}");

    disk.free_space();
    until_accepted(&broker, "other");
    let broker = broker.restart_after_kill();
    let got = drain(&broker, "killed", false);
    assert!(
        got.is_empty(),
        "drained on a full disk, back later: {got:?}"
    );
}

#[test]
fn max_disk_usage_refuses_durable_sends_and_lets_them_in_again() {
    let Some(disk) = SmallDisk::mount(16, 1) else {
        return;
    };
    let config = "[store]\nmax_disk_usage = 60\nmin_free_disk = 0\n";
    let broker = BrokerProcess::start(&disk.data(), Some(config));
    let mut stomp = broker.client();
    stomp.send_frame(
        "SEND",
        &[("destination", "limited"), ("persistent", "true")],
        &body(0),
    );
    stomp.send_receipted("limited", "", &[("persistent", "true")], "first");

    // Past the limit (the monitor looks four times a second).
    std::fs::write(disk.root.join("big"), vec![0u8; 10 << 20]).expect("big file");
    std::thread::sleep(Duration::from_secs(1));
    let mut stomp = broker.client();
    let (accepted, error) = send_until_refused(&mut stomp, "limited");
    assert!(accepted.is_empty(), "accepted past the limit: {accepted:?}");
    assert!(
        error.body_text().contains("max_disk_usage"),
        "{}",
        error.body_text()
    );
    // Non-durable messages and consumers go on.
    let mut stomp = broker.client();
    stomp.send_receipted("limited", "", &[], "plain");
    let got = drain(&broker, "limited", true);
    assert!(got.contains(&0), "{got:?}");

    std::fs::remove_file(disk.root.join("big")).expect("remove big file");
    until_accepted(&broker, "limited");
}

async fn amqp_sender(
    addr: std::net::SocketAddr,
) -> (ConnectionHandle<()>, SessionHandle<()>, Sender) {
    let mut connection = Connection::builder()
        .container_id("disk-full")
        .open(format!("amqp://{addr}").as_str())
        .await
        .expect("connection");
    let mut session = Session::begin(&mut connection).await.expect("session");
    let sender = Sender::builder()
        .name("s")
        .target("full.amqp")
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut session)
        .await
        .expect("sender");
    (connection, session, sender)
}

fn durable(i: usize) -> Message<Data> {
    let mut message = Message::builder().data(Binary::from(body(i))).build();
    message.header = Some(Header {
        durable: true,
        ..Header::default()
    });
    message
}

async fn amqp_drain(addr: std::net::SocketAddr) -> BTreeSet<usize> {
    let mut connection = Connection::builder()
        .container_id("disk-full-r")
        .open(format!("amqp://{addr}").as_str())
        .await
        .expect("connection");
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut receiver = Receiver::attach(&mut session, "r", "full.amqp")
        .await
        .expect("receiver");
    let mut got = BTreeSet::new();
    while let Ok(Ok(d)) =
        tokio::time::timeout(Duration::from_secs(2), receiver.recv::<Body<Value>>()).await
    {
        if let Body::Data(sections) = d.body() {
            let bytes: Vec<u8> = sections.iter().flat_map(|s| s.0.to_vec()).collect();
            got.extend(index(&bytes));
        }
        receiver.accept(&d).await.expect("accept");
    }
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;
    got
}

// The broker restart blocks this thread; the client's tasks need another one meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_sends_on_a_full_disk_are_rejected_and_nothing_accepted_is_lost() {
    let Some(disk) = SmallDisk::mount(8, 2) else {
        return;
    };
    let broker = BrokerProcess::start_with_amqp(&disk.data(), Some(NO_LIMITS));
    let addr = broker.amqp.expect("amqp");
    let (mut connection, mut session, mut sender) = amqp_sender(addr).await;
    let mut accepted = Vec::new();
    let mut rejection = None;
    for i in 0..MAX_SENDS {
        match sender.send(durable(i)).await.expect("an outcome") {
            Outcome::Accepted(_) => accepted.push(i),
            Outcome::Rejected(r) => {
                rejection = Some(r);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let rejection = rejection.expect("nothing was rejected on a full disk");
    let condition = format!("{:?}", rejection.error);
    assert!(condition.contains("ResourceLimitExceeded"), "{condition}");
    assert!(!accepted.is_empty(), "nothing fit at all");
    // The same link goes on: the next one is refused too, not a closed link.
    assert!(matches!(
        sender.send(durable(MAX_SENDS)).await.expect("an outcome"),
        Outcome::Rejected(_)
    ));
    let _ = sender.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;

    disk.free_space();
    until_accepted(&broker, "other");
    let broker = broker.restart_after_kill();
    let got = amqp_drain(broker.amqp.expect("amqp")).await;
    assert_has_all(&got, &accepted, "after space returned and a restart");
}
