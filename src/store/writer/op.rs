//! What the writer is asked to do: the ops, and how durable "written" is.

use crate::store::keys::{MessageKey, ScheduleKey};
use crate::store::record::Record;
use bytes::Bytes;
use std::time::Duration;

/// When a write counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync every batch before completing it.
    Always,
    /// Gather writes for up to `window`, then one fsync for all of them.
    Batched { window: Duration },
    /// Hand writes to the OS without fsync: survives a broker crash, not a power loss.
    Never,
}

/// One change. Several ops submitted together are applied atomically.
#[derive(Debug)]
pub enum Op {
    PutMessage {
        key: MessageKey,
        record: Record,
        /// The queue keeps it in memory and has consumers, so it may be
        /// acknowledged before it is written (see `holding`). False for a
        /// queue without consumers, and for a message paged straight to disk:
        /// the queue reads those back in order, so they are written in order,
        /// at once.
        consumable: bool,
    },
    DeleteMessage {
        key: MessageKey,
    },
    PutScheduled {
        key: ScheduleKey,
        record: Bytes,
    },
    DeleteScheduled {
        key: ScheduleKey,
    },
    PutQueue {
        name: String,
        record: Bytes,
    },
    DeleteQueue {
        name: String,
    },
    /// Removes every message of a queue (deleted temporary queues).
    PurgeQueue {
        queue: u32,
    },
    /// Writes nothing: completes once every submission before it is applied
    /// (one writer applies them in order), and costs no fsync of its own. A
    /// reader that must see what was submitted before it (the delay schedule's
    /// listing and page-in) waits for one.
    Barrier,
    /// A claim's record (made or renewed), under its id.
    PutClaim {
        id: std::sync::Arc<str>,
        record: Bytes,
    },
    DeleteClaim {
        id: std::sync::Arc<str>,
    },
}

/// Most submissions carry one op; keep that case free of a Vec allocation.
pub(in crate::store) enum OpList {
    One(Op),
    Many(Vec<Op>),
}

impl OpList {
    pub fn len(&self) -> usize {
        match self {
            OpList::One(_) => 1,
            OpList::Many(ops) => ops.len(),
        }
    }

    /// Whether it stores a message (what a full disk refuses; deletes,
    /// which free space, and queue records still go through).
    pub fn puts_message(&self) -> bool {
        let puts = |op: &Op| matches!(op, Op::PutMessage { .. } | Op::PutScheduled { .. });
        match self {
            OpList::One(op) => puts(op),
            OpList::Many(ops) => ops.iter().any(puts),
        }
    }
}
