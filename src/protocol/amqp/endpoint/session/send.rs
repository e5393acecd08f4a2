//! Sending: deliveries from the core go out as credit and the session window
//! allow, drains are answered, and the peer's dispositions settle what we sent.

use super::{Session, Unsettled};
use crate::core::consumer::{ConsumerId, Delivery};
use crate::core::message::now_ms;
use crate::core::queue::{PendingAcks, Queue};
use crate::core::{Receipt, Settlement, TransactionError};
use crate::protocol::amqp::endpoint::convert;
use crate::protocol::amqp::endpoint::outgoing::{DeliveryStart, Outgoing, Placed};
use crate::protocol::amqp::endpoint::txn::{self, Txns};
use crate::protocol::amqp::wire::definitions::{DeliveryState, Role};
use crate::protocol::amqp::wire::performatives::Disposition;
use bytes::BytesMut;
use std::sync::Arc;

/// Whether a link told the core to drain, so that what the core dispatched for
/// it may still be in the connection's channel: all of that must be sent before
/// the drain is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CoreDrain {
    #[default]
    Idle,
    Pending,
}

impl Session {
    /// A delivery from the core for the link `handle`.
    pub fn deliver(
        &mut self,
        out: &mut Outgoing,
        acks: &mut PendingAcks,
        drain: CoreDrain,
        handle: u32,
        delivery: Delivery,
    ) -> CoreDrain {
        let Some(link) = self.senders.get_mut(&handle) else {
            return drain;
        };
        link.arrived(delivery);
        self.pump(out, acks, drain, handle)
    }

    pub(super) fn pump_all(
        &mut self,
        out: &mut Outgoing,
        acks: &mut PendingAcks,
        mut drain: CoreDrain,
    ) -> CoreDrain {
        let handles: Vec<u32> = self.senders.keys().copied().collect();
        for h in handles {
            drain = self.pump(out, acks, drain, h);
        }
        drain
    }

    /// Sends what credit and the session window allow; completes a drain.
    pub(super) fn pump(
        &mut self,
        out: &mut Outgoing,
        acks: &mut PendingAcks,
        drain: CoreDrain,
        handle: u32,
    ) -> CoreDrain {
        let Some(link) = self.senders.get_mut(&handle) else {
            return drain;
        };
        while self.remote_incoming_window > 0 {
            let Some(d) = link.next_to_send() else { break };
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            let settings = d.group_first.then(|| d.queue.settings());
            let first_key = settings.as_ref().and_then(|s| s.group_first_key.as_deref());
            // The clock only matters for the remaining time-to-live.
            let now = d.message.expires_at.map_or(0, |_| now_ms());
            let write = |buf: &mut BytesMut| {
                convert::outbound(&d.message, d.delivery_count, now, first_key, buf)
            };
            let start = DeliveryStart {
                channel: self.channel,
                handle,
                delivery_id,
                settled: link.presettled,
            };
            let frames = match out.delivery(start, write) {
                Placed::OneFrame => 1,
                Placed::TooLarge => out.split_delivery(start, d.message.weight() + 32, write),
            };
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(frames);
            self.remote_incoming_window = self.remote_incoming_window.saturating_sub(frames);
            if link.browse {
                continue;
            }
            if link.presettled {
                // Acked once the connection has written its batch (`try_apply`).
                acks.defer(link.queue(), link.subscription.consumer(), d.seq);
            } else {
                link.sent_unsettled();
                self.unsettled.insert(
                    delivery_id,
                    Unsettled {
                        handle,
                        consumer: d.consumer,
                        queue: d.queue,
                        seq: d.seq,
                    },
                );
            }
        }
        if link.drain && link.credit > 0 && link.pending.is_empty() && !link.core_drained {
            // What the core dispatches while draining lands in the connection's channel;
            // the connection feeds it in and then calls `finish_drains`.
            link.drain_core();
            return CoreDrain::Pending;
        }
        // While the connection is still feeding in what the core dispatched for
        // a drain, an empty `pending` does not mean the drain is done.
        if link.drain_done() && drain == CoreDrain::Idle {
            link.finish_drain();
            self.send_link_flow(out, handle);
        }
        drain
    }

