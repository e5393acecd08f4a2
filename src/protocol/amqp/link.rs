//! Link state: credit bookkeeping for the links we send on (deliveries from the core) and
//! reassembly for the links we receive on.
//!
//! Credit towards the core is granted with `add_credit` only, never set outright: the core
//! may be dispatching on another thread at the same moment, and a relative grant cannot
//! double-count. `granted - received` is what the core may still send (or has in the
//! channel); `pending` holds what arrived beyond the peer's current link credit.

use super::performatives::sender_credit;
use super::txn::Dest;
use crate::core::broker::{Subscription, TemporaryQueue};
use crate::core::consumer::Delivery;
use crate::core::factory::ProducerGroup;
use crate::core::queue::Queue;
use crate::core::RoutingType;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;

/// A link on which the broker sends (the peer's receiver).
pub struct SenderLink {
    pub subscription: Subscription,
    /// Deliveries go out settled (peer asked for settled mode, or a browser).
    pub presettled: bool,
    pub browse: bool,
    pub delivery_count: u32,
    pub credit: u32,
    pub drain: bool,
    /// The core was told to drain; what it dispatched is in the connection's channel.
    pub core_drained: bool,
    granted: u64,
    received: u64,
    pub pending: VecDeque<Delivery>,
    /// Deleted when the link detaches with `closed` (JMS unsubscribe).
    pub durable: Option<(Arc<str>, String)>,
    /// A dynamic node this link created; deleted with it.
    pub temporary: Option<TemporaryQueue>,
}

impl SenderLink {
    pub fn new(subscription: Subscription, presettled: bool, browse: bool) -> Self {
        SenderLink {
            subscription,
            presettled,
            browse,
            delivery_count: 0,
            credit: 0,
            drain: false,
            core_drained: false,
            granted: 0,
            received: 0,
            pending: VecDeque::new(),
            durable: None,
            temporary: None,
        }
    }

    pub fn queue(&self) -> &Arc<Queue> {
        self.subscription.queue()
    }

    /// A flow from the peer: its view of the delivery count and its credit.
    pub fn flow(&mut self, delivery_count: Option<u32>, link_credit: u32, drain: bool) {
        // A missing delivery-count means the peer has not seen our attach's initial count (0).
        let theirs = delivery_count.unwrap_or(0);
        self.credit = sender_credit(theirs, link_credit, self.delivery_count);
        self.drain = drain;
        self.grant();
    }

    /// Tops the core up so that what it may send plus what we hold equals our credit.
    fn grant(&mut self) {
        let want = self.received - self.pending.len() as u64 + u64::from(self.credit);
        if want > self.granted {
            let more = (want - self.granted).min(u64::from(u32::MAX)) as u32;
            self.granted += u64::from(more);
            let q = self.subscription.queue().clone();
            q.add_credit(self.subscription.consumer(), more);
        }
    }

    pub fn arrived(&mut self, delivery: Delivery) {
        self.received += 1;
        self.pending.push_back(delivery);
    }

    /// The next delivery we may send now, taking one credit.
    pub fn next_to_send(&mut self) -> Option<Delivery> {
        if self.credit == 0 {
            return None;
        }
        let d = self.pending.pop_front()?;
        self.credit -= 1;
        self.delivery_count = self.delivery_count.wrapping_add(1);
        Some(d)
    }

    /// Drain: the core drops the credit it still holds; we spend ours on nothing.
    /// Returns the credit the core dropped (for the caller to collect stragglers).
    pub fn drain_core(&mut self) -> u32 {
        self.core_drained = true;
        let q = self.subscription.queue().clone();
        let dropped = q.drain(self.subscription.consumer());
        self.granted -= u64::from(dropped).min(self.granted);
        dropped
    }

    /// Ends a drain: the unused credit is consumed by advancing the delivery count.
    pub fn finish_drain(&mut self) {
        self.delivery_count = self.delivery_count.wrapping_add(self.credit);
        self.credit = 0;
        self.drain = false;
        self.core_drained = false;
    }

    /// Whether a drain can be answered now: no credit left, or the core drained and
    /// everything it had is sent.
    pub fn drain_done(&self) -> bool {
        self.drain && (self.credit == 0 || (self.core_drained && self.pending.is_empty()))
    }
}

/// Where a receiving link's messages go.
pub enum Route {
    Node {
        name: Arc<str>,
        routing: RoutingType,
    },
    Temporary(TemporaryQueue),
    /// The anonymous relay: each message's `to`.
    Anonymous,
    /// The transaction coordinator.
    Coordinator,
}

impl Route {
    pub fn dest(&self) -> Option<(Arc<str>, Dest)> {
        match self {
            Route::Node { name, routing } => Some((name.clone(), Dest::Routed(*routing))),
            Route::Temporary(t) => Some((t.name().clone(), Dest::Queue(t.queue().clone()))),
            Route::Anonymous | Route::Coordinator => None,
        }
    }
}

/// A delivery being received over several transfer frames.
pub struct Partial {
    pub delivery_id: u32,
    pub settled: bool,
    pub txn: Option<Bytes>,
    pub buf: BytesMut,
}

/// A link on which the broker receives (the peer's sender).
pub struct ReceiverLink {
    pub route: Route,
    pub producer: ProducerGroup,
    pub credit: u32,
    pub delivery_count: u32,
    pub partial: Option<Partial>,
}

impl ReceiverLink {
    /// Spends one credit for a new delivery; false when the peer had none.
    pub fn take_credit(&mut self) -> bool {
        if self.credit == 0 {
            return false;
        }
        self.credit -= 1;
        self.delivery_count = self.delivery_count.wrapping_add(1);
        true
    }

    /// Whether to grant more: below half the window.
    pub fn needs_credit(&self, window: u32) -> bool {
        self.credit < window / 2
    }
}
