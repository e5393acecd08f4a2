//! The protocol side of the load generator, behind two small traits so the
//! run logic (pacing, flow control, checks) is written once: STOMP and AMQP 1.0.

pub mod amqp;
mod amqp_stamp;
pub mod stomp;

use super::error::PerfError;
use bytes::Bytes;
use std::future::Future;

/// What the perf headers of one message say. Every message carries the run id,
/// its producer, a per-producer sequence number and the send stamp (scheduled
/// time at a fixed rate), so latency and order are measurable on receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub producer: u32,
    pub seq: u64,
    /// Microseconds since the Unix epoch (see [`super::clock::Clock`]).
    pub sent_us: u64,
    pub group: Option<u32>,
}

/// One received message: its stamp, or `None` for a message that is not from
/// this run (left in the queue by an earlier run, or sent by someone else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub stamp: Option<Stamp>,
}

/// Header names shared by every protocol (AMQP: application properties).
pub mod headers {
    pub const RUN: &str = "perf-run";
    pub const PRODUCER: &str = "perf-p";
    pub const SEQ: &str = "perf-seq";
    pub const SENT: &str = "perf-ts";
    pub const GROUP: &str = "JMSXGroupID";
    pub const DELAY: &str = "AMQ_SCHEDULED_DELAY";
    /// Group ids are `g<index>`.
    pub const GROUP_PREFIX: &str = "g";
}

/// A producer connection. Sends are buffered so that many go out in one write.
pub trait Publisher: Send {
    /// Buffers one message; `confirm` asks the broker to confirm everything up
    /// to and including it (a STOMP receipt). A large body is queued as it is,
    /// not copied (see [`weir_wire::write_parts`]).
    fn push(&mut self, stamp: &Stamp, body: &Bytes, confirm: bool);
    /// Bytes buffered and not yet written.
    fn buffered(&self) -> usize;
    /// Writes everything buffered.
    fn flush(&mut self) -> impl Future<Output = Result<(), PerfError>> + Send;
    /// Waits until every confirmation asked for so far has arrived.
    fn wait_confirmed(&mut self) -> impl Future<Output = Result<(), PerfError>> + Send;
    /// Messages that may be pushed before waiting on the broker (AMQP: link
    /// credit, session window, the window of unsettled sends).
    fn room(&self) -> u64 {
        u64::MAX
    }
    /// Writes what is buffered and waits until [`Publisher::room`] is above 0.
    fn wait_room(&mut self) -> impl Future<Output = Result<(), PerfError>> + Send {
        self.flush()
    }
}

/// A consumer connection with one subscription.
pub trait Subscriber: Send {
    /// The next message. Acknowledgements owed are written before waiting.
    fn next(&mut self) -> impl Future<Output = Result<Delivery, PerfError>> + Send;
    /// The last message returned by `next` is processed: acknowledge it as the
    /// acknowledgement mode says (maybe later, coalesced).
    fn settle_last(&mut self) -> Result<(), PerfError>;
}
