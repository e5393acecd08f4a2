//! The home document, ping, health, and the parts of the API not offered.

use super::error::ZaqarError;
use crate::http::Management;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use std::sync::Arc;

/// The JSON home document: which resources this server offers.
pub async fn document() -> impl IntoResponse {
    let link = |template: &str, vars: serde_json::Value, allow: &[&str]| {
        serde_json::json!({
            "href-template": template,
            "href-vars": vars,
            "hints": {"allow": allow, "formats": {"application/json": {}}},
        })
    };
    let q = serde_json::json!({"queue_name": "param/queue_name"});
    Json(serde_json::json!({
        "resources": {
            "rel/queues": link("/v2/queues{?marker,limit,detailed}",
                serde_json::json!({"marker": "param/marker", "limit": "param/queue_limit", "detailed": "param/detailed"}), &["GET"]),
            "rel/queue": link("/v2/queues/{queue_name}", q.clone(), &["GET", "PUT", "DELETE", "PATCH"]),
            "rel/queue_stats": link("/v2/queues/{queue_name}/stats", q.clone(), &["GET"]),
            "rel/messages": link("/v2/queues/{queue_name}/messages{?marker,limit,echo,include_claimed,include_delayed}", q.clone(), &["GET"]),
            "rel/post_messages": link("/v2/queues/{queue_name}/messages", q.clone(), &["POST"]),
            "rel/messages_delete": link("/v2/queues/{queue_name}/messages{?ids,pop}", q.clone(), &["DELETE"]),
            "rel/claim": link("/v2/queues/{queue_name}/claims{?limit}", q.clone(), &["POST"]),
            "rel/purge": link("/v2/queues/{queue_name}/purge", q, &["POST"]),
        }
    }))
}

pub async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}

pub async fn health(State(management): State<Arc<Management>>) -> impl IntoResponse {
    match management.is_ready() {
        true => (
            StatusCode::OK,
            Json(serde_json::json!({"storage_reachable": true})),
        ),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"storage_reachable": false})),
        ),
    }
}

pub async fn not_offered(uri: axum::http::Uri) -> ZaqarError {
    ZaqarError::NotImplemented(format!(
        "{} is not offered by Weir's Zaqar API: subscriptions, pools, flavors, topics and signed URLs are not implemented (queues, messages and claims are).",
        uri.path()
    ))
}
