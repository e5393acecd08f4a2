//! Queue metadata: Zaqar's reserved `_` keys, which change how the queue
//! treats messages posted and claimed through this API, and the user's own
//! keys, kept as given.
//!
//! Metadata is stored with the Weir queue (its record keeps it across
//! restarts and forgets it with the queue). `_default_message_delay` is the
//! queue's `default_message_delay` setting: setting it here sets that, so a
//! queue Zaqar made delayed delays what STOMP and AMQP clients send to it too,
//! and what this API shows and applies is read back from the setting, so a
//! change made through the management API or the config holds here as well.

use super::error::ZaqarError;
use super::limits;
use crate::config::check_queue_settings;
use crate::core::queue::Queue;
use crate::core::security::Principal;
use crate::core::{Broker, CoreError};
use serde_json::{Map, Value};
use std::time::Duration;

/// The reserved keys Weir understands; any other `_` key is refused.
const RESERVED: [&str; 7] = [
    "_default_message_delay",
    "_default_message_ttl",
    "_max_messages_post_size",
    "_max_claim_count",
    "_dead_letter_queue",
    "_dead_letter_queue_messages_ttl",
    "_enable_encrypt_messages",
];

pub fn is_reserved(key: &str) -> bool {
    RESERVED.contains(&key)
}

/// `metadata` as a GET shows it: as Zaqar's queue resource does, every
/// reserved key with a default value that is unset (or set to something
/// false: `null`, `0`, `false`, `""`) shows that default, the value this
/// API applies when the key is not set. So a client sees which ttl, post
/// size and delay hold.
///
/// Zaqar also shows `_max_claim_count`, `_dead_letter_queue` and
/// `_dead_letter_queue_messages_ttl` as `null` when unset; Weir leaves them
/// out. python-zaqarclient's `queue.metadata(new)` adds a key it read as
/// `null` and then removes it again in the same patch (it removes every key
/// it read and was not told to replace), so against a server that shows
/// them it cannot set a dead-letter queue at all.
pub fn shown(mut metadata: Map<String, Value>) -> Map<String, Value> {
    let rules = QueueRules::default();
    let defaults = [
        (
            "_max_messages_post_size",
            Value::from(rules.max_messages_post_size),
        ),
        (
            "_default_message_ttl",
            Value::from(rules.default_message_ttl),
        ),
        (
            "_default_message_delay",
            Value::from(rules.default_message_delay_ms / 1000),
        ),
        ("_enable_encrypt_messages", Value::Bool(false)),
    ];
    for (key, default) in defaults {
        if metadata.get(key).is_none_or(falsy) {
            metadata.insert(key.to_owned(), default);
        }
    }
    metadata
}

/// Python's falsehood, which Zaqar's `if not metadata.get(key)` tests.
fn falsy(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// What a queue's reserved keys say, with Zaqar's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRules {
    /// Milliseconds (the queue setting's precision, Zaqar's keys give whole
    /// seconds); 0 is a normal queue, where a message's `delay` is ignored.
    pub default_message_delay_ms: u64,
    pub default_message_ttl: u64,
    pub max_messages_post_size: usize,
    /// Claims a message may take before it moves to the dead-letter queue.
    pub max_claim_count: Option<u32>,
    /// The Zaqar name of the dead-letter queue (same project).
    pub dead_letter_queue: Option<String>,
    /// Seconds a dead-lettered message lives there; `None` keeps its own ttl.
    pub dead_letter_queue_messages_ttl: Option<u64>,
}

impl Default for QueueRules {
    fn default() -> Self {
        QueueRules {
            default_message_delay_ms: 0,
            default_message_ttl: limits::DEFAULT_MESSAGE_TTL,
            max_messages_post_size: limits::MAX_MESSAGES_POST_SIZE,
            max_claim_count: None,
            dead_letter_queue: None,
            dead_letter_queue_messages_ttl: None,
        }
    }
}

