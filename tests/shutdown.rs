//! SIGTERM: every client is told in its protocol, receipted messages survive, and the
//! process exits 0 within the shutdown timeout.

mod common;

use common::amqp_raw::RawAmqp;
use common::BrokerProcess;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_says_goodbye_keeps_receipted_messages_and_exits_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start_with_amqp(
        &dir.path().join("d"),
        Some("[broker]\nshutdown_timeout = \"3s\"\n"),
    );
    let mut stomp = broker.client();
    stomp.send_receipted("/queue/kept", "survives", &[("persistent", "true")], "r1");
    let mut amqp = RawAmqp::connect(broker.amqp.unwrap()).await;
    amqp.open_anonymous().await;

    let started = Instant::now();
    let status = tokio::task::block_in_place(|| broker.terminate(Duration::from_secs(10)))
        .expect("exits within the timeout");
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    let goodbye = stomp
        .recv_timeout(Duration::from_secs(2))
        .expect("an ERROR frame");
    assert_eq!(goodbye.command, "ERROR");
    assert_eq!(goodbye.header("message"), Some("broker shutting down"));
    assert_eq!(
        amqp.closed_with(Duration::from_secs(2)).await,
        "amqp:connection:forced"
    );

    let broker = broker.restart();
    let mut client = broker.client();
    client.subscribe("s", "/queue/kept", "auto");
    let message = client
        .recv_timeout(Duration::from_secs(5))
        .expect("the message");
    assert_eq!(message.body_text(), "survives");
}

#[test]
fn a_client_still_in_its_handshake_is_told_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(&dir.path().join("d"), None);
    // Connected, no CONNECT yet (the connect timeout is 30s, the shutdown timeout 10s).
    let mut stream = std::net::TcpStream::connect(broker.stomp).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let status = broker.terminate(Duration::from_secs(15)).expect("exits");
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut text = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut text);
    let text = String::from_utf8_lossy(&text);
    assert!(text.starts_with("ERROR\n"), "{text:?}");
    assert!(text.contains("message:broker shutting down"), "{text:?}");
}
