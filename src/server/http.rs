//! The management HTTP listener's sockets: accepting, TLS with the broker's identity,
//! and a graceful stop with the rest of the server. What it answers is `crate::http`,
//! and STOMP over WebSocket at `/stomp` (`super::websocket`).
//!
//! It starts before recovery, so `/health/live` answers and `/health/ready` says 503
//! while the broker recovers; the API answers once the broker is handed over.

use super::tls::TlsContext;
use super::websocket::{self, Endpoint};
use super::ServerError;
use crate::config::Http;
use crate::core::RecoveryStatus;
use crate::http::{ConnInfo, Management};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt as _;

/// The TLS handshake and the request head must come within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The running management HTTP listener.
pub struct HttpListener {
    pub addr: SocketAddr,
    pub management: Arc<Management>,
    /// STOMP over WebSocket at `/stomp`, served once the broker is handed over.
    pub websocket: Arc<Endpoint>,
    listener: RouterListener,
}

impl HttpListener {
    /// Binds and starts serving; the API answers 503 until [`Management::set_ready`].
    pub async fn start(
        config: Http,
        tls: Option<Arc<TlsContext>>,
        recovery: Arc<RecoveryStatus>,
    ) -> Result<Self, ServerError> {
        let tls = match config.tls {
            true => Some(tls.ok_or(ServerError::HttpTlsWithoutIdentity)?),
            false => None,
        };
        let management = Arc::new(Management::new(recovery));
        let websocket = Arc::new(Endpoint::default());
        let router = crate::http::router(management.clone())
            .merge(websocket::management_route(websocket.clone()));
        let listener = RouterListener::bind("http", config.bind, router, tls).await?;
        Ok(HttpListener {
            addr: listener.addr,
            management,
            websocket,
            listener,
        })
    }

    /// Stops accepting, lets requests in progress finish, and closes idle connections;
    /// false when some were still busy at `timeout`.
    pub async fn stop(self, timeout: Duration) -> bool {
        self.management.set_stopping();
        self.listener.stop(timeout).await
    }
}

/// A listener serving a router over HTTP/1.1 (and over TLS when given an identity),
/// with WebSocket upgrades, stopping gracefully.
pub(super) struct RouterListener {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RouterListener {
    pub(super) async fn bind(
        name: &str,
        bind: SocketAddr,
        router: Router,
        tls: Option<Arc<TlsContext>>,
    ) -> Result<Self, ServerError> {
        let socket = TcpListener::bind(bind)
            .await
            .map_err(|source| ServerError::Bind {
                name: name.to_owned(),
                addr: bind,
                source,
            })?;
        let addr = socket.local_addr().unwrap_or(bind);
        tracing::info!(name, %addr, tls = tls.is_some(), "listening");
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(accept(socket, router, tls, stopping));
        Ok(RouterListener { addr, stop, task })
    }

    /// Stops accepting, lets requests in progress finish, and closes idle connections;
    /// false when some were still busy at `timeout`. Upgraded WebSocket connections are
    /// no longer HTTP: they stop with the protocol connections.
    pub(super) async fn stop(self, timeout: Duration) -> bool {
        let _ = self.stop.send(true);
        tokio::time::timeout(timeout, self.task).await.is_ok()
    }
}

async fn accept(
    socket: TcpListener,
    router: Router,
    tls: Option<Arc<TlsContext>>,
    mut stopping: watch::Receiver<bool>,
) {
    // Every connection task holds a clone; all gone means every connection is done.
    let (open, mut done) = mpsc::channel::<()>(1);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopping.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = ConnInfo {
            peer,
            tls: tls.is_some(),
        };
        let router = router.clone();
        let stopping = stopping.clone();
        let open = open.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(context) => {
                    let handshake = context.acceptor().accept(stream);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => serve(stream, conn, router, stopping).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTPS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "HTTPS handshake not done in time"),
                    }
                }
                None => serve::<TcpStream>(stream, conn, router, stopping).await,
            }
            drop(open);
        });
    }
    drop(socket);
    drop(open);
    let _ = done.recv().await;
}

/// One HTTP connection until it ends; once the listener stops, it ends after the request
/// in progress (an idle one at once).
async fn serve<S>(stream: S, conn: ConnInfo, router: Router, mut stopping: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(conn);
            router.clone().oneshot(request)
        });
    let http = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(http);
    let mut stop_asked = false;
    let ended = loop {
        tokio::select! {
            ended = http.as_mut() => break ended,
            _ = stopping.wait_for(|stop| *stop), if !stop_asked => {
                stop_asked = true;
                http.as_mut().graceful_shutdown();
            }
        }
    };
    if let Err(e) = ended {
        tracing::debug!(peer = %conn.peer, error = %e, "HTTP connection ended");
    }
}
