//! STOMP over WebSocket, as RabbitMQ Web-STOMP and Artemis offer it: served at `/stomp`
//! on the management HTTP listener, and on any path of a listener of its own when
//! `[websocket] bind` is set.
//!
//! The upgraded socket becomes a byte stream ([`stream::WsStream`]) handed to the same
//! `stomp::serve` as a TCP connection: logins, permissions, admission limits, timeouts
//! and the connection registry are plain STOMP's. Only the registry's `transport` says
//! it came over WebSocket; the core never knows.

mod stream;

use crate::config::AllowedOrigins;
use crate::core::Broker;
use crate::http::ConnInfo;
use crate::protocol::stomp::{self, StompOptions};
use crate::protocol::Peer;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Extension, Json, Router};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use stream::WsStream;
use tokio::sync::{broadcast, mpsc};

/// Where the management listener serves STOMP over WebSocket.
pub const PATH: &str = "/stomp";

/// The subprotocols Weir agrees to, best first: a client offering several gets the
/// highest STOMP version it names (as RabbitMQ does). A client that names none is
/// served all the same, without a `Sec-WebSocket-Protocol` in the answer (RabbitMQ too);
/// the STOMP version is then agreed by CONNECT's `accept-version` as over TCP.
pub const SUBPROTOCOLS: [&str; 3] = ["v12.stomp", "v11.stomp", "v10.stomp"];

/// The transport name the connection registry shows.
pub const TRANSPORT: &str = "websocket";

/// Bytes a WebSocket message may hold beyond one STOMP frame of the largest size (a
/// heart-beat or the start of the next frame sent along).
const MESSAGE_SLACK: usize = 64 * 1024;

/// What upgraded connections are served with: empty until the broker is recovered (the
/// management listener starts before that), then set once.
#[derive(Default)]
pub struct Endpoint {
    serving: OnceLock<Serving>,
    /// Set before the server tells its connections to stop: a connection upgraded after
    /// that would have missed the word, so it is closed at once.
    stopping: AtomicBool,
}

struct Serving {
    broker: Broker,
    stomp: StompOptions,
    /// Pages from other origins are refused (empty: none is).
    origins: AllowedOrigins,
    shutdown: broadcast::Sender<()>,
    /// The server's count of open connections; gone once the server stops.
    open: mpsc::WeakSender<()>,
}

impl Endpoint {
    /// From now on upgrades are served with these. Set once; a second call is ignored.
    pub(super) fn set_ready(
        &self,
        broker: Broker,
        stomp: StompOptions,
        origins: AllowedOrigins,
        shutdown: broadcast::Sender<()>,
        open: &mpsc::Sender<()>,
    ) {
        let _ = self.serving.set(Serving {
            broker,
            stomp,
            origins,
            shutdown,
            open: open.downgrade(),
        });
    }

    /// No more connections: call before the server's shutdown is sent.
    pub(super) fn stop_serving(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

/// `/stomp`, for the management listener's router.
pub fn management_route(endpoint: Arc<Endpoint>) -> Router {
    // Every method, so that a wrong one gets the upgrade's own JSON refusal.
    Router::new().route(PATH, any(upgrade)).with_state(endpoint)
}

/// Upgrades on any path, for the WebSocket listener of its own (as Artemis's ws acceptor).
pub(super) fn listener_router(endpoint: Arc<Endpoint>) -> Router {
    Router::new().fallback(upgrade).with_state(endpoint)
}

/// An HTTP error with the JSON body every management error has.
fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    let body = Json(serde_json::json!({ "error": code, "message": message }));
    (status, body).into_response()
}

async fn upgrade(
    State(endpoint): State<Arc<Endpoint>>,
    conn: Option<Extension<ConnInfo>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            let status = rejection.status();
            let code = match status {
                StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
                _ => "bad_request",
            };
            return refuse(
                status,
                code,
                format!(
                    "{}: STOMP over WebSocket needs a WebSocket upgrade (GET with \
                     Connection: Upgrade, Upgrade: websocket)",
                    rejection.body_text()
                ),
            );
        }
    };
    let Some(Extension(conn)) = conn else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the connection's address is unknown".into(),
        );
    };
    let Some(serving) = endpoint.serving.get() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the broker is still recovering".into(),
        );
    };
    let origin = headers
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or("(not text)"));
    if !serving.origins.allows(origin) {
        tracing::debug!(peer = %conn.peer, ?origin, "WebSocket upgrade from an origin not allowed");
        return refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "origin {} may not open STOMP over WebSocket (websocket.allowed_origins)",
                origin.unwrap_or_default()
            ),
        );
    }
    let Some(open) = serving.open.upgrade() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the broker is stopping".into(),
        );
    };
    let peer = Peer {
        addr: conn.peer,
        tls: conn.tls,
        certified_user: None,
        transport: TRANSPORT,
    };
    let broker = serving.broker.clone();
    let stomp = serving.stomp.clone();
    let shutdown = serving.shutdown.subscribe();
    // After subscribing: a stop that began before is seen here, a later one is received.
    if endpoint.stopping.load(Ordering::SeqCst) {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the broker is stopping".into(),
        );
    }
    let max_message = stomp.limits.max_frame_size.saturating_add(MESSAGE_SLACK);
    upgrade
        .protocols(SUBPROTOCOLS)
        .max_message_size(max_message)
        .max_frame_size(max_message)
        .on_failed_upgrade(
            move |e| tracing::debug!(peer = %conn.peer, error = %e, "WebSocket upgrade failed"),
        )
        .on_upgrade(move |socket: WebSocket| async move {
            let frame_limit = stomp.limits.max_frame_size;
            let stream = WsStream::new(socket, frame_limit);
            stomp::serve(stream, peer, broker, stomp, shutdown).await;
            drop(open);
        })
}
