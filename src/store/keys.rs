//! Key layouts. Big-endian so RocksDB's byte order is numeric order, which
//! makes "next messages of a queue" and "what is due next" plain range scans.

/// `queue id (4) ++ sequence (8)` in the `messages` column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageKey {
    pub queue: u32,
    pub seq: u64,
}

impl MessageKey {
    pub const LEN: usize = 12;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut key = [0u8; Self::LEN];
        key[..4].copy_from_slice(&self.queue.to_be_bytes());
        key[4..].copy_from_slice(&self.seq.to_be_bytes());
        key
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let queue = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
        let seq = u64::from_be_bytes(bytes.get(4..Self::LEN)?.try_into().ok()?);
        Some(Self { queue, seq })
    }
}

/// `due time ms (8) ++ queue id (4) ++ sequence (8)` in the `scheduled` column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScheduleKey {
    pub due_ms: u64,
    pub queue: u32,
    pub seq: u64,
}

impl ScheduleKey {
    pub const LEN: usize = 20;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut key = [0u8; Self::LEN];
        key[..8].copy_from_slice(&self.due_ms.to_be_bytes());
        key[8..12].copy_from_slice(&self.queue.to_be_bytes());
        key[12..].copy_from_slice(&self.seq.to_be_bytes());
        key
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let due_ms = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let queue = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?);
        let seq = u64::from_be_bytes(bytes.get(12..Self::LEN)?.try_into().ok()?);
        Some(Self { due_ms, queue, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically() {
        let a = MessageKey { queue: 1, seq: 255 }.encode();
        let b = MessageKey { queue: 1, seq: 256 }.encode();
        let c = MessageKey { queue: 2, seq: 0 }.encode();
        assert!(a < b && b < c);
        let d = ScheduleKey {
            due_ms: 10,
            queue: 9,
            seq: 9,
        }
        .encode();
        let e = ScheduleKey {
            due_ms: 11,
            queue: 0,
            seq: 0,
        }
        .encode();
        assert!(d < e);
        assert_eq!(
            ScheduleKey::decode(&d),
            Some(ScheduleKey {
                due_ms: 10,
                queue: 9,
                seq: 9
            })
        );
        assert_eq!(
            MessageKey::decode(&a),
            Some(MessageKey { queue: 1, seq: 255 })
        );
    }
}
