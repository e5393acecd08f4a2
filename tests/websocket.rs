//! STOMP over WebSocket against a broker process: at `/stomp` on the management listener
//! and on a listener of its own, with an independent WebSocket client (tungstenite),
//! cross-checked with plain STOMP over TCP and the management API.

mod common;

use common::{encode_frame, free_port, BrokerProcess, Socket, Stomp};
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

const USERS: &str = r##"
[[users]]
name = "admin"
password = "pw"
roles = ["ops"]

[security]
login_failure_delay = "0"

[security.permissions."#"]
send = ["ops"]
consume = ["ops"]
create_address = ["ops"]
create_durable_queue = ["ops"]
view = ["ops"]
"##;

/// A broker with `config`, the management listener on, and a WebSocket listener of its
/// own on the returned address.
fn start(config: &str) -> (tempfile::TempDir, BrokerProcess, SocketAddr) {
    start_with(config, "")
}

/// [`start`] with more keys of the `[websocket]` section.
fn start_with(config: &str, websocket: &str) -> (tempfile::TempDir, BrokerProcess, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let ws: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = format!("{config}\n[websocket]\nbind = \"{ws}\"\n{websocket}\n");
    let broker = BrokerProcess::start_with_http(&dir.path().join("data"), Some(&config));
    (dir, broker, ws)
}

/// A WebSocket to `url` offering `subprotocols`; the subprotocol the broker agreed.
fn open(url: &str, subprotocols: &[&str]) -> (WebSocket<TcpStream>, Option<String>) {
    open_from(url, subprotocols, None).expect("WebSocket upgrade")
}

/// [`open`] as a page from `origin` would (`None`: no Origin header, as non-browser
/// clients); the refusal when the upgrade is refused.
fn open_from(
    url: &str,
    subprotocols: &[&str],
    origin: Option<&str>,
) -> Result<(WebSocket<TcpStream>, Option<String>), tungstenite::Error> {
    let mut request = url.into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("Origin", origin.parse().unwrap());
    }
    if !subprotocols.is_empty() {
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            subprotocols.join(", ").parse().unwrap(),
        );
    }
    let host = request.uri().authority().unwrap().as_str().to_owned();
    let stream = TcpStream::connect(host).unwrap();
    let (socket, response) = tungstenite::client(request, stream).map_err(|e| match e {
        tungstenite::HandshakeError::Failure(e) => e,
        tungstenite::HandshakeError::Interrupted(_) => panic!("a blocking socket"),
    })?;
    let agreed = response
        .headers()
        .get("sec-websocket-protocol")
        .map(|v| v.to_str().unwrap().to_owned());
    Ok((socket, agreed))
}

/// The test client's STOMP over a WebSocket: each write is one binary message, reads
/// take text and binary messages alike.
struct WsSocket {
    socket: WebSocket<TcpStream>,
    unread: Vec<u8>,
}

impl WsSocket {
    fn new(socket: WebSocket<TcpStream>) -> Self {
        WsSocket {
            socket,
            unread: Vec::new(),
        }
    }
}

impl Read for WsSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.unread.is_empty() {
            match self.socket.read() {
                Ok(Message::Text(text)) => self.unread = text.as_bytes().to_vec(),
                Ok(Message::Binary(data)) => self.unread = data.to_vec(),
                Ok(Message::Close(_)) => return Ok(0),
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed) => return Ok(0),
                Err(tungstenite::Error::Io(e)) => return Err(e),
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.unread.len());
        buf[..n].copy_from_slice(&self.unread[..n]);
        self.unread.drain(..n);
        Ok(n)
    }
}

impl Write for WsSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.socket
            .send(Message::binary(buf.to_vec()))
            .map_err(io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush().map_err(io::Error::other)
    }
}

impl Socket for WsSocket {
    fn tcp(&self) -> &TcpStream {
        self.socket.get_ref()
    }
}

