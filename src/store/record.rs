//! What a stored message is written as, made only when it is written.
//!
//! Most durable messages of a queue whose consumers keep up are acknowledged
//! before they are written (see `holding`), so encoding their records on the
//! connection's thread, copying every body once more, was work thrown away.
//! The core hands over the message itself; the writer asks it for its record
//! only when the record goes into a commit, into one reused buffer.

use bytes::Bytes;
use std::sync::Arc;

/// A message that can write its own record. The store never looks inside it.
pub trait MessageRecord: Send + Sync {
    /// Appends the record to `out`. `delivery_count` is kept beside the
    /// message: the same message is stored again after a failed delivery.
    fn encode_record(&self, delivery_count: u32, out: &mut Vec<u8>);
}

/// A record to write: ready bytes, or a message that writes its own.
pub enum Record {
    Encoded(Bytes),
    Message {
        message: Arc<dyn MessageRecord>,
        delivery_count: u32,
    },
}

impl Record {
    pub fn message(message: Arc<dyn MessageRecord>, delivery_count: u32) -> Self {
        Record::Message {
            message,
            delivery_count,
        }
    }

    /// The record's bytes, encoded into `scratch` when not ready.
    pub(super) fn bytes<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        match self {
            Record::Encoded(bytes) => bytes,
            Record::Message {
                message,
                delivery_count,
            } => {
                scratch.clear();
                message.encode_record(*delivery_count, scratch);
                scratch
            }
        }
    }
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Record::Encoded(bytes) => write!(f, "Record({} bytes)", bytes.len()),
            Record::Message { delivery_count, .. } => {
                write!(f, "Record(message, delivery count {delivery_count})")
            }
        }
    }
}

impl From<Bytes> for Record {
    fn from(bytes: Bytes) -> Self {
        Record::Encoded(bytes)
    }
}
