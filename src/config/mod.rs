//! TOML configuration, read once at start.
//!
//! `config/weir.toml` documents every key. Loading is two steps: serde reads the file into
//! `raw` types (unknown keys refused, paths tracked by `serde_path_to_error`), then
//! `convert` checks values and cross-references and fills in defaults. Any error is a
//! [`ConfigError`] whose Display is one line naming the key.

mod convert;
mod error;
mod queue_settings;
mod raw;
mod units;
mod websocket_origins;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use crate::core::security::Secret;
use crate::core::security::{Permissions, RoleSet, UserPolicy};
use crate::core::settings::{QueueSettings, SettingsTable};
use std::collections::HashMap;

pub use error::{ConfigError, KeyPath, Problem};
pub use queue_settings::{check_queue_settings, settings_change, SettingsChange};
pub use units::{format_duration, parse_duration, parse_size, DurationError, SizeError};
pub use websocket_origins::AllowedOrigins;

/// The configuration used when no file is given: `src/config/default.toml`.
const DEFAULT_TOML: &str = include_str!("default.toml");

#[derive(Debug, Clone)]
pub struct Config {
    broker: BrokerConfig,
    acceptors: Acceptors,
    http: Option<Http>,
    websocket: Option<WebSocket>,
    /// `[websocket] allowed_origins`, for `/stomp` and the WebSocket listener alike.
    websocket_origins: AllowedOrigins,
    store: StoreConfig,
    limits: Limits,
    security: Security,
    tls: Option<Tls>,
    connection_factories: Vec<ConnectionFactory>,
    settings: SettingsTable,
    queues: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    pub name: String,
    pub data_dir: PathBuf,
    /// Already folded into the settings table as the base of `auto_create`.
    pub auto_create_queues: bool,
    /// Threads that run the connections (the async runtime's workers).
    pub worker_threads: usize,
    /// How long a stopping broker waits for its connections to close.
    pub shutdown_timeout: Duration,
    /// Bytes all queues' messages may hold in memory (`-1` resolved to half
    /// the physical memory).
    pub global_max_size: u64,
}

/// The two well-known acceptors (`None` = off) and any extra listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptors {
    pub stomp: Option<SocketAddr>,
    pub amqp: Option<SocketAddr>,
    pub extra: Vec<Listener>,
}

/// One TCP listener. With several protocols the server sniffs the first bytes
/// ("AMQP" header versus a STOMP command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub bind: SocketAddr,
    pub protocols: Vec<Protocol>,
    /// Name of a [`ConnectionFactory`] applied to connections accepted here; checked to exist.
    pub connection_factory: Option<String>,
    /// Every connection starts with a TLS handshake (with the `[tls]` identity, checked to exist).
    pub tls: bool,
}

/// The management HTTP listener (REST API, health, metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http {
    pub bind: SocketAddr,
    /// Serve HTTPS with the `[tls]` identity (checked to exist).
    pub tls: bool,
}

/// STOMP over WebSocket on a listener of its own (it is also served at `/stomp` on the
/// HTTP listener).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebSocket {
    pub bind: SocketAddr,
    /// `wss://` with the `[tls]` identity (checked to exist).
    pub tls: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Stomp,
    Amqp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub fsync: FsyncPolicy,
    /// Most messages written by one group commit.
    pub max_batch: usize,
    /// How long a new durable message may stay unwritten waiting for its
    /// consumer's acknowledgement; zero for never.
    pub hold_for_ack: Duration,
    /// Percent of the data dir's filesystem in use beyond which durable
    /// messages are refused.
    pub max_disk_usage: u8,
    /// Free bytes on the data dir's filesystem below which durable messages
    /// are refused.
    pub min_free_disk: u64,
}

