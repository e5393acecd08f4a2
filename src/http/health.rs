//! Health checks for orchestrators and load balancers; no login, nothing about the
//! broker beyond up or not.

use super::state::Management;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;

/// 200 while the process serves HTTP.
pub async fn live() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "live" }))
}

/// 200 once recovery is done and every listener is up; 503 before (and while stopping).
pub async fn ready(State(m): State<Arc<Management>>) -> (StatusCode, Json<serde_json::Value>) {
    match m.is_ready() {
        true => (
            StatusCode::OK,
            Json(serde_json::json!({ "status": "ready" })),
        ),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "status": "not_ready" })),
        ),
    }
}
