//! Receiving: transfers from the peer are reassembled, routed (batched per
//! queue, see `SendBatch`) or handed to the transaction
//! coordinator, and answered now or once their disk write is done.

use super::{session_error, Session, SessionError, INCOMING_WINDOW};
use crate::core::message::now_ms;
use crate::core::{Broker, CoreError, Receipt, RoutingType, TransactionError};
use crate::protocol::amqp::endpoint::condition::{core_rejection, rejected};
use crate::protocol::amqp::endpoint::convert;
use crate::protocol::amqp::endpoint::env::Env;
use crate::protocol::amqp::endpoint::link::{Partial, Route};
use crate::protocol::amqp::endpoint::outgoing::Outgoing;
use crate::protocol::amqp::endpoint::terminus;
use crate::protocol::amqp::endpoint::txn::{self, Dest, RefusedTransfer, Txns};
use crate::protocol::amqp::endpoint::waits::{Received, Settled, Waits};
use crate::protocol::amqp::wire::definitions::{AmqpError, DeliveryState, Role};
use crate::protocol::amqp::wire::described::Composite;
use crate::protocol::amqp::wire::error::condition;
use crate::protocol::amqp::wire::messaging::{Body, MessageView};
use crate::protocol::amqp::wire::performatives::{Disposition, Performative, Transfer};
use crate::protocol::amqp::wire::{Declare, Discharge, Frame, Value};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// A whole message the peer sent on a receiving link.
struct Arrived {
    handle: u32,
    delivery_id: u32,
    settled: bool,
    txn: Option<Bytes>,
}

