//! The management HTTP API: health, the broker's and its queues' state, queue
//! operations, Prometheus metrics, and its own OpenAPI description.
//!
//! It sits beside the protocols on the core API: it reads and changes the broker only
//! through [`crate::core::Broker`] and the handles it returns, never the store or a
//! protocol's internals. The socket side (TLS, accepting, shutdown) is the server's
//! (`crate::server::http`); this module is the router and what it answers.
//!
//! Every error is JSON, `{"error": "<code>", "message": "<what was wrong>"}`.

mod auth;
mod broker_info;
mod connections;
mod console;
mod error;
mod groups;
mod health;
mod messages;
mod metrics;
mod query;
mod queue_settings;
mod queues;
mod schedule;
mod state;
#[cfg(test)]
mod tests;

pub use auth::{Caller, ConnInfo};
pub use state::{ListenerInfo, Management};

use axum::http::header;
use axum::routing::{delete, get, patch, post, put, MethodRouter};
use axum::Router;
use std::sync::Arc;

/// The API's description, served at `/api/openapi.json`; a test checks it describes
/// every route the router serves, and nothing else.
const OPENAPI: &str = include_str!("openapi.json");

type Shared = Arc<Management>;

/// Every route the API serves: method, path, handler. The router is built from this
/// table, and the OpenAPI test reads the same table. The web console's pages under
/// `/console/` are not API and not in this table (see [`console`]).
fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Shared>)> {
    vec![
        ("GET", "/health/live", get(health::live)),
        ("GET", "/health/ready", get(health::ready)),
        ("GET", "/api/openapi.json", get(openapi)),
        ("GET", "/metrics", get(metrics::metrics)),
        ("GET", "/api/broker", get(broker_info::broker)),
        ("GET", "/api/queues", get(queues::list)),
        ("GET", "/api/queues/{name}", get(queues::detail)),
        ("PUT", "/api/queues/{name}", put(queues::create)),
        ("DELETE", "/api/queues/{name}", delete(queues::delete)),
        ("PATCH", "/api/queues/{name}", patch(queue_settings::change)),
        ("POST", "/api/queues/{name}/purge", post(queues::purge)),
        ("POST", "/api/queues/{name}/pause", post(queues::pause)),
        ("POST", "/api/queues/{name}/resume", post(queues::resume)),
        ("GET", "/api/queues/{name}/messages", get(messages::browse)),
        ("POST", "/api/queues/{name}/messages", post(messages::send)),
        (
            "GET",
            "/api/queues/{name}/messages/{id}",
            get(messages::view),
        ),
        (
            "DELETE",
            "/api/queues/{name}/messages/{id}",
            delete(messages::delete),
        ),
        (
            "POST",
            "/api/queues/{name}/messages/move",
            post(messages::move_to),
        ),
        (
            "POST",
            "/api/queues/{name}/messages/copy",
            post(messages::copy_to),
        ),
        ("GET", "/api/queues/{name}/groups", get(groups::list)),
        (
            "DELETE",
            "/api/queues/{name}/groups",
            delete(groups::reset_all),
        ),
        (
            "DELETE",
            "/api/queues/{name}/groups/{group}",
            delete(groups::reset),
        ),
        (
            "GET",
            "/api/queues/{name}/consumers",
            get(groups::consumers),
        ),
        ("GET", "/api/schedule", get(schedule::list)),
        ("GET", "/api/schedule/timeline", get(schedule::timeline)),
        ("GET", "/api/schedule/{id}", get(schedule::view)),
        ("DELETE", "/api/schedule/{id}", delete(schedule::cancel)),
        ("PATCH", "/api/schedule/{id}", patch(schedule::edit)),
        (
            "POST",
            "/api/schedule/{id}/reschedule",
            post(schedule::reschedule),
        ),
        ("GET", "/api/connections", get(connections::list)),
        (
            "DELETE",
            "/api/connections/{id}",
            delete(connections::close),
        ),
    ]
}

pub fn router(management: Shared) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| {
            router.route(path, handler)
        })
        .merge(console::router())
        .merge(crate::zaqar::router())
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(management)
}

async fn openapi() -> impl axum::response::IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}
