//! A queue's record in the store: its id, the topic of a durable subscription, and what
//! management changed on it at run time (settings, paused dispatch), so a restart finds
//! the queue as it was left.
//!
//! Version 1 is `[1][id: u32][topic bytes to the end]`; version 2 adds the changes:
//! `[2][id: u32][topic length: u16][topic][changes as JSON]`. A queue nobody changed
//! keeps a version 1 record.

use super::settings::QueueSettingsOverride;
use bytes::{BufMut, Bytes, BytesMut};

const PLAIN: u8 = 1;
const WITH_CHANGES: u8 = 2;

/// What management changed on one queue.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct QueueChanges {
    /// Settings set on this queue, over what the config gives it.
    pub settings: QueueSettingsOverride,
    /// Dispatch paused (`/api/queues/{name}/pause`).
    pub paused: bool,
    /// Metadata an API keeps with the queue (Zaqar's queue metadata, as JSON
    /// text); the broker stores it and does not read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

impl QueueChanges {
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty() && !self.paused && self.metadata.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueRecord {
    pub id: u32,
    /// The topic a durable subscription's queue is bound to.
    pub topic: Option<String>,
    pub changes: QueueChanges,
}

/// A record this broker cannot read.
#[derive(Debug, PartialEq, Eq)]
pub struct Unreadable;

impl QueueRecord {
    /// The record of a new queue.
    pub fn new(id: u32, topic: Option<&str>) -> Self {
        QueueRecord {
            id,
            topic: topic.map(str::to_owned),
            changes: QueueChanges::default(),
        }
    }

    pub fn encode(&self) -> Bytes {
        let topic = self.topic.as_deref().unwrap_or("").as_bytes();
        let mut record = BytesMut::with_capacity(7 + topic.len());
        if self.changes.is_empty() {
            record.put_u8(PLAIN);
            record.put_u32(self.id);
            record.put_slice(topic);
            return record.freeze();
        }
        record.put_u8(WITH_CHANGES);
        record.put_u32(self.id);
        // Topic names are at most 255 bytes (`validate_name`).
        record.put_u16(topic.len() as u16);
        record.put_slice(topic);
        // Serializing plain data into memory cannot fail.
        let changes = serde_json::to_vec(&self.changes).unwrap_or_default();
        record.put_slice(&changes);
        record.freeze()
    }

    pub fn decode(record: &[u8]) -> Result<Self, Unreadable> {
        let (&version, rest) = record.split_first().ok_or(Unreadable)?;
        let id = u32::from_be_bytes(
            rest.get(..4)
                .ok_or(Unreadable)?
                .try_into()
                .map_err(|_| Unreadable)?,
        );
        let rest = &rest[4..];
        let text = |bytes: &[u8]| -> Result<Option<String>, Unreadable> {
            match bytes.is_empty() {
                true => Ok(None),
                false => std::str::from_utf8(bytes)
                    .map(|t| Some(t.to_owned()))
                    .map_err(|_| Unreadable),
            }
        };
        match version {
            PLAIN => Ok(QueueRecord {
                id,
                topic: text(rest)?,
                changes: QueueChanges::default(),
            }),
            WITH_CHANGES => {
                let len = usize::from(u16::from_be_bytes(
                    rest.get(..2)
                        .ok_or(Unreadable)?
                        .try_into()
                        .map_err(|_| Unreadable)?,
                ));
                let topic = rest.get(2..2 + len).ok_or(Unreadable)?;
                let changes = serde_json::from_slice(&rest[2 + len..]).map_err(|_| Unreadable)?;
                Ok(QueueRecord {
                    id,
                    topic: text(topic)?,
                    changes,
                })
            }
            _ => Err(Unreadable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::memory::AddressFullPolicy;
    use std::time::Duration;

    fn round_trip(record: QueueRecord) {
        let bytes = record.encode();
        assert_eq!(QueueRecord::decode(&bytes), Ok(record));
    }

    #[test]
    fn records_without_changes_stay_version_one() {
        let plain = QueueRecord {
            id: 7,
            topic: Some("prices".into()),
            changes: QueueChanges::default(),
        };
        assert_eq!(plain.encode()[0], PLAIN);
        round_trip(plain);
        round_trip(QueueRecord {
            id: 8,
            topic: None,
            changes: QueueChanges::default(),
        });
    }

    #[test]
    fn changes_survive_the_round_trip_including_a_cleared_address() {
        let changes = QueueChanges {
            settings: QueueSettingsOverride {
                redelivery_delay: Some(Duration::from_millis(1500)),
                dead_letter_address: Some(None),
                expiry_address: Some(Some("expired".into())),
                max_size_bytes: Some(Some(4096)),
                address_full_policy: Some(AddressFullPolicy::Block),
                delay_before_dispatch: Some(None),
                delay_headers: Some(crate::core::delay_headers::DelayHeader::defaults()),
                exclusive: Some(true),
                ..Default::default()
            },
            paused: true,
            metadata: Some("{\"colour\": \"blue\"}".into()),
        };
        for topic in [None, Some("prices".to_owned())] {
            let record = QueueRecord {
                id: u32::MAX,
                topic,
                changes: changes.clone(),
            };
            assert_eq!(record.encode()[0], WITH_CHANGES);
            round_trip(record);
        }
    }

    #[test]
    fn damaged_records_are_refused() {
        for bad in [
            &[][..],
            &[1, 0, 0],
            &[3, 0, 0, 0, 1],
            &[2, 0, 0, 0, 1, 0, 9, b'x'],
            &[2, 0, 0, 0, 1, 0, 0, b'{'],
        ] {
            assert_eq!(QueueRecord::decode(bad), Err(Unreadable), "{bad:?}");
        }
    }
}