/// A queue's metadata (empty for a queue that has none, or none readable),
/// its `_default_message_delay` the queue's setting now: in whole seconds,
/// rounded up so a delayed queue never shows as a normal one.
pub fn get(queue: &Queue) -> Map<String, Value> {
    let mut metadata: Map<String, Value> = queue
        .changes()
        .metadata
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let delay_ms = delay_setting_ms(queue);
    match delay_ms {
        0 => metadata.remove("_default_message_delay"),
        ms => metadata.insert(
            "_default_message_delay".into(),
            Value::from(ms.div_ceil(1000)),
        ),
    };
    metadata
}

/// The rules a queue's metadata sets, with the default delay its setting holds.
pub fn rules(queue: &Queue) -> QueueRules {
    QueueRules {
        default_message_delay_ms: delay_setting_ms(queue),
        ..rules_of(&get(queue)).unwrap_or_default()
    }
}

fn delay_setting_ms(queue: &Queue) -> u64 {
    u64::try_from(queue.settings().default_message_delay.as_millis()).unwrap_or(u64::MAX)
}

/// Replaces a queue's metadata, checked first, and gives the queue the default
/// delay it names (none: no default delay), as Zaqar's PUT and PATCH do;
/// answered once both are stored.
pub async fn set(
    broker: &Broker,
    who: &Principal,
    queue: &str,
    metadata: Map<String, Value>,
) -> Result<(), ZaqarError> {
    let rules = rules_of(&metadata)?;
    let delay = Duration::from_millis(rules.default_message_delay_ms);
    let (_, settings_written) = broker.change_queue_settings_as(
        queue,
        who,
        |layer| match delay.is_zero() {
            true => {
                layer.clear("default_message_delay");
            }
            false => layer.default_message_delay = Some(delay),
        },
        |settings| check_queue_settings(settings).map_err(|e| e.reason()),
    )?;
    store(broker, who, queue, metadata).await?;
    settings_written.wait().await.map_err(CoreError::Store)?;
    Ok(())
}

/// [`set`] for the management API, where the default delay is a setting of its
/// own: metadata without `_default_message_delay` leaves the queue's delay as it is.
pub async fn replace_keeping_delay(
    broker: &Broker,
    who: &Principal,
    queue: &str,
    metadata: Map<String, Value>,
) -> Result<(), ZaqarError> {
    if metadata.contains_key("_default_message_delay") {
        return set(broker, who, queue, metadata).await;
    }
    rules_of(&metadata)?;
    store(broker, who, queue, metadata).await
}

/// Stores `metadata` with the queue; answered once it is written.
async fn store(
    broker: &Broker,
    who: &Principal,
    queue: &str,
    metadata: Map<String, Value>,
) -> Result<(), ZaqarError> {
    let text = (!metadata.is_empty()).then(|| Value::Object(metadata).to_string());
    let written = broker.set_queue_metadata_as(queue, who, text)?;
    written.wait().await.map_err(CoreError::Store)?;
    Ok(())
}

fn seconds(
    metadata: &Map<String, Value>,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, ZaqarError> {
    // `null` is unset: Zaqar shows some unset keys so, and a client that
    // read them there may send them back.
    let Some(value) = metadata.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match value.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(ZaqarError::BadRequest(format!(
            "The {key} must be an integer from {min} to {max}."
        ))),
    }
}

