//! TLS over real sockets: STOMP and AMQP on TLS listeners, AMQP's TLS upgrade on a plain
//! port, SASL EXTERNAL and STOMP logins by client certificate, client certificates that
//! are missing, untrusted or expired, `weir perf` logging in by certificate (SASL EXTERNAL,
//! the certificate user's permissions holding) or SCRAM where certificates are required,
//! passwords kept to TLS, a certificate reload on SIGHUP
//! and on file change, and a start stopped by a bad file. Every certificate is made here, with rcgen.

mod common;

use common::{free_port, Socket, Stomp};
use fe2o3_amqp::connection::OpenError;
use fe2o3_amqp::sasl_profile::{SaslProfile, SaslScramSha256};
use fe2o3_amqp::types::messaging::{AmqpValue, Body, Message};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use futures_util::{SinkExt, StreamExt};
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::codec::Framed;
use weir::core::security::{ScramCredential, ScramHash, DEFAULT_ITERATIONS};
use weir::protocol::amqp::{
    AmqpFrameCodec, Frame, Inbound, Outbound, ProtocolHeader, SaslCode, SaslFrame, SaslInit, Symbol,
};

const WAIT: Duration = Duration::from_secs(10);

/// A certificate authority that signs the test's certificates.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its key, as PEM.
struct Issued {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ca {
            cert: params.self_signed(&key).unwrap(),
            key,
        }
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }

    /// The broker's certificate: for "localhost" and 127.0.0.1, `cn` to tell two apart.
    fn server(&self, cn: &str) -> Issued {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client's certificate naming `cn`; `expired` puts its validity in the past.
    fn client(&self, cn: &str, expired: bool) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = date_time_ymd(2001, 1, 1);
            params.not_after = date_time_ymd(2002, 1, 1);
        }
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// The CAs and certificates of one test, written to its directory.
struct Pki {
    dir: tempfile::TempDir,
    server_ca: Ca,
    client_ca: Ca,
}

impl Pki {
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            server_ca: Ca::new("Weir test server CA"),
            client_ca: Ca::new("Weir test client CA"),
        };
        pki.install_server(&pki.server_ca.server("weir-one"));
        std::fs::write(pki.path("clients-ca.pem"), pki.client_ca.pem()).unwrap();
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes the broker's certificate and key where `[tls]` points.
    fn install_server(&self, issued: &Issued) {
        std::fs::write(self.path("server.pem"), &issued.cert).unwrap();
        std::fs::write(self.path("server.key"), &issued.key).unwrap();
    }

    fn tls_section(&self, client_auth: &str) -> String {
        format!(
            "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nca_file = \"{}\"\nclient_auth = \"{client_auth}\"\n",
            self.path("server.pem").display(),
            self.path("server.key").display(),
            self.path("clients-ca.pem").display(),
        )
    }

    /// Files for `weir perf --tls-ca --tls-cert --tls-key`: the broker's CA, and alice's
    /// client certificate and key.
    fn perf_files(&self) -> PerfFiles {
        let files = PerfFiles {
            ca: self.path("server-ca.pem"),
            cert: self.path("alice.pem"),
            key: self.path("alice.key"),
        };
        let alice = self.client_ca.client("alice", false);
        std::fs::write(&files.ca, self.server_ca.pem()).unwrap();
        std::fs::write(&files.cert, &alice.cert).unwrap();
        std::fs::write(&files.key, &alice.key).unwrap();
        files
    }

    /// Writes a client certificate and its key for `weir perf --tls-cert --tls-key`.
    fn client_files(&self, name: &str, issued: &Issued) -> (String, String) {
        let (cert, key) = (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&cert, &issued.cert).unwrap();
        std::fs::write(&key, &issued.key).unwrap();
        let text = |p: PathBuf| p.to_str().expect("temporary paths are UTF-8").to_owned();
        (text(cert), text(key))
    }

    /// A client trusting the broker's CA, showing `cert` if given.
    fn client(&self, cert: Option<&Issued>) -> Arc<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.server_ca.pem().as_bytes()).unwrap())
            .unwrap();
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            Some(issued) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_slice(issued.cert.as_bytes()).unwrap()],
                    PrivateKeyDer::from_pem_slice(issued.key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        Arc::new(config)
    }
}

struct PerfFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl PerfFiles {
    fn args(&self) -> (&str, &str, &str) {
        fn text(p: &Path) -> &str {
            p.to_str().expect("temporary paths are UTF-8")
        }
        (text(&self.ca), text(&self.cert), text(&self.key))
    }
}

/// `alice` may log in (password "wonderland"); `mallory` is no user.
const USERS: &str = "[[users]]\nname = \"alice\"\npassword = \"wonderland\"\n";

/// A broker started from a config of the test's own, its log kept in a file.
struct Broker {
    child: Child,
    log: PathBuf,
    _data: tempfile::TempDir,
    stomp: SocketAddr,
    amqp: SocketAddr,
    stomp_tls: SocketAddr,
    amqps: SocketAddr,
    /// TLS carrying both protocols, told apart inside TLS.
    both_tls: SocketAddr,
    /// The management API (HTTPS with `[http] tls = true`).
    http: SocketAddr,
}

impl Broker {
    /// Plain STOMP and AMQP, STOMP over TLS and AMQP over TLS, with `extra` config (users,
    /// [security], and a [tls] section, without which the TLS listeners are left out).
    fn start(extra: &str) -> Broker {
        for _ in 0..5 {
            if let Some(broker) = Broker::try_start(extra) {
                return broker;
            }
        }
        panic!("broker did not start");
    }

