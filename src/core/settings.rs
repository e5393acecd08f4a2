//! Per-queue behaviour, resolved from address patterns the way Artemis resolves
//! `address-settings`: the most specific matching pattern wins, field by field.

use std::time::Duration;

use super::delay_headers::DelayHeader;
use super::memory::AddressFullPolicy;

/// What to do with a per-message delay above `max_message_delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum DelayOverMax {
    /// Refuse the message with a protocol error (the default).
    #[default]
    Reject,
    /// Deliver it at `max_message_delay` instead.
    Clamp,
}

/// Everything a queue needs to know about itself. Fields for grouping and delay
/// are here from the start so settings can be written before the features land.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSettings {
    /// Persist every message sent to the queue, whatever the sender asked.
    pub durable: bool,
    /// Deliveries before a message is moved to `dead_letter_address`.
    pub max_delivery_attempts: u32,
    pub dead_letter_address: Option<String>,
    /// Where expired messages go; dropped when `None`.
    pub expiry_address: Option<String>,
    /// Messages held in memory before new ones are paged to disk.
    pub max_memory_messages: usize,
    /// Bytes the queue's messages may hold in memory (Artemis's
    /// `max-size-bytes`); `None`: only the broker-wide limit applies.
    pub max_size_bytes: Option<u64>,
    /// What a new message meets while this queue's limit or the broker's is reached.
    pub address_full_policy: AddressFullPolicy,
    /// Unacknowledged deliveries per consumer unless the consumer asks for another window.
    pub default_prefetch: u32,
    /// Zaqar's `_default_message_delay`; zero makes this a normal queue.
    pub default_message_delay: Duration,
    pub max_message_delay: Duration,
    pub delay_over_max: DelayOverMax,
    /// Properties read as a per-message delay besides the broker-defined ones, in order
    /// of precedence (see [`super::delay_headers`]).
    pub delay_headers: Vec<DelayHeader>,
    pub redelivery_delay: Duration,
    pub redelivery_multiplier: f64,
    pub max_redelivery_delay: Duration,
    pub group_rebalance: bool,
    pub group_rebalance_pause_dispatch: bool,
    /// -1 tracks every group, 0 turns grouping off, N hashes groups into N buckets.
    pub group_buckets: i32,
    pub group_first_key: Option<String>,
    pub consumers_before_dispatch: u32,
    /// How long dispatch waits for `consumers_before_dispatch` after the first consumer
    /// attaches (Artemis's meaning): `None` waits without a time limit (Artemis's -1),
    /// zero does not wait at all.
    pub delay_before_dispatch: Option<Duration>,
    pub exclusive: bool,
    /// Create the queue when a client first names it.
    pub auto_create: bool,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            durable: false,
            max_delivery_attempts: 10,
            dead_letter_address: Some("DLQ".to_owned()),
            expiry_address: None,
            max_memory_messages: 10_000,
            max_size_bytes: None,
            address_full_policy: AddressFullPolicy::Page,
            default_prefetch: 1_000,
            default_message_delay: Duration::ZERO,
            max_message_delay: Duration::from_secs(900),
            delay_over_max: DelayOverMax::Reject,
            delay_headers: DelayHeader::defaults(),
            redelivery_delay: Duration::ZERO,
            redelivery_multiplier: 1.0,
            max_redelivery_delay: Duration::from_secs(600),
            group_rebalance: false,
            group_rebalance_pause_dispatch: false,
            group_buckets: -1,
            group_first_key: None,
            consumers_before_dispatch: 0,
            delay_before_dispatch: None,
            exclusive: false,
            auto_create: true,
        }
    }
}

/// Declares [`QueueSettingsOverride`] from one list of the settings' names, so
/// applying, merging, clearing and naming them cannot miss a field.
macro_rules! settings_override {
    ($($field:ident : $ty:ty),* $(,)?) => {
        /// A partial set of settings attached to an address pattern, or changed on
        /// one queue at run time; `None` inherits. Serialized when a queue's
        /// run-time changes are stored with it.
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct QueueSettingsOverride {
            $(
                #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
                pub $field: Option<$ty>,
            )*
        }

        impl QueueSettingsOverride {
            /// Every setting's name, as in the config file.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            pub fn apply_to(&self, s: &mut QueueSettings) {
                $( if let Some(v) = &self.$field { s.$field = v.clone(); } )*
            }

            /// Takes every setting `newer` sets, keeping the rest.
            pub fn merge(&mut self, newer: &QueueSettingsOverride) {
                $( if newer.$field.is_some() { self.$field = newer.$field.clone(); } )*
            }

            /// Back to inherited; false for a name that is no setting.
            pub fn clear(&mut self, name: &str) -> bool {
                match name {
                    $( stringify!($field) => { self.$field = None; true } )*
                    _ => false,
                }
            }

            /// The names of the settings it sets.
            pub fn names_set(&self) -> Vec<&'static str> {
                let mut names = Vec::new();
                $( if self.$field.is_some() { names.push(stringify!($field)); } )*
                names
            }

            pub fn is_empty(&self) -> bool {
                true $( && self.$field.is_none() )*
            }
        }
    };
}

