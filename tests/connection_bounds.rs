//! What one connection may hold, over real sockets with small limits: STOMP
//! subscriptions, AMQP sessions, links and unsettled deliveries, and frames
//! whose declared size is a lie.

mod common;

use common::{encode_frame, BrokerProcess, Frame, Stomp};
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use futures_util::{SinkExt, StreamExt};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;
use tokio_util::codec::Framed;
use weir::protocol::amqp::wire::codec::{AmqpFrame, AmqpFrameCodec, Frame as AmqpWire};
use weir::protocol::amqp::wire::codec::{Inbound, Outbound, ProtocolHeader};
use weir::protocol::amqp::wire::performatives::{Begin, Open, Performative};

const WAIT: Duration = Duration::from_secs(10);

fn start(config: &str) -> (tempfile::TempDir, BrokerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(config));
    (dir, broker)
}

fn expect_error(c: &mut Stomp) -> Frame {
    let f = c.recv().expect("a frame");
    assert_eq!(f.command, "ERROR", "{f:?}");
    f
}

fn error_text(f: &Frame) -> String {
    format!("{} {}", f.header("message").unwrap_or(""), f.body_text())
}

// ---- STOMP -------------------------------------------------------------------------

#[test]
fn stomp_subscriptions_past_the_limit_get_an_error_naming_it() {
    let (_dir, broker) = start("[limits]\nmax_subscriptions_per_connection = 3\n");
    let mut c = broker.client();
    for i in 0..3 {
        c.subscribe(&format!("s{i}"), &format!("/queue/q{i}"), "auto");
    }
    // Unsubscribing frees a place.
    c.send_frame("UNSUBSCRIBE", &[("id", "s0"), ("receipt", "u")], b"");
    assert_eq!(c.recv().expect("RECEIPT").command, "RECEIPT");
    c.subscribe("s3", "/queue/q3", "auto");
    c.send_frame(
        "SUBSCRIBE",
        &[("id", "s4"), ("destination", "/queue/q4"), ("receipt", "r")],
        b"",
    );
    let f = expect_error(&mut c);
    assert!(
        error_text(&f).contains("max_subscriptions_per_connection"),
        "{f:?}"
    );
    // Another connection has its own allowance, and the broker serves it.
    let mut other = broker.client();
    for i in 0..3 {
        other.subscribe(&format!("s{i}"), "/queue/shared", "auto");
    }
    broker
        .client()
        .send_receipted("/queue/shared", "hello", &[], "sent");
    assert_eq!(other.recv().expect("MESSAGE").body_text(), "hello");
}

#[test]
fn stomp_lying_content_lengths_hold_nothing_and_the_broker_keeps_serving() {
    let (_dir, broker) = start("[limits]\nmax_frame_size = \"10MiB\"\n");
    // Each announces a 10 MB body and sends 1 KiB of it.
    let liars: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut c = broker.client();
            let head = "SEND\ndestination:/queue/lie\ncontent-length:10000000\n\n";
            c.raw(head.as_bytes());
            c.raw(&[b'x'; 1024]);
            c.into_stream()
        })
        .collect();
    let mut consumer = broker.client();
    consumer.subscribe("s", "/queue/ok", "auto");
    let mut producer = broker.client();
    for i in 0..20 {
        producer.send_receipted("/queue/ok", &format!("m{i}"), &[], &format!("r{i}"));
        assert_eq!(
            consumer.recv().expect("MESSAGE").body_text(),
            format!("m{i}")
        );
    }
    drop(liars);
    // Nothing of the unfinished frames was delivered.
    let mut c = broker.client();
    c.subscribe("s", "/queue/lie", "auto");
    assert!(c.recv_timeout(Duration::from_millis(300)).is_none());
}

#[test]
fn stomp_a_frame_shorter_than_its_content_length_is_an_error() {
    let (_dir, broker) = start("[limits]\nmax_frame_size = \"1MiB\"\n");
    let mut c = broker.client();
    // content-length says 2048, the body ends after 1024 and the next frame follows:
    // octet 2048 is not the NUL the length promised.
    let mut bytes = b"SEND\ndestination:/queue/short\ncontent-length:2048\n\n".to_vec();
    bytes.extend_from_slice(&[b'y'; 1024]);
    bytes.push(0);
    for _ in 0..40 {
        encode_frame(
            &mut bytes,
            "SEND",
            &[("destination", "/queue/short")],
            b"next",
        );
    }
    c.raw(&bytes);
    let f = expect_error(&mut c);
    assert!(error_text(&f).to_lowercase().contains("nul"), "{f:?}");
    let mut check = broker.client();
    check.subscribe("s", "/queue/short", "auto");
    assert!(check.recv_timeout(Duration::from_millis(300)).is_none());
}