    fn try_start(extra: &str) -> Option<Broker> {
        let data = tempfile::tempdir().unwrap();
        let addr = |port: u16| -> SocketAddr { format!("127.0.0.1:{port}").parse().unwrap() };
        let (stomp, amqp, stomp_tls, amqps, both_tls, http) = (
            addr(free_port()),
            addr(free_port()),
            addr(free_port()),
            addr(free_port()),
            addr(free_port()),
            addr(free_port()),
        );
        let tls = extra.contains("[tls]");
        let mut config = format!(
            "[broker]\ndata_dir = \"{}\"\n[acceptors]\nstomp = \"{stomp}\"\namqp = \"{amqp}\"\n",
            data.path().join("data").display()
        );
        if tls {
            config += &format!(
                "[[acceptors.extra]]\nname = \"stomp-tls\"\nbind = \"{stomp_tls}\"\nprotocols = [\"stomp\"]\ntls = true\n\
                 [[acceptors.extra]]\nname = \"amqps\"\nbind = \"{amqps}\"\nprotocols = [\"amqp\"]\ntls = true\n\
                 [[acceptors.extra]]\nname = \"both-tls\"\nbind = \"{both_tls}\"\ntls = true\n"
            );
        }
        config += extra;
        let config_path = data.path().join("weir.toml");
        std::fs::write(&config_path, config).unwrap();
        let log = data.path().join("weir.log");
        let log_file = std::fs::File::create(&log).unwrap();
        // Debug for the broker's own lines: a connection's span (tls=, user=) shows there.
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--http")
            .arg(http.to_string())
            .arg("--log")
            .arg("info,weir=debug")
            .env("NO_COLOR", "1")
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("spawn weir");
        let mut broker = Broker {
            child,
            log,
            _data: data,
            stomp,
            amqp,
            stomp_tls,
            amqps,
            both_tls,
            http,
        };
        let mut ports = vec![stomp, amqp, http];
        if tls {
            ports.extend([stomp_tls, amqps, both_tls]);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(broker.child.try_wait(), Ok(Some(_))) {
                return None; // a port was taken meanwhile
            }
            if ports.iter().all(|p| TcpStream::connect(p).is_ok()) {
                return Some(broker);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("broker did not listen; log:\n{}", broker.log_text());
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn hangup(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: signals our own child process, which we have not reaped yet.
        unsafe { libc::kill(pid, libc::SIGHUP) };
    }

    fn error_lines(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.contains("ERROR"))
            .map(str::to_owned)
            .collect()
    }

    /// Waits for a log line containing `text` (the broker logs asynchronously).
    fn wait_for_log(&self, text: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.log_text().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no {text:?} in the log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type TlsSocket = StreamOwned<ClientConnection, TcpStream>;

impl Socket for TlsSocket {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }
}

fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

/// A blocking TLS connection, handshake done; `Err` when the broker refused it.
fn tls_connect(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<TlsSocket> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(WAIT))?;
    let mut tls = StreamOwned::new(ClientConnection::new(config, localhost()).unwrap(), tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// The name in the certificate the broker presented.
fn served_cn(tls: &TlsSocket) -> String {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let chain = tls.conn.peer_certificates().expect("a server certificate");
    let (_, cert) = X509Certificate::from_der(chain[0].as_ref()).unwrap();
    let cn = cert.subject().iter_common_name().next().unwrap();
    cn.as_str().unwrap().to_owned()
}

/// Whether the broker refuses this TLS client: the handshake fails, or (TLS 1.3, where the
/// client finishes first) the first read after it does.
fn tls_refused(addr: SocketAddr, config: Arc<ClientConfig>) -> bool {
    let Ok(mut tls) = tls_connect(addr, config) else {
        return true;
    };
    let _ = tls.write_all(b"CONNECT\naccept-version:1.2\n\n\0");
    let mut buf = [0u8; 256];
    match tls.read(&mut buf) {
        Ok(0) | Err(_) => true,
        Ok(n) => {
            assert!(
                !String::from_utf8_lossy(&buf[..n]).contains("CONNECTED"),
                "connected"
            );
            true
        }
    }
}

fn stomp_tls(
    broker: &Broker,
    config: Arc<ClientConfig>,
    headers: &[(&str, &str)],
) -> Stomp<TlsSocket> {
    let tls = tls_connect(broker.stomp_tls, config).expect("TLS handshake");
    Stomp::connect_over(tls, headers)
}

async fn tls_stream(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(localhost(), tcp)
        .await
        .expect("TLS handshake")
}

/// Opens an AMQP connection over `stream` with `profile`, then sends a message to a queue
/// and takes it back.
async fn amqp_round_trip<S>(stream: S, profile: SaslProfile, queue: &str) -> Result<(), OpenError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let mut connection = Connection::builder()
        .container_id("weir-tls-test")
        .scheme("amqp")
        .sasl_profile(profile)
        .open_with_stream(stream)
        .await?;
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "s", queue)
        .await
        .expect("sender");
    sender
        .send(Message::builder().value("over TLS".to_owned()).build())
        .await
        .expect("send");
    let mut receiver = Receiver::attach(&mut session, "r", queue)
        .await
        .expect("receiver");
    let delivery = tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("a delivery")
        .expect("recv");
    match delivery.body() {
        Body::Value(AmqpValue(Value::String(text))) => assert_eq!(text, "over TLS"),
        other => panic!("unexpected body {other:?}"),
    }
    receiver.accept(&delivery).await.expect("accept");
    let _ = sender.close().await;
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;
    Ok(())
}

/// The SASL layer by hand (fe2o3 offers EXTERNAL only with its own TLS): the mechanisms
/// the broker offers, and the outcome of `mechanism` with `response`.
async fn sasl<S>(stream: S, mechanism: &'static str, response: &[u8]) -> (Vec<String>, SaslCode)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut framed = Framed::new(stream, AmqpFrameCodec::new(1 << 20));
    framed
        .send(Outbound::Header(ProtocolHeader::SASL))
        .await
        .unwrap();
    assert_eq!(
        next(&mut framed).await,
        Inbound::Header(ProtocolHeader::SASL)
    );
    let offered = match next(&mut framed).await {
        Inbound::Frame(Frame::Sasl(SaslFrame::Mechanisms(m))) => {
            m.mechanisms.iter().map(|s| s.as_str().to_owned()).collect()
        }
        other => panic!("expected sasl-mechanisms, got {other:?}"),
    };
    let init = SaslInit {
        mechanism: Symbol::from_static(mechanism),
        initial_response: Some(bytes::Bytes::copy_from_slice(response)),
        hostname: None,
    };
    framed
        .send(Outbound::Frame(Frame::Sasl(SaslFrame::Init(init))))
        .await
        .unwrap();
    let code = match next(&mut framed).await {
        Inbound::Frame(Frame::Sasl(SaslFrame::Outcome(o))) => o.code,
        other => panic!("expected sasl-outcome, got {other:?}"),
    };
    (offered, code)
}

async fn next<S>(framed: &mut Framed<S, AmqpFrameCodec>) -> Inbound
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(WAIT, framed.next())
        .await
        .expect("an answer in time")
        .expect("an answer")
        .expect("a valid frame")
}

#[test]
fn stomp_over_tls_logs_in_and_passwords_stay_off_plain_ports() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}[security]\nlogin_failure_delay = \"10ms\"\nrequire_tls_for_passwords = true\n{}",
        pki.tls_section("none")
    ));
    let login = [("login", "alice"), ("passcode", "wonderland")];
    let mut client = stomp_tls(&broker, pki.client(None), &login);
    assert_eq!(
        client.connected.command, "CONNECTED",
        "{:?}",
        client.connected
    );
    client.send_receipted("tls.stomp", "secret", &[], "r1");
    client.subscribe("1", "tls.stomp", "auto");
    let message = client.recv().expect("MESSAGE over TLS");
    assert_eq!(message.command, "MESSAGE");
    assert_eq!(message.body_text(), "secret");

    // The same login on the plain port is refused, saying why.
    let plain = Stomp::connect(broker.stomp, &login);
    assert_eq!(plain.connected.command, "ERROR");
    assert!(
        plain
            .connected
            .header("message")
            .unwrap_or_default()
            .contains("TLS"),
        "{:?}",
        plain.connected
    );
    broker.wait_for_log("tls=true");
}