/// A stored setting is one that was set, even when its value is `null` (no
/// dead-letter address): serde alone would read that back as "inherit".
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

settings_override! {
    durable: bool,
    max_delivery_attempts: u32,
    dead_letter_address: Option<String>,
    expiry_address: Option<String>,
    max_memory_messages: usize,
    max_size_bytes: Option<u64>,
    address_full_policy: AddressFullPolicy,
    default_prefetch: u32,
    default_message_delay: Duration,
    max_message_delay: Duration,
    delay_over_max: DelayOverMax,
    delay_headers: Vec<DelayHeader>,
    redelivery_delay: Duration,
    redelivery_multiplier: f64,
    max_redelivery_delay: Duration,
    group_rebalance: bool,
    group_rebalance_pause_dispatch: bool,
    group_buckets: i32,
    group_first_key: Option<String>,
    consumers_before_dispatch: u32,
    delay_before_dispatch: Option<Duration>,
    exclusive: bool,
    auto_create: bool,
}

/// An address pattern: words separated by `.`, `*` matches one word, `#` any
/// number of words (including none), as in Artemis and RabbitMQ topic bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPattern {
    text: String,
    words: Vec<String>,
}

impl AddressPattern {
    pub fn new(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            words: text.split('.').map(str::to_owned).collect(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, address: &str) -> bool {
        let words: Vec<&str> = address.split('.').collect();
        match_words(&self.words, &words)
    }

    /// Orders patterns so the more specific one sorts later (and wins when applied last):
    /// literal words beat `*`, which beats `#`.
    pub(crate) fn specificity(&self) -> (usize, usize, usize) {
        let literal = self.words.iter().filter(|w| *w != "*" && *w != "#").count();
        let single = self.words.iter().filter(|w| *w == "*").count();
        let no_hash = usize::from(!self.words.iter().any(|w| w == "#"));
        (no_hash, literal, single)
    }
}

fn match_words(pattern: &[String], words: &[&str]) -> bool {
    match pattern.split_first() {
        None => words.is_empty(),
        Some((first, rest)) if first == "#" => {
            (0..=words.len()).any(|skip| match_words(rest, &words[skip..]))
        }
        Some((first, rest)) => match words.split_first() {
            Some((word, more)) if first == "*" || first == word => match_words(rest, more),
            _ => false,
        },
    }
}

/// The broker-wide defaults plus the per-pattern overrides.
#[derive(Debug, Clone, Default)]
pub struct SettingsTable {
    defaults: QueueSettings,
    patterns: Vec<(AddressPattern, QueueSettingsOverride)>,
}

impl SettingsTable {
    pub fn new(defaults: QueueSettings) -> Self {
        Self {
            defaults,
            patterns: Vec::new(),
        }
    }

    pub fn add(&mut self, pattern: AddressPattern, settings: QueueSettingsOverride) {
        self.patterns.push((pattern, settings));
        self.patterns
            .sort_by_key(|(pattern, _)| pattern.specificity());
    }

    pub fn defaults(&self) -> &QueueSettings {
        &self.defaults
    }

    /// Every delay header any queue may read: the defaults' and every pattern's.
    pub fn all_delay_headers(&self) -> impl Iterator<Item = &DelayHeader> {
        let listed = self
            .patterns
            .iter()
            .filter_map(|(_, over)| over.delay_headers.as_ref())
            .flatten();
        self.defaults.delay_headers.iter().chain(listed)
    }

    /// Settings for a queue, most specific matching pattern applied last.
    pub fn resolve(&self, queue: &str) -> QueueSettings {
        let mut settings = self.defaults.clone();
        for (pattern, over) in &self.patterns {
            if pattern.matches(queue) {
                over.apply_to(&mut settings);
            }
        }
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_words() {
        let p = AddressPattern::new("orders.*");
        assert!(p.matches("orders.eu"));
        assert!(!p.matches("orders"));
        assert!(!p.matches("orders.eu.paris"));
        let h = AddressPattern::new("orders.#");
        assert!(h.matches("orders"));
        assert!(h.matches("orders.eu.paris"));
        assert!(!h.matches("invoices.eu"));
        assert!(AddressPattern::new("#").matches("anything.at.all"));
    }

    #[test]
    fn most_specific_pattern_wins() {
        let mut table = SettingsTable::new(QueueSettings::default());
        table.add(
            AddressPattern::new("orders.eu"),
            QueueSettingsOverride {
                max_delivery_attempts: Some(3),
                ..Default::default()
            },
        );
        table.add(
            AddressPattern::new("#"),
            QueueSettingsOverride {
                max_delivery_attempts: Some(5),
                durable: Some(true),
                ..Default::default()
            },
        );
        let s = table.resolve("orders.eu");
        assert_eq!(s.max_delivery_attempts, 3);
        assert!(s.durable);
        assert_eq!(table.resolve("x").max_delivery_attempts, 5);
    }
}
