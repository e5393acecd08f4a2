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
        if !seqs.is_empty() {
            self.seqs_of(queue, consumer).append(seqs);
            self.try_apply();
        }
    }

    /// Queues `seq` for acking, for a [`try_apply`](Self::try_apply) once the
    /// caller's batch is written. A connection that sends deliveries one by one
    /// acks them in one go: each ack takes the queue lock and tries to dispatch,
    /// and that once per message was a tenth of an AMQP consumer's CPU.
    pub fn defer(&mut self, queue: &Arc<Queue>, consumer: ConsumerId, seq: u64) {
        self.seqs_of(queue, consumer).push(seq);
    }

    fn seqs_of(&mut self, queue: &Arc<Queue>, consumer: ConsumerId) -> &mut Vec<u64> {
        let at = match self.entries.iter().position(|p| p.consumer == consumer) {
            Some(at) => at,
            None => {
                self.entries.push(Pending {
                    queue: queue.clone(),
                    consumer,
                    seqs: Vec::new(),
                });
                self.entries.len() - 1
            }
        };
        &mut self.entries[at].seqs
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