/// When a durable write is on disk, and so when its receipt may go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Every commit is fsynced before its receipt.
    Always,
    /// At most one fsync per `window`; receipts wait for the fsync covering their write.
    Batched { window: Duration },
    /// Written to the OS only: survives `kill -9` of the broker, not a power loss.
    Never,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_frame_size: usize,
    pub max_headers: usize,
    pub max_header_length: usize,
    pub max_message_size: usize,
    pub max_connections: usize,
    /// The server's preferred heart-beat interval; zero means none.
    pub heartbeat: Duration,
    /// Broker-wide consumer window; the base of every queue's `default_prefetch`.
    pub default_prefetch: u32,
    /// Sends and acknowledgements one transaction may hold.
    pub max_transaction_ops: usize,
    /// Bytes of messages one transaction may hold.
    pub max_transaction_bytes: usize,
    /// Transactions one connection may have open at once.
    pub max_open_transactions: usize,
    /// Connections one user may have open at once; 0 = unlimited.
    pub max_connections_per_user: usize,
    /// Connections one source address may have open at once; 0 = unlimited.
    pub max_connections_per_address: usize,
    /// Socket open to STOMP CONNECT.
    pub connect_timeout: Duration,
    /// AMQP header to `open`.
    pub amqp_open_timeout: Duration,
    /// The AMQP protocol header and SASL exchange.
    pub sasl_timeout: Duration,
    /// A frame that started must be complete within this; zero = no limit.
    pub frame_timeout: Duration,
    /// STOMP subscriptions one connection may hold.
    pub max_subscriptions_per_connection: usize,
    /// AMQP sessions one connection may have begun.
    pub max_sessions_per_connection: usize,
    /// AMQP links one session may have attached.
    pub max_links_per_session: usize,
    /// AMQP deliveries sent on one link and not yet settled by the peer.
    pub max_unsettled_per_link: usize,
    /// Queues one user's connections may have created at once; 0 = unlimited.
    pub max_queues_per_user: usize,
}

#[derive(Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub secret: Secret,
    pub roles: Vec<String>,
    /// Overrides `limits.max_connections_per_user` for this user.
    pub max_connections: Option<usize>,
    /// Overrides `limits.max_queues_per_user` for this user.
    pub max_queues: Option<usize>,
}

impl fmt::Debug for User {
    // Keeps passwords out of logs that print the config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.secret {
            Secret::Password(_) => "password",
            Secret::Credential(_) => "credential",
        };
        f.debug_struct("User")
            .field("name", &self.name)
            .field(kind, &"***")
            .field("roles", &self.roles)
            .field("max_connections", &self.max_connections)
            .field("max_queues", &self.max_queues)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Security {
    pub allow_anonymous: bool,
    /// Whether `allow_anonymous` was written in the file (rather than defaulted): needed
    /// to listen beyond loopback with anonymous clients allowed.
    pub allow_anonymous_set: bool,
    pub users: Vec<User>,
    /// How long a failed login waits before it is refused.
    pub login_failure_delay: Duration,
    pub access: Access,
    /// Refuse SASL PLAIN and STOMP passcodes on connections without TLS.
    pub require_tls_for_passwords: bool,
}

/// Roles and permissions, resolved to the form the broker checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub permissions: Permissions,
    pub users: HashMap<String, UserPolicy>,
    pub anonymous_roles: RoleSet,
}

/// The `[tls]` section: the broker's identity and how clients prove theirs. The files are
/// read when the server starts and again when they change or on SIGHUP, not with the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// PEM: the broker's certificate, then any intermediates.
    pub cert_file: PathBuf,
    /// PEM: the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM: the CAs whose client certificates are trusted.
    pub ca_file: Option<PathBuf>,
    pub client_auth: ClientAuth,
    pub external_user: ExternalUser,
}

/// Whether a TLS client must show a certificate signed by a CA of `ca_file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No certificate is asked for.
    None,
    /// Asked for; a client without one may still log in otherwise, a bad one is refused.
    Optional,
    /// A client without a trusted certificate is refused in the TLS handshake.
    Required,
}

/// Which name of a verified client certificate is the user it logs in as (SASL EXTERNAL, or
/// a STOMP CONNECT without `login`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExternalUser {
    /// The subject's common name.
    Cn,
    /// The first DNS name among the subject alternative names.
    SanDns,
    /// The first e-mail address (rfc822Name) among the subject alternative names.
    SanEmail,
}

/// Artemis-style client defaults for message grouping, picked by a listener by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionFactory {
    pub name: String,
    /// Give each producer a generated group id for everything it sends.
    pub autogroup: bool,
    /// A fixed group id for messages that carry none.
    pub group_id: Option<String>,
}

impl Config {
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let raw: raw::RawConfig =
            serde_path_to_error::deserialize(de).map_err(|e| serde_error(e, text))?;
        convert::convert(raw)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// STOMP on 127.0.0.1:61613, AMQP on 127.0.0.1:5672, data in `./weir-data`,
    /// queues created on first use, no users (anonymous allowed).
    pub fn embedded_default() -> Config {
        // The text is compiled in and a unit test loads it, so this cannot fail at run time.
        Self::from_toml_str(DEFAULT_TOML)
            .unwrap_or_else(|e| panic!("embedded default configuration is invalid: {e}"))
    }