impl Session {
    /// A transfer frame from the peer.
    pub fn transfer(
        &mut self,
        env: &Env,
        out: &mut Outgoing,
        txns: &mut Txns,
        waits: &mut Waits,
        t: Transfer,
        payload: Bytes,
    ) -> Result<(), SessionError> {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window = self.incoming_window.saturating_sub(1);
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            self.send_session_flow(out);
        }
        let handle = t.handle;
        let max = env.max_message_size;
        let Some(link) = self.receivers.get_mut(&handle) else {
            if self.detaching.contains(&handle) {
                return Ok(());
            }
            if self.senders.contains_key(&handle) {
                return Err(session_error(
                    condition::SESSION_ERRANT_LINK,
                    "transfer on a link where the broker is the sender",
                ));
            }
            return Err(session_error(
                condition::SESSION_UNATTACHED_HANDLE,
                "transfer for a handle that is not attached",
            ));
        };
        if t.aborted {
            link.partial = None;
            return Ok(());
        }
        let mut partial = match link.partial.take() {
            Some(p) => p,
            None => {
                let Some(delivery_id) = t.delivery_id else {
                    return Err(session_error(
                        condition::INVALID_FIELD,
                        "first transfer of a delivery without a delivery-id",
                    ));
                };
                if !link.take_credit() {
                    self.detach_receiver_with_error(
                        out,
                        handle,
                        AmqpError::new(
                            condition::LINK_TRANSFER_LIMIT_EXCEEDED,
                            Some("transfer without link credit"),
                        ),
                    );
                    return Ok(());
                }
                let txn = match &t.state {
                    Some(DeliveryState::TransactionalState { txn_id, .. }) => Some(txn_id.clone()),
                    _ => None,
                };
                if !t.more {
                    // The common case: one frame, no copy.
                    let arrived = Arrived {
                        handle,
                        delivery_id,
                        settled: t.settled.unwrap_or(false),
                        txn,
                    };
                    self.complete(env, out, txns, waits, arrived, payload);
                    return Ok(());
                }
                Partial {
                    delivery_id,
                    settled: t.settled.unwrap_or(false),
                    txn,
                    buf: BytesMut::new(),
                }
            }
        };
        if t.settled == Some(true) {
            partial.settled = true;
        }
        if partial.buf.len() as u64 + payload.len() as u64 > max {
            refuse_in(
                txns,
                partial.txn.as_ref(),
                format!("message larger than {max} bytes"),
            );
            self.detach_receiver_with_error(
                out,
                handle,
                AmqpError::new(
                    condition::LINK_MESSAGE_SIZE_EXCEEDED,
                    Some(&format!("message larger than {max} bytes")),
                ),
            );
            return Ok(());
        }
        partial.buf.extend_from_slice(&payload);
        if t.more {
            link.partial = Some(partial);
            return Ok(());
        }
        let Partial {
            delivery_id,
            settled,
            txn,
            buf,
        } = partial;
        let arrived = Arrived {
            handle,
            delivery_id,
            settled,
            txn,
        };
        self.complete(env, out, txns, waits, arrived, buf.freeze());
        Ok(())
    }

    /// A whole message arrived on a receiving link.
    fn complete(
        &mut self,
        env: &Env,
        out: &mut Outgoing,
        txns: &mut Txns,
        waits: &mut Waits,
        arrived: Arrived,
        payload: Bytes,
    ) {
        if payload.len() as u64 > env.max_message_size {
            let max = env.max_message_size;
            refuse_in(
                txns,
                arrived.txn.as_ref(),
                format!("message larger than {max} bytes"),
            );
            self.detach_receiver_with_error(
                out,
                arrived.handle,
                AmqpError::new(
                    condition::LINK_MESSAGE_SIZE_EXCEEDED,
                    Some(&format!("message larger than {max} bytes")),
                ),
            );
            return;
        }
        let outcome = self.accept_message(env, out, txns, waits, &arrived, payload);
        if let (Some(DeliveryState::Rejected { error }), Some(_)) = (&outcome, &arrived.txn) {
            // Refused before it reached its transaction: the transaction is doomed.
            let why = error.as_ref().and_then(|e| e.description.as_ref());
            let why = why.map(|d| d.as_str().to_owned()).unwrap_or_default();
            refuse_in(txns, arrived.txn.as_ref(), why);
        }
        self.refill(&env.broker, out, env.link_credit, arrived.handle);
        let Some(state) = outcome else { return };
        if !arrived.settled {
            self.disposition_out(out, arrived.delivery_id, state);
        }
    }

    /// Grants the peer's sender more credit when it runs low, unless its
    /// queue blocks producers: then the credit is withheld until the queue
    /// lets them go (see `Session::regrant`).
    fn refill(&mut self, broker: &Broker, out: &mut Outgoing, window: u32, handle: u32) {
        if let Some(link) = self.receivers.get_mut(&handle) {
            if link.withheld.is_some() {
                return;
            }
            if link.needs_credit(window) {
                if let Some(queue) = link.route.blocking_queue(broker) {
                    link.withheld = Some(queue);
                    self.withholding = true;
                    return;
                }
                link.credit = window;
                self.send_link_flow(out, handle);
            }
        }
    }

    fn disposition_out(&mut self, out: &mut Outgoing, delivery_id: u32, state: DeliveryState) {
        // Consecutive acceptances become one ranged disposition: a producer's window
        // of transfers is answered with one frame, not one per message.
        if matches!(state, DeliveryState::Accepted)
            && extend_acceptance(out.last_mut(), self.channel, delivery_id)
        {
            return;
        }
        out.frame(
            self.channel,
            Disposition {
                role: Role::Receiver,
                first: delivery_id,
                last: None,
                settled: true,
                state: Some(state),
                batchable: false,
            },
        );
    }

    /// Routes a message; returns the outcome to send now, or `None` when it comes later
    /// (after the disk write) or is not wanted (pre-settled).
    fn accept_message(
        &mut self,
        env: &Env,
        out: &mut Outgoing,
        txns: &mut Txns,
        waits: &mut Waits,
        arrived: &Arrived,
        payload: Bytes,
    ) -> Option<DeliveryState> {
        let &Arrived {
            handle,
            delivery_id,
            settled,
            ref txn,
        } = arrived;
        let link = self.receivers.get_mut(&handle)?;
        // Borrowed where it lies, not moved out: a view is most of a kilobyte.
        let parsed = MessageView::parse(payload);
        let view = match &parsed {
            Ok(v) => v,
            Err(e) => return Some(rejected(e.condition(), &e.to_string())),
        };
        if matches!(link.route, Route::Coordinator) {
            // A discharge commits what came before it, batched sends included.
            self.flush_sends(&env.broker, out, waits);
            return self.coordinate(env, txns, waits, arrived, view);
        }
        let (address, dest) = match link.route.dest(&env.broker, &env.principal) {
            Err(e) => return Some(core_rejection(&e)),
            Ok(Some(x)) => x,
            Ok(None) => {
                let Some(to) = view.properties().and_then(|p| p.to.as_ref()) else {
                    return Some(rejected(
                        condition::INVALID_FIELD,
                        "anonymous relay: message has no 'to' address",
                    ));
                };
                let jms_dest = view.message_annotations().and_then(|m| {
                    m.iter()
                        .find(|(k, _)| {
                            matches!(k, Value::Symbol(s) if s.as_str() == "x-opt-jms-dest")
                        })
                        .map(|(_, v)| v)
                });
                let node = terminus::resolve_relay(to.as_str(), jms_dest);
                if env.principal.is_restricted()
                    && !link.relay_allowed.contains(&node.name, node.routing)
                {
                    // Each message names its own address: checked here, once per
                    // address the link sends to lately.
                    let who = &env.principal;
                    let allowed = env.broker.may_send(&node.name, node.routing, who);
                    // A queue made by the first message counts against its user's limit;
                    // in a transaction it is made, and counted, at commit (a rollback
                    // leaves none behind).
                    let made_at_commit = txn.is_some() && node.routing == RoutingType::Anycast;
                    let opened = allowed.and_then(|()| match node.routing {
                        RoutingType::Anycast if made_at_commit => Ok(()),
                        RoutingType::Anycast => env.broker.open_queue(&node.name, who).map(drop),
                        RoutingType::Multicast => Ok(()),
                    });
                    if let Err(e) = opened {
                        let rejection = core_rejection(&e);
                        let Some(id) = txn else {
                            return Some(rejection);
                        };
                        // Inside a transaction: it is doomed, and the outcome says
                        // which transaction the refusal belongs to.
                        refuse_in(txns, Some(id), e.to_string());
                        return Some(DeliveryState::TransactionalState {
                            txn_id: id.clone(),
                            outcome: Some(Box::new(rejection)),
                        });
                    }
                    // Not remembered while the queue may not exist: a later send outside
                    // the transaction must still make (and count) it.
                    if !made_at_commit {
                        link.relay_allowed.insert(node.name.clone(), node.routing);
                    }
                }
                (node.name, Dest::Routed(node.routing))
            }
        };
        let delay_names = env.broker.delay_header_names();
        let mut message = match convert::inbound(view, address, env.read_at_ms, now_ms, delay_names)
        {
            Ok(m) => m,
            Err(e) => return Some(rejected(e.condition(), &e.to_string())),
        };
        if message.group_id.is_none() && link.producer.group_id().is_some() {
            link.producer.apply(&mut message);
            convert::stamp_group(&mut message);
        }
        if let Some(txn) = txn {
            let outcome = match txns.open.send(&env.broker, txn, message, dest.target()) {
                Ok(()) => DeliveryState::Accepted,
                Err(TransactionError::Unknown) => {
                    return Some(rejected(
                        condition::TRANSACTION_UNKNOWN_ID,
                        "unknown transaction",
                    ))
                }
                // The transaction is doomed: its discharge will fail with this.
                Err(e) => rejected(txn::condition_of(&e), &e.to_string()),
            };
            return Some(DeliveryState::TransactionalState {
                txn_id: txn.clone(),
                outcome: Some(Box::new(outcome)),
            });
        }
        let routing = match dest {
            Dest::Queue(queue) if self.sends.takes(queue) => {
                self.sends
                    .push(queue, Arc::new(message), (delivery_id, settled));
                return None;
            }
            Dest::Queue(queue) => {
                let queue = queue.clone();
                self.flush_sends(&env.broker, out, waits);
                self.sends
                    .push(&queue, Arc::new(message), (delivery_id, settled));
                return None;
            }
            Dest::Routed(routing) => routing,
        };
        // Routed one by one; what was batched before goes first.
        self.flush_sends(&env.broker, out, waits);
        let result = env.broker.publish(message, routing);
        self.send_outcome(waits, delivery_id, settled, result)
    }

    /// Publishes the batched sends and answers them as [`Session::accept_message`]
    /// would have one by one.
    pub fn flush_sends(&mut self, broker: &Broker, out: &mut Outgoing, waits: &mut Waits) {
        let Some((mut sent, results)) = self.sends.publish(broker) else {
            return;
        };
        for ((delivery_id, settled), result) in sent.drain(..).zip(results) {
            let outcome = self.send_outcome(waits, delivery_id, settled, result);
            if let (Some(state), false) = (outcome, settled) {
                self.disposition_out(out, delivery_id, state);
            }
        }
        self.sends.reuse(sent);
    }

    /// The outcome to send now for a published message, or `None` when it
    /// comes after the disk write (or is not wanted: pre-settled).
    fn send_outcome(
        &mut self,
        waits: &mut Waits,
        delivery_id: u32,
        settled: bool,
        result: Result<Receipt, CoreError>,
    ) -> Option<DeliveryState> {
        match result {
            Err(e) => Some(core_rejection(&e)),
            Ok(c) if settled || c.is_ready() => Some(DeliveryState::Accepted),
            Ok(c) => {
                self.wait_then_settle(waits, delivery_id, c);
                None
            }
        }
    }

    fn wait_then_settle(&mut self, waits: &mut Waits, delivery_id: u32, c: Receipt) {
        let received = Received {
            channel: self.channel,
            generation: self.generation,
            delivery_id,
        };
        waits.push(received, c);
    }

    /// A wait finished for a delivery the peer sent.
    pub fn settled(&mut self, out: &mut Outgoing, s: Settled) {
        if s.received.generation == self.generation && !self.ending {
            self.disposition_out(out, s.received.delivery_id, s.state);
        }
    }

    /// A message to the transaction coordinator: declare or discharge.
    fn coordinate(
        &mut self,
        env: &Env,
        txns: &mut Txns,
        waits: &mut Waits,
        arrived: &Arrived,
        view: &MessageView,
    ) -> Option<DeliveryState> {
        let Body::Value(value) = view.body() else {
            return Some(rejected(
                condition::DECODE_ERROR,
                "coordinator expects an amqp-value",
            ));
        };
        if Declare::from_value(value).is_ok() {
            return Some(match txns.declare() {
                Ok(id) => DeliveryState::Declared { txn_id: id },
                Err(e) => rejected(txn::condition_of(&e), &e.to_string()),
            });
        }
        let Ok(discharge) = Discharge::from_value(value) else {
            return Some(rejected(
                condition::DECODE_ERROR,
                "neither declare nor discharge",
            ));
        };
        let id = &discharge.txn_id;
        let committed = match discharge.fail {
            true => txns.open.rollback(id).map(|()| Receipt::ready()),
            // Queues the transaction creates count against the user's limit.
            false => txns.open.commit(&env.broker, id, &env.principal),
        };
        match committed {
            Err(TransactionError::Unknown) => Some(rejected(
                condition::TRANSACTION_UNKNOWN_ID,
                "unknown transaction",
            )),
            // Nothing of it took effect; what it settled goes back for redelivery.
            Err(e) => Some(rejected(
                condition::TRANSACTION_ROLLBACK,
                &format!("transaction rolled back: {e}"),
            )),
            Ok(c) if arrived.settled || c.is_ready() => Some(DeliveryState::Accepted),
            Ok(c) => {
                self.wait_then_settle(waits, arrived.delivery_id, c);
                None
            }
        }
    }
}

