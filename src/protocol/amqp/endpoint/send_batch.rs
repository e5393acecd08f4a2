//! Transfers read together for one queue, published together: one queue lock
//! and one dispatch pass per read instead of per message (see
//! `Queue::publish_all`). A session fills it while the connection works
//! through what one read brought and publishes it before anything else can
//! observe the order: another frame, a send elsewhere, the end of the read.

use crate::core::message::Message;
use crate::core::queue::Queue;
use crate::core::{Broker, CoreError, Receipt};
use std::sync::Arc;

/// A delivery the peer sent: its id and whether the peer settled it.
pub type Sent = (u32, bool);

/// What publishing a batch gave: each delivery with its result, in order.
pub type Published = (Vec<Sent>, Vec<Result<Receipt, CoreError>>);

#[derive(Default)]
pub struct SendBatch {
    queue: Option<Arc<Queue>>,
    messages: Vec<Arc<Message>>,
    sent: Vec<Sent>,
}

impl SendBatch {
    /// Whether a message for `queue` may join: the batch is empty or for it.
    pub fn takes(&self, queue: &Arc<Queue>) -> bool {
        self.queue.as_ref().is_none_or(|q| Arc::ptr_eq(q, queue))
    }

    /// Adds a message; the caller checked [`SendBatch::takes`].
    pub fn push(&mut self, queue: &Arc<Queue>, message: Arc<Message>, sent: Sent) {
        if self.queue.is_none() {
            self.queue = Some(queue.clone());
        }
        self.messages.push(message);
        self.sent.push(sent);
    }

    /// Publishes everything; each delivery with its result, in order. Hand
    /// the vector back with [`SendBatch::reuse`] to keep its allocation.
    pub fn publish(&mut self, broker: &Broker) -> Option<Published> {
        let queue = self.queue.take()?;
        let results = broker.publish_all_to(&queue, self.messages.drain(..));
        Some((std::mem::take(&mut self.sent), results))
    }

    pub fn reuse(&mut self, mut sent: Vec<Sent>) {
        if self.sent.is_empty() {
            sent.clear();
            self.sent = sent;
        }
    }
}