#[tokio::test]
async fn amqp_over_tls_with_scram_and_plain() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}[security]\nrequire_tls_for_passwords = true\n{}",
        pki.tls_section("none")
    ));
    let scram = SaslScramSha256::new("alice", "wonderland").into();
    let stream = tls_stream(broker.amqps, pki.client(None)).await;
    amqp_round_trip(stream, scram, "tls.amqp.scram")
        .await
        .expect("SCRAM-SHA-256 over TLS");
    let plain = SaslProfile::Plain {
        username: "alice".into(),
        password: "wonderland".into(),
    };
    let stream = tls_stream(broker.amqps, pki.client(None)).await;
    amqp_round_trip(stream, plain, "tls.amqp.plain")
        .await
        .expect("PLAIN over TLS");
}

#[tokio::test]
async fn one_tls_port_carries_both_protocols() {
    let pki = Pki::new();
    let broker = Broker::start(&format!("{USERS}{}", pki.tls_section("none")));
    let stream = tls_stream(broker.both_tls, pki.client(None)).await;
    let scram = SaslScramSha256::new("alice", "wonderland").into();
    amqp_round_trip(stream, scram, "both.amqp")
        .await
        .expect("AMQP on the shared TLS port");
    let tls = tls_connect(broker.both_tls, pki.client(None)).expect("TLS handshake");
    let login = [("login", "alice"), ("passcode", "wonderland")];
    let client = tokio::task::spawn_blocking(move || Stomp::connect_over(tls, &login).connected)
        .await
        .unwrap();
    assert_eq!(client.command, "CONNECTED", "{client:?}");
}

#[tokio::test]
async fn plain_is_refused_without_tls_when_passwords_need_it() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}[security]\nlogin_failure_delay = \"10ms\"\nrequire_tls_for_passwords = true\n{}",
        pki.tls_section("none")
    ));
    let tcp = tokio::net::TcpStream::connect(broker.amqp).await.unwrap();
    let (offered, code) = sasl(tcp, "PLAIN", b"\0alice\0wonderland").await;
    assert!(!offered.contains(&"PLAIN".to_owned()), "{offered:?}");
    assert_eq!(code, SaslCode::Auth, "PLAIN tried anyway");
    // SCRAM never sends the password: it still works on the plain port.
    let tcp = tokio::net::TcpStream::connect(broker.amqp).await.unwrap();
    let scram = SaslScramSha256::new("alice", "wonderland").into();
    amqp_round_trip(tcp, scram, "plain.scram")
        .await
        .expect("SCRAM without TLS");
    let tcp = tokio::net::TcpStream::connect(broker.amqp).await.unwrap();
    let plain = SaslProfile::Plain {
        username: "alice".into(),
        password: "wonderland".into(),
    };
    // fe2o3 gives up by itself, PLAIN not being offered.
    assert!(amqp_round_trip(tcp, plain, "plain.plain").await.is_err());
}

