//! The relay ceilings: `weir perf --sink-stomp` and `--sink-amqp` serve
//! endpoints that only cut frames and forward each message to a consumer of
//! its destination, with no queue and no storage. Driven by `weir perf`, they
//! show what a broker could reach on this machine if it did nothing but move
//! frames.

pub mod amqp;
pub mod stomp;

use super::error::PerfError;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

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

/// Listens on `addr`, saying so on stderr.
async fn listen(addr: SocketAddr, relay: &str) -> Result<TcpListener, PerfError> {
    let listener = TcpListener::bind(addr).await?;
    eprintln!(
        "weir perf sink: {relay} relay on {}",
        listener.local_addr()?
    );
    Ok(listener)
}

/// Runs `connection` on a task of its own for every connection accepted,
/// numbered from 0, until accepting fails.
async fn accept_each<F, Fut>(listener: TcpListener, connection: F) -> Result<(), PerfError>
where
    F: Fn(TcpStream, u64) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    for id in 0u64.. {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(connection(stream, id));
    }
    Ok(())
}
