//! Health checks for orchestrators and load balancers; no login, nothing about the
//! broker beyond up or not, and how far its recovery has come.

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
/// Either way the body carries recovery's figures: while it runs, the messages read so
/// far, the rate and the estimated time left, so a slow start can be told from a hung one.
pub async fn ready(State(m): State<Arc<Management>>) -> (StatusCode, Json<serde_json::Value>) {
    let recovery = m.recovery().snapshot();
    let (code, status) = match (m.is_ready(), recovery.done) {
        (true, _) => (StatusCode::OK, "ready"),
        (false, false) => (StatusCode::SERVICE_UNAVAILABLE, "recovering"),
        (false, true) => (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
    };
    (
        code,
        Json(serde_json::json!({ "status": status, "recovery": recovery })),
    )
}
