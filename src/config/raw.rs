//! The file as serde reads it. Durations, sizes and addresses stay text here so that
//! the conversion in `convert.rs` can name the key when one is wrong.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::{ClientAuth, ExternalUser, Protocol};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawConfig {
    pub broker: RawBroker,
    pub acceptors: RawAcceptors,
    pub http: RawHttp,
    pub websocket: RawWebSocket,
    pub store: RawStore,
    pub limits: RawLimits,
    pub users: Vec<RawUser>,
    pub security: RawSecurity,
    pub queue_defaults: RawSettings,
    pub address_settings: BTreeMap<String, RawSettings>,
    pub queues: Vec<RawQueue>,
    pub connection_factories: BTreeMap<String, RawConnectionFactory>,
    /// Present (even empty) means TLS is configured; `convert` then asks for the files.
    pub tls: Option<RawTls>,
    /// Read only to be refused: see `convert::refuse_grouping_handler`.
    pub grouping_handler: Option<de::IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBroker {
    pub name: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub auto_create_queues: Option<bool>,
    pub worker_threads: Option<u64>,
    pub shutdown_timeout: Option<RawDuration>,
    pub global_max_size: Option<RawByteLimit>,
}

/// `None` takes the default address; an empty string turns the acceptor off.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAcceptors {
    pub stomp: Option<String>,
    pub amqp: Option<String>,
    pub extra: Vec<RawExtraAcceptor>,
}

/// The management HTTP listener.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawHttp {
    pub enabled: Option<bool>,
    pub bind: Option<String>,
    pub tls: Option<bool>,
}

/// STOMP over WebSocket on a listener of its own (off unless `bind` is given).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawWebSocket {
    pub bind: Option<String>,
    pub tls: Option<bool>,
    pub allowed_origins: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExtraAcceptor {
    pub name: String,
    pub bind: String,
    #[serde(default = "both_protocols")]
    pub protocols: Vec<Protocol>,
    #[serde(default)]
    pub connection_factory: Option<String>,
    #[serde(default)]
    pub tls: bool,
}

