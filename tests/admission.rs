//! Connection limits refuse in the client's protocol: a STOMP ERROR naming the limit,
//! an AMQP `open` then `close` with amqp:resource-limit-exceeded; never a bare reset.

mod common;

use common::amqp_raw::RawAmqp;
use common::{BrokerProcess, Stomp};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// CONNECTs with `login` and gives what the broker answered, up to its closing the socket
/// (or the first frame, when it stays open).
fn connect_answer(addr: SocketAddr, login: Option<(&str, &str)>) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut frame = String::from("CONNECT\naccept-version:1.2\nhost:x\n");
    if let Some((user, pass)) = login {
        frame.push_str(&format!("login:{user}\npasscode:{pass}\n"));
    }
    frame.push_str("\n\0");
    stream.write_all(frame.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while let Ok(1) = stream.read(&mut byte) {
        if byte[0] == 0 {
            break;
        }
        answer.push(byte[0]);
    }
    (String::from_utf8_lossy(&answer).into_owned(), stream)
}

/// The broker closed the socket after its answer.
fn is_closed(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).is_ok()
}

#[test]
fn stomp_client_over_max_connections_gets_an_error_and_a_freed_place_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(
        &dir.path().join("d"),
        Some("[limits]\nmax_connections = 2\n"),
    );
    let first = broker.client();
    let _second = broker.client();
    let (answer, mut stream) = connect_answer(broker.stomp, None);
    assert!(answer.starts_with("ERROR\n"), "{answer:?}");
    assert!(answer.contains("limits.max_connections"), "{answer:?}");
    assert!(is_closed(&mut stream));
    drop(first);
    std::thread::sleep(Duration::from_millis(200));
    let (answer, _stream) = connect_answer(broker.stomp, None);
    assert!(answer.starts_with("CONNECTED\n"), "{answer:?}");
}

#[test]
fn stomp_user_over_max_connections_per_user_is_refused_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[limits]\nmax_connections_per_user = 1\n\
        [[users]]\nname = \"ann\"\npassword = \"a\"\n[[users]]\nname = \"bob\"\npassword = \"b\"\n";
    let broker = BrokerProcess::start(&dir.path().join("d"), Some(config));
    let _ann = Stomp::connect(broker.stomp, &[("login", "ann"), ("passcode", "a")]);
    let (answer, _s) = connect_answer(broker.stomp, Some(("ann", "a")));
    assert!(answer.starts_with("ERROR\n"), "{answer:?}");
    assert!(answer.contains("user 'ann'"), "{answer:?}");
    assert!(
        answer.contains("limits.max_connections_per_user"),
        "{answer:?}"
    );
    let (answer, _s) = connect_answer(broker.stomp, Some(("bob", "b")));
    assert!(answer.starts_with("CONNECTED\n"), "{answer:?}");
}

#[test]
fn stomp_address_over_max_connections_per_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(
        &dir.path().join("d"),
        Some("[limits]\nmax_connections_per_address = 1\n"),
    );
    let _one = broker.client();
    let (answer, _s) = connect_answer(broker.stomp, None);
    assert!(answer.starts_with("ERROR\n"), "{answer:?}");
    assert!(answer.contains("from 127.0.0.1"), "{answer:?}");
    assert!(
        answer.contains("limits.max_connections_per_address"),
        "{answer:?}"
    );
}

#[tokio::test]
async fn amqp_client_over_max_connections_gets_open_and_resource_limit_close() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(
        &dir.path().join("d"),
        Some("[limits]\nmax_connections = 1\n"),
    );
    let addr = broker.amqp.unwrap();
    let mut first = RawAmqp::connect(addr).await;
    first.open_anonymous().await;
    let mut second = RawAmqp::connect(addr).await;
    second.open_anonymous().await;
    let wait = Duration::from_secs(5);
    assert_eq!(
        second.closed_with(wait).await,
        "amqp:resource-limit-exceeded"
    );
    assert!(second.ends(wait).await);
    // The same limit counts STOMP connections too.
    let (answer, _s) = connect_answer(broker.stomp, None);
    assert!(answer.contains("limits.max_connections"), "{answer:?}");
}

#[tokio::test]
async fn amqp_address_over_max_connections_per_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(
        &dir.path().join("d"),
        Some("[limits]\nmax_connections_per_address = 1\n"),
    );
    let addr = broker.amqp.unwrap();
    let mut first = RawAmqp::connect(addr).await;
    first.open_anonymous().await;
    let mut second = RawAmqp::connect(addr).await;
    second.open_anonymous().await;
    assert_eq!(
        second.closed_with(Duration::from_secs(5)).await,
        "amqp:resource-limit-exceeded"
    );
}
