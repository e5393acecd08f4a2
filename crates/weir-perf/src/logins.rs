//! `weir perf --logins N`: the cost of a login. N connections one after another, each
//! connecting (and TLS, with amqps:// or stomps://), logging in (AMQP: SASL with the
//! chosen mechanism, open, begin; STOMP: CONNECT with login and passcode) and closing;
//! one JSON line with logins per second and the time of one login.

use super::args::{Endpoint, PerfArgs, Protocol};
use super::client::stomp::Login;
use super::client::{amqp, stomp};
use super::error::PerfError;
use super::stats::{self, q};
use super::transport::Peer;
use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::time::Instant;

/// What a login run measured.
#[derive(Debug)]
pub struct LoginSummary {
    /// `PLAIN`, `SCRAM-SHA-256`, …, `ANONYMOUS`, `EXTERNAL`, or `STOMP` for CONNECT.
    pub mechanism: String,
    pub logins: u64,
    pub seconds: f64,
    /// Microseconds from connect to the broker's answer to our close.
    pub latency: Histogram<u64>,
}

impl LoginSummary {
    pub fn logins_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.logins as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn to_json(&self) -> String {
        let h = &self.latency;
        let mut out = String::with_capacity(256);
        let _ = write!(
            out,
            "{{\"mode\":\"logins\",\"mechanism\":\"{}\",\"logins\":{},\"seconds\":{:.3},\
             \"logins_per_sec\":{:.1},\"login_us\":{{\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}}}}",
            self.mechanism,
            self.logins,
            self.seconds,
            self.logins_per_sec(),
            q(h, 0.5),
            q(h, 0.9),
            q(h, 0.99),
            h.max()
        );
        out
    }
}

/// Opens `count` connections in turn, each logging in and closing; the first error
/// (a refused login included) ends the run.
pub async fn run(
    args: &PerfArgs,
    endpoint: &Endpoint,
    peer: &Peer,
    login: &Login,
    count: u64,
) -> Result<LoginSummary, PerfError> {
    // What the logins used, not what the flags suggest: without --sasl-mechanism
    // the broker's offer decides (EXTERNAL or ANONYMOUS for a client certificate).
    let mut mechanism = match endpoint.protocol {
        Protocol::Stomp => "STOMP",
        Protocol::Amqp => "",
    };
    let mut latency = stats::histogram()?;
    let start = Instant::now();
    let mut last_line = start;
    for done in 0..count {
        let began = Instant::now();
        match endpoint.protocol {
            Protocol::Amqp => mechanism = amqp::login_once(peer, login).await?,
            Protocol::Stomp => stomp::login_once(peer, login).await?,
        }
        let _ = latency.record(began.elapsed().as_micros().max(1) as u64);
        if !args.json_only && last_line.elapsed().as_secs() >= 1 {
            last_line = Instant::now();
            let seconds = start.elapsed().as_secs_f64();
            eprintln!(
                "{:>6.1}s logins {:>8} ({:.1}/s) p50 {} us",
                seconds,
                done + 1,
                (done + 1) as f64 / seconds,
                q(&latency, 0.5)
            );
        }
    }
    Ok(LoginSummary {
        mechanism: mechanism.to_owned(),
        logins: count,
        seconds: start.elapsed().as_secs_f64(),
        latency,
    })
}