/// AMQP 1.0 part 5.2.1: header `AMQP 2 1 0 0`, the same back, then TLS on the same socket.
async fn upgrade(addr: SocketAddr) -> (tokio::net::TcpStream, [u8; 8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"AMQP\x02\x01\x00\x00").await.unwrap();
    let mut answer = [0u8; 8];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut answer))
        .await
        .expect("an answer in time")
        .expect("the broker's header");
    (tcp, answer)
}

#[tokio::test]
async fn amqp_tls_upgrade_on_a_plain_port() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}[security]\nrequire_tls_for_passwords = true\n{}",
        pki.tls_section("none")
    ));
    let (tcp, answer) = upgrade(broker.amqp).await;
    assert_eq!(&answer, b"AMQP\x02\x01\x00\x00");
    let tls = tokio_rustls::TlsConnector::from(pki.client(None))
        .connect(localhost(), tcp)
        .await
        .expect("TLS after the upgrade header");
    // Inside, the usual SASL and AMQP headers; PLAIN is allowed, the bytes being protected.
    let plain = SaslProfile::Plain {
        username: "alice".into(),
        password: "wonderland".into(),
    };
    amqp_round_trip(tls, plain, "upgraded")
        .await
        .expect("PLAIN over the upgraded connection");

    // Without [tls] the upgrade is refused as before: the header we take, then close.
    let plain_broker = Broker::start(USERS);
    let (mut tcp, answer) = upgrade(plain_broker.amqp).await;
    assert_eq!(&answer, b"AMQP\x03\x01\x00\x00");
    let mut rest = [0u8; 16];
    let closed = tokio::time::timeout(WAIT, tokio::io::AsyncReadExt::read(&mut tcp, &mut rest))
        .await
        .expect("closed in time");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
}

#[tokio::test]
async fn external_and_stomp_log_in_by_client_certificate() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}[security]\nlogin_failure_delay = \"10ms\"\n{}",
        pki.tls_section("optional")
    ));
    let alice = pki.client_ca.client("alice", false);
    let mallory = pki.client_ca.client("mallory", false);

    let stream = tls_stream(broker.amqps, pki.client(Some(&alice))).await;
    let (offered, code) = sasl(stream, "EXTERNAL", b"").await;
    assert_eq!(offered.first().map(String::as_str), Some("EXTERNAL"));
    assert_eq!(code, SaslCode::Ok);
    // Naming someone else as the authorization identity is refused.
    let stream = tls_stream(broker.amqps, pki.client(Some(&alice))).await;
    assert_eq!(sasl(stream, "EXTERNAL", b"bob").await.1, SaslCode::Auth);
    // A trusted certificate whose name is no user.
    let stream = tls_stream(broker.amqps, pki.client(Some(&mallory))).await;
    assert_eq!(sasl(stream, "EXTERNAL", b"").await.1, SaslCode::Auth);
    // No certificate: EXTERNAL is not offered, nor accepted.
    let stream = tls_stream(broker.amqps, pki.client(None)).await;
    let (offered, code) = sasl(stream, "EXTERNAL", b"").await;
    assert!(!offered.contains(&"EXTERNAL".to_owned()), "{offered:?}");
    assert_eq!(code, SaslCode::Auth);

    // STOMP: a certificate and no login header logs in as the certificate's user...
    let client = stomp_tls(&broker, pki.client(Some(&alice)), &[]);
    assert_eq!(
        client.connected.command, "CONNECTED",
        "{:?}",
        client.connected
    );
    broker.wait_for_log("tls=true user=\"alice\"");
    let refused = stomp_tls(&broker, pki.client(Some(&mallory)), &[]);
    assert_eq!(refused.connected.command, "ERROR");
    // ...and a login header still logs in with its password.
    let login = [("login", "alice"), ("passcode", "wonderland")];
    let client = stomp_tls(&broker, pki.client(Some(&mallory)), &login);
    assert_eq!(client.connected.command, "CONNECTED");
}

#[test]
fn required_client_certificates_must_be_trusted_and_current() {
    let pki = Pki::new();
    let broker = Broker::start(&format!("{USERS}{}", pki.tls_section("required")));
    let alice = pki.client_ca.client("alice", false);
    let expired = pki.client_ca.client("alice", true);
    let stranger = Ca::new("Someone else's CA").client("alice", false);

    let client = stomp_tls(&broker, pki.client(Some(&alice)), &[]);
    assert_eq!(
        client.connected.command, "CONNECTED",
        "{:?}",
        client.connected
    );
    assert!(tls_refused(broker.stomp_tls, pki.client(None)), "no cert");
    assert!(
        tls_refused(broker.stomp_tls, pki.client(Some(&expired))),
        "expired"
    );
    assert!(
        tls_refused(broker.stomp_tls, pki.client(Some(&stranger))),
        "untrusted"
    );
    broker.wait_for_log("TLS handshake failed");
}