fn both_protocols() -> Vec<Protocol> {
    vec![Protocol::Stomp, Protocol::Amqp]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawFsync {
    Always,
    Batched,
    Never,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawStore {
    pub fsync: Option<RawFsync>,
    pub batch_window: Option<RawDuration>,
    pub max_batch: Option<u64>,
    pub hold_for_ack: Option<RawDuration>,
    pub max_disk_usage: Option<u64>,
    pub min_free_disk: Option<RawSize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLimits {
    pub max_frame_size: Option<RawSize>,
    pub max_headers: Option<u64>,
    pub max_header_length: Option<RawSize>,
    pub max_message_size: Option<RawSize>,
    pub max_connections: Option<u64>,
    pub heartbeat: Option<RawDuration>,
    pub default_prefetch: Option<u64>,
    pub max_transaction_ops: Option<u64>,
    pub max_transaction_bytes: Option<RawSize>,
    pub max_open_transactions: Option<u64>,
    pub max_connections_per_user: Option<u64>,
    pub max_connections_per_address: Option<u64>,
    pub connect_timeout: Option<RawDuration>,
    pub amqp_open_timeout: Option<RawDuration>,
    pub sasl_timeout: Option<RawDuration>,
    pub frame_timeout: Option<RawDuration>,
    pub max_subscriptions_per_connection: Option<u64>,
    pub max_sessions_per_connection: Option<u64>,
    pub max_links_per_session: Option<u64>,
    pub max_unsettled_per_link: Option<u64>,
    pub max_queues_per_user: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUser {
    pub name: String,
    pub password: Option<String>,
    pub credential: Option<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub max_connections: Option<u64>,
    #[serde(default)]
    pub max_queues: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSecurity {
    pub allow_anonymous: Option<bool>,
    pub login_failure_delay: Option<RawDuration>,
    pub anonymous_roles: Vec<String>,
    pub permissions: BTreeMap<String, RawPermissions>,
    pub require_tls_for_passwords: Option<bool>,
}

/// The roles granted each permission at one address pattern; absent grants nobody.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawPermissions {
    pub send: Vec<String>,
    pub consume: Vec<String>,
    pub browse: Vec<String>,
    pub create_durable_queue: Vec<String>,
    pub delete_durable_queue: Vec<String>,
    pub create_non_durable_queue: Vec<String>,
    pub delete_non_durable_queue: Vec<String>,
    pub create_address: Vec<String>,
    pub manage: Vec<String>,
    pub view: Vec<String>,
}

impl RawPermissions {
    /// Each permission with the roles it is granted to.
    pub fn grants(&self) -> [(crate::core::security::Permission, &[String]); 10] {
        use crate::core::security::Permission as P;
        [
            (P::Send, &self.send),
            (P::Consume, &self.consume),
            (P::Browse, &self.browse),
            (P::CreateDurableQueue, &self.create_durable_queue),
            (P::DeleteDurableQueue, &self.delete_durable_queue),
            (P::CreateNonDurableQueue, &self.create_non_durable_queue),
            (P::DeleteNonDurableQueue, &self.delete_non_durable_queue),
            (P::CreateAddress, &self.create_address),
            (P::Manage, &self.manage),
            (P::View, &self.view),
        ]
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTls {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub client_auth: Option<ClientAuth>,
    pub external_user: Option<ExternalUser>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawConnectionFactory {
    pub autogroup: Option<bool>,
    pub group_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawDelayOverMax {
    Reject,
    Clamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(super) enum RawAddressFullPolicy {
    #[serde(rename = "PAGE", alias = "page")]
    Page,
    #[serde(rename = "BLOCK", alias = "block")]
    Block,
    #[serde(rename = "FAIL", alias = "fail")]
    Fail,
    #[serde(rename = "DROP", alias = "drop")]
    Drop,
}

/// Declares the queue-settings keys once for both `[queue_defaults]` / `[address_settings.X]`
/// and `[[queues]]` (which adds `name`): `#[serde(flatten)]` would silently drop unknown keys.
macro_rules! settings_structs {
    ($($field:ident : $ty:ty),* $(,)?) => {
        /// Every key optional: absent inherits. For the optional addresses and
        /// `group_first_key`, an empty string means "none".
        #[derive(Debug, Default, Clone, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub(super) struct RawSettings {
            $(pub $field: Option<$ty>,)*
        }

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RawQueue {
            pub name: String,
            $(#[serde(default)] pub $field: Option<$ty>,)*
        }

        impl RawQueue {
            pub fn split(self) -> (String, RawSettings) {
                (self.name, RawSettings { $($field: self.$field,)* })
            }
        }
    };
}

settings_structs! {
    durable: bool,
    max_delivery_attempts: u32,
    dead_letter_address: String,
    expiry_address: String,
    max_memory_messages: usize,
    max_size_bytes: RawByteLimit,
    address_full_policy: RawAddressFullPolicy,
    default_prefetch: u32,
    default_message_delay: RawDuration,
    max_message_delay: RawDuration,
    delay_over_max: RawDelayOverMax,
    delay_headers: Vec<String>,
    redelivery_delay: RawDuration,
    redelivery_multiplier: f64,
    max_redelivery_delay: RawDuration,
    group_rebalance: bool,
    group_rebalance_pause_dispatch: bool,
    group_buckets: i32,
    group_first_key: String,
    consumers_before_dispatch: u32,
    delay_before_dispatch: RawTimeLimit,
    exclusive: bool,
    auto_create: bool,
}

/// A duration as written: text for `parse_duration`, or a TOML integer of milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RawDuration {
    Millis(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration such as \"250ms\", \"30s\", \"15m\" or an integer of milliseconds",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawDuration::Millis(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(RawDuration::Millis)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawDuration::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A time limit as written: `-1` (integer or text) for none, else a [`RawDuration`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RawTimeLimit {
    Unlimited,
    Limit(RawDuration),
}

impl<'de> Deserialize<'de> for RawTimeLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawTimeLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "-1 for no time limit, or a duration such as \"0\", \"500ms\", \"30s\" \
                     or an integer of milliseconds",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawTimeLimit::Limit(RawDuration::Millis(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match v {
                    -1 => Ok(RawTimeLimit::Unlimited),
                    _ => u64::try_from(v)
                        .map(|ms| RawTimeLimit::Limit(RawDuration::Millis(ms)))
                        .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(match v.trim() {
                    "-1" => RawTimeLimit::Unlimited,
                    _ => RawTimeLimit::Limit(RawDuration::Text(v.to_owned())),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A size as written: text for `parse_size`, or a TOML integer of bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RawSize {
    Bytes(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for RawSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 65536 or \"10MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawSize::Bytes(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(RawSize::Bytes)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawSize::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte limit as written: `-1` (integer or text) for the default meaning
/// (no limit, or a computed default), else a [`RawSize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RawByteLimit {
    Default,
    Size(RawSize),
}

impl<'de> Deserialize<'de> for RawByteLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawByteLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("-1, or a size such as 1048576 or \"512MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawByteLimit::Size(RawSize::Bytes(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match v {
                    -1 => Ok(RawByteLimit::Default),
                    _ => u64::try_from(v)
                        .map(|b| RawByteLimit::Size(RawSize::Bytes(b)))
                        .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(match v.trim() {
                    "-1" => RawByteLimit::Default,
                    _ => RawByteLimit::Size(RawSize::Text(v.to_owned())),
                })
            }
        }
        d.deserialize_any(V)
    }
}
