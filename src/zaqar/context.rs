//! Who asks and for which project: what every queue request carries.

use super::error::ZaqarError;
use super::names;
use crate::core::security::{Permission, Principal};
use crate::core::Broker;
use crate::http::{Caller, Management};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::sync::Arc;

/// A request's broker, caller, `Client-ID` and project.
pub struct Ctx {
    pub broker: Broker,
    pub principal: Principal,
    pub client_id: String,
    pub project: Option<String>,
}

impl Ctx {
    /// The Weir name of the Zaqar queue `queue` of this request's project.
    pub fn weir_name(&self, queue: &str) -> Result<String, ZaqarError> {
        names::check_queue_name(queue)?;
        Ok(names::weir_name(self.project.as_deref(), queue))
    }

    pub fn may(&self, weir_name: &str, permission: Permission) -> Result<(), ZaqarError> {
        self.principal
            .check(weir_name, permission)
            .map_err(|denied| ZaqarError::Forbidden(denied.to_string()))
    }
}

impl FromRequestParts<Arc<Management>> for Ctx {
    type Rejection = ZaqarError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Management>,
    ) -> Result<Self, Self::Rejection> {
        let client_id = client_id(parts)?;
        let project = match parts.headers.get("x-project-id") {
            None => None,
            Some(v) => {
                let text = v.to_str().map_err(|_| ZaqarError::Malformed {
                    title: "Malformed header",
                    description: "X-Project-Id is not ASCII.".into(),
                })?;
                names::check_project(text)?;
                (!text.is_empty()).then(|| text.to_owned())
            }
        };
        let caller = Caller::from_request_parts(parts, state)
            .await
            .map_err(|e| ZaqarError::Unauthorized(e.to_string()))?;
        Ok(Ctx {
            broker: caller.broker,
            principal: caller.principal,
            client_id,
            project,
        })
    }
}

/// `Client-ID`, required and a UUID, as Zaqar requires it.
fn client_id(parts: &Parts) -> Result<String, ZaqarError> {
    let malformed = |description: &str| ZaqarError::BadRequest(description.to_owned());
    let value = parts
        .headers
        .get("client-id")
        .ok_or_else(|| malformed("The Client-ID header is required."))?;
    let text = value
        .to_str()
        .map_err(|_| malformed("Malformed hexadecimal UUID."))?;
    match is_uuid(text) {
        true => Ok(text.to_ascii_lowercase()),
        false => Err(malformed("Malformed hexadecimal UUID.")),
    }
}

/// 32 hex digits, with or without the four dashes of the usual form.
fn is_uuid(text: &str) -> bool {
    let hex: Vec<u8> = text.bytes().filter(|b| *b != b'-').collect();
    let dashes = text.len() - hex.len();
    let dashed_right = dashes == 0
        || (dashes == 4
            && [8, 13, 18, 23]
                .iter()
                .all(|&at| text.as_bytes().get(at) == Some(&b'-')));
    hex.len() == 32 && hex.iter().all(u8::is_ascii_hexdigit) && dashed_right
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_with_and_without_dashes() {
        assert!(super::is_uuid("3381af92-2b9e-11e3-b191-71861300734c"));
        assert!(super::is_uuid("3381af922b9e11e3b19171861300734c"));
        assert!(!super::is_uuid("3381af92-2b9e-11e3-b191-71861300734"));
        assert!(!super::is_uuid("not-a-uuid"));
        assert!(!super::is_uuid("3381af92-2b9e11e3-b191-71861300-734c"));
    }
}
