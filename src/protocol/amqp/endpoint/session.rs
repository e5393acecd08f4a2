//! A session: windows, transfer and delivery ids, its links by handle, and the deliveries it
//! has sent and the peer has yet to settle.

use super::connection::{Ctx, Settled, WaitingWrite};
use super::convert;
use super::link::{Partial, ReceiverLink, Route, SenderLink};
use super::outgoing::{DeliveryStart, Placed};
use super::send_batch::SendBatch;
use super::terminus;
use super::txn::{self, Dest, RefusedTransfer};
use crate::core::consumer::{ConsumerId, Delivery};
use crate::core::fast_map::FastMap;
use crate::core::message::now_ms;
use crate::core::queue::Queue;
use crate::core::{CoreError, Receipt, Settlement, TransactionError};
use crate::protocol::amqp::wire::definitions::{AmqpError, DeliveryState, Role};
use crate::protocol::amqp::wire::described::Composite;
use crate::protocol::amqp::wire::error::condition;
use crate::protocol::amqp::wire::messaging::{Body, MessageView};
use crate::protocol::amqp::wire::performatives::{
    Begin, Detach, Disposition, End, Flow, Performative, Transfer,
};
use crate::protocol::amqp::wire::{AmqpFrame, Declare, Discharge, Frame};
use bytes::{Bytes, BytesMut};
use std::collections::HashSet;
use std::sync::Arc;

/// Our incoming window; re-announced when half used.
const INCOMING_WINDOW: u32 = 1 << 20;
/// What a transfer performative may take in a frame, with room to spare.
const TRANSFER_OVERHEAD: usize = 64;

#[derive(Debug)]
pub enum SessionError {
    /// End the session with this error.
    End(AmqpError),
    /// Close the whole connection.
    Connection(AmqpError),
}

pub fn session_error(condition: &str, description: &str) -> SessionError {
    SessionError::End(AmqpError::new(condition, Some(description)))
}

/// A delivery the broker sent and the peer has not settled.
pub struct Unsettled {
    pub handle: u32,
    pub consumer: ConsumerId,
    pub queue: Arc<Queue>,
    pub seq: u64,
}

pub struct Session {
    pub channel: u16,
    pub generation: u64,
    next_outgoing_id: u32,
    next_delivery_id: u32,
    next_incoming_id: u32,
    incoming_window: u32,
    remote_incoming_window: u32,
    pub handle_max: u32,
    pub senders: FastMap<u32, SenderLink>,
    pub receivers: FastMap<u32, ReceiverLink>,
    unsettled: FastMap<u32, Unsettled>,
    /// We sent `end` and wait for the peer's.
    ending: bool,
    /// Links we detached (refused or failed) whose detach the peer has yet to send: its
    /// frames for them, already in flight, are ignored.
    pub detaching: HashSet<u32>,
    /// Messages received for one queue, not yet published (see [`SendBatch`]).
    sends: SendBatch,
}

impl Session {
    pub fn begin(cx: &mut Ctx, channel: u16, generation: u64, begin: &Begin) -> Session {
        let s = Session {
            channel,
            generation,
            next_outgoing_id: 1,
            next_delivery_id: 0,
            next_incoming_id: begin.next_outgoing_id,
            incoming_window: INCOMING_WINDOW,
            remote_incoming_window: begin.incoming_window,
            handle_max: begin.handle_max.min(65535),
            senders: FastMap::default(),
            receivers: FastMap::default(),
            unsettled: FastMap::default(),
            ending: false,
            detaching: HashSet::new(),
            sends: SendBatch::default(),
        };
        cx.frame(
            channel,
            Begin {
                remote_channel: Some(channel),
                next_outgoing_id: s.next_outgoing_id,
                incoming_window: s.incoming_window,
                outgoing_window: u32::MAX,
                handle_max: s.handle_max,
                offered_capabilities: Vec::new(),
                desired_capabilities: Vec::new(),
                properties: None,
            },
        );
        s
    }

