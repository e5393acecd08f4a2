//! One accepted socket: its TLS handshake (on a TLS listener, or when an AMQP client asks
//! to upgrade a plain one), the protocol sniffed on a shared port, and the hand-over to
//! that protocol with what the transport knows about the client.

use super::sniff;
use super::tls::{self, Rewind, TlsContext};
use crate::config::Protocol;
use crate::core::Broker;
use crate::protocol::amqp::{self, AmqpOptions};
use crate::protocol::stomp::{self, StompOptions};
use crate::protocol::Peer;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast;

/// How a listener's connections use TLS.
#[derive(Clone)]
pub(super) enum TlsMode {
    /// Every connection starts with a TLS handshake.
    Listener(Arc<TlsContext>),
    /// Plain TCP; with a `[tls]` section, AMQP clients may ask to upgrade (`AMQP 2 1 0 0`).
    Plain { upgrade: Option<Arc<TlsContext>> },
}

/// What a connection is served with.
pub(super) struct Options {
    pub broker: Broker,
    pub stomp: StompOptions,
    pub amqp: AmqpOptions,
    /// The TLS handshake must be done within this.
    pub handshake_timeout: Duration,
}

pub(super) async fn serve_connection(
    stream: TcpStream,
    addr: SocketAddr,
    protocols: &[Protocol],
    tls: TlsMode,
    options: Options,
    mut shutdown: broadcast::Receiver<()>,
) {
    let upgrade = match tls {
        TlsMode::Listener(context) => {
            let Some((mut stream, peer)) =
                accept_tls(stream, addr, &context, &options, &mut shutdown).await
            else {
                return;
            };
            let (protocol, head) = match protocols {
                [only] => (*only, Bytes::new()),
                _ => {
                    let sniffed = tokio::select! {
                        sniffed = sniff::sniff_read(&mut stream) => sniffed,
                        _ = shutdown.recv() => None,
                    };
                    match sniffed {
                        Some(sniffed) => sniffed,
                        None => return,
                    }
                }
            };
            let stream = Rewind::new(stream, head);
            return serve(stream, peer, protocol, options, shutdown).await;
        }
        TlsMode::Plain { upgrade } => upgrade,
    };
    let protocol = match protocols {
        [only] => *only,
        _ => {
            let sniffed = tokio::select! {
                sniffed = sniff::sniff(&stream) => sniffed,
                // Not a word from the client yet: nothing to say goodbye in.
                _ = shutdown.recv() => None,
            };
            match sniffed {
                Some(p) => p,
                None => return,
            }
        }
    };
    if let (Protocol::Amqp, Some(context)) = (protocol, upgrade) {
        let requested = tokio::select! {
            requested = sniff::amqp_tls_requested(&stream) => requested,
            _ = shutdown.recv() => return,
        };
        if requested {
            let Some(stream) = agree_amqp_tls(stream, addr).await else {
                return;
            };
            let Some((stream, peer)) =
                accept_tls(stream, addr, &context, &options, &mut shutdown).await
            else {
                return;
            };
            let stream = Rewind::new(stream, Bytes::new());
            return serve(stream, peer, protocol, options, shutdown).await;
        }
    }
    serve(stream, Peer::plain(addr), protocol, options, shutdown).await;
}

/// A TLS stream, as every TLS connection is served (one type for all: the protocols'
/// code is compiled once for plain TCP and once for this).
type TlsStream = tokio_rustls::server::TlsStream<TcpStream>;

/// The TLS handshake, with the current certificate, and who the client's verified
/// certificate names. `None` when it failed (logged) or the broker is stopping.
async fn accept_tls(
    stream: TcpStream,
    addr: SocketAddr,
    context: &TlsContext,
    options: &Options,
    shutdown: &mut broadcast::Receiver<()>,
) -> Option<(TlsStream, Peer)> {
    let handshake =
        tokio::time::timeout(options.handshake_timeout, context.acceptor().accept(stream));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            // A port probe or health check: connected, said nothing, left.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!(peer = %addr, "closed before the TLS handshake");
                return None;
            }
            Ok(Err(e)) => {
                tracing::info!(peer = %addr, error = %e, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                tracing::info!(peer = %addr, timeout = ?options.handshake_timeout, "TLS handshake not done in time");
                return None;
            }
        },
        _ = shutdown.recv() => return None,
    };
    let certified_user = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| tls::certified_user(chain, context.settings().external_user));
    let peer = Peer {
        addr,
        tls: true,
        certified_user,
        transport: crate::protocol::peer::TCP,
    };
    Some((stream, peer))
}

/// AMQP's TLS upgrade (part 5.2.1): the client's TLS header is taken and answered with
/// ours; the TLS handshake follows on the same socket.
async fn agree_amqp_tls(mut stream: TcpStream, addr: SocketAddr) -> Option<TcpStream> {
    let mut header = [0u8; 8];
    let agreed = async {
        stream.read_exact(&mut header).await?;
        stream.write_all(&sniff::AMQP_TLS_HEADER).await
    };
    match tokio::time::timeout(Duration::from_secs(5), agreed).await {
        Ok(Ok(())) => Some(stream),
        _ => {
            tracing::debug!(peer = %addr, "AMQP TLS upgrade: the client left");
            None
        }
    }
}

/// Hands the connection to its protocol.
async fn serve<S>(
    stream: S,
    peer: Peer,
    protocol: Protocol,
    options: Options,
    shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let Options {
        broker,
        stomp,
        amqp,
        ..
    } = options;
    match protocol {
        Protocol::Stomp => stomp::serve(stream, peer, broker, stomp, shutdown).await,
        Protocol::Amqp => amqp::serve(stream, peer, broker, amqp, shutdown).await,
    }
}
