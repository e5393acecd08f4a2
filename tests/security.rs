//! Logins over real sockets: SCRAM with an independent client (fe2o3-amqp), passwords
//! checked against stored SCRAM credentials, and the delay before a refusal.

mod common;

use common::{BrokerProcess, Stomp};
use fe2o3_amqp::connection::OpenError;
use fe2o3_amqp::sasl_profile::{SaslProfile, SaslScramSha256, SaslScramSha512};
use fe2o3_amqp::types::sasl::SaslCode;
use fe2o3_amqp::Connection;
use std::time::{Duration, Instant};
use weir::core::security::{ScramCredential, ScramHash, DEFAULT_ITERATIONS};

const DELAY: Duration = Duration::from_millis(300);

/// `alice` stored as a SHA-256 credential, `carol` as SHA-512, `bob` in plain text.
fn config() -> String {
    let cred = |hash, pw| ScramCredential::derive(hash, pw, DEFAULT_ITERATIONS).unwrap();
    format!(
        "[security]\nlogin_failure_delay = \"300ms\"\n\
         [[users]]\nname = \"alice\"\ncredential = \"{}\"\n\
         [[users]]\nname = \"carol\"\ncredential = \"{}\"\n\
         [[users]]\nname = \"bob\"\npassword = \"builder\"\n",
        cred(ScramHash::Sha256, "wonderland"),
        cred(ScramHash::Sha512, "christmas"),
    )
}

async fn open(broker: &BrokerProcess, profile: SaslProfile) -> Result<(), OpenError> {
    let addr = broker.amqp.expect("broker started with AMQP");
    let mut connection = Connection::builder()
        .container_id("weir-security-test")
        .sasl_profile(profile)
        .open(format!("amqp://{addr}").as_str())
        .await?;
    let _ = connection.close().await;
    Ok(())
}

fn assert_auth_refused(result: Result<(), OpenError>) {
    match result {
        Err(OpenError::SaslError { code, .. }) => assert_eq!(code, SaslCode::Auth),
        Err(other) => panic!("expected a SASL auth outcome, got {other:?}"),
        Ok(()) => panic!("the login was accepted"),
    }
}

#[tokio::test]
async fn scram_logs_in_with_stored_and_plain_text_users() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(&config()));
    // fe2o3 checks our server signature: it fails the open if we do not hold the credential.
    open(&broker, SaslScramSha256::new("alice", "wonderland").into())
        .await
        .expect("SCRAM-SHA-256 with a stored credential");
    open(&broker, SaslScramSha512::new("carol", "christmas").into())
        .await
        .expect("SCRAM-SHA-512 with a stored credential");
    open(&broker, SaslScramSha512::new("bob", "builder").into())
        .await
        .expect("SCRAM-SHA-512 with a plain-text password");
    open(&broker, SaslScramSha256::new("bob", "builder").into())
        .await
        .expect("SCRAM-SHA-256 with a plain-text password");
    let plain = SaslProfile::Plain {
        username: "alice".into(),
        password: "wonderland".into(),
    };
    open(&broker, plain)
        .await
        .expect("PLAIN against a SCRAM credential");
}

#[tokio::test]
async fn scram_refuses_wrong_passwords_unknown_users_and_other_hashes_after_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(&config()));
    for profile in [
        SaslScramSha256::new("alice", "wonderlant").into(),
        SaslScramSha256::new("nobody", "wonderland").into(),
        // alice has only a SHA-256 credential.
        SaslScramSha512::new("alice", "wonderland").into(),
        SaslProfile::Plain {
            username: "alice".into(),
            password: "nope".into(),
        },
    ] {
        let started = Instant::now();
        assert_auth_refused(open(&broker, profile).await);
        assert!(started.elapsed() >= DELAY, "refused before the delay");
    }
    // With users configured, ANONYMOUS is not even offered.
    assert!(open(&broker, SaslProfile::Anonymous).await.is_err());
}

#[test]
fn stomp_passcodes_are_checked_against_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(&dir.path().join("data"), Some(&config()));
    for (login, passcode) in [
        ("alice", "wonderland"),
        ("carol", "christmas"),
        ("bob", "builder"),
    ] {
        let ok = Stomp::connect(broker.stomp, &[("login", login), ("passcode", passcode)]);
        assert_eq!(ok.connected.command, "CONNECTED", "{login}");
    }
    for (login, passcode) in [("alice", "christmas"), ("nobody", "x"), ("", "")] {
        let started = Instant::now();
        let bad = Stomp::connect(broker.stomp, &[("login", login), ("passcode", passcode)]);
        assert_eq!(bad.connected.command, "ERROR", "{login}");
        assert!(started.elapsed() >= DELAY, "refused before the delay");
    }
}

/// Sends one SASL frame (type 1) whose body is `performative` with a list8 of `fields`.
fn sasl_frame(descriptor: u8, fields: &[u8], count: u8) -> Vec<u8> {
    let mut body = vec![
        0x00,
        0x53,
        descriptor,
        0xc0,
        (fields.len() + 1) as u8,
        count,
    ];
    body.extend_from_slice(fields);
    let mut frame = ((body.len() + 8) as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&[2, 1, 0, 0]);
    frame.extend_from_slice(&body);
    frame
}

/// Reads one frame's body.
fn read_frame(stream: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("frame size");
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize - 4];
    stream.read_exact(&mut rest).expect("frame");
    rest.split_off(4)
}

/// A client that breaks the SCRAM rules by hand gets the `auth` outcome, not a hang or a
/// silent close, and the connection ends after it.
#[test]
fn broken_scram_exchanges_get_the_auth_outcome() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(&config()));
    let addr = broker.amqp.expect("AMQP listener");
    for client_first in [
        &b"p=tls-unique,,n=alice,r=abc"[..],
        b"n,,n=alice",
        b"n,,r=abc",
        b"\xff\xfe",
    ] {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"AMQP\x03\x01\x00\x00").unwrap();
        let mut header = [0u8; 8];
        s.read_exact(&mut header).unwrap();
        assert_eq!(&header, b"AMQP\x03\x01\x00\x00");
        let mechanisms = read_frame(&mut s);
        assert!(mechanisms.windows(13).any(|w| w == b"SCRAM-SHA-256"));
        let mut fields = vec![0xa3, 13];
        fields.extend_from_slice(b"SCRAM-SHA-256");
        fields.extend_from_slice(&[0xa0, client_first.len() as u8]);
        fields.extend_from_slice(client_first);
        s.write_all(&sasl_frame(0x41, &fields, 2)).unwrap();
        let started = Instant::now();
        let outcome = read_frame(&mut s);
        assert!(started.elapsed() >= DELAY, "refused before the delay");
        assert_eq!(&outcome[..3], &[0x00, 0x53, 0x44], "sasl-outcome");
        let code_at = match outcome[3] {
            0xc0 => 6,
            0xd0 => 12,
            other => panic!("unexpected list encoding {other:#x}"),
        };
        assert_eq!(&outcome[code_at..code_at + 2], &[0x50, 1], "code auth");
        let mut rest = Vec::new();
        assert_eq!(
            s.read_to_end(&mut rest).unwrap(),
            0,
            "closed after the outcome"
        );
    }
}