    /// Handles a frame for this session; `Ok(true)` when the session is over.
    pub fn handle(
        &mut self,
        cx: &mut Ctx,
        performative: Performative,
        payload: Bytes,
    ) -> Result<bool, SessionError> {
        if self.ending {
            // Everything but the peer's end is moot now.
            return Ok(matches!(performative, Performative::End(_)));
        }
        match performative {
            Performative::End(end) => {
                if let Some(e) = end.error {
                    tracing::debug!(
                        condition = e.condition.as_str(),
                        "peer ended session with error"
                    );
                }
                Ok(true)
            }
            Performative::Attach(attach) => {
                self.attach(cx, *attach)?;
                Ok(false)
            }
            Performative::Detach(detach) => {
                self.detach(cx, detach)?;
                Ok(false)
            }
            Performative::Flow(flow) => {
                self.flow(cx, flow)?;
                Ok(false)
            }
            Performative::Transfer(transfer) => {
                self.transfer(cx, transfer, payload)?;
                Ok(false)
            }
            Performative::Disposition(d) => {
                self.disposition(cx, d);
                Ok(false)
            }
            other => Err(SessionError::Connection(AmqpError::new(
                condition::ILLEGAL_STATE,
                Some(&format!("{} on a session channel", other.name())),
            ))),
        }
    }

    /// Ends the session: an error `end` waits for the peer's, a reply is final.
    pub fn is_ending(&self) -> bool {
        self.ending
    }

    pub fn end(&mut self, cx: &mut Ctx, error: Option<AmqpError>) {
        self.ending = error.is_some();
        cx.frame(self.channel, End { error });
        self.release_all(cx);
    }

    /// Drops every link; the core returns unsettled messages to their queues.
    pub fn release_all(&mut self, cx: &mut Ctx) {
        for (_, link) in self.senders.drain() {
            cx.consumers.remove(&link.subscription.consumer());
        }
        self.receivers.clear();
        self.unsettled.clear();
    }

    // ---- links -------------------------------------------------------------------------

    fn detach(&mut self, cx: &mut Ctx, detach: Detach) -> Result<(), SessionError> {
        let handle = detach.handle;
        if self.detaching.remove(&handle) {
            // The answer to our own detach.
            return Ok(());
        }
        if let Some(link) = self.senders.remove(&handle) {
            let consumer = link.subscription.consumer();
            cx.consumers.remove(&consumer);
            self.unsettled.retain(|_, u| u.handle != handle);
            let durable = link.durable.clone();
            let queue = link.queue().clone();
            drop(link);
            if let (true, Some((topic, name))) = (detach.closed, durable) {
                if queue.stats().consumers == 0 {
                    cx.broker.delete_durable_subscription(&topic, &name);
                }
            }
        } else if self.receivers.remove(&handle).is_none() {
            return Err(session_error(
                condition::SESSION_UNATTACHED_HANDLE,
                "detach of a handle that is not attached",
            ));
        }
        cx.frame(
            self.channel,
            Detach {
                handle,
                closed: detach.closed,
                error: None,
            },
        );
        Ok(())
    }

    /// Detaches a link of ours with an error (e.g. a message over the size limit).
    pub fn detach_with_error(&mut self, cx: &mut Ctx, handle: u32, error: AmqpError) {
        if let Some(link) = self.senders.remove(&handle) {
            cx.consumers.remove(&link.subscription.consumer());
            self.unsettled.retain(|_, u| u.handle != handle);
        }
        self.receivers.remove(&handle);
        self.detaching.insert(handle);
        cx.frame(
            self.channel,
            Detach {
                handle,
                closed: true,
                error: Some(error),
            },
        );
    }

    // ---- flow --------------------------------------------------------------------------

