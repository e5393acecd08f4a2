//! The API's errors, each a status and a JSON body that says what was wrong.

use crate::core::CoreError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No credentials where they are needed, or wrong ones.
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    /// Bad input in one field, which the body names (`field`).
    #[error("{field}: {message}")]
    BadField { field: String, message: String },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    /// Still recovering, or stopping.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) | ApiError::BadField { .. } => StatusCode::BAD_REQUEST,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::BadRequest(_) | ApiError::BadField { .. } => "bad_request",
            ApiError::Conflict(_) => "conflict",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({
            "error": self.code(),
            "message": self.to_string(),
        });
        if let ApiError::BadField { field, .. } = &self {
            body["field"] = serde_json::Value::String(field.clone());
        }
        let body = Json(body);
        let mut response = (self.status(), body).into_response();
        if matches!(self, ApiError::Unauthorized(_)) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"weir\""),
            );
        }
        response
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        let message = e.to_string();
        match e {
            CoreError::Denied(_) => ApiError::Forbidden(message),
            CoreError::NotFound(name) => ApiError::NotFound(format!("no queue named '{name}'")),
            CoreError::InvalidAddress(_) | CoreError::InvalidSettings(_) => {
                ApiError::BadRequest(message)
            }
            CoreError::SettingsConflict(_) => ApiError::Conflict(message),
            CoreError::QueueInUse { .. }
            | CoreError::NotDeletable { .. }
            | CoreError::QueueLimit(_) => ApiError::Conflict(message),
            CoreError::ShuttingDown => ApiError::Unavailable(message),
            _ if e.is_disk_full() => ApiError::Unavailable(message),
            _ => ApiError::Internal(message),
        }
    }
}

pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("nothing at {}", uri.path()))
}

pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not served at {}", uri.path()))
}
