//! A session: windows, transfer and delivery ids, its links by handle, and the deliveries it
//! has sent and the peer has yet to settle.
//!
//! The connection hands each handler only what it reads or changes: the frames going out,
//! the consumer map, the open transactions, the waiting dispositions. Sending (deliveries
//! from the core, and the peer settling them) is in `send`, receiving (transfers from the
//! peer, and the transaction coordinator) in `receive`.

mod receive;
mod send;

pub use send::CoreDrain;

use super::attach;
use super::condition::core_condition;
use super::env::Env;
use super::link::{Consumers, ReceiverLink, SenderLink};
use super::outgoing::Outgoing;
use super::send_batch::SendBatch;
use crate::core::consumer::ConsumerId;
use crate::core::fast_map::FastMap;
use crate::core::queue::{PendingAcks, Queue};
use crate::core::Broker;
use crate::protocol::amqp::wire::definitions::{AmqpError, Role};
use crate::protocol::amqp::wire::error::condition;
use crate::protocol::amqp::wire::performatives::{Attach, Begin, Detach, End, Flow};
use std::collections::HashSet;
use std::sync::Arc;

/// Our incoming window; re-announced when half used.
const INCOMING_WINDOW: u32 = 1 << 20;

#[derive(Debug)]
pub enum SessionError {
    /// End the session with this error.
    End(AmqpError),
    /// Close the whole connection.
    Connection(AmqpError),
}

fn session_error(condition: &str, description: &str) -> SessionError {
    SessionError::End(AmqpError::new(condition, Some(description)))
}

/// A delivery the broker sent and the peer has not settled.
struct Unsettled {
    handle: u32,
    consumer: ConsumerId,
    queue: Arc<Queue>,
    seq: u64,
}

pub struct Session {
    channel: u16,
    generation: u64,
    next_outgoing_id: u32,
    next_delivery_id: u32,
    next_incoming_id: u32,
    incoming_window: u32,
    remote_incoming_window: u32,
    handle_max: u32,
    senders: FastMap<u32, SenderLink>,
    receivers: FastMap<u32, ReceiverLink>,
    unsettled: FastMap<u32, Unsettled>,
    /// We sent `end` and wait for the peer's.
    ending: bool,
    /// Links we detached (refused or failed) whose detach the peer has yet to send: its
    /// frames for them, already in flight, are ignored.
    detaching: HashSet<u32>,
    /// Messages received for one queue, not yet published (see [`SendBatch`]).
    sends: SendBatch,
    /// Some receiving link has its credit withheld (see `ReceiverLink::withheld`).
    withholding: bool,
}

