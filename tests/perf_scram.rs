//! `weir perf` logging in to a whole broker whose users are SCRAM credentials: AMQP runs
//! with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 deliver everything; a wrong password, a
//! hash the user's credential was not made with, a mechanism without a user, or a
//! mechanism on STOMP stop it with exit 2 and a message that says so; STOMP logs in with
//! the same --user/--password; `--logins N` counts N logins.

mod common;

use common::BrokerProcess;
use weir::core::security::{ScramCredential, ScramHash, DEFAULT_ITERATIONS};

const PASSWORD_256: &str = "sha-256 secret";
const PASSWORD_512: &str = "sha-512 sécret";

/// Two users, one credential each (as `weir user add` prints them), and a short delay
/// for refused logins so the negative cases stay quick.
fn config() -> String {
    let c256 = ScramCredential::derive(ScramHash::Sha256, PASSWORD_256, DEFAULT_ITERATIONS)
        .expect("derive SHA-256 credential");
    let c512 = ScramCredential::derive(ScramHash::Sha512, PASSWORD_512, DEFAULT_ITERATIONS)
        .expect("derive SHA-512 credential");
    format!(
        "[[users]]\nname = \"s256\"\ncredential = \"{c256}\"\n\
         [[users]]\nname = \"s512\"\ncredential = \"{c512}\"\n\
         [security]\nlogin_failure_delay = \"10ms\"\n"
    )
}

/// Exit 2 with every one of `words` in the error line.
fn refused(args: &[&str], words: &[&str]) {
    let (code, json, stderr) = common::weir_perf(args);
    assert_eq!(code, Some(2), "{args:?}: {json} {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{args:?}: no {word:?} in {stderr}");
    }
}

#[test]
fn weir_perf_logs_in_with_plain_and_scram_and_reports_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with_amqp(&dir.path().join("data"), Some(&config()));
    let amqp = format!("amqp://{}", broker.amqp.unwrap());
    let stomp = format!("stomp://{}", broker.stomp);
    let run = |url: &str, queue: &str| {
        [
            "--url".to_owned(),
            url.to_owned(),
            "--messages".to_owned(),
            "500".to_owned(),
            "--receipt-every".to_owned(),
            "50".to_owned(),
            "--queue".to_owned(),
            queue.to_owned(),
        ]
    };

    // Each mechanism, with a user whose credential it can use (PLAIN: either).
    for (user, password, mechanism) in [
        ("s256", PASSWORD_256, "PLAIN"),
        ("s512", PASSWORD_512, "PLAIN"),
        ("s256", PASSWORD_256, "SCRAM-SHA-256"),
        ("s512", PASSWORD_512, "scram-sha-512"),
    ] {
        let base = run(&amqp, &format!("perf.{user}.{mechanism}"));
        let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
        args.extend([
            "--user",
            user,
            "--password",
            password,
            "--sasl-mechanism",
            mechanism,
        ]);
        common::perf_delivers(&args, 500);
    }
    // STOMP: the same users through login and passcode.
    let base = run(&stomp, "perf.stomp");
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.extend(["--user", "s512", "--password", PASSWORD_512]);
    common::perf_delivers(&args, 500);

    // A wrong password, for each mechanism: the broker's outcome `auth`, named.
    let base = run(&amqp, "perf.refused");
    let amqp_args: Vec<&str> = base.iter().map(String::as_str).collect();
    for (user, mechanism) in [
        ("s256", "PLAIN"),
        ("s256", "SCRAM-SHA-256"),
        ("s512", "SCRAM-SHA-512"),
    ] {
        let mut args = amqp_args.clone();
        args.extend([
            "--user",
            user,
            "--password",
            "wrong",
            "--sasl-mechanism",
            mechanism,
        ]);
        refused(
            &args,
            &[
                "SASL authentication failed",
                mechanism,
                &format!("\"{user}\""),
                "auth (wrong user or password)",
            ],
        );
    }
    // The right password with a hash the credential was not made with: refused too.
    let mut args = amqp_args.clone();
    args.extend([
        "--user",
        "s256",
        "--password",
        PASSWORD_256,
        "--sasl-mechanism",
        "SCRAM-SHA-512",
    ]);
    refused(&args, &["SASL authentication failed", "SCRAM-SHA-512"]);
    // A password mechanism with no user to log in as stops before connecting.
    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        refused(
            &["--url", &amqp, "--sasl-mechanism", mechanism],
            &["--sasl-mechanism", "need --login"],
        );
    }
    // STOMP: a wrong passcode is the broker's ERROR; a SASL mechanism is not STOMP's.
    let base = run(&stomp, "perf.refused");
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.extend(["--user", "s256", "--password", "wrong"]);
    refused(&args, &["ERROR", "authentication failed"]);
    args.extend(["--sasl-mechanism", "PLAIN"]);
    refused(&args, &["--sasl-mechanism", "AMQP only"]);

    // --logins: that many logins, one after another, each with the SCRAM exchange.
    let (code, json, stderr) = common::weir_perf(&[
        "--url",
        &amqp,
        "--logins",
        "25",
        "--user",
        "s512",
        "--password",
        PASSWORD_512,
        "--sasl-mechanism",
        "SCRAM-SHA-512",
    ]);
    assert_eq!(code, Some(0), "{json} {stderr}");
    assert!(
        json.starts_with("{\"mode\":\"logins\",\"mechanism\":\"SCRAM-SHA-512\",\"logins\":25,"),
        "{json}"
    );
    let (code, json, stderr) = common::weir_perf(&[
        "--url",
        &stomp,
        "--logins",
        "25",
        "--user",
        "s256",
        "--password",
        PASSWORD_256,
    ]);
    assert_eq!(code, Some(0), "{json} {stderr}");
    assert!(
        json.contains("\"mechanism\":\"STOMP\",\"logins\":25,"),
        "{json}"
    );
    // A refused login ends a --logins run with the same error.
    refused(
        &[
            "--url",
            &amqp,
            "--logins",
            "3",
            "--user",
            "s512",
            "--password",
            "wrong",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
        ],
        &["SASL authentication failed", "SCRAM-SHA-512"],
    );
}