    /// Answers drains whose deliveries have all been sent.
    pub fn finish_drains(&mut self, out: &mut Outgoing) {
        let done: Vec<u32> = self
            .senders
            .iter()
            .filter(|(_, l)| l.drain_done())
            .map(|(h, _)| *h)
            .collect();
        for handle in done {
            if let Some(link) = self.senders.get_mut(&handle) {
                link.finish_drain();
            }
            self.send_link_flow(out, handle);
        }
    }

    /// The peer settles deliveries (ours, when it is the receiver).
    pub fn disposition(&mut self, out: &mut Outgoing, txns: &mut Txns, d: Disposition) {
        if d.role == Role::Sender {
            // The peer settling its own transfers: we settle ours at once, nothing to do.
            return;
        }
        let last = d.last.unwrap_or(d.first);
        if last.wrapping_sub(d.first) > 1 << 20 {
            return;
        }
        let mut id = d.first;
        // Accepted deliveries by consumer and queue, acknowledged in one call
        // each. Nearly always one consumer: a vector searched from its last
        // entry, not a map (and no copy of the outcome per delivery).
        let mut acks: Vec<(ConsumerId, Arc<Queue>, Vec<u64>)> = Vec::new();
        let state = d.state.as_ref().unwrap_or(&DeliveryState::Accepted);
        // Links held back by their unsettled limit, granted credit again once.
        let mut held_back: Vec<u32> = Vec::new();
        loop {
            if let Some(u) = self.unsettled.remove(&id) {
                let was_held = self
                    .senders
                    .get_mut(&u.handle)
                    .is_some_and(|link| link.settled_one());
                if was_held && held_back.last() != Some(&u.handle) {
                    held_back.push(u.handle);
                }
                match state {
                    DeliveryState::TransactionalState { txn_id, outcome } => {
                        let outcome = outcome.as_deref().unwrap_or(&DeliveryState::Accepted);
                        let how = txn::settlement(outcome);
                        // Held otherwise (a doomed transaction returns it at its end).
                        let held = txns.open.settle(txn_id, &u.queue, u.consumer, u.seq, how);
                        if let Err(TransactionError::Unknown) = held {
                            apply_outcome(&u.queue, u.consumer, u.seq, outcome);
                        }
                    }
                    DeliveryState::Accepted => {
                        match acks
                            .iter_mut()
                            .rev()
                            .find(|(c, q, _)| *c == u.consumer && Arc::ptr_eq(q, &u.queue))
                        {
                            Some((_, _, seqs)) => seqs.push(u.seq),
                            None => acks.push((u.consumer, u.queue, vec![u.seq])),
                        }
                    }
                    other => {
                        apply_outcome(&u.queue, u.consumer, u.seq, other);
                    }
                }
            }
            if id == last {
                break;
            }
            id = id.wrapping_add(1);
        }
        for (consumer, queue, seqs) in acks {
            let _ = queue.ack(consumer, &seqs);
        }
        for handle in held_back {
            if let Some(link) = self.senders.get_mut(&handle) {
                link.regrant();
            }
        }
        if !d.settled {
            // The peer wants us to settle (it used rcv-settle-mode second).
            out.frame(
                self.channel,
                Disposition {
                    role: Role::Sender,
                    first: d.first,
                    last: d.last,
                    settled: true,
                    state: d.state,
                    batchable: false,
                },
            );
        }
    }
}

/// Applies a peer's outcome for one delivery; returns the disk write of an acknowledgement.
fn apply_outcome(
    queue: &Arc<Queue>,
    consumer: ConsumerId,
    seq: u64,
    outcome: &DeliveryState,
) -> Option<Receipt> {
    match txn::settlement(outcome) {
        Settlement::Ack => queue.ack(consumer, &[seq]).ok(),
        Settlement::Release(how) => {
            let _ = queue.release(consumer, seq, how);
            None
        }
    }
}