// ---- AMQP: raw frames, to go past limits a well-behaved client respects ------------

type Raw = Framed<tokio::net::TcpStream, AmqpFrameCodec>;

/// An AMQP connection without SASL (the test broker allows anonymous), opened.
async fn raw_open(broker: &BrokerProcess) -> Raw {
    let addr = broker.amqp.expect("AMQP listener");
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut framed = Framed::new(stream, AmqpFrameCodec::new(1 << 20));
    framed
        .send(Outbound::Header(ProtocolHeader::AMQP))
        .await
        .expect("header");
    framed
        .send(amqp(0, Open::new("bounds-test").into()))
        .await
        .expect("open");
    match next(&mut framed).await {
        Some(Inbound::Header(h)) => assert_eq!(h, ProtocolHeader::AMQP),
        other => panic!("wanted the AMQP header, got {other:?}"),
    }
    match next_performative(&mut framed).await {
        Some(Performative::Open(_)) => {}
        other => panic!("wanted open, got {other:?}"),
    }
    framed
}

fn amqp(channel: u16, performative: Performative) -> Outbound {
    Outbound::Frame(AmqpWire::Amqp(AmqpFrame::bare(channel, performative)))
}

fn begin() -> Performative {
    Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 1000,
        outgoing_window: 1000,
        handle_max: 100,
        offered_capabilities: Vec::new(),
        desired_capabilities: Vec::new(),
        properties: None,
    }
    .into()
}

async fn next(framed: &mut Raw) -> Option<Inbound> {
    loop {
        match tokio::time::timeout(WAIT, framed.next()).await {
            Ok(Some(Ok(Inbound::Heartbeat))) => continue,
            Ok(Some(Ok(item))) => return Some(item),
            Ok(Some(Err(_)) | None) => return None,
            Err(_) => panic!("nothing from the broker within {WAIT:?}"),
        }
    }
}

