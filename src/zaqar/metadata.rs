//! Queue metadata: Zaqar's reserved `_` keys, which change how the queue
//! treats messages posted and claimed through this API, and the user's own
//! keys, kept as given.
//!
//! Everything about where metadata lives is behind [`ZaqarState`]'s
//! methods. It lives in memory for now: a restart forgets it (see the
//! README's Zaqar section).

use super::error::ZaqarError;
use super::limits;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The reserved keys Weir understands; any other `_` key is refused.
const RESERVED: [&str; 6] = [
    "_default_message_delay",
    "_default_message_ttl",
    "_max_messages_post_size",
    "_max_claim_count",
    "_dead_letter_queue",
    "_dead_letter_queue_messages_ttl",
];

/// What a queue's reserved keys say, with Zaqar's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRules {
    /// Seconds; 0 is a normal queue, where a message's `delay` is ignored.
    pub default_message_delay: u64,
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
            default_message_delay: 0,
            default_message_ttl: limits::DEFAULT_MESSAGE_TTL,
            max_messages_post_size: limits::MAX_MESSAGES_POST_SIZE,
            max_claim_count: None,
            dead_letter_queue: None,
            dead_letter_queue_messages_ttl: None,
        }
    }
}

/// The Zaqar API's own state: queue metadata, by Weir queue name.
#[derive(Default)]
pub struct ZaqarState {
    metadata: Mutex<HashMap<String, Map<String, Value>>>,
}

impl ZaqarState {
    pub fn get(&self, queue: &str) -> Map<String, Value> {
        self.metadata.lock().get(queue).cloned().unwrap_or_default()
    }

    /// Replaces a queue's metadata, checked first.
    pub fn set(&self, queue: &str, metadata: Map<String, Value>) -> Result<(), ZaqarError> {
        rules_of(&metadata)?;
        self.metadata.lock().insert(queue.to_owned(), metadata);
        Ok(())
    }

    pub fn forget(&self, queue: &str) {
        self.metadata.lock().remove(queue);
    }

    pub fn rules(&self, queue: &str) -> QueueRules {
        let metadata = self.metadata.lock();
        metadata
            .get(queue)
            .and_then(|m| rules_of(m).ok())
            .unwrap_or_default()
    }
}

fn seconds(
    metadata: &Map<String, Value>,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, ZaqarError> {
    let Some(value) = metadata.get(key) else {
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
        rules.default_message_delay = d;
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
    if let Some(dlq) = metadata.get("_dead_letter_queue") {
        let name = dlq.as_str().ok_or_else(|| {
            ZaqarError::BadRequest("The _dead_letter_queue must be a queue name.".into())
        })?;
        super::names::check_queue_name(name)?;
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
        assert_eq!(rules.default_message_delay, 30);
        assert_eq!(rules.max_claim_count, Some(2));
        assert_eq!(rules.dead_letter_queue.as_deref(), Some("dead"));
        assert!(rules_of(&map(json!({"_unknown": 1}))).is_err());
        assert!(rules_of(&map(json!({"_default_message_delay": 901}))).is_err());
        assert!(rules_of(&map(json!({"_default_message_ttl": 59}))).is_err());
        assert!(rules_of(&map(json!({"_dead_letter_queue": "a/b"}))).is_err());
    }
}