#[test]
fn sighup_reloads_the_certificate_and_a_bad_file_keeps_the_old_one() {
    let pki = Pki::new();
    let broker = Broker::start(&format!("{USERS}{}", pki.tls_section("none")));
    let first = tls_connect(broker.stomp_tls, pki.client(None)).unwrap();
    assert_eq!(served_cn(&first), "weir-one");

    pki.install_server(&pki.server_ca.server("weir-two"));
    broker.hangup();
    broker.wait_for_log("TLS certificates reloaded");
    let second = tls_connect(broker.stomp_tls, pki.client(None)).unwrap();
    assert_eq!(served_cn(&second), "weir-two");

    std::fs::write(pki.path("server.pem"), "not a certificate").unwrap();
    broker.hangup();
    broker.wait_for_log("keeping the previous certificate");
    let third = tls_connect(broker.stomp_tls, pki.client(None)).unwrap();
    assert_eq!(served_cn(&third), "weir-two");
    // The file watcher may have reported the bad file before the signal did.
    let errors = broker.error_lines();
    assert!(!errors.is_empty(), "{errors:?}");
    assert!(
        errors.iter().all(|e| e.contains("server.pem")),
        "{errors:?}"
    );
}

/// The TLS handshake on `addr` as soon as it listens; the name its certificate shows.
fn served_cn_at(addr: SocketAddr, pki: &Pki) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match tls_connect(addr, pki.client(None)) {
            Ok(tls) => return served_cn(&tls),
            Err(e) if Instant::now() > deadline => panic!("no TLS on {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[test]
fn changed_certificate_files_reach_every_tls_listener_without_a_signal() {
    let pki = Pki::new();
    let websocket: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let broker = Broker::start(&format!(
        "{USERS}{}[http]\ntls = true\n[websocket]\nbind = \"{websocket}\"\ntls = true\n",
        pki.tls_section("none")
    ));
    // STOMP, AMQP, both protocols, the management API and WebSocket.
    let listeners = [
        broker.stomp_tls,
        broker.amqps,
        broker.both_tls,
        broker.http,
        websocket,
    ];
    for addr in listeners {
        assert_eq!(served_cn_at(addr, &pki), "weir-one", "{addr}");
    }
    let login = [("login", "alice"), ("passcode", "wonderland")];
    let mut open = stomp_tls(&broker, pki.client(None), &login);
    assert_eq!(open.connected.command, "CONNECTED", "{:?}", open.connected);

    pki.install_server(&pki.server_ca.server("weir-two"));
    broker.wait_for_log("TLS certificates reloaded (the certificate files changed)");
    for addr in listeners {
        assert_eq!(served_cn_at(addr, &pki), "weir-two", "{addr}");
    }

    std::fs::write(pki.path("server.pem"), "not a certificate").unwrap();
    broker.wait_for_log("keeping the previous certificate");
    for addr in listeners {
        assert_eq!(served_cn_at(addr, &pki), "weir-two", "{addr}");
    }
    // The connection made before both changes still works.
    open.send_receipted("reload.open", "still here", &[], "r1");
    open.subscribe("1", "reload.open", "auto");
    assert_eq!(open.recv().expect("MESSAGE").body_text(), "still here");
    // The bad file is reported once, not at every check.
    std::thread::sleep(Duration::from_secs(5));
    let errors = broker.error_lines();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("server.pem"), "{errors:?}");
}

/// Runs `weir serve` to its end; its exit status and what it printed on stderr.
fn failed_start(pki: &Pki, tls: &str) -> (std::process::ExitStatus, String) {
    let config = pki.path("bad.toml");
    std::fs::write(
        &config,
        format!(
            "[broker]\ndata_dir = \"{}\"\n[acceptors]\nstomp = \"127.0.0.1:{}\"\namqp = \"\"\n{tls}",
            pki.path("data").display(),
            free_port()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--log", "warn", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("run weir");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_certificate_or_key_stops_the_start_with_one_line() {
    let pki = Pki::new();
    let section = |cert: &Path, key: &Path| {
        format!(
            "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            cert.display(),
            key.display()
        )
    };
    std::fs::write(
        pki.path("garbage.pem"),
        "-----BEGIN CERTIFICATE-----\n%%%\n",
    )
    .unwrap();
    let other_key = KeyPair::generate().unwrap().serialize_pem();
    std::fs::write(pki.path("other.key"), other_key).unwrap();
    let cases = [
        (
            section(&pki.path("missing.pem"), &pki.path("server.key")),
            "missing.pem",
        ),
        (
            section(&pki.path("garbage.pem"), &pki.path("server.key")),
            "garbage.pem",
        ),
        (
            section(&pki.path("server.pem"), &pki.path("server.pem")),
            "server.pem: no PRIVATE KEY",
        ),
        (
            section(&pki.path("server.pem"), &pki.path("other.key")),
            "other.key",
        ),
    ];
    for (tls, named) in cases {
        let (status, stderr) = failed_start(&pki, &tls);
        assert!(!status.success(), "started with {tls}");
        let lines: Vec<_> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(named), "{named}: {stderr}");
    }
}

/// The management API on HTTPS with the broker's certificate: a client trusting the
/// broker's CA is served and logs in; plain HTTP on that port gets no answer.
#[test]
fn the_management_api_is_served_over_https() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}{}[http]\ntls = true\n",
        pki.tls_section("none")
    ));
    let ca = reqwest::Certificate::from_pem(pki.server_ca.pem().as_bytes()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .timeout(WAIT)
        .build()
        .unwrap();
    let base = format!("https://{}", broker.http);
    let live = client.get(format!("{base}/health/live")).send().unwrap();
    assert_eq!(live.status(), reqwest::StatusCode::OK);
    let described = client
        .get(format!("{base}/api/broker"))
        .basic_auth("alice", Some("wonderland"))
        .send()
        .unwrap();
    assert_eq!(described.status(), reqwest::StatusCode::OK);
    let refused = client
        .get(format!("{base}/api/broker"))
        .basic_auth("alice", Some("looking-glass"))
        .send()
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    let plain = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    assert!(plain
        .get(format!("http://{}/health/live", broker.http))
        .send()
        .is_err());
}