    fn flow(&mut self, cx: &mut Ctx, flow: Flow) -> Result<(), SessionError> {
        // Session window: how many more transfer frames the peer takes from us.
        let their_next_in = flow.next_incoming_id.unwrap_or(1);
        self.remote_incoming_window = their_next_in
            .wrapping_add(flow.incoming_window)
            .wrapping_sub(self.next_outgoing_id);
        let Some(handle) = flow.handle else {
            self.pump_all(cx);
            if flow.echo {
                self.send_session_flow(cx);
            }
            return Ok(());
        };
        if let Some(link) = self.senders.get_mut(&handle) {
            link.flow(
                flow.delivery_count,
                flow.link_credit.unwrap_or(0),
                flow.drain,
            );
            self.pump(cx, handle);
            if flow.echo {
                self.send_link_flow(cx, handle);
            }
            return Ok(());
        }
        if self.receivers.contains_key(&handle) {
            if flow.echo {
                self.send_link_flow(cx, handle);
            }
            return Ok(());
        }
        if self.detaching.contains(&handle) {
            return Ok(());
        }
        Err(session_error(
            condition::SESSION_UNATTACHED_HANDLE,
            "flow for a handle that is not attached",
        ))
    }

    fn send_session_flow(&mut self, cx: &mut Ctx) {
        cx.frame(self.channel, self.flow_base());
    }

