//! Zaqar's errors: a status and `{"title", "description"}`, as Zaqar's own
//! server answers them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, thiserror::Error)]
pub enum ZaqarError {
    /// Malformed or out-of-range input (Zaqar's "Invalid API request").
    #[error("{0}")]
    BadRequest(String),
    /// Zaqar's "Malformed JSON" and "Malformed header" answers.
    #[error("{description}")]
    Malformed {
        title: &'static str,
        description: String,
    },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Parts of the API Weir does not offer (subscriptions, pools, flavors,
    /// signed URLs, topics).
    #[error("{0}")]
    NotImplemented(String),
    #[error("{0}")]
    Unavailable(String),
}

impl ZaqarError {
    fn status_and_title(&self) -> (StatusCode, &'static str) {
        match self {
            ZaqarError::BadRequest(_) => (StatusCode::BAD_REQUEST, "Invalid API request"),
            ZaqarError::Malformed { title, .. } => (StatusCode::BAD_REQUEST, title),
            ZaqarError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "Authentication required"),
            ZaqarError::Forbidden(_) => (StatusCode::FORBIDDEN, "Not allowed"),
            ZaqarError::NotFound(_) => (StatusCode::NOT_FOUND, "Not found"),
            ZaqarError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            ZaqarError::NotImplemented(_) => (StatusCode::NOT_IMPLEMENTED, "Not implemented"),
            ZaqarError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Service temporarily unavailable",
            ),
        }
    }
}

impl IntoResponse for ZaqarError {
    fn into_response(self) -> Response {
        let (status, title) = self.status_and_title();
        let body = Json(serde_json::json!({
            "title": title,
            "description": self.to_string(),
        }));
        (status, body).into_response()
    }
}

impl From<crate::core::CoreError> for ZaqarError {
    fn from(e: crate::core::CoreError) -> Self {
        use crate::core::CoreError;
        let text = e.to_string();
        match e {
            CoreError::Denied(_) | CoreError::QueueLimit(_) => ZaqarError::Forbidden(text),
            CoreError::NotFound(_) => ZaqarError::NotFound(text),
            CoreError::InvalidAddress(_)
            | CoreError::DelayTooLong { .. }
            | CoreError::InvalidDelay(_) => ZaqarError::BadRequest(text),
            CoreError::QueueInUse { .. } | CoreError::NotDeletable { .. } => {
                ZaqarError::Conflict(text)
            }
            _ => ZaqarError::Unavailable(text),
        }
    }
}

pub type Result<T> = std::result::Result<T, ZaqarError>;
