//! `[websocket] allowed_origins`: the web pages whose scripts may open STOMP over
//! WebSocket. A browser names the page's origin in every WebSocket upgrade, and a page
//! on another site could otherwise use the browser's network position (and a broker
//! that allows anonymous clients on loopback) to reach the broker.

use super::error::{ConfigError, KeyPath, Problem};
use super::raw::RawWebSocket;

/// The origins allowed to upgrade; empty allows every origin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedOrigins {
    /// Lowercased `scheme://host[:port]`.
    origins: Vec<String>,
}

impl AllowedOrigins {
    /// Whether an upgrade carrying `origin` (the request's `Origin` header) is served. A
    /// request without one does not come from a browser's page (stomp.py, Node, a
    /// native client), which could send any origin it liked, so it is served.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        match origin {
            _ if self.origins.is_empty() => true,
            None => true,
            Some(origin) => self
                .origins
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(origin.trim())),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }
}

/// Each entry must be an origin as browsers send it: `scheme://host[:port]`, nothing after.
pub(super) fn convert(raw: &RawWebSocket) -> Result<AllowedOrigins, ConfigError> {
    let key = KeyPath::root("websocket").field("allowed_origins");
    let mut origins = Vec::new();
    for text in raw.allowed_origins.iter().flatten() {
        if !is_origin(text) {
            return Err(ConfigError::key(
                key.clone(),
                Problem::NotAnOrigin(text.clone()),
            ));
        }
        origins.push(text.to_ascii_lowercase());
    }
    Ok(AllowedOrigins { origins })
}

fn is_origin(text: &str) -> bool {
    let Some((scheme, host)) = text.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    let host_ok = !host.is_empty()
        && !host.starts_with(':')
        && !host
            .chars()
            .any(|c| c.is_whitespace() || "/?#@".contains(c));
    scheme_ok && host_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(list: &[&str]) -> Result<AllowedOrigins, ConfigError> {
        convert(&RawWebSocket {
            allowed_origins: Some(list.iter().map(|s| s.to_string()).collect()),
            ..RawWebSocket::default()
        })
    }

    #[test]
    fn empty_allows_every_origin() {
        let all = origins(&[]).unwrap();
        assert!(all.allows(Some("https://anywhere.example")));
        assert!(all.allows(None));
    }

    #[test]
    fn only_listed_origins_are_allowed() {
        let some = origins(&["https://App.example.com", "http://localhost:8080"]).unwrap();
        assert!(some.allows(Some("https://app.example.com")));
        assert!(some.allows(Some("http://localhost:8080")));
        assert!(!some.allows(Some("http://localhost:8081")));
        assert!(!some.allows(Some("https://app.example.com.evil.example")));
        assert!(!some.allows(Some("null")));
        // Not a browser's page: no Origin to check.
        assert!(some.allows(None));
    }

    #[test]
    fn entries_must_be_origins() {
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://app.example.com/stomp",
            "https://",
            "*",
        ] {
            let e = origins(&[bad]).unwrap_err().to_string();
            assert!(
                e.contains("websocket.allowed_origins") && e.contains(bad),
                "{bad}: {e}"
            );
        }
    }
}
