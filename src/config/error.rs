//! Configuration errors: each one renders as a single line naming the key and the reason.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

use super::units::{DurationError, SizeError};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config: cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not valid TOML, or a shape error serde could not place under a key.
    #[error("config: line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("config: {key}: {problem}")]
    Key { key: KeyPath, problem: Problem },
}

/// What is wrong with the value at a key.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Problem {
    /// Serde's own words: an unknown key, a missing key or a value of the wrong type.
    #[error("{0}")]
    Schema(String),
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Size(#[from] SizeError),
    #[error(transparent)]
    DelayHeader(#[from] crate::core::delay_headers::DelayHeaderError),
    #[error("\"{0}\" is not a socket address (use e.g. 127.0.0.1:61613 or [::]:5672)")]
    NotASocketAddr(String),
    #[error("must be between {min} and {max}")]
    OutOfRange { min: u64, max: u64 },
    #[error("must be {}between {} and {}", if *.zero_allowed { "0 or " } else { "" },
        super::units::format_duration(*.min), super::units::format_duration(*.max))]
    DurationOutOfRange {
        min: std::time::Duration,
        max: std::time::Duration,
        zero_allowed: bool,
    },
    #[error("must be at least {0}")]
    BelowMinimum(f64),
    /// One setting must not exceed another, e.g. a default delay above the maximum delay.
    #[error("{value} exceeds {other} ({other_value})")]
    Exceeds {
        value: String,
        other: &'static str,
        other_value: String,
    },
    #[error("must not be empty")]
    Empty,
    #[error("\"{0}\" is not an origin (use scheme://host[:port] as a browser sends it, e.g. https://app.example.com)")]
    NotAnOrigin(String),
    #[error(transparent)]
    Credential(#[from] crate::core::security::CredentialError),
    #[error("give either `credential` (from `weir user add`) or `password`, not both")]
    PasswordAndCredential,
    #[error(
        "no user holds role \"{0}\" (give it in a user's `roles` or in security.anonymous_roles)"
    )]
    UnknownRole(String),
    #[error("\"{0}\" is declared twice")]
    Duplicate(String),
    #[error("{addr} is already used by {other}")]
    AddressInUse {
        addr: std::net::SocketAddr,
        other: KeyPath,
    },
    #[error("no connection factory named \"{0}\" (declare it as [connection_factories.{0}])")]
    UnknownConnectionFactory(String),
    #[error("only applies when fsync = \"batched\"")]
    BatchWindowWithoutBatching,
    #[error("set autogroup or group_id, not both")]
    AutogroupAndGroupId,
    #[error("must list at least one of \"stomp\", \"amqp\"")]
    NoProtocols,
    #[error("\"{0}\" has an empty word (write words separated by '.', with * and # as wildcards)")]
    BadPattern(String),
    #[error("\"{0}\" contains a * or # word; a declared queue needs a literal name")]
    WildcardQueueName(String),
    #[error("needs a [tls] section with cert_file and key_file")]
    TlsWithoutIdentity,
    #[error("needs ca_file: the CAs whose client certificates are trusted")]
    ClientAuthWithoutCa,
    /// A section Weir reads but cannot act on yet; refused rather than ignored.
    #[error("not supported yet ({0})")]
    NotSupportedYet(&'static str),
}

impl ConfigError {
    /// The error without its `config:` prefix, for a setting that did not come from
    /// the file (a management API request).
    pub fn reason(&self) -> String {
        match self {
            ConfigError::Key { key, problem } if key.as_str().is_empty() => problem.to_string(),
            ConfigError::Key { key, problem } => format!("{key}: {problem}"),
            other => other.to_string().trim_start_matches("config: ").to_owned(),
        }
    }

    pub(crate) fn key(key: KeyPath, problem: impl Into<Problem>) -> Self {
        ConfigError::Key {
            key,
            problem: problem.into(),
        }
    }
}

/// A dotted TOML path such as `address_settings."orders.#".max_message_delay` or `users[0].name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPath(String);

impl KeyPath {
    pub fn root(name: &str) -> Self {
        KeyPath::default().field(name)
    }

    pub fn field(&self, name: &str) -> Self {
        let mut text = self.0.clone();
        if !text.is_empty() {
            text.push('.');
        }
        let bare = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if bare {
            text.push_str(name);
        } else {
            text.push('"');
            for c in name.chars() {
                if c == '"' || c == '\\' {
                    text.push('\\');
                }
                text.push(c);
            }
            text.push('"');
        }
        KeyPath(text)
    }

    pub fn index(&self, i: usize) -> Self {
        KeyPath(format!("{}[{i}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Converts serde_path_to_error's path, quoting keys that are not bare TOML keys
    /// (its own Display would print `address_settings.orders.#`).
    pub(crate) fn from_serde(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment;
        path.iter()
            .fold(KeyPath::default(), |key, segment| match segment {
                Segment::Seq { index } => key.index(*index),
                Segment::Map { key: name } | Segment::Enum { variant: name } => key.field(name),
                Segment::Unknown => key.field("?"),
            })
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_quote_only_when_needed() {
        let k = KeyPath::root("address_settings")
            .field("orders.#")
            .field("max_message_delay");
        assert_eq!(
            k.as_str(),
            "address_settings.\"orders.#\".max_message_delay"
        );
        assert_eq!(
            KeyPath::root("users").index(2).field("name").as_str(),
            "users[2].name"
        );
        assert_eq!(KeyPath::root("a\"b").as_str(), "\"a\\\"b\"");
    }
}
