//! The writer after a failed write: what it still owes the disk.

use super::Op;
use crate::store::keys::MessageKey;
use std::time::{Duration, Instant};

/// A change that must still be written after a failed write: everything but
/// new messages (whose senders were told it failed). Acknowledgements above
/// all: they took effect in memory, and must not come back after a restart.
pub(super) enum Pending {
    Op(Op),
    DeleteRange(MessageKey, MessageKey),
}

/// After a failed write RocksDB refuses every later one (its background
/// error) until it is reopened. Until then the writer writes nothing:
/// new messages are refused, every other change waits here, and once the
/// disk has room again the writer reopens the database and writes them.
pub(in crate::store) struct Failed {
    pub(super) active: bool,
    pub(super) pending: Vec<Pending>,
    /// The current commit's changes other than new messages, kept in case
    /// its write fails.
    pub(super) retained: Vec<Pending>,
    pub(super) next_attempt: Instant,
    pub(super) backoff: Duration,
}

/// How often a store that failed a write tries to write again, at first.
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(250);
pub(super) const RETRY_MAX: Duration = Duration::from_secs(5);

impl Failed {
    pub fn new(active: bool) -> Self {
        Self {
            active,
            pending: Vec::new(),
            retained: Vec::new(),
            next_attempt: Instant::now(),
            backoff: RETRY_FIRST,
        }
    }

    pub(super) fn retain(&mut self, op: &Op) {
        let kept = match op {
            Op::PutMessage { .. } | Op::PutScheduled { .. } | Op::Barrier => return,
            Op::DeleteMessage { key } => Op::DeleteMessage { key: *key },
            Op::DeleteScheduled { key } => Op::DeleteScheduled { key: *key },
            Op::PutQueue { name, record } => Op::PutQueue {
                name: name.clone(),
                record: record.clone(),
            },
            Op::DeleteQueue { name } => Op::DeleteQueue { name: name.clone() },
            Op::PurgeQueue { queue } => Op::PurgeQueue { queue: *queue },
            Op::PutClaim { id, record } => Op::PutClaim {
                id: id.clone(),
                record: record.clone(),
            },
            Op::DeleteClaim { id } => Op::DeleteClaim { id: id.clone() },
        };
        self.retained.push(Pending::Op(kept));
    }
}
