//! The `weir perf` command line.

use super::error::PerfError;
use clap::{Args, ValueEnum};

/// `weir perf`: drive a broker with producers and consumers and report
/// throughput, latency, lateness of delayed messages, and any lost message or
/// broken group order. Exits non-zero on a violation or a lost message.
#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// Broker to drive: stomp://host:port or amqp://host:port (AMQP 1.0); stomps:// and
    /// amqps:// for the same over TLS (then --tls-ca is needed).
    #[arg(long, default_value = "stomp://127.0.0.1:61613")]
    pub url: String,
    /// TLS: PEM file of the CA(s) that signed the broker's certificate (the only ones trusted).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// TLS: a client certificate chain (PEM) to show the broker, with --tls-key. With no
    /// --login, AMQP then logs in with SASL EXTERNAL when the broker offers it.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS: the private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// TLS: the name the broker's certificate must carry (default: the URL's host).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Producer connections.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    /// Consumer connections (0: only send).
    #[arg(long, default_value_t = 1)]
    pub consumers: u32,
    /// Messages to send in total (split over the producers). Default 100000
    /// unless --duration is given.
    #[arg(long, conflicts_with = "duration")]
    pub messages: Option<u64>,
    /// Send for this many seconds instead of a message count.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Body size in bytes.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
    /// Fixed total send rate (messages/s); latency is then measured from each
    /// message's scheduled send time, so a stalled broker cannot hide its
    /// stall (no coordinated omission).
    #[arg(long, value_name = "MSGS_PER_SEC")]
    pub rate: Option<f64>,
    /// Send with persistent:true.
    #[arg(long)]
    pub persistent: bool,
    /// Queue name (sent as /queue/NAME).
    #[arg(long, default_value = "perf")]
    pub queue: String,
    /// Use /topic/NAME instead of a queue: every consumer gets every message.
    #[arg(long, value_name = "NAME", conflicts_with = "queue")]
    pub topic: Option<String>,
    /// Round-robin JMSXGroupID over this many groups, and check that no group
    /// was split across consumers and that each group's order held.
    #[arg(long, default_value_t = 0)]
    pub groups: u32,
    /// Delay each message by this many ms (AMQ_SCHEDULED_DELAY); reports
    /// lateness = receive time - due time.
    #[arg(long, value_name = "MS")]
    pub delay_ms: Option<u64>,
    /// Acknowledgement mode of the consumers (AMQP: auto receives pre-settled,
    /// client and individual settle with `accepted`, in ranges).
    #[arg(long, value_enum, default_value_t = AckMode::Auto)]
    pub ack: AckMode,
    /// Consumer prefetch in messages, sent in the header the broker named in
    /// CONNECTED reads (prefetch, prefetch-count, activemq.prefetchSize, or
    /// Artemis's consumer-window-size in bytes). AMQP: the link credit.
    #[arg(long, default_value_t = 1000)]
    pub prefetch: u32,
    /// A producer asks a receipt every K sends and waits for it (flow control).
    /// AMQP: at most K unsettled sends in flight (a window).
    #[arg(long, value_name = "K", default_value_t = 500)]
    pub receipt_every: u64,
    /// AMQP: producers send pre-settled (fire and forget, no dispositions).
    #[arg(long)]
    pub amqp_settled: bool,
    /// User to log in as: STOMP login header; AMQP SASL PLAIN unless
    /// --sasl-mechanism says otherwise. With no login: EXTERNAL with a client
    /// certificate, else ANONYMOUS.
    #[arg(long, visible_alias = "user")]
    pub login: Option<String>,
    /// Password of --login: the STOMP passcode header, SASL PLAIN
    /// or SCRAM.
    #[arg(long, visible_alias = "password")]
    pub passcode: Option<String>,
    /// AMQP: the SASL mechanism (default PLAIN with --login). SCRAM-SHA-256 and
    /// SCRAM-SHA-512 never send the password and check the broker's signature;
    /// EXTERNAL logs in as the user of --tls-cert (--login, if given, is sent as the
    /// authorization identity). The run stops if the broker does not offer the mechanism.
    #[arg(long, value_enum, ignore_case = true)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// Instead of a load run, open N connections one after another, each logging in
    /// (AMQP: SASL, open, begin; STOMP: CONNECT) and closing, and report logins per
    /// second and the time of one login.
    #[arg(long, value_name = "N", conflicts_with_all = ["messages", "duration", "sink_stomp", "sink_amqp"])]
    pub logins: Option<u64>,
    /// STOMP host header (the virtual host; RabbitMQ wants "/").
    #[arg(long, default_value = "/")]
    pub vhost: String,
    /// Per-message processing time in a consumer (head-of-line benchmarks).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub consumer_delay_ms: u64,
    /// How long to wait for outstanding messages after the producers finish
    /// (on top of --delay-ms) before counting them lost.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub drain_timeout: f64,
    /// Print only the final JSON line (no progress lines).
    #[arg(long)]
    pub json_only: bool,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Instead of a load run, serve a STOMP relay on ADDR: it only cuts frames,
    /// answers CONNECTED and RECEIPTs and forwards each SEND as a MESSAGE to a
    /// subscriber of the destination (no queue, no storage). Driven by
    /// `weir perf` it shows what the machine can do. May be given with
    /// --sink-amqp: both relays then run in this process.
    #[arg(long, value_name = "ADDR")]
    pub sink_stomp: Option<String>,
    /// Instead of a load run, serve an AMQP 1.0 relay on ADDR: it answers SASL
    /// (ANONYMOUS, or PLAIN with any credentials), mirrors attaches, and
    /// forwards each transfer, undecoded, to one receiver link of the same
    /// address within its credit (no queue, no storage; unsettled sends are
    /// accepted once relayed). The ceiling for the AMQP runs.
    #[arg(long, value_name = "ADDR")]
    pub sink_amqp: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AckMode {
    Auto,
    /// Cumulative ACK of the latest message.
    Client,
    /// One ACK per message (STOMP client-individual).
    Individual,
}

