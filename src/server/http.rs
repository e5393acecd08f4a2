//! The management HTTP listener's sockets: accepting, TLS with the broker's identity,
//! and a graceful stop with the rest of the server. What it answers is `crate::http`.
//!
//! It starts before recovery, so `/health/live` answers and `/health/ready` says 503
//! while the broker recovers; the API answers once the broker is handed over.

use super::tls::TlsContext;
use super::ServerError;
use crate::config::Http;
use crate::http::{ConnInfo, Management};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt as _;

/// The TLS handshake and the request head must come within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The running HTTP listener.
pub struct HttpListener {
    pub addr: SocketAddr,
    pub management: Arc<Management>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpListener {
    /// Binds and starts serving; the API answers 503 until [`Management::set_ready`].
    pub async fn start(config: Http, tls: Option<Arc<TlsContext>>) -> Result<Self, ServerError> {
        let socket = TcpListener::bind(config.bind)
            .await
            .map_err(|source| ServerError::Bind {
                name: "http".to_owned(),
                addr: config.bind,
                source,
            })?;
        let addr = socket.local_addr().unwrap_or(config.bind);
        let tls = match config.tls {
            true => Some(tls.ok_or(ServerError::HttpTlsWithoutIdentity)?),
            false => None,
        };
        tracing::info!(name = "http", %addr, tls = tls.is_some(), "listening");
        let management = Arc::new(Management::default());
        let router = crate::http::router(management.clone());
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(accept(socket, router, tls, stopping));
        Ok(HttpListener {
            addr,
            management,
            stop,
            task,
        })
    }

    /// Stops accepting, lets requests in progress finish, and closes idle connections;
    /// false when some were still busy at `timeout`.
    pub async fn stop(self, timeout: Duration) -> bool {
        self.management.set_stopping();
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
    let graceful = GracefulShutdown::new();
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
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(context) => {
                    let handshake = context.acceptor().accept(stream);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => serve(stream, conn, router, watcher).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTPS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "HTTPS handshake not done in time"),
                    }
                }
                None => serve::<TcpStream>(stream, conn, router, watcher).await,
            }
        });
    }
    drop(socket);
    graceful.shutdown().await;
}

async fn serve<S>(
    stream: S,
    conn: ConnInfo,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
) where
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
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = watcher.watch(http).await {
        tracing::debug!(peer = %conn.peer, error = %e, "HTTP connection ended");
    }
}