fn login(socket: WebSocket<TcpStream>) -> Stomp<WsSocket> {
    let s = Stomp::connect_over(
        WsSocket::new(socket),
        &[("login", "admin"), ("passcode", "pw")],
    );
    assert_eq!(s.connected.command, "CONNECTED", "{:?}", s.connected);
    s
}

#[test]
fn the_best_offered_stomp_subprotocol_is_agreed() {
    let (_dir, broker, ws) = start(USERS);
    let http = broker.http.unwrap();
    for url in [format!("ws://{http}/stomp"), format!("ws://{ws}/")] {
        let (_, agreed) = open(&url, &["v10.stomp", "v12.stomp", "v11.stomp"]);
        assert_eq!(agreed.as_deref(), Some("v12.stomp"), "{url}");
        let (_, agreed) = open(&url, &["v11.stomp"]);
        assert_eq!(agreed.as_deref(), Some("v11.stomp"), "{url}");
        let (_, agreed) = open(&url, &["v10.stomp"]);
        assert_eq!(agreed.as_deref(), Some("v10.stomp"), "{url}");
        // None offered: served all the same, without a subprotocol, as RabbitMQ does.
        let (socket, agreed) = open(&url, &[]);
        assert_eq!(agreed, None, "{url}");
        login(socket);
    }
}

#[test]
fn frames_may_span_messages_and_share_them_and_meet_plain_stomp() {
    let (_dir, broker, ws) = start(USERS);
    let (mut socket, _) = open(&format!("ws://{ws}/stomp"), &["v12.stomp"]);
    // CONNECT in three messages, cut mid-command and mid-header.
    let mut connect = Vec::new();
    encode_frame(
        &mut connect,
        "CONNECT",
        &[
            ("accept-version", "1.2"),
            ("host", "localhost"),
            ("login", "admin"),
            ("passcode", "pw"),
        ],
        b"",
    );
    for piece in [&connect[..3], &connect[3..20], &connect[20..]] {
        socket.send(Message::binary(piece.to_vec())).unwrap();
    }
    let mut client = Stomp::unconnected(WsSocket::new(socket));
    let connected = client.recv().expect("CONNECTED");
    assert_eq!(connected.command, "CONNECTED", "{connected:?}");
    assert_eq!(connected.header("version"), Some("1.2"));

    // Two SENDs and a heart-beat in one text message, the second SEND's body split off.
    let mut two = Vec::new();
    encode_frame(&mut two, "SEND", &[("destination", "/queue/ws")], b"one");
    two.push(b'\n');
    encode_frame(
        &mut two,
        "SEND",
        &[("destination", "/queue/ws"), ("receipt", "r2")],
        b"two",
    );
    let cut = two.len() - 3;
    for piece in [&two[..cut], &two[cut..]] {
        let text = String::from_utf8(piece.to_vec()).unwrap();
        client
            .stream_mut()
            .socket
            .send(Message::text(text))
            .unwrap();
    }
    let receipt = client.recv().expect("RECEIPT");
    assert_eq!(receipt.header("receipt-id"), Some("r2"), "{receipt:?}");

    // A plain STOMP client on the same queue gets both.
    let mut tcp = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    tcp.subscribe("s", "/queue/ws", "auto");
    let bodies: Vec<String> = (0..2)
        .map(|_| tcp.recv().expect("MESSAGE").body_text())
        .collect();
    assert_eq!(bodies, ["one", "two"]);

    // And the other way round, over the management listener's /stomp.
    let (socket, _) = open(
        &format!("ws://{}/stomp", broker.http.unwrap()),
        &["v12.stomp"],
    );
    let mut web = login(socket);
    web.subscribe("w", "/queue/back", "client-individual");
    tcp.send_receipted("/queue/back", "from tcp", &[], "r");
    let message = web.recv().expect("MESSAGE over WebSocket");
    assert_eq!(message.body_text(), "from tcp");
    web.ack(&message);
}