#[test]
fn weir_perf_drives_stomps_and_amqps() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "{USERS}[security]\nlogin_failure_delay = \"10ms\"\nrequire_tls_for_passwords = true\n{}",
        pki.tls_section("optional")
    ));
    let files = pki.perf_files();
    let (ca, cert, key) = files.args();
    let stomps = format!("stomps://{}", broker.stomp_tls);
    let amqps = format!("amqps://{}", broker.amqps);
    let password = ["--login", "alice", "--passcode", "wonderland"];
    let certificate = ["--tls-cert", cert, "--tls-key", key];

    // A password login over each protocol: STOMP with receipts and client acks, AMQP
    // unsettled with ranges of dispositions, then pre-settled.
    let stomp_run = [
        "--url",
        &stomps,
        "--tls-ca",
        ca,
        "--messages",
        "3000",
        "--producers",
        "2",
        "--receipt-every",
        "100",
        "--ack",
        "client",
        "--queue",
        "perf.stomps",
    ];
    common::perf_delivers(&[&stomp_run[..], &password[..]].concat(), 3000);
    let amqp_run = [
        "--url",
        &amqps,
        "--tls-ca",
        ca,
        "--messages",
        "3000",
        "--receipt-every",
        "100",
        "--ack",
        "client",
        "--queue",
        "perf.amqps",
    ];
    common::perf_delivers(&[&amqp_run[..], &password[..]].concat(), 3000);
    common::perf_delivers(
        &[&amqp_run[..], &password[..], &["--amqp-settled"][..]].concat(),
        3000,
    );
    // Bodies larger than a TLS record (16 KiB) and than an AMQP frame (1 MiB).
    common::perf_delivers(
        &[
            &amqp_run[..4],
            &password[..],
            &[
                "--messages",
                "20",
                "--size",
                "1500000",
                "--queue",
                "perf.large",
            ][..],
        ]
        .concat(),
        20,
    );
    // A client certificate and no password: SASL EXTERNAL, and STOMP's certificate login.
    common::perf_delivers(&[&amqp_run[..], &certificate[..]].concat(), 3000);
    common::perf_delivers(&[&stomp_run[..], &certificate[..]].concat(), 3000);
    broker.wait_for_log("tls=true user=\"alice\"");

    // Refusals: a wrong password, a broker certificate from a CA not trusted, the broker's
    // name not in its certificate, a TLS URL without a CA, TLS options on a plain URL.
    let wrong = ["--login", "alice", "--passcode", "queen"];
    let (code, _, stderr) = common::weir_perf(&[&amqp_run[..], &wrong[..]].concat());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("SASL authentication failed"), "{stderr}");
    let (code, _, stderr) = common::weir_perf(&[&stomp_run[..], &wrong[..]].concat());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ERROR"), "{stderr}");
    let clients_ca = pki.path("clients-ca.pem");
    let (code, _, stderr) =
        common::weir_perf(&["--url", &stomps, "--tls-ca", clients_ca.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("TLS handshake"), "{stderr}");
    let (code, _, stderr) = common::weir_perf(&[
        "--url",
        &amqps,
        "--tls-ca",
        ca,
        "--tls-server-name",
        "broker.example",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("TLS handshake"), "{stderr}");
    let (code, _, stderr) = common::weir_perf(&["--url", &stomps]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--tls-ca"), "{stderr}");
    let plain = format!("stomp://{}", broker.stomp);
    let (code, _, stderr) = common::weir_perf(&["--url", &plain, "--tls-ca", ca]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("stomps://"), "{stderr}");
}

/// A listener that requires client certificates, where each login names the user the
/// broker authorizes: `alice` by her certificate (SASL EXTERNAL, STOMP's certificate
/// login), `bob` by SCRAM over the same TLS connection while showing alice's certificate.
/// Each may use only its own addresses, so a run at the other's address is refused.
#[test]
fn weir_perf_logs_in_by_certificate_or_scram_where_certificates_are_required() {
    let pki = Pki::new();
    let bob = ScramCredential::derive(ScramHash::Sha256, "builder", DEFAULT_ITERATIONS).unwrap();
    let alice =
        ScramCredential::derive(ScramHash::Sha512, "wonderland", DEFAULT_ITERATIONS).unwrap();
    let own = |role: &str| {
        format!(
            "send = [\"{role}\"]\nconsume = [\"{role}\"]\ncreate_address = [\"{role}\"]\n\
             create_durable_queue = [\"{role}\"]\n"
        )
    };
    let broker = Broker::start(&format!(
        "[[users]]\nname = \"alice\"\ncredential = \"{alice}\"\nroles = [\"a\"]\n\
         [[users]]\nname = \"bob\"\ncredential = \"{bob}\"\nroles = [\"b\"]\n\
         [security]\nlogin_failure_delay = \"10ms\"\n\
         [security.permissions.\"alice.#\"]\n{}[security.permissions.\"bob.#\"]\n{}{}",
        own("a"),
        own("b"),
        pki.tls_section("required")
    ));
    let files = pki.perf_files();
    let (ca, cert, key) = files.args();
    let amqps = format!("amqps://{}", broker.amqps);
    let stomps = format!("stomps://{}", broker.stomp_tls);
    let run = |url: &str, queue: &str| perf_by_certificate(url, ca, (cert, key), queue, &[]);
    let scram_bob = [
        "--login",
        "bob",
        "--passcode",
        "builder",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
    ];
    let args = |run: &[String], more: &[&'static str]| -> Vec<String> {
        run.iter()
            .cloned()
            .chain(more.iter().map(|s| (*s).to_owned()))
            .collect()
    };
    let delivers = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::perf_delivers(&args, 500);
    };
    // Exit 2, and the broker's refusal names the user it authorized.
    let refused = perf_refused;
    let denied = |user: &str, queue: &str| format!("user '{user}' may not consume at '{queue}'");

    // alice's certificate and no login: SASL EXTERNAL and STOMP's certificate login, as alice.
    delivers(&run(&amqps, "alice.external"));
    delivers(&run(&stomps, "alice.stomp"));
    for url in [&amqps, &stomps] {
        refused(&run(url, "bob.x"), &[&denied("alice", "bob.x")]);
    }
    // The same certificate with a SCRAM login: the SASL user is the one authorized.
    delivers(&args(&run(&amqps, "bob.scram"), &scram_bob));
    refused(
        &args(&run(&amqps, "alice.x"), &scram_bob),
        &["amqp:unauthorized-access", &denied("bob", "alice.x")],
    );
    let scram_alice = [
        "--login",
        "alice",
        "--passcode",
        "wonderland",
        "--sasl-mechanism",
        "SCRAM-SHA-512",
    ];
    delivers(&args(&run(&amqps, "alice.scram"), &scram_alice));
    // STOMP: a login header wins over the certificate too.
    let stomp_bob = ["--login", "bob", "--passcode", "builder"];
    delivers(&args(&run(&stomps, "bob.stomp"), &stomp_bob));
    refused(
        &args(&run(&stomps, "alice.x"), &stomp_bob),
        &[&denied("bob", "alice.x")],
    );
    // A certificate does not stand in for a wrong SCRAM password.
    let wrong = [
        "--login",
        "bob",
        "--passcode",
        "wrong",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
    ];
    refused(
        &args(&run(&amqps, "bob.x"), &wrong),
        &["SASL authentication failed", "SCRAM-SHA-256", "\"bob\""],
    );
    // No certificate: the listener refuses the client, whatever its password.
    let no_cert: Vec<String> = run(&amqps, "bob.x")
        .into_iter()
        .filter(|a| ![cert, key, "--tls-cert", "--tls-key"].contains(&a.as_str()))
        .collect();
    for (url, login) in [(&amqps, &scram_bob[..]), (&stomps, &stomp_bob[..])] {
        let mut no_cert = no_cert.clone();
        no_cert[1] = url.to_string();
        refused(&args(&no_cert, login), &["CertificateRequired"]);
    }
}

/// `weir perf --sasl-mechanism EXTERNAL` where client certificates are required: the
/// broker logs the run in as the `[[users]]` entry the certificate names, whose
/// permissions then hold (alice may consume at `feed.*` but not send there); a
/// certificate naming no user, one from a CA the broker does not trust, and an
/// authorization identity naming another user are each refused, exiting 2 with the reason.
#[test]
fn weir_perf_external_logs_in_as_the_certificate_user_and_its_permissions_hold() {
    let pki = Pki::new();
    let broker = Broker::start(&format!(
        "[[users]]\nname = \"alice\"\npassword = \"wonderland\"\nroles = [\"a\"]\n[[users]]\nname = \"bob\"\npassword = \"builder\"\n\
         [security]\nlogin_failure_delay = \"10ms\"\n\
         [security.permissions.\"alice.#\"]\nsend = [\"a\"]\nconsume = [\"a\"]\n\
         create_address = [\"a\"]\ncreate_durable_queue = [\"a\"]\n\
         [security.permissions.\"feed.#\"]\nconsume = [\"a\"]\n\
         create_address = [\"a\"]\ncreate_durable_queue = [\"a\"]\n{}",
        pki.tls_section("required")
    ));
    let files = pki.perf_files();
    let (ca, alice_cert, alice_key) = files.args();
    let (carol_cert, carol_key) = pki.client_files("carol", &pki.client_ca.client("carol", false));
    let stranger = Ca::new("Someone else's CA").client("alice", false);
    let (stranger_cert, stranger_key) = pki.client_files("stranger", &stranger);
    let amqps = format!("amqps://{}", broker.amqps);
    let stomps = format!("stomps://{}", broker.stomp_tls);
    let run = |url: &str, cert: &str, key: &str, queue: &str, more: &[&str]| {
        perf_by_certificate(url, ca, (cert, key), queue, more)
    };
    fn as_strs(args: &[String]) -> Vec<&str> {
        args.iter().map(String::as_str).collect()
    }
    let refused = perf_refused;
    let external = ["--sasl-mechanism", "EXTERNAL"];

    // EXTERNAL asked for by name, and STOMP's certificate login: both as alice.
    let delivered = run(&amqps, alice_cert, alice_key, "alice.external", &external);
    common::perf_delivers(&as_strs(&delivered), 500);
    broker.wait_for_log("mechanism=\"EXTERNAL\" tls=true");
    let delivered = run(&stomps, alice_cert, alice_key, "alice.stomp", &[]);
    common::perf_delivers(&as_strs(&delivered), 500);
    // The authorization identity may name the certificate's own user, and no other.
    let own = [&external[..], &["--login", "alice"][..]].concat();
    let delivered = run(&amqps, alice_cert, alice_key, "alice.authzid", &own);
    common::perf_delivers(&as_strs(&delivered), 500);
    let other = [&external[..], &["--login", "bob"][..]].concat();
    refused(
        &run(&amqps, alice_cert, alice_key, "alice.x", &other),
        &["SASL authentication failed", "EXTERNAL", "\"bob\""],
    );

    // alice may consume at feed.in but not send there: her consumers attach, and her
    // producers are refused with the broker's reason, over either protocol.
    let no_send = "user 'alice' may not send at 'feed.in'";
    refused(
        &run(&amqps, alice_cert, alice_key, "feed.in", &external),
        &["amqp:unauthorized-access", no_send],
    );
    refused(
        &run(&stomps, alice_cert, alice_key, "feed.in", &[]),
        &[no_send],
    );

    // carol's certificate is signed by the trusted CA, but no [[users]] entry is carol.
    refused(
        &run(&amqps, &carol_cert, &carol_key, "alice.x", &external),
        &["SASL authentication failed", "EXTERNAL"],
    );
    refused(
        &run(&stomps, &carol_cert, &carol_key, "alice.x", &[]),
        &["ERROR", "not a configured user"],
    );
    // A certificate naming alice from a CA the broker does not trust: refused in the
    // TLS handshake, before any login.
    for url in [&amqps, &stomps] {
        refused(
            &run(url, &stranger_cert, &stranger_key, "alice.x", &[]),
            &["UnknownCA"],
        );
    }
    broker.wait_for_log("TLS handshake failed");

    // EXTERNAL needs a certificate to show, and sends no password.
    let (code, _, stderr) = common::weir_perf(&[
        "--url",
        &amqps,
        "--tls-ca",
        ca,
        "--sasl-mechanism",
        "EXTERNAL",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--tls-cert"), "{stderr}");
    let with_password = [
        &external[..],
        &["--login", "alice", "--passcode", "wonderland"][..],
    ]
    .concat();
    refused(
        &run(&amqps, alice_cert, alice_key, "alice.x", &with_password),
        &["--passcode"],
    );
}

/// `weir perf --logins` names the mechanism its logins used, not the one its flags
/// suggest: with alice's certificate and no `--sasl-mechanism`, EXTERNAL where the
/// listener asks for certificates, ANONYMOUS where it asks for none (the client then
/// shows none, and the broker offers no EXTERNAL, so the client falls back).
#[test]
fn weir_perf_logins_report_the_mechanism_the_logins_used() {
    let pki = Pki::new();
    let files = pki.perf_files();
    let (ca, cert, key) = files.args();
    for (client_auth, used) in [("optional", "EXTERNAL"), ("none", "ANONYMOUS")] {
        let broker = Broker::start(&format!(
            "[[users]]\nname = \"alice\"\npassword = \"wonderland\"\n\
             [security]\nallow_anonymous = true\n{}",
            pki.tls_section(client_auth)
        ));
        let amqps = format!("amqps://{}", broker.amqps);
        // Only the certificate flags: --logins measures logins and takes no --messages.
        let mut args = certificate_flags(&amqps, ca, (cert, key));
        args.extend(["--logins".to_owned(), "3".to_owned()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, json, stderr) = common::weir_perf(&args);
        assert_eq!(code, Some(0), "{client_auth}: {json} {stderr}");
        assert!(
            json.contains(&format!("\"mechanism\":\"{used}\"")),
            "client_auth {client_auth}: {json}"
        );
    }
}

/// `weir perf` arguments for 500 receipted messages to `queue` over `url`,
/// trusting `ca` and presenting the client certificate `(cert, key)`, then `more`.
fn perf_by_certificate(
    url: &str,
    ca: &str,
    certificate: (&str, &str),
    queue: &str,
    more: &[&str],
) -> Vec<String> {
    let mut args = certificate_flags(url, ca, certificate);
    args.extend(
        [
            "--messages",
            "500",
            "--receipt-every",
            "50",
            "--queue",
            queue,
        ]
        .iter()
        .chain(more)
        .map(|s| (*s).to_owned()),
    );
    args
}

/// `weir perf` flags that reach `url` trusting `ca` and presenting `(cert, key)`.
fn certificate_flags(url: &str, ca: &str, (cert, key): (&str, &str)) -> Vec<String> {
    [
        "--url",
        url,
        "--tls-ca",
        ca,
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Runs `weir perf` with `args`: it must exit 2 with each of `words` in its stderr.
fn perf_refused(args: &[String], words: &[&str]) {
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, json, stderr) = common::weir_perf(&strs);
    assert_eq!(code, Some(2), "{args:?}: {json} {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{args:?}: no {word:?} in {stderr}");
    }
}