async fn next_performative(framed: &mut Raw) -> Option<Performative> {
    match next(framed).await? {
        Inbound::Frame(AmqpWire::Amqp(f)) => Some(f.performative),
        other => panic!("wanted an AMQP frame, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_session_past_the_limit_closes_with_resource_limit_exceeded() {
    let (_dir, broker) = start("[limits]\nmax_sessions_per_connection = 2\n");
    let mut c = raw_open(&broker).await;
    for channel in 0..2 {
        c.send(amqp(channel, begin())).await.expect("begin");
        match next_performative(&mut c).await {
            Some(Performative::Begin(b)) => assert_eq!(b.remote_channel, Some(channel)),
            other => panic!("wanted begin, got {other:?}"),
        }
    }
    c.send(amqp(2, begin())).await.expect("begin");
    match next_performative(&mut c).await {
        Some(Performative::Close(close)) => {
            let error = close.error.expect("an error");
            assert_eq!(error.condition.as_str(), "amqp:resource-limit-exceeded");
            let description = error.description.map(|d| d.as_str().to_owned());
            assert!(
                description
                    .as_deref()
                    .is_some_and(|d| d.contains("max_sessions_per_connection")),
                "{description:?}"
            );
        }
        other => panic!("wanted close, got {other:?}"),
    }
}

/// A connection and session through an independent client.
async fn client(broker: &BrokerProcess) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let addr = broker.amqp.expect("AMQP listener");
    let mut connection = Connection::builder()
        .container_id("bounds-test")
        .sasl_profile(SaslProfile::Anonymous)
        .open(format!("amqp://{addr}").as_str())
        .await
        .expect("open");
    let session = Session::begin(&mut connection).await.expect("begin");
    (connection, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_link_past_the_limit_is_refused_with_resource_limit_exceeded() {
    let (_dir, broker) = start("[limits]\nmax_links_per_session = 2\n");
    let (_connection, mut session) = client(&broker).await;
    let _a = Receiver::attach(&mut session, "a", "q-a").await.expect("a");
    let _b = Sender::attach(&mut session, "b", "q-b").await.expect("b");
    let refused = Receiver::attach(&mut session, "c", "q-c").await;
    let error = match refused {
        Ok(_) => panic!("a third link attached"),
        Err(e) => format!("{e:?}"),
    };
    assert!(error.contains("ResourceLimitExceeded"), "{error}");
    assert!(error.contains("max_links_per_session"), "{error}");
    // The session goes on: its links still work.
    let mut sender = _b;
    sender.send("still here").await.expect("send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_link_stops_at_its_unsettled_limit_until_settlements_arrive() {
    let (_dir, broker) = start("[limits]\nmax_unsettled_per_link = 3\n");
    let (_connection, mut session) = client(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "unsettled")
        .await
        .expect("s");
    for i in 0..10 {
        sender.send(format!("m{i}")).await.expect("send");
    }
    // Plenty of credit (the client's default), deliveries left unsettled.
    let mut receiver = Receiver::attach(&mut session, "r", "unsettled")
        .await
        .expect("r");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(recv(&mut receiver).await);
    }
    let more =
        tokio::time::timeout(Duration::from_millis(500), receiver.recv::<Body<Value>>()).await;
    assert!(more.is_err(), "a fourth delivery while three are unsettled");
    receiver.accept(&held.remove(0)).await.expect("accept");
    let fourth = recv(&mut receiver).await;
    assert_eq!(text(&fourth), "m3");
    for d in held.drain(..).chain([fourth]) {
        receiver.accept(&d).await.expect("accept");
    }
    for i in 4..10 {
        let d = recv(&mut receiver).await;
        assert_eq!(text(&d), format!("m{i}"));
        receiver.accept(&d).await.expect("accept");
    }
}

async fn recv(receiver: &mut Receiver) -> fe2o3_amqp::link::delivery::Delivery<Body<Value>> {
    tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("a delivery in time")
        .expect("recv")
}

fn text(d: &fe2o3_amqp::link::delivery::Delivery<Body<Value>>) -> String {
    match d.body() {
        Body::Value(v) => match &v.0 {
            Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_lying_frame_sizes_hold_nothing_and_the_broker_keeps_serving() {
    let (_dir, broker) = start("[limits]\nmax_frame_size = \"10MiB\"\n");
    let addr = broker.amqp.expect("AMQP listener");
    // Each sends the protocol header, then a frame header announcing 10 MB, then 1 KiB.
    let mut liars = Vec::new();
    for _ in 0..50 {
        let mut s = TcpStream::connect(addr).expect("connect");
        let mut bytes = b"AMQP\x00\x01\x00\x00".to_vec();
        bytes.extend_from_slice(&10_000_000u32.to_be_bytes());
        bytes.extend_from_slice(&[2, 0, 0, 0]);
        bytes.extend_from_slice(&[0x40; 1024]);
        s.write_all(&bytes).expect("write");
        liars.push(s);
    }
    let (_connection, mut session) = client(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "alive").await.expect("s");
    let mut receiver = Receiver::attach(&mut session, "r", "alive")
        .await
        .expect("r");
    for i in 0..20 {
        sender.send(format!("m{i}")).await.expect("send");
        let d = recv(&mut receiver).await;
        assert_eq!(text(&d), format!("m{i}"));
        receiver.accept(&d).await.expect("accept");
    }
    drop(liars);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_frame_shorter_than_its_size_is_a_decode_error() {
    let (_dir, broker) = start("[limits]\nmax_frame_size = \"1MiB\"\n");
    let mut c = raw_open(&broker).await;
    // A frame announcing 2048 bytes whose performative ends after a few: the
    // rest, up to the announced size, is the peer's next frames, not this one.
    let mut lie = 2048u32.to_be_bytes().to_vec();
    lie.extend_from_slice(&[2, 0, 0, 0]);
    let mut rest = Vec::new();
    while lie.len() + rest.len() < 4096 {
        rest.extend_from_slice(&[0, 0, 0, 8, 2, 0, 0, 0]);
    }
    lie.extend_from_slice(&rest);
    c.get_mut().write_all_raw(&lie).await;
    match next_performative(&mut c).await {
        Some(Performative::Close(close)) => {
            let error = close.error.expect("an error");
            assert!(
                error.condition.as_str().starts_with("amqp:"),
                "{:?}",
                error.condition
            );
        }
        other => panic!("wanted close, got {other:?}"),
    }
}

trait WriteRaw {
    async fn write_all_raw(&mut self, bytes: &[u8]);
}

impl WriteRaw for tokio::net::TcpStream {
    async fn write_all_raw(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.write_all(bytes).await.expect("write");
    }
}