#[test]
fn heart_beats_flow_both_ways() {
    let (_dir, _broker, ws) = start(USERS);
    let (socket, _) = open(&format!("ws://{ws}/stomp"), &["v12.stomp"]);
    let mut client = Stomp::connect_over(
        WsSocket::new(socket),
        &[
            ("login", "admin"),
            ("passcode", "pw"),
            ("heart-beat", "200,200"),
        ],
    );
    assert_eq!(client.connected.command, "CONNECTED");
    let agreed = client.connected.header("heart-beat").unwrap().to_owned();
    let send_every: u64 = agreed.split(',').nth(1).unwrap().parse().unwrap();
    assert!(send_every > 0, "the broker heart-beats: {agreed}");
    // Our heart-beats (EOL-only messages) keep the connection open past the broker's
    // deadline, and the broker's own arrive as EOLs.
    let mut eols = 0;
    let socket = client.stream_mut();
    let deadline = std::time::Instant::now() + Duration::from_millis(send_every * 2 + 2000);
    while std::time::Instant::now() < deadline {
        socket.socket.send(Message::text("\n")).unwrap();
        socket
            .socket
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(150)))
            .unwrap();
        match socket.socket.read() {
            Ok(Message::Text(t)) if t.as_str().trim_matches(['\r', '\n']).is_empty() => eols += 1,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("connection ended: {e}"),
        }
    }
    // The broker beats once per interval without other output, counted from its
    // last write: one beat in two intervals is what a loaded machine guarantees.
    assert!(eols >= 1, "heart-beats from the broker: {eols}");
    socket
        .socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client.send_receipted("/queue/hb", "still here", &[], "r");
}

