//! The relay ceilings: `weir perf --sink-stomp` and `--sink-amqp` serve
//! endpoints that only cut frames and forward each message to a consumer of
//! its destination, with no queue and no storage. Driven by `weir perf`, they
//! show what a broker could reach on this machine if it did nothing but move
//! frames.

pub mod amqp;
pub mod stomp;

use super::error::PerfError;
use std::net::SocketAddr;

/// Serves the relays given an address, side by side in this process, until it
/// is stopped (or one cannot listen).
pub async fn serve(stomp: Option<SocketAddr>, amqp: Option<SocketAddr>) -> Result<(), PerfError> {
    let stomp = async move {
        match stomp {
            Some(addr) => stomp::serve(addr).await,
            None => Ok(()),
        }
    };
    let amqp = async move {
        match amqp {
            Some(addr) => amqp::serve(addr).await,
            None => Ok(()),
        }
    };
    tokio::try_join!(stomp, amqp).map(|_| ())
}
