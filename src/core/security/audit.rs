//! The audit log: every login and every refused permission, one line each on the
//! `weir::audit` tracing target, so it can be kept or shipped apart from the rest
//! (e.g. `--log info,weir::audit=info` or a subscriber that filters on the target).

use super::permissions::Permission;
use std::net::SocketAddr;

/// How a login ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginOutcome {
    Accepted,
    Refused,
}

/// A login attempt. `mechanism` is the SASL mechanism, or `"stomp"` for a STOMP
/// login header. `tls` says whether the connection was encrypted.
pub fn login(
    peer: SocketAddr,
    user: Option<&str>,
    mechanism: &str,
    tls: bool,
    client_id: Option<&str>,
    outcome: LoginOutcome,
) {
    let user = user.unwrap_or("anonymous");
    let client = client_id.unwrap_or("");
    match outcome {
        LoginOutcome::Accepted => tracing::info!(
            target: "weir::audit",
            %peer, user, mechanism, tls, client,
            "audit: login accepted"
        ),
        LoginOutcome::Refused => tracing::warn!(
            target: "weir::audit",
            %peer, user, mechanism, tls, client,
            "audit: login refused"
        ),
    }
}

/// A permission refused at an address.
pub fn denied(
    peer: Option<SocketAddr>,
    user: Option<&str>,
    client_id: Option<&str>,
    permission: Permission,
    address: &str,
) {
    let peer = peer.map(|p| p.to_string()).unwrap_or_default();
    tracing::warn!(
        target: "weir::audit",
        peer = peer.as_str(),
        user = user.unwrap_or("anonymous"),
        client = client_id.unwrap_or(""),
        permission = permission.key(),
        address,
        "audit: permission denied"
    );
}