/// Widens the last frame queued, when it accepts the delivery just before
/// `delivery_id` on this channel, to cover `delivery_id` too.
fn extend_acceptance(last: Option<&mut Frame>, channel: u16, delivery_id: u32) -> bool {
    let Some(Frame::Amqp(last)) = last else {
        return false;
    };
    if last.channel != channel {
        return false;
    }
    let Performative::Disposition(d) = &mut last.performative else {
        return false;
    };
    let follows = d.last.unwrap_or(d.first).wrapping_add(1) == delivery_id;
    if d.role == Role::Receiver
        && d.settled
        && matches!(d.state, Some(DeliveryState::Accepted))
        && follows
    {
        d.last = Some(delivery_id);
        return true;
    }
    false
}

/// Dooms the transaction a transfer belonged to, when it was refused before
/// reaching it.
fn refuse_in(txns: &mut Txns, txn: Option<&Bytes>, why: String) {
    if let Some(id) = txn {
        let refused = TransactionError::Protocol(Arc::new(RefusedTransfer(why)));
        let _ = txns.open.refuse(id, refused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::amqp::wire::AmqpFrame;

    fn accepted(channel: u16, first: u32) -> Frame {
        Frame::Amqp(AmqpFrame {
            channel,
            performative: Performative::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last: None,
                settled: true,
                state: Some(DeliveryState::Accepted),
                batchable: false,
            }),
            payload: Bytes::new(),
            payload_tail: Bytes::new(),
        })
    }

    fn range(frame: &Frame) -> (u32, Option<u32>) {
        match frame {
            Frame::Amqp(AmqpFrame {
                performative: Performative::Disposition(d),
                ..
            }) => (d.first, d.last),
            other => panic!("not a disposition: {other:?}"),
        }
    }

    #[test]
    fn consecutive_acceptances_widen_one_disposition() {
        let mut last = accepted(1, u32::MAX);
        assert!(
            extend_acceptance(Some(&mut last), 1, 0),
            "serial numbers wrap"
        );
        assert!(extend_acceptance(Some(&mut last), 1, 1));
        assert_eq!(range(&last), (u32::MAX, Some(1)));
    }

    #[test]
    fn a_gap_another_channel_or_another_outcome_starts_a_new_frame() {
        let mut last = accepted(1, 5);
        assert!(!extend_acceptance(Some(&mut last), 1, 7), "gap");
        assert!(!extend_acceptance(Some(&mut last), 2, 6), "other channel");
        let Frame::Amqp(f) = &mut last else {
            unreachable!()
        };
        let Performative::Disposition(d) = &mut f.performative else {
            unreachable!()
        };
        d.state = Some(DeliveryState::Released);
        assert!(!extend_acceptance(Some(&mut last), 1, 6), "other outcome");
        assert!(!extend_acceptance(None, 1, 6), "nothing queued");
    }
}
