//! What a protocol session holds for each subscription, and what it receives.

use super::message::Message;
use super::queue::Queue;
use std::sync::Arc;

/// Unique across the broker for the broker's lifetime.
pub type ConsumerId = u64;

/// A message handed to a consumer, outstanding until settled.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub consumer: ConsumerId,
    pub queue: Arc<Queue>,
    /// The message's sequence in its queue: the settle handle.
    pub seq: u64,
    pub message: Arc<Message>,
    /// 1 on first delivery; more means redelivered.
    pub delivery_count: u32,
    /// True when this consumer is the first of its group to receive this group
    /// (Artemis `group-first-key`).
    pub group_first: bool,
}

impl Delivery {
    pub fn redelivered(&self) -> bool {
        self.delivery_count > 1
    }
}

/// Where deliveries for one connection go; one receiver per connection so a
/// session waits on a single channel whatever its number of subscriptions.
pub use super::deliveries::{Deliveries, DeliverySink};

/// How credit comes back to a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditMode {
    /// A prefetch window: each settlement returns one credit (STOMP, JMS prefetch).
    Window(u32),
    /// The protocol grants credit explicitly (AMQP flow).
    Explicit,
}

/// A filter a consumer applies to messages; implemented by JMS selectors.
pub trait MessageFilter: Send + Sync + std::fmt::Debug {
    fn matches(&self, message: &Message) -> bool;

    /// The filter as its client wrote it (a selector's text), for management.
    fn text(&self) -> Option<&str> {
        None
    }
}

/// Who attached a consumer, as management shows it: what the client's
/// principal says (the protocol's connection is found by its peer address).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerOwner {
    pub user: Option<String>,
    pub client_id: Option<String>,
    pub peer: Option<std::net::SocketAddr>,
}

#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    pub credit: CreditMode,
    /// Higher priority consumers get messages first (Artemis consumer priority).
    pub priority: i32,
    pub filter: Option<Arc<dyn MessageFilter>>,
    /// See messages without taking them (JMS QueueBrowser).
    pub browse: bool,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            credit: CreditMode::Window(1000),
            priority: 0,
            filter: None,
            browse: false,
        }
    }
}

/// The result of settling a delivery with something other than accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Deliver again, counting this as a failed attempt (STOMP NACK, AMQP modified delivery-failed).
    Failed,
    /// Deliver again without counting an attempt (AMQP released).
    Unused,
    /// Deliver again but not to this consumer (AMQP modified undeliverable-here).
    NotHere,
    /// Do not deliver again: dead-letter it (AMQP rejected).
    Reject,
}