impl AckMode {
    pub fn stomp_header(self) -> &'static str {
        match self {
            AckMode::Auto => "auto",
            AckMode::Client => "client",
            AckMode::Individual => "client-individual",
        }
    }
}

/// A SASL mechanism `weir perf` can be told to log in with: by user and password, or
/// (EXTERNAL) by the client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanism {
    #[value(name = "PLAIN")]
    Plain,
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
    #[value(name = "EXTERNAL")]
    External,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::External => "EXTERNAL",
        }
    }
}

/// The protocol a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Stomp,
    Amqp,
}

/// Where to connect: protocol, host:port, and whether over TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub protocol: Protocol,
    pub authority: String,
    pub tls: bool,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, PerfError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| PerfError::BadUrl(url.to_owned()))?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
            return Err(PerfError::BadUrl(url.to_owned()));
        }
        let (protocol, tls) = match scheme {
            "stomp" | "tcp" => (Protocol::Stomp, false),
            "stomps" => (Protocol::Stomp, true),
            "amqp" => (Protocol::Amqp, false),
            "amqps" => (Protocol::Amqp, true),
            other => return Err(PerfError::UnsupportedScheme(other.to_owned())),
        };
        Ok(Endpoint {
            protocol,
            authority: authority.to_owned(),
            tls,
        })
    }
}

/// Where messages go: a queue (one consumer gets each) or a topic (all do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Queue(String),
    Topic(String),
}

impl Destination {
    pub fn from_args(args: &PerfArgs) -> Result<Destination, PerfError> {
        let (name, topic) = match &args.topic {
            Some(t) => (t.as_str(), true),
            None => (args.queue.as_str(), false),
        };
        // The name goes into headers unescaped: keep it to what needs no escape.
        if name.is_empty()
            || name
                .bytes()
                .any(|b| matches!(b, b':' | b'\\' | b'\r' | b'\n' | 0))
        {
            return Err(PerfError::BadArg {
                flag: "--queue/--topic",
                why: "empty, or holds ':', '\\', CR, LF or NUL",
            });
        }
        Ok(if topic {
            Destination::Topic(name.to_owned())
        } else {
            Destination::Queue(name.to_owned())
        })
    }

    pub fn is_topic(&self) -> bool {
        matches!(self, Destination::Topic(_))
    }

    pub fn stomp(&self) -> String {
        match self {
            Destination::Queue(n) => format!("/queue/{n}"),
            Destination::Topic(n) => format!("/topic/{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(protocol: Protocol, authority: &str, tls: bool) -> Option<Endpoint> {
        Some(Endpoint {
            protocol,
            authority: authority.to_owned(),
            tls,
        })
    }

    #[test]
    fn parses_stomp_and_amqp_urls_and_refuses_others() {
        assert_eq!(
            Endpoint::parse("stomp://127.0.0.1:61613").ok(),
            endpoint(Protocol::Stomp, "127.0.0.1:61613", false)
        );
        assert_eq!(
            Endpoint::parse("stomp://localhost:1/").ok(),
            endpoint(Protocol::Stomp, "localhost:1", false)
        );
        assert_eq!(
            Endpoint::parse("amqp://h:5672").ok(),
            endpoint(Protocol::Amqp, "h:5672", false)
        );
        assert_eq!(
            Endpoint::parse("stomps://h:61614").ok(),
            endpoint(Protocol::Stomp, "h:61614", true)
        );
        assert_eq!(
            Endpoint::parse("amqps://h:5671").ok(),
            endpoint(Protocol::Amqp, "h:5671", true)
        );
        assert!(matches!(
            Endpoint::parse("http://h:5671"),
            Err(PerfError::UnsupportedScheme(_))
        ));
        assert!(Endpoint::parse("127.0.0.1:61613").is_err());
        assert!(Endpoint::parse("stomp://host").is_err());
        assert!(Endpoint::parse("stomp://h:1/x").is_err());
    }
}
