//! Errors of the load generator and the sink.

use crate::client::amqp::ScramError;
use std::io;
use std::path::PathBuf;
use weir_wire::amqp::AmqpCodecError;
use weir_wire::stomp::StompError;

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("STOMP: {0}")]
    Stomp(#[from] StompError),
    #[error("AMQP: {0}")]
    Amqp(#[from] AmqpCodecError),
    #[error("SASL authentication failed: the broker answered {outcome} to {mechanism} as {user}")]
    AuthFailed {
        mechanism: &'static str,
        /// The user, quoted, or how we logged in without one.
        user: String,
        outcome: &'static str,
    },
    #[error("SASL: the broker offers no mechanism we can use here (it offers {offered}; give --login/--passcode, or --tls-cert for EXTERNAL)")]
    NoMechanism { offered: String },
    #[error("SASL: the broker does not offer {wanted} (it offers {offered})")]
    MechanismNotOffered {
        wanted: &'static str,
        offered: String,
    },
    #[error("SASL {mechanism}: {source}")]
    Scram {
        mechanism: &'static str,
        source: ScramError,
    },
    #[error("the broker answered ERROR: {0}")]
    Broker(String),
    #[error("the broker closed the connection")]
    Closed,
    #[error("unexpected {0} frame from the broker")]
    Unexpected(&'static str),
    #[error("no answer from the broker within {0} s")]
    Timeout(u64),
    #[error("bad --url {0:?}: expected stomp://, stomps://, amqp:// or amqps:// and host:port")]
    BadUrl(String),
    #[error("{0}:// is not supported (stomp://, stomps://, amqp:// or amqps://)")]
    UnsupportedScheme(String),
    #[error("TLS: {}: {why}", path.display())]
    Tls { path: PathBuf, why: String },
    #[error("TLS handshake with {0} failed: {1}")]
    TlsHandshake(String, io::Error),
    #[error("bad argument {flag}: {why}")]
    BadArg {
        flag: &'static str,
        why: &'static str,
    },
}