#[test]
fn a_login_is_required_as_over_tcp_and_the_connection_is_listed() {
    let (_dir, broker, ws) = start(USERS);
    let http = broker.http.unwrap();
    let (socket, _) = open(&format!("ws://{http}/stomp"), &["v12.stomp"]);
    let refused = Stomp::connect_over(WsSocket::new(socket), &[]);
    assert_eq!(
        refused.connected.command, "ERROR",
        "{:?}",
        refused.connected
    );
    let (socket, _) = open(&format!("ws://{ws}/"), &["v12.stomp"]);
    let wrong = Stomp::connect_over(
        WsSocket::new(socket),
        &[("login", "admin"), ("passcode", "nope")],
    );
    assert_eq!(wrong.connected.command, "ERROR");

    let (socket, _) = open(&format!("ws://{ws}/"), &["v12.stomp"]);
    let _web = login(socket);
    let _tcp = Stomp::connect(broker.stomp, &[("login", "admin"), ("passcode", "pw")]);
    let connections: Value = Client::new()
        .get(format!("http://{http}/api/connections"))
        .basic_auth("admin", Some("pw"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let mut transports: Vec<(&str, &str)> = connections
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["protocol"].as_str().unwrap(),
                c["transport"].as_str().unwrap(),
            )
        })
        .collect();
    transports.sort();
    assert_eq!(transports, [("stomp", "tcp"), ("stomp", "websocket")]);
    let metrics = Client::new()
        .get(format!("http://{http}/metrics"))
        .basic_auth("admin", Some("pw"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for transport in ["tcp", "websocket"] {
        let series = format!(
            "weir_connections{{protocol=\"stomp\",transport=\"{transport}\",tls=\"false\"}} 1"
        );
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }
}

#[test]
fn a_request_that_is_no_upgrade_gets_a_json_4xx() {
    let (_dir, broker, ws) = start(USERS);
    let client = Client::new();
    for base in [
        format!("http://{}/stomp", broker.http.unwrap()),
        format!("http://{ws}/"),
    ] {
        let r = client.get(&base).send().unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{base}");
        let body: Value = r.json().unwrap();
        assert_eq!(body["error"], "bad_request", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("WebSocket"),
            "{body}"
        );
        let r = client.post(&base).send().unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{base}");
        let body: Value = r.json().unwrap();
        assert_eq!(body["error"], "method_not_allowed", "{body}");
    }
}

#[test]
fn a_client_that_never_connects_is_closed_at_the_connect_timeout() {
    let config = format!("{USERS}\n[limits]\nconnect_timeout = \"1s\"\n");
    let (_dir, _broker, ws) = start(&config);
    let (mut socket, _) = open(&format!("ws://{ws}/stomp"), &["v12.stomp"]);
    socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = std::time::Instant::now();
    // The broker ends the connection, perhaps with an ERROR first; nothing else comes.
    loop {
        match socket.read() {
            Ok(Message::Text(t)) => assert!(t.as_str().starts_with("ERROR"), "{t}"),
            Ok(Message::Binary(b)) => panic!("unexpected {b:?}"),
            Ok(Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => break,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                panic!("still open after {:?}", started.elapsed())
            }
            Err(_) => break,
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_websocket_listener_is_among_the_broker_s_listeners() {
    let (_dir, broker, ws) = start(USERS);
    let info: Value = Client::new()
        .get(format!("http://{}/api/broker", broker.http.unwrap()))
        .basic_auth("admin", Some("pw"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let listener = info["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "websocket")
        .unwrap_or_else(|| panic!("{info}"));
    assert_eq!(listener["address"], ws.to_string());
    assert_eq!(listener["protocols"], serde_json::json!(["stomp"]));
    assert_eq!(listener["tls"], false);
}

#[test]
fn pages_from_origins_not_listed_are_refused_with_a_json_403() {
    let (_dir, broker, ws) = start_with(
        USERS,
        "allowed_origins = [\"https://app.example.com\", \"http://localhost:8080\"]",
    );
    let http = broker.http.unwrap();
    for url in [format!("ws://{http}/stomp"), format!("ws://{ws}/")] {
        // A listed origin (its case does not matter), and a client that names none.
        for origin in [
            Some("https://APP.example.com"),
            Some("http://localhost:8080"),
            None,
        ] {
            let (socket, _) = open_from(&url, &["v12.stomp"], origin)
                .unwrap_or_else(|e| panic!("{url} from {origin:?}: {e}"));
            let mut client = login(socket);
            client.send_receipted("/queue/origins", "in", &[], "r");
        }
        for origin in ["https://evil.example", "http://localhost:8081", "null"] {
            let refused = open_from(&url, &["v12.stomp"], Some(origin)).map(|_| ());
            let Err(tungstenite::Error::Http(response)) = refused else {
                panic!("{url} from {origin}: {refused:?}");
            };
            assert_eq!(response.status(), 403, "{url} from {origin}");
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"], "forbidden", "{body}");
            let message = body["message"].as_str().unwrap();
            assert!(
                message.contains(origin) && message.contains("allowed_origins"),
                "{message}"
            );
        }
    }
}

#[test]
fn a_message_over_the_limit_gets_an_error_frame_then_the_close() {
    let config = format!("{USERS}\n[limits]\nmax_frame_size = \"4KiB\"\n");
    let (_dir, _broker, ws) = start(&config);
    let (socket, _) = open(&format!("ws://{ws}/"), &["v12.stomp"]);
    let mut client = login(socket);
    // Past max_frame_size plus the 64 KiB a message may carry beyond one frame.
    let mut frame = Vec::new();
    encode_frame(
        &mut frame,
        "SEND",
        &[("destination", "/queue/big")],
        &vec![b'x'; 4096 + 64 * 1024 + 1],
    );
    let ws = client.stream_mut();
    ws.socket.send(Message::binary(frame)).unwrap();
    ws.socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let error = client.recv().expect("an ERROR frame before the close");
    assert_eq!(error.command, "ERROR", "{error:?}");
    let message = error.header("message").unwrap();
    assert!(
        message.contains("frame larger than the limit of 4096 bytes"),
        "{message}"
    );
    assert!(client.recv().is_none(), "closed after the ERROR");
}
