//! Who is asking: HTTP Basic against the broker's users, or anonymous where the broker
//! allows anonymous clients; then the caller's permissions, checked by the core like a
//! protocol client's.
//!
//! Every request logs in (HTTP has no session). A refused login waits the broker's
//! `login_failure_delay` and is written to the audit log; accepted ones are not (a
//! metrics scraper would fill it). Verifying a password costs a SCRAM key derivation, so
//! it runs on the blocking pool, not on a worker that serves connections.

use super::error::ApiError;
use super::state::Management;
use crate::core::security::audit::{self, LoginOutcome};
use crate::core::security::{AuthError, Permission, Principal};
use crate::core::{Broker, CoreError};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use std::net::SocketAddr;
use std::sync::Arc;

/// The transport of one HTTP connection, put into each request's extensions by the
/// server.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub tls: bool,
}

/// A logged-in caller of the API and the broker it asks about.
pub struct Caller {
    pub broker: Broker,
    pub principal: Principal,
}

impl Caller {
    /// Allowed, or 403 (401 for an anonymous caller: logging in may help).
    pub fn may(&self, address: &str, permission: Permission) -> Result<(), ApiError> {
        self.principal
            .check(address, permission)
            .map_err(|denied| self.refusal(CoreError::Denied(denied)))
    }

    /// A core error for this caller; a refusal of an anonymous caller asks for a login.
    pub fn refusal(&self, e: CoreError) -> ApiError {
        match (&e, self.principal.user()) {
            (CoreError::Denied(_), None) => ApiError::Unauthorized(format!(
                "{e}; log in with HTTP Basic as a user whose roles grant it"
            )),
            _ => ApiError::from(e),
        }
    }
}

/// Why the API does not answer yet: still reading the store (with how far it came, as
/// `/health/ready` shows), or recovered and starting its listeners.
fn not_yet(state: &Management) -> String {
    let r = state.recovery().snapshot();
    match (r.done, r.estimated_messages) {
        (true, _) => "the broker is starting its listeners".into(),
        (false, Some(estimate)) => format!(
            "the broker is still recovering: {} of about {estimate} messages read (see /health/ready)",
            r.messages_read
        ),
        (false, None) => format!(
            "the broker is still recovering: {} messages read (see /health/ready)",
            r.messages_read
        ),
    }
}

impl FromRequestParts<Arc<Management>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Management>,
    ) -> Result<Self, Self::Rejection> {
        let broker = state
            .broker()
            .cloned()
            .ok_or_else(|| ApiError::Unavailable(not_yet(state)))?;
        let conn = parts.extensions.get::<ConnInfo>().copied();
        let tls = conn.is_some_and(|c| c.tls);
        let peer = conn.map(|c| c.peer);
        let user = match basic_credentials(&parts.headers)? {
            None if broker.auth().allows_anonymous() => None,
            None => {
                return Err(ApiError::Unauthorized(
                    "log in with HTTP Basic as one of the broker's users".into(),
                ))
            }
            Some((login, password)) => {
                let checking = broker.clone();
                let name = login.clone();
                let verdict = tokio::task::spawn_blocking(move || {
                    checking
                        .auth()
                        .authenticate_password(Some(&name), Some(&password), tls)
                })
                .await
                .map_err(|e| ApiError::Internal(format!("login check failed: {e}")))?;
                match verdict {
                    Ok(user) => user,
                    Err(e) => return Err(refuse(&broker, peer, &login, tls, e).await),
                }
            }
        };
        let principal = broker.principal(user.as_deref(), peer, None);
        Ok(Caller { broker, principal })
    }
}

async fn refuse(
    broker: &Broker,
    peer: Option<SocketAddr>,
    login: &str,
    tls: bool,
    e: AuthError,
) -> ApiError {
    if let Some(peer) = peer {
        audit::login(
            peer,
            Some(login),
            "http-basic",
            tls,
            None,
            LoginOutcome::Refused,
        );
    }
    tokio::time::sleep(broker.auth().failure_delay()).await;
    ApiError::Unauthorized(e.to_string())
}

/// `Authorization: Basic base64(user:password)`, if present. Another scheme, or Basic
/// that does not decode, is a failed login.
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed =
        || ApiError::Unauthorized("the Authorization header is not HTTP Basic credentials".into());
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, encoded) = value.trim().split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(malformed());
    }
    let decoded = BASE64.decode(encoded.trim()).map_err(|_| malformed())?;
    let text = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (user, password) = text.split_once(':').ok_or_else(malformed)?;
    Ok(Some((user.to_owned(), password.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn basic_credentials_are_read_and_anything_else_is_refused() {
        let encoded = BASE64.encode("alice:pa:ss");
        assert_eq!(
            basic_credentials(&headers(&format!("Basic {encoded}"))).unwrap(),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(basic_credentials(&HeaderMap::new()).unwrap(), None);
        for bad in [
            "Bearer abc",
            "Basic !!!",
            "Basic",
            &format!("Basic {}", BASE64.encode("nocolon")),
        ] {
            assert!(matches!(
                basic_credentials(&headers(bad)),
                Err(ApiError::Unauthorized(_))
            ));
        }
    }
}