impl Session {
    pub fn begin(out: &mut Outgoing, channel: u16, generation: u64, begin: &Begin) -> Session {
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
            withholding: false,
        };
        out.frame(
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

    /// We ended the session with an error and wait for the peer's `end`: every other
    /// frame of the peer's is moot.
    pub fn is_ending(&self) -> bool {
        self.ending
    }

    /// Ends the session: an error `end` waits for the peer's, a reply is final.
    pub fn end(&mut self, out: &mut Outgoing, consumers: &mut Consumers, error: Option<AmqpError>) {
        self.ending = error.is_some();
        out.frame(self.channel, End { error });
        self.release_all(consumers);
    }

    /// Drops every link; the core returns unsettled messages to their queues.
    pub fn release_all(&mut self, consumers: &mut Consumers) {
        for (_, link) in self.senders.drain() {
            consumers.remove(&link.subscription.consumer());
        }
        self.receivers.clear();
        self.unsettled.clear();
    }

    // ---- links -------------------------------------------------------------------------

    pub fn attach(
        &mut self,
        env: &Env,
        out: &mut Outgoing,
        consumers: &mut Consumers,
        a: Attach,
    ) -> Result<(), SessionError> {
        if self.senders.contains_key(&a.handle)
            || self.receivers.contains_key(&a.handle)
            || self.detaching.contains(&a.handle)
        {
            return Err(session_error(
                condition::SESSION_HANDLE_IN_USE,
                "attach on a handle already in use",
            ));
        }
        if a.handle > self.handle_max {
            return Err(SessionError::Connection(AmqpError::new(
                condition::CONNECTION_FRAMING_ERROR,
                Some("handle over handle-max"),
            )));
        }
        if self.senders.len() + self.receivers.len() >= env.max_links_per_session {
            let error = AmqpError::new(
                condition::RESOURCE_LIMIT_EXCEEDED,
                Some(&format!(
                    "more than {} links on this session (limits.max_links_per_session)",
                    env.max_links_per_session
                )),
            );
            let ours = match a.role {
                Role::Receiver => Role::Sender,
                Role::Sender => Role::Receiver,
            };
            self.refuse(out, &a, ours, error);
            return Ok(());
        }
        match a.role {
            // The peer receives: we send.
            Role::Receiver => match attach::sender(env, &a) {
                Ok((mut link, reply)) => {
                    link.limit_unsettled(env.max_unsettled_per_link);
                    out.frame(self.channel, reply);
                    consumers.insert(link.subscription.consumer(), (self.channel, a.handle));
                    self.senders.insert(a.handle, link);
                }
                Err(e) => self.refuse(out, &a, Role::Sender, e),
            },
            Role::Sender => match attach::receiver(env, &a) {
                Ok((link, reply)) => {
                    out.frame(self.channel, reply);
                    self.withholding |= link.withheld.is_some();
                    self.receivers.insert(a.handle, link);
                    self.send_link_flow(out, a.handle);
                }
                Err(e) => self.refuse(out, &a, Role::Receiver, e),
            },
        }
        Ok(())
    }

    /// Refuses an attach the spec's way: an attach with a null terminus, then a detach
    /// carrying the error.
    fn refuse(&mut self, out: &mut Outgoing, a: &Attach, role: Role, error: AmqpError) {
        out.frame(self.channel, attach::refusal(a, role, &error));
        self.detaching.insert(a.handle);
        out.frame(
            self.channel,
            Detach {
                handle: a.handle,
                closed: true,
                error: Some(error),
            },
        );
    }

    pub fn detach(
        &mut self,
        env: &Env,
        out: &mut Outgoing,
        consumers: &mut Consumers,
        detach: Detach,
    ) -> Result<(), SessionError> {
        let handle = detach.handle;
        if self.detaching.remove(&handle) {
            // The answer to our own detach.
            return Ok(());
        }
        if let Some(link) = self.senders.remove(&handle) {
            let consumer = link.subscription.consumer();
            consumers.remove(&consumer);
            if link.unsettled() > 0 {
                self.unsettled.retain(|_, u| u.handle != handle);
            }
            let durable = link.durable.clone();
            let queue = link.queue().clone();
            drop(link);
            if let (true, Some((topic, name))) = (detach.closed, durable) {
                if queue.stats().consumers == 0 {
                    let deleted =
                        env.broker
                            .delete_durable_subscription_as(&topic, &name, &env.principal);
                    if let Err(e) = deleted {
                        // The subscription stays; the peer hears why.
                        out.frame(
                            self.channel,
                            Detach {
                                handle,
                                closed: true,
                                error: Some(AmqpError::new(
                                    core_condition(&e),
                                    Some(&e.to_string()),
                                )),
                            },
                        );
                        return Ok(());
                    }
                }
            }
        } else if self.receivers.remove(&handle).is_none() {
            return Err(session_error(
                condition::SESSION_UNATTACHED_HANDLE,
                "detach of a handle that is not attached",
            ));
        }
        out.frame(
            self.channel,
            Detach {
                handle,
                closed: detach.closed,
                error: None,
            },
        );
        Ok(())
    }

    /// Detaches a link the peer sends on with an error (e.g. a message over the size limit).
    fn detach_receiver_with_error(&mut self, out: &mut Outgoing, handle: u32, error: AmqpError) {
        self.receivers.remove(&handle);
        self.detaching.insert(handle);
        out.frame(
            self.channel,
            Detach {
                handle,
                closed: true,
                error: Some(error),
            },
        );
    }

    // ---- flow --------------------------------------------------------------------------

    /// A flow from the peer. What it lets us send goes out; returns whether the core
    /// is now draining into the connection's channel.
    pub fn flow(
        &mut self,
        out: &mut Outgoing,
        acks: &mut PendingAcks,
        drain: CoreDrain,
        flow: Flow,
    ) -> Result<CoreDrain, SessionError> {
        // Session window: how many more transfer frames the peer takes from us.
        let their_next_in = flow.next_incoming_id.unwrap_or(1);
        self.remote_incoming_window = their_next_in
            .wrapping_add(flow.incoming_window)
            .wrapping_sub(self.next_outgoing_id);
        let Some(handle) = flow.handle else {
            let drain = self.pump_all(out, acks, drain);
            if flow.echo {
                self.send_session_flow(out);
            }
            return Ok(drain);
        };
        if let Some(link) = self.senders.get_mut(&handle) {
            link.flow(
                flow.delivery_count,
                flow.link_credit.unwrap_or(0),
                flow.drain,
            );
            let drain = self.pump(out, acks, drain, handle);
            if flow.echo {
                self.send_link_flow(out, handle);
            }
            return Ok(drain);
        }
        if self.receivers.contains_key(&handle) {
            if flow.echo {
                self.send_link_flow(out, handle);
            }
            return Ok(drain);
        }
        if self.detaching.contains(&handle) {
            return Ok(drain);
        }
        Err(session_error(
            condition::SESSION_UNATTACHED_HANDLE,
            "flow for a handle that is not attached",
        ))
    }

    fn send_session_flow(&mut self, out: &mut Outgoing) {
        out.frame(self.channel, self.flow_base());
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

    /// A queue that holds back the credit of one of this session's
    /// receiving links: the connection waits for it to let producers go.
    pub fn withheld_queue(&self) -> Option<Arc<Queue>> {
        if !self.withholding {
            return None;
        }
        self.receivers.values().find_map(|l| l.withheld.clone())
    }

    /// Grants credit again to the links whose queue lets producers go now.
    pub fn regrant(&mut self, broker: &Broker, out: &mut Outgoing, window: u32) {
        if !self.withholding {
            return;
        }
        let mut still = false;
        let mut granted = Vec::new();
        for (&handle, link) in self.receivers.iter_mut() {
            if link.withheld.is_none() {
                continue;
            }
            link.withheld = link.route.blocking_queue(broker);
            match link.withheld {
                Some(_) => still = true,
                None => {
                    link.credit = window;
                    granted.push(handle);
                }
            }
        }
        self.withholding = still;
        for handle in granted {
            self.send_link_flow(out, handle);
        }
    }

    fn send_link_flow(&mut self, out: &mut Outgoing, handle: u32) {
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
        out.frame(self.channel, flow);
    }
}