/// The rules `metadata` sets, or why it is refused.
pub fn rules_of(metadata: &Map<String, Value>) -> Result<QueueRules, ZaqarError> {
    if let Some(unknown) = metadata
        .keys()
        .find(|k| k.starts_with('_') && !RESERVED.contains(&k.as_str()))
    {
        return Err(ZaqarError::BadRequest(format!(
            "Unknown reserved metadata key '{unknown}': keys starting with '_' are reserved; the known ones are {}.",
            RESERVED.join(", ")
        )));
    }
    let mut rules = QueueRules::default();
    if let Some(d) = seconds(
        metadata,
        "_default_message_delay",
        0,
        limits::MAX_MESSAGE_DELAY,
    )? {
        rules.default_message_delay_ms = d * 1000;
    }
    if let Some(t) = seconds(
        metadata,
        "_default_message_ttl",
        limits::MIN_MESSAGE_TTL,
        limits::MAX_MESSAGE_TTL,
    )? {
        rules.default_message_ttl = t;
    }
    if let Some(size) = seconds(
        metadata,
        "_max_messages_post_size",
        1,
        limits::MAX_MESSAGES_POST_SIZE as u64,
    )? {
        rules.max_messages_post_size = size as usize;
    }
    if let Some(count) = seconds(metadata, "_max_claim_count", 1, u64::from(u32::MAX))? {
        rules.max_claim_count = Some(count as u32);
    }
    rules.dead_letter_queue_messages_ttl = seconds(
        metadata,
        "_dead_letter_queue_messages_ttl",
        limits::MIN_MESSAGE_TTL,
        limits::MAX_MESSAGE_TTL,
    )?;
    match metadata.get("_enable_encrypt_messages") {
        None | Some(Value::Null | Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            return Err(ZaqarError::BadRequest(
                "The _enable_encrypt_messages cannot be true: Weir does not encrypt messages."
                    .into(),
            ))
        }
        Some(_) => {
            return Err(ZaqarError::BadRequest(
                "The _enable_encrypt_messages must be a boolean.".into(),
            ))
        }
    }
    if let Some(dlq) = metadata.get("_dead_letter_queue").filter(|v| !v.is_null()) {
        let name = dlq.as_str().ok_or_else(|| {
            ZaqarError::BadRequest("The _dead_letter_queue must be a queue name.".into())
        })?;
        // Named with the key, so the client knows which part was refused.
        super::names::check_queue_name(name).map_err(|e| {
            ZaqarError::BadRequest(format!("The _dead_letter_queue is not a queue name: {e}"))
        })?;
        rules.dead_letter_queue = Some(name.to_owned());
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn reserved_keys_are_checked_and_user_keys_kept() {
        let rules = rules_of(&map(json!({
            "_default_message_delay": 30,
            "_max_claim_count": 2,
            "_dead_letter_queue": "dead",
            "colour": "blue",
        })))
        .unwrap();
        assert_eq!(rules.default_message_delay_ms, 30_000);
        assert_eq!(rules.max_claim_count, Some(2));
        assert_eq!(rules.dead_letter_queue.as_deref(), Some("dead"));
        assert!(rules_of(&map(json!({"_unknown": 1}))).is_err());
        assert!(rules_of(&map(json!({"_default_message_delay": 901}))).is_err());
        assert!(rules_of(&map(json!({"_default_message_ttl": 59}))).is_err());
        assert!(rules_of(&map(json!({"_dead_letter_queue": "a/b"}))).is_err());
    }

    #[test]
    fn unset_or_false_reserved_keys_show_their_defaults() {
        let shown = shown(map(json!({
            "_default_message_ttl": 120,
            "_max_claim_count": null,
            "_default_message_delay": 0,
            "colour": "",
        })));
        assert_eq!(
            Value::Object(shown.clone()),
            json!({
                "_default_message_ttl": 120,
                "_max_messages_post_size": limits::MAX_MESSAGES_POST_SIZE,
                "_default_message_delay": 0,
                "_max_claim_count": null,
                "_enable_encrypt_messages": false,
                "colour": "",
            })
        );
        // What a GET shows is accepted back as it is.
        assert_eq!(
            rules_of(&shown).unwrap(),
            QueueRules {
                default_message_ttl: 120,
                ..QueueRules::default()
            }
        );
        assert!(rules_of(&map(json!({"_enable_encrypt_messages": true}))).is_err());
        assert!(rules_of(&map(json!({"_enable_encrypt_messages": "no"}))).is_err());
    }

    #[test]
    fn a_refused_reserved_value_names_its_key() {
        for (key, bad) in [
            ("_dead_letter_queue", json!("a/b")),
            ("_dead_letter_queue", json!(5)),
            ("_dead_letter_queue_messages_ttl", json!(59)),
            ("_max_claim_count", json!(0)),
            ("_max_messages_post_size", json!(262_145)),
            ("_default_message_ttl", json!("60")),
            ("_enable_encrypt_messages", json!(true)),
        ] {
            let mut metadata = Map::new();
            metadata.insert(key.to_owned(), bad.clone());
            match rules_of(&metadata) {
                Err(ZaqarError::BadRequest(why)) => {
                    assert!(why.contains(key), "{key}={bad}: {why}")
                }
                other => panic!("{key}={bad}: {other:?}"),
            }
        }
    }
}
