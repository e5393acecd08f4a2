//! Acks that wait for a free queue. An auto-ack consumer (STOMP `ack:auto`,
//! AMQP pre-settled) acks after every write batch; taking the queue lock for
//! that while a publisher holds it made both spin. The ack only returns
//! credit (the window has plenty) and frees memory, so it can ride along with
//! the next batch, or be applied once the session has nothing else to do.
//! Sessions apply what is left before a consumer goes away, so a message
//! that was written is never handed out again.

use super::Queue;
use crate::core::consumer::ConsumerId;
use std::sync::Arc;

#[derive(Default)]
pub struct PendingAcks {
    entries: Vec<Pending>,
}

struct Pending {
    queue: Arc<Queue>,
    consumer: ConsumerId,
    seqs: Vec<u64>,
}

impl PendingAcks {
    /// Queues `seqs` for acking, then acks everything whose queue is free now.
    pub fn add(&mut self, queue: &Arc<Queue>, consumer: ConsumerId, seqs: &mut Vec<u64>) {
        if seqs.is_empty() {
            return;
        }
        match self.entries.iter_mut().find(|p| p.consumer == consumer) {
            Some(pending) => pending.seqs.append(seqs),
            None => self.entries.push(Pending {
                queue: queue.clone(),
                consumer,
                seqs: std::mem::take(seqs),
            }),
        }
        self.try_apply();
    }

    /// Acks what it can without waiting for a lock.
    pub fn try_apply(&mut self) {
        self.entries
            .retain(|p| p.queue.try_ack(p.consumer, &p.seqs).is_none());
    }

    /// Acks everything, waiting for the queues.
    pub fn apply(&mut self) {
        for p in self.entries.drain(..) {
            // An unknown sequence is a message already returned (consumer gone).
            let _ = p.queue.ack(p.consumer, &p.seqs);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
