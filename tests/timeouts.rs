//! Every handshake stage has a deadline, and a frame that starts must finish: a client
//! that stalls is told so in its protocol and disconnected. Second-scale settings.

mod common;

use common::amqp_raw::RawAmqp;
use common::BrokerProcess;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use weir::protocol::amqp::{Frame, Inbound, ProtocolHeader, SaslCode, SaslFrame};

const CONFIG: &str = "[limits]\nconnect_timeout = \"1s\"\namqp_open_timeout = \"1s\"\n\
    sasl_timeout = \"1s\"\nframe_timeout = \"1s\"\nheartbeat = 0\n";

/// Everything the broker writes until it closes the socket (at most `within`).
fn read_to_close(stream: &mut TcpStream, within: Duration) -> String {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut all = Vec::new();
    let _ = stream.read_to_end(&mut all);
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn stomp_client_that_never_sends_connect_gets_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("d"), Some(CONFIG));
    let mut stream = TcpStream::connect(broker.stomp).unwrap();
    let started = Instant::now();
    let text = read_to_close(&mut stream, Duration::from_secs(10));
    assert!(text.starts_with("ERROR\n"), "{text:?}");
    assert!(text.contains("no CONNECT frame within 1s"), "{text:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn stomp_frame_that_never_finishes_gets_an_error_with_heartbeats_off() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("d"), Some(CONFIG));
    let mut stream = TcpStream::connect(broker.stomp).unwrap();
    stream
        .write_all(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\0")
        .unwrap();
    let mut connected = [0u8; 9];
    stream.read_exact(&mut connected).unwrap();
    assert_eq!(&connected, b"CONNECTED");
    // Half a SEND, then silence.
    stream.write_all(b"SEND\ndestination:/queue/a\n").unwrap();
    let started = Instant::now();
    let text = read_to_close(&mut stream, Duration::from_secs(10));
    assert!(text.contains("\0ERROR\n"), "{text:?}");
    assert!(
        text.contains("a frame was not completed within 1s"),
        "{text:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[test]
fn a_steady_stream_of_frames_is_not_a_frame_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("d"), Some(CONFIG));
    let mut client = broker.client();
    // Frames keep finishing for three times the frame timeout.
    let until = Instant::now() + Duration::from_secs(3);
    let mut n = 0;
    while Instant::now() < until {
        client.send_receipted("/queue/steady", "x", &[], &format!("r{n}"));
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    client.send_receipted("/queue/steady", "last", &[], "done");
}

#[tokio::test]
async fn amqp_header_without_open_gets_open_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("d"), Some(CONFIG));
    let mut amqp = RawAmqp::connect(broker.amqp.unwrap()).await;
    amqp.header(ProtocolHeader::AMQP).await;
    let wait = Duration::from_secs(5);
    assert_eq!(
        amqp.next_item(wait).await,
        Some(Inbound::Header(ProtocolHeader::AMQP))
    );
    let started = Instant::now();
    let open = amqp.next(wait).await.unwrap();
    assert!(open.contains("Open"), "{open}");
    assert_eq!(amqp.closed_with(wait).await, "amqp:connection:forced");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(amqp.ends(wait).await);
}

#[tokio::test]
async fn amqp_sasl_exchange_that_stalls_gets_a_sys_temp_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("d"), Some(CONFIG));
    let mut amqp = RawAmqp::connect(broker.amqp.unwrap()).await;
    amqp.header(ProtocolHeader::SASL).await;
    let wait = Duration::from_secs(5);
    assert_eq!(
        amqp.next_item(wait).await,
        Some(Inbound::Header(ProtocolHeader::SASL))
    );
    assert!(matches!(
        amqp.next_item(wait).await,
        Some(Inbound::Frame(Frame::Sasl(SaslFrame::Mechanisms(_))))
    ));
    // No sasl-init.
    match amqp.next_item(wait).await {
        Some(Inbound::Frame(Frame::Sasl(SaslFrame::Outcome(outcome)))) => {
            assert_eq!(outcome.code, SaslCode::SysTemp)
        }
        other => panic!("expected a sasl-outcome, got {other:?}"),
    }
    assert!(amqp.ends(wait).await);
}

#[tokio::test]
async fn amqp_frame_that_never_finishes_gets_a_framing_error() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("d"), Some(CONFIG));
    let mut amqp = RawAmqp::connect(broker.amqp.unwrap()).await;
    amqp.open_anonymous().await;
    // A frame header announcing 100 bytes, and 10 of them.
    amqp.raw(&[0, 0, 0, 100, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        .await;
    let started = Instant::now();
    let condition = amqp.closed_with(Duration::from_secs(10)).await;
    assert_eq!(condition, "amqp:connection:framing-error");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}