    pub fn set_data_dir(&mut self, dir: PathBuf) {
        self.broker.data_dir = dir;
    }

    /// `None` turns the STOMP acceptor off.
    pub fn set_stomp_addr(&mut self, addr: Option<SocketAddr>) {
        self.acceptors.stomp = addr;
    }

    /// `None` turns the AMQP acceptor off.
    pub fn set_amqp_addr(&mut self, addr: Option<SocketAddr>) {
        self.acceptors.amqp = addr;
    }

    /// `None` turns the HTTP listener off; an address keeps its `tls` setting.
    pub fn set_http_addr(&mut self, addr: Option<SocketAddr>) {
        self.http = addr.map(|bind| Http {
            bind,
            tls: self.http.is_some_and(|h| h.tls),
        });
    }

    /// The management HTTP listener, when on.
    pub fn http(&self) -> Option<&Http> {
        self.http.as_ref()
    }

    /// `None` turns the WebSocket listener off; an address keeps its `tls` setting.
    pub fn set_websocket_addr(&mut self, addr: Option<SocketAddr>) {
        self.websocket = addr.map(|bind| WebSocket {
            bind,
            tls: self.websocket.is_some_and(|w| w.tls),
        });
    }

    /// The WebSocket listener of its own, when configured.
    pub fn websocket(&self) -> Option<&WebSocket> {
        self.websocket.as_ref()
    }

    /// The origins whose pages may open STOMP over WebSocket (empty: every one).
    pub fn websocket_origins(&self) -> &AllowedOrigins {
        &self.websocket_origins
    }

    pub fn broker(&self) -> &BrokerConfig {
        &self.broker
    }

    pub fn data_dir(&self) -> &Path {
        &self.broker.data_dir
    }

    pub fn acceptors(&self) -> &Acceptors {
        &self.acceptors
    }

    /// Every listener to open: `stomp` and `amqp` (when on) first, then the extras.
    pub fn listeners(&self) -> Vec<Listener> {
        let main = [
            ("stomp", self.acceptors.stomp, Protocol::Stomp),
            ("amqp", self.acceptors.amqp, Protocol::Amqp),
        ];
        main.into_iter()
            .filter_map(|(name, addr, protocol)| {
                addr.map(|bind| Listener {
                    name: name.to_owned(),
                    bind,
                    protocols: vec![protocol],
                    connection_factory: None,
                    tls: false,
                })
            })
            .chain(self.acceptors.extra.iter().cloned())
            .collect()
    }

    pub fn store(&self) -> &StoreConfig {
        &self.store
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn security(&self) -> &Security {
        &self.security
    }

    pub fn users(&self) -> &[User] {
        &self.security.users
    }

    /// The `[tls]` section, when there is one.
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    pub fn allow_anonymous(&self) -> bool {
        self.security.allow_anonymous
    }

    pub fn connection_factories(&self) -> &[ConnectionFactory] {
        &self.connection_factories
    }

    pub fn connection_factory(&self, name: &str) -> Option<&ConnectionFactory> {
        self.connection_factories.iter().find(|f| f.name == name)
    }

    /// `[queue_defaults]` plus every `[address_settings.PATTERN]` and each declared
    /// queue's inline keys (as an exact-name pattern).
    pub fn settings_table(&self) -> SettingsTable {
        self.settings.clone()
    }

    /// Queues from `[[queues]]`, in file order, with their resolved settings.
    pub fn declared_queues(&self) -> Vec<(String, QueueSettings)> {
        self.queues
            .iter()
            .map(|name| (name.clone(), self.settings.resolve(name)))
            .collect()
    }
}

/// A serde error with a key path names the key; without one it is a TOML syntax
/// error, placed by line and column.
fn serde_error(e: serde_path_to_error::Error<toml::de::Error>, text: &str) -> ConfigError {
    let key = KeyPath::from_serde(e.path());
    let inner = e.into_inner();
    let mut message = one_line(inner.message());
    if message.is_empty() {
        // toml leaves the message empty for some syntax errors, e.g. a value cut off at the end.
        message = "not valid TOML".to_owned();
    }
    if !key.as_str().is_empty() {
        return ConfigError::key(key, Problem::Schema(message));
    }
    let (line, column) = inner
        .span()
        .map_or((1, 1), |span| line_column(text, span.start));
    ConfigError::Syntax {
        line,
        column,
        message,
    }
}

fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests;
