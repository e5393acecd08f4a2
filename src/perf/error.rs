//! Errors of the load generator and the sink.

use crate::protocol::stomp::StompError;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("STOMP: {0}")]
    Stomp(#[from] StompError),
    #[error("the broker answered ERROR: {0}")]
    Broker(String),
    #[error("the broker closed the connection")]
    Closed,
    #[error("unexpected {0} frame from the broker")]
    Unexpected(&'static str),
    #[error("no answer from the broker within {0} s")]
    Timeout(u64),
    #[error("bad --url {0:?}: expected stomp://host:port")]
    BadUrl(String),
    #[error("{0}:// is not supported yet (STOMP only; AMQP 1.0 comes with the AMQP issue)")]
    UnsupportedScheme(String),
    #[error("bad argument {flag}: {why}")]
    BadArg {
        flag: &'static str,
        why: &'static str,
    },
}
