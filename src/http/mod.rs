//! The management HTTP API: health, the broker's and its queues' state, queue
//! operations, and Prometheus metrics.
//!
//! It sits beside the protocols on the core API: it reads and changes the broker only
//! through [`crate::core::Broker`] and the handles it returns, never the store or a
//! protocol's internals. The socket side (TLS, accepting, shutdown) is the server's
//! (`crate::server::http`); this module is the router and what it answers.
//!
//! Every error is JSON, `{"error": "<code>", "message": "<what was wrong>"}`.

mod auth;
mod broker_info;
mod error;
mod health;
mod metrics;
mod queues;
mod state;

pub use auth::ConnInfo;
pub use state::{ListenerInfo, Management};

use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

/// Every route the API serves, with what it does (also checked against the OpenAPI
/// description in the tests).
pub fn router(management: Arc<Management>) -> Router {
    Router::new()
        .route("/health/live", get(health::live))
        .route("/health/ready", get(health::ready))
        .route("/metrics", get(metrics::metrics))
        .route("/api/broker", get(broker_info::broker))
        .route("/api/queues", get(queues::list))
        .route(
            "/api/queues/{name}",
            get(queues::detail)
                .put(queues::create)
                .delete(queues::delete),
        )
        .route("/api/queues/{name}/purge", post(queues::purge))
        .route("/api/queues/{name}/pause", post(queues::pause))
        .route("/api/queues/{name}/resume", post(queues::resume))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(management)
}
