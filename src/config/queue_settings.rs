//! Queue settings as written (`[queue_defaults]`, `[address_settings.X]`, `[[queues]]`)
//! and as the management API changes them at run time: the same keys, the same values,
//! the same checks.

use serde_json::{Map, Value};

use crate::core::delay_headers::DelayHeader;
use crate::core::memory::AddressFullPolicy;
use crate::core::settings::{DelayOverMax, QueueSettings, QueueSettingsOverride};

use super::convert::{byte_limit, duration};
use super::error::{ConfigError, KeyPath, Problem};
use super::raw::{RawAddressFullPolicy, RawDelayOverMax, RawDuration, RawSettings, RawTimeLimit};
use super::units::format_duration;

/// A change to one queue's settings: what it sets, and which settings go back to
/// what the config gives the queue.
#[derive(Debug, Default, PartialEq)]
pub struct SettingsChange {
    pub set: QueueSettingsOverride,
    pub cleared: Vec<&'static str>,
}

/// Reads a change from JSON with the config file's keys and values (durations as
/// text such as `"30s"` or integer milliseconds, sizes as text or bytes, `-1` for
/// none where the config allows it); `null` puts a key back to inherited. Unknown
/// keys and bad values are refused with the key's name.
pub fn settings_change(body: &Map<String, Value>) -> Result<SettingsChange, ConfigError> {
    let mut cleared = Vec::new();
    let mut given = Map::new();
    for (name, value) in body {
        if value.is_null() {
            let known = QueueSettingsOverride::NAMES.iter().find(|n| **n == name);
            let Some(known) = known else {
                return Err(ConfigError::key(
                    KeyPath::root(name),
                    Problem::Schema(format!(
                        "unknown setting (known: {})",
                        QueueSettingsOverride::NAMES.join(", ")
                    )),
                ));
            };
            cleared.push(*known);
        } else {
            given.insert(name.clone(), value.clone());
        }
    }
    let raw: RawSettings = serde_path_to_error::deserialize(Value::Object(given)).map_err(|e| {
        let key = KeyPath::from_serde(e.path());
        ConfigError::key(key, Problem::Schema(e.into_inner().to_string()))
    })?;
    let set = settings_override(&raw, &KeyPath::default())?;
    Ok(SettingsChange { set, cleared })
}

/// Checks between fields of settings as a queue would see them, for the
/// management API's run-time changes.
pub fn check_queue_settings(s: &QueueSettings) -> Result<(), ConfigError> {
    check_resolved(s, &KeyPath::default())
}