    fn flow_base(&self) -> Flow {
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: u32::MAX,
            ..Flow::default()
        }
    }

    pub fn send_link_flow(&mut self, cx: &mut Ctx, handle: u32) {
        let mut flow = self.flow_base();
        flow.handle = Some(handle);
        if let Some(l) = self.senders.get(&handle) {
            flow.delivery_count = Some(l.delivery_count);
            flow.link_credit = Some(l.credit);
            flow.available = Some(l.pending.len() as u32);
            flow.drain = l.drain;
        } else if let Some(l) = self.receivers.get(&handle) {
            flow.delivery_count = Some(l.delivery_count);
            flow.link_credit = Some(l.credit);
        }
        cx.frame(self.channel, flow);
    }

    // ---- sending -----------------------------------------------------------------------

    /// A delivery from the core for the link `handle`.
    pub fn deliver(&mut self, cx: &mut Ctx, handle: u32, delivery: Delivery) {
        let Some(link) = self.senders.get_mut(&handle) else {
            return;
        };
        link.arrived(delivery);
        self.pump(cx, handle);
    }

    fn pump_all(&mut self, cx: &mut Ctx) {
        let handles: Vec<u32> = self.senders.keys().copied().collect();
        for h in handles {
            self.pump(cx, h);
        }
    }

    /// Sends what credit and the session window allow; completes a drain.
    fn pump(&mut self, cx: &mut Ctx, handle: u32) {
        let Some(link) = self.senders.get_mut(&handle) else {
            return;
        };
        while self.remote_incoming_window > 0 {
            let Some(d) = link.next_to_send() else { break };
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            let first_key = d
                .group_first
                .then(|| d.queue.settings().group_first_key.as_deref())
                .flatten();
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
            let frames = match cx.out.delivery(start, write) {
                Placed::OneFrame => 1,
                Placed::TooLarge => {
                    let tail = write(cx.staging.room(d.message.weight() + 32));
                    let payload = cx.staging.take();
                    send_transfer(cx, start, payload, tail.unwrap_or_default())
                }
            };
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(frames);
            self.remote_incoming_window = self.remote_incoming_window.saturating_sub(frames);
            if link.browse {
                continue;
            }
            if link.presettled {
                // Acked once the connection has written its batch (`try_apply`).
                cx.pending_acks
                    .defer(link.queue(), link.subscription.consumer(), d.seq);
            } else {
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
            cx.drains_pending = true;
            return;
        }
        // While the connection is still feeding in what the core dispatched for
        // a drain, an empty `pending` does not mean the drain is done.
        if link.drain_done() && !cx.drains_pending {
            link.finish_drain();
            self.send_link_flow(cx, handle);
        }
    }

    /// Answers drains whose deliveries have all been sent.
    pub fn finish_drains(&mut self, cx: &mut Ctx) {
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
            self.send_link_flow(cx, handle);
        }
    }

    // ---- receiving ---------------------------------------------------------------------

    fn transfer(&mut self, cx: &mut Ctx, t: Transfer, payload: Bytes) -> Result<(), SessionError> {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window = self.incoming_window.saturating_sub(1);
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            self.send_session_flow(cx);
        }
        let handle = t.handle;
        let max = cx.options.max_message_size;
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
                    self.detach_with_error(
                        cx,
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
                    let settled = t.settled.unwrap_or(false);
                    self.complete(cx, handle, delivery_id, settled, txn, payload);
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
                cx,
                partial.txn.as_ref(),
                format!("message larger than {max} bytes"),
            );
            self.detach_with_error(
                cx,
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
        self.complete(cx, handle, delivery_id, settled, txn, buf.freeze());
        Ok(())
    }

    /// A whole message arrived on a receiving link.
    fn complete(
        &mut self,
        cx: &mut Ctx,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        txn: Option<Bytes>,
        payload: Bytes,
    ) {
        if payload.len() as u64 > cx.options.max_message_size {
            let max = cx.options.max_message_size;
            refuse_in(cx, txn.as_ref(), format!("message larger than {max} bytes"));
            self.detach_with_error(
                cx,
                handle,
                AmqpError::new(
                    condition::LINK_MESSAGE_SIZE_EXCEEDED,
                    Some(&format!("message larger than {max} bytes")),
                ),
            );
            return;
        }
        let outcome = self.accept_message(cx, handle, delivery_id, settled, txn.as_ref(), payload);
        if let (Some(DeliveryState::Rejected { error }), Some(_)) = (&outcome, &txn) {
            // Refused before it reached its transaction: the transaction is doomed.
            let why = error.as_ref().and_then(|e| e.description.as_ref());
            let why = why.map(|d| d.as_str().to_owned()).unwrap_or_default();
            refuse_in(cx, txn.as_ref(), why);
        }
        self.refill(cx, handle);
        let Some(state) = outcome else { return };
        if !settled {
            self.disposition_out(cx, delivery_id, state);
        }
    }

    /// Grants the peer's sender more credit when it runs low.
    fn refill(&mut self, cx: &mut Ctx, handle: u32) {
        let window = cx.options.link_credit;
        if let Some(link) = self.receivers.get_mut(&handle) {
            if link.needs_credit(window) {
                link.credit = window;
                self.send_link_flow(cx, handle);
            }
        }
    }

    fn disposition_out(&mut self, cx: &mut Ctx, delivery_id: u32, state: DeliveryState) {
        // Consecutive acceptances become one ranged disposition: a producer's window
        // of transfers is answered with one frame, not one per message.
        if matches!(state, DeliveryState::Accepted)
            && extend_acceptance(cx.out.last_mut(), self.channel, delivery_id)
        {
            return;
        }
        cx.frame(
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
        cx: &mut Ctx,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        txn: Option<&Bytes>,
        payload: Bytes,
    ) -> Option<DeliveryState> {
        let link = self.receivers.get_mut(&handle)?;
        // Borrowed where it lies, not moved out: a view is most of a kilobyte.
        let parsed = MessageView::parse(payload);
        let view = match &parsed {
            Ok(v) => v,
            Err(e) => return Some(rejected(e.condition(), &e.to_string())),
        };
        if matches!(link.route, Route::Coordinator) {
            // A discharge commits what came before it, batched sends included.
            self.flush_sends(cx);
            return self.coordinate(cx, delivery_id, settled, view);
        }
        let (address, dest) = match link.route.dest(&cx.broker) {
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
                        .find(|(k, _)| matches!(k, crate::protocol::amqp::wire::Value::Symbol(s) if s.as_str() == "x-opt-jms-dest"))
                        .map(|(_, v)| v)
                });
                let node = terminus::resolve_relay(to.as_str(), jms_dest);
                (node.name, Dest::Routed(node.routing))
            }
        };
        let delay_names = cx.broker.delay_header_names();
        let mut message = match convert::inbound(view, address, cx.read_at_ms, now_ms, delay_names)
        {
            Ok(m) => m,
            Err(e) => return Some(rejected(e.condition(), &e.to_string())),
        };
        if message.group_id.is_none() && link.producer.group_id().is_some() {
            link.producer.apply(&mut message);
            convert::stamp_group(&mut message);
        }
        if let Some(txn) = txn {
            let outcome = match cx.txns.send(&cx.broker, txn, message, dest.target()) {
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
                self.flush_sends(cx);
                self.sends
                    .push(&queue, Arc::new(message), (delivery_id, settled));
                return None;
            }
            Dest::Routed(routing) => routing,
        };
        // Routed one by one; what was batched before goes first.
        self.flush_sends(cx);
        let result = cx.broker.publish(message, routing);
        self.send_outcome(cx, delivery_id, settled, result)
    }

    /// Publishes the batched sends and answers them as [`Session::accept_message`]
    /// would have one by one.
    pub fn flush_sends(&mut self, cx: &mut Ctx) {
        let Some((mut sent, results)) = self.sends.publish(&cx.broker) else {
            return;
        };
        for ((delivery_id, settled), result) in sent.drain(..).zip(results) {
            let outcome = self.send_outcome(cx, delivery_id, settled, result);
            if let (Some(state), false) = (outcome, settled) {
                self.disposition_out(cx, delivery_id, state);
            }
        }
        self.sends.reuse(sent);
    }

    /// The outcome to send now for a published message, or `None` when it
    /// comes after the disk write (or is not wanted: pre-settled).
    fn send_outcome(
        &mut self,
        cx: &mut Ctx,
        delivery_id: u32,
        settled: bool,
        result: Result<Receipt, CoreError>,
    ) -> Option<DeliveryState> {
        match result {
            Err(e) => Some(core_rejection(&e)),
            Ok(c) if settled || c.is_ready() => Some(DeliveryState::Accepted),
            Ok(c) => {
                self.wait_then_settle(cx, delivery_id, c);
                None
            }
        }
    }

    fn wait_then_settle(&mut self, cx: &mut Ctx, delivery_id: u32, c: Receipt) {
        let (channel, generation) = (self.channel, self.generation);
        let c = match c.into_written() {
            Ok(written) => {
                cx.written.push_back(WaitingWrite {
                    channel,
                    generation,
                    delivery_id,
                    written,
                });
                return;
            }
            Err(c) => c,
        };
        cx.waiting.push(Box::pin(async move {
            let state = write_outcome(c.wait().await);
            Settled {
                channel,
                generation,
                delivery_id,
                state,
            }
        }));
    }

    /// A disk write finished for a delivery the peer sent.
    pub fn settled(&mut self, cx: &mut Ctx, s: Settled) {
        if s.generation == self.generation && !self.ending {
            self.disposition_out(cx, s.delivery_id, s.state);
        }
    }

    /// A message to the transaction coordinator: declare or discharge.
    fn coordinate(
        &mut self,
        cx: &mut Ctx,
        delivery_id: u32,
        settled: bool,
        view: &MessageView,
    ) -> Option<DeliveryState> {
        let Body::Value(value) = view.body() else {
            return Some(rejected(
                condition::DECODE_ERROR,
                "coordinator expects an amqp-value",
            ));
        };
        if Declare::from_value(value).is_ok() {
            let id = txn::next_id(&mut cx.declared);
            return Some(match cx.txns.begin(id.clone()) {
                Ok(()) => DeliveryState::Declared { txn_id: id },
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
            true => cx.txns.rollback(id).map(|()| Receipt::ready()),
            false => cx.txns.commit(&cx.broker, id),
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
            Ok(c) if settled || c.is_ready() => Some(DeliveryState::Accepted),
            Ok(c) => {
                self.wait_then_settle(cx, delivery_id, c);
                None
            }
        }
    }

    // ---- settlement of what we sent ---------------------------------------------------

    fn disposition(&mut self, cx: &mut Ctx, d: Disposition) {
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
        loop {
            if let Some(u) = self.unsettled.remove(&id) {
                match state {
                    DeliveryState::TransactionalState { txn_id, outcome } => {
                        let outcome = outcome.as_deref().unwrap_or(&DeliveryState::Accepted);
                        let how = txn::settlement(outcome);
                        // Held otherwise (a doomed transaction returns it at its end).
                        let held = cx.txns.settle(txn_id, &u.queue, u.consumer, u.seq, how);
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
        if !d.settled {
            // The peer wants us to settle (it used rcv-settle-mode second).
            cx.frame(
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

    fn attach(
        &mut self,
        cx: &mut Ctx,
        attach: crate::protocol::amqp::wire::Attach,
    ) -> Result<(), SessionError> {
        super::attach::attach(self, cx, attach)
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

/// Applies a peer's outcome for one delivery; returns the disk write of an acknowledgement.
pub fn apply_outcome(
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

/// Dooms the transaction a transfer belonged to, when it was refused before
/// reaching it.
fn refuse_in(cx: &mut Ctx, txn: Option<&Bytes>, why: String) {
    if let Some(id) = txn {
        let refused = TransactionError::Protocol(Arc::new(RefusedTransfer(why)));
        let _ = cx.txns.refuse(id, refused);
    }
}

/// How a transfer is settled once its disk write is done (or failed).
pub fn write_outcome(result: Result<(), CoreError>) -> DeliveryState {
    match result {
        Ok(()) => DeliveryState::Accepted,
        Err(e) => rejected(core_condition(&e), &e.to_string()),
    }
}

pub fn rejected(condition: &str, description: &str) -> DeliveryState {
    DeliveryState::Rejected {
        error: Some(AmqpError::new(condition, Some(description))),
    }
}

/// The AMQP condition for a core error.
pub fn core_condition(e: &CoreError) -> &'static str {
    match e {
        CoreError::NotFound(_) => condition::NOT_FOUND,
        CoreError::InvalidAddress(_) => condition::INVALID_FIELD,
        CoreError::DelayTooLong { .. } | CoreError::InvalidDelay(_) => condition::INVALID_FIELD,
        CoreError::UnknownDelivery(_) => condition::ILLEGAL_STATE,
        CoreError::ConsumerClosed => condition::ILLEGAL_STATE,
        // A full disk is a limit the client can wait out, not the broker's fault.
        CoreError::Store(_) if e.is_disk_full() => condition::RESOURCE_LIMIT_EXCEEDED,
        CoreError::Store(_) => condition::INTERNAL_ERROR,
        CoreError::ShuttingDown => condition::RESOURCE_DELETED,
    }
}

fn core_rejection(e: &CoreError) -> DeliveryState {
    rejected(core_condition(e), &e.to_string())
}

/// Queues the transfer frames of one delivery, split to the peer's frame size; returns how
/// many frames (transfer ids) it took.
fn send_transfer(cx: &mut Ctx, start: DeliveryStart, payload: Bytes, tail: Bytes) -> u32 {
    let DeliveryStart {
        channel,
        handle,
        delivery_id,
        settled,
    } = start;
    let limit = (cx.remote_max_frame as usize)
        .saturating_sub(8 + TRANSFER_OVERHEAD)
        .max(64);
    // One frame takes the tail as it is; split over several, the payload is one piece.
    let (mut rest, mut tail) = if payload.len() + tail.len() <= limit || tail.is_empty() {
        (payload, tail)
    } else {
        let whole = cx.staging.room(payload.len() + tail.len());
        whole.extend_from_slice(&payload);
        whole.extend_from_slice(&tail);
        (cx.staging.take(), Bytes::new())
    };
    let mut first = true;
    let mut frames = 0;
    loop {
        let chunk = rest.split_to(rest.len().min(limit));
        let more = !rest.is_empty();
        let transfer = if first {
            Transfer {
                handle,
                delivery_id: Some(delivery_id),
                delivery_tag: Some({
                    bytes::BufMut::put_u32(cx.staging.room(4), delivery_id);
                    cx.staging.take()
                }),
                message_format: Some(0),
                settled: Some(settled),
                more,
                ..Transfer::default()
            }
        } else {
            Transfer {
                handle,
                more,
                ..Transfer::default()
            }
        };
        cx.out.push(Frame::Amqp(AmqpFrame {
            channel,
            performative: transfer.into(),
            payload: chunk,
            payload_tail: std::mem::take(&mut tail),
        }));
        frames += 1;
        first = false;
        if !more {
            return frames;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