/// Converts one `[queue_defaults]`, `[address_settings.X]` or `[[queues]]` table.
pub(super) fn settings_override(
    raw: &RawSettings,
    key: &KeyPath,
) -> Result<QueueSettingsOverride, ConfigError> {
    let dur = |v: &Option<RawDuration>, field: &str| {
        v.as_ref()
            .map(|d| duration(d, &key.field(field)))
            .transpose()
    };
    // Absent inherits; an explicit empty string clears the inherited value.
    let optional_text = |v: &Option<String>| {
        v.as_ref()
            .map(|s| if s.is_empty() { None } else { Some(s.clone()) })
    };
    if let Some(m) = raw.redelivery_multiplier {
        // Written so that NaN fails too.
        if !(m >= 1.0 && m.is_finite()) {
            return Err(ConfigError::key(
                key.field("redelivery_multiplier"),
                Problem::BelowMinimum(1.0),
            ));
        }
    }
    if let Some(b) = raw.group_buckets {
        if b < -1 {
            return Err(ConfigError::key(
                key.field("group_buckets"),
                Problem::BelowMinimum(-1.0),
            ));
        }
    }
    if raw.max_delivery_attempts == Some(0) {
        return Err(ConfigError::key(
            key.field("max_delivery_attempts"),
            Problem::BelowMinimum(1.0),
        ));
    }
    if raw.default_prefetch == Some(0) {
        return Err(ConfigError::key(
            key.field("default_prefetch"),
            Problem::BelowMinimum(1.0),
        ));
    }
    Ok(QueueSettingsOverride {
        durable: raw.durable,
        max_delivery_attempts: raw.max_delivery_attempts,
        dead_letter_address: optional_text(&raw.dead_letter_address),
        expiry_address: optional_text(&raw.expiry_address),
        max_memory_messages: raw.max_memory_messages,
        max_size_bytes: raw
            .max_size_bytes
            .as_ref()
            .map(|limit| byte_limit(Some(limit), &key.field("max_size_bytes")))
            .transpose()?,
        address_full_policy: raw.address_full_policy.map(|p| match p {
            RawAddressFullPolicy::Page => AddressFullPolicy::Page,
            RawAddressFullPolicy::Block => AddressFullPolicy::Block,
            RawAddressFullPolicy::Fail => AddressFullPolicy::Fail,
            RawAddressFullPolicy::Drop => AddressFullPolicy::Drop,
        }),
        default_prefetch: raw.default_prefetch,
        default_message_delay: dur(&raw.default_message_delay, "default_message_delay")?,
        max_message_delay: dur(&raw.max_message_delay, "max_message_delay")?,
        delay_over_max: raw.delay_over_max.map(|d| match d {
            RawDelayOverMax::Reject => DelayOverMax::Reject,
            RawDelayOverMax::Clamp => DelayOverMax::Clamp,
        }),
        delay_headers: raw
            .delay_headers
            .as_deref()
            .map(|list| delay_headers(list, &key.field("delay_headers")))
            .transpose()?,
        redelivery_delay: dur(&raw.redelivery_delay, "redelivery_delay")?,
        redelivery_multiplier: raw.redelivery_multiplier,
        max_redelivery_delay: dur(&raw.max_redelivery_delay, "max_redelivery_delay")?,
        group_rebalance: raw.group_rebalance,
        group_rebalance_pause_dispatch: raw.group_rebalance_pause_dispatch,
        group_buckets: raw.group_buckets,
        group_first_key: optional_text(&raw.group_first_key),
        consumers_before_dispatch: raw.consumers_before_dispatch,
        delay_before_dispatch: raw
            .delay_before_dispatch
            .as_ref()
            .map(|limit| match limit {
                RawTimeLimit::Unlimited => Ok(None),
                RawTimeLimit::Limit(d) => {
                    duration(d, &key.field("delay_before_dispatch")).map(Some)
                }
            })
            .transpose()?,
        exclusive: raw.exclusive,
        auto_create: raw.auto_create,
    })
}

/// `delay_headers`: each `NAME:ms` or `NAME:s`, each name once.
fn delay_headers(list: &[String], key: &KeyPath) -> Result<Vec<DelayHeader>, ConfigError> {
    let mut headers: Vec<DelayHeader> = Vec::with_capacity(list.len());
    for (i, text) in list.iter().enumerate() {
        let header = DelayHeader::parse(text).map_err(|e| ConfigError::key(key.index(i), e))?;
        if headers.iter().any(|h| h.name == header.name) {
            return Err(ConfigError::key(
                key.index(i),
                Problem::Duplicate(header.name.to_string()),
            ));
        }
        headers.push(header);
    }
    Ok(headers)
}

/// Checks between fields, on settings as a queue would see them.
pub(super) fn check_resolved(s: &QueueSettings, key: &KeyPath) -> Result<(), ConfigError> {
    let pairs = [
        (
            "default_message_delay",
            s.default_message_delay,
            "max_message_delay",
            s.max_message_delay,
        ),
        (
            "redelivery_delay",
            s.redelivery_delay,
            "max_redelivery_delay",
            s.max_redelivery_delay,
        ),
    ];
    for (field, value, other, max) in pairs {
        if value > max {
            return Err(ConfigError::key(
                key.field(field),
                Problem::Exceeds {
                    value: format_duration(value),
                    other,
                    other_value: format_duration(max),
                },
            ));
        }
    }
    Ok(())
}
