//! Link state: credit bookkeeping for the links we send on (deliveries from the core) and
//! reassembly for the links we receive on.
//!
//! Credit towards the core is granted with `add_credit` only, never set outright: the core
//! may be dispatching on another thread at the same moment, and a relative grant cannot
//! double-count. `granted - received` is what the core may still send (or has in the
//! channel); `pending` holds what arrived beyond the peer's current link credit.

use super::txn::Dest;
use crate::core::broker::{Subscription, TemporaryQueue};
use crate::core::consumer::{ConsumerId, Delivery};
use crate::core::factory::ProducerGroup;
use crate::core::fast_map::FastMap;
use crate::core::producers::ProducerRegistration;
use crate::core::queue::Queue;
use crate::core::security::Principal;
use crate::core::{Broker, CoreError, RoutingType};
use crate::protocol::amqp::wire::performatives::sender_credit;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;

/// Which link each consumer of a connection delivers to: (channel, handle).
pub type Consumers = FastMap<ConsumerId, (u16, u32)>;

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
    /// Sent, not yet settled by the peer (counted for links that are not presettled).
    unsettled: u64,
    /// At most this many unsettled: past it the core gets no credit, and so
    /// sends nothing more on this link, until settlements arrive.
    max_unsettled: u64,
    /// The last grant fell short of the peer's credit because of `max_unsettled`.
    held_back: bool,
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
            unsettled: 0,
            max_unsettled: u64::MAX,
            held_back: false,
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

    /// Caps the deliveries sent and not yet settled (`max_unsettled_per_link`).
    pub fn limit_unsettled(&mut self, max: usize) {
        self.max_unsettled = max as u64;
    }

    pub fn unsettled(&self) -> u64 {
        self.unsettled
    }

    /// A delivery went out unsettled.
    pub fn sent_unsettled(&mut self) {
        self.unsettled += 1;
    }

    /// The peer settled one of our deliveries. True when the link was held
    /// back by the unsettled limit: the caller then calls [`SenderLink::regrant`]
    /// once for the whole disposition.
    pub fn settled_one(&mut self) -> bool {
        self.unsettled = self.unsettled.saturating_sub(1);
        self.held_back
    }

    /// Grants the core what settlements made room for.
    pub fn regrant(&mut self) {
        self.grant();
    }

    /// Tops the core up so that what it may send plus what we hold equals our
    /// credit, and what it may send plus what we hold and what the peer has
    /// unsettled stays within `max_unsettled`.
    fn grant(&mut self) {
        let held = self.pending.len() as u64;
        let mut want = self.received - held + u64::from(self.credit);
        let room = self
            .received
            .saturating_add(self.max_unsettled)
            .saturating_sub(held + self.unsettled);
        self.held_back = want > room;
        want = want.min(room);
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
    /// An anycast address: its queue, looked up at attach and kept, so a
    /// message costs no lookup by name (a shared map, and across worker
    /// threads a contended one).
    Queue {
        name: Arc<str>,
        queue: Arc<Queue>,
    },
    /// A multicast address: its subscribers are looked up per message.
    Topic {
        name: Arc<str>,
    },
    Temporary(TemporaryQueue),
    /// The anonymous relay: each message's `to`.
    Anonymous,
    /// The transaction coordinator.
    Coordinator,
}

impl Route {
    /// Registers a producer of the queue this route sends to; a topic, the anonymous
    /// relay and the coordinator feed no one queue.
    pub fn register_producer(&self, broker: &Broker) -> Option<ProducerRegistration> {
        let name = match self {
            Route::Queue { name, .. } => name,
            Route::Temporary(t) => t.name(),
            Route::Topic { .. } | Route::Anonymous | Route::Coordinator => return None,
        };
        Some(broker.producers().register(name.clone()))
    }

    /// A queue this route sends to whose producers must wait now (see
    /// [`Queue::blocks_producers`]). The anonymous relay's messages go
    /// anywhere: it is never held back as a whole.
    pub fn blocking_queue(&self, broker: &Broker) -> Option<Arc<Queue>> {
        match self {
            Route::Queue { queue, .. } => queue.blocks_producers().then(|| queue.clone()),
            Route::Temporary(t) => t.queue().blocks_producers().then(|| t.queue().clone()),
            Route::Topic { name } if broker.may_block_producers() => {
                broker.blocking_subscriber(name)
            }
            Route::Topic { .. } | Route::Anonymous | Route::Coordinator => None,
        }
    }
}

/// A message's address and where it goes, the queue lent by the link.
pub type RouteDest<'a> = (Arc<str>, Dest<&'a Arc<Queue>>);

impl Route {
    /// The address and destination of the next message; `None` when each
    /// message names its own. A kept queue deleted since (a durable
    /// subscription unsubscribed) is looked up again, as a first send would.
    pub fn dest(
        &mut self,
        broker: &Broker,
        who: &Principal,
    ) -> Result<Option<RouteDest<'_>>, CoreError> {
        Ok(match self {
            Route::Queue { name, queue } => {
                if queue.is_deleted() {
                    *queue = broker.open_queue(name, who)?;
                }
                Some((name.clone(), Dest::Queue(&*queue)))
            }
            Route::Topic { name } => Some((name.clone(), Dest::Routed(RoutingType::Multicast))),
            Route::Temporary(t) => Some((t.name().clone(), Dest::Queue(t.queue()))),
            Route::Anonymous | Route::Coordinator => None,
        })
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
    /// The queue whose producers must wait (BLOCK policy, memory limit
    /// reached): no credit is granted until it lets them go.
    pub withheld: Option<Arc<Queue>>,
    /// Anonymous relay: addresses this link was allowed to send to lately.
    pub relay_allowed: RelayAllowed,
    /// Counts the link as a producer of its queue while it is attached (held for its drop).
    pub _producing: Option<ProducerRegistration>,
}

/// The last few addresses an anonymous-relay link was allowed to send to, so a
/// producer cycling through a handful of destinations is checked once per
/// destination, not once per message.
#[derive(Debug, Default)]
pub struct RelayAllowed {
    recent: Vec<(Arc<str>, RoutingType)>,
    next: usize,
}

impl RelayAllowed {
    const SIZE: usize = 8;

    pub fn contains(&self, address: &str, routing: RoutingType) -> bool {
        self.recent
            .iter()
            .any(|(a, r)| **a == *address && *r == routing)
    }

    pub fn insert(&mut self, address: Arc<str>, routing: RoutingType) {
        if self.recent.len() < Self::SIZE {
            self.recent.push((address, routing));
        } else {
            self.recent[self.next] = (address, routing);
            self.next = (self.next + 1) % Self::SIZE;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::consumer::{ConsumerOptions, CreditMode};
    use crate::core::deliveries;
    use crate::core::settings::QueueSettings;

    #[tokio::test]
    async fn deleted_queue_is_never_sent_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = crate::core::tests::open(dir.path(), QueueSettings::default());
        let (tx, _rx) = deliveries::channel();
        let options = ConsumerOptions {
            credit: CreditMode::Window(10),
            ..Default::default()
        };
        let sub = broker
            .subscribe_named("prices", "c:s", true, options, tx)
            .expect("subscribe");
        let name: Arc<str> = Arc::from("prices::durable::c:s");
        let first = broker.queue_or_create(&name, false).expect("queue");
        let mut route = Route::Queue {
            name: name.clone(),
            queue: first.clone(),
        };
        let Ok(Some((_, Dest::Queue(q)))) =
            route.dest(&broker, &crate::core::security::Principal::unrestricted())
        else {
            panic!("anycast route gives its queue");
        };
        assert!(Arc::ptr_eq(q, &first), "kept, not looked up");

        drop(sub);
        assert!(broker.delete_durable_subscription("prices", "c:s"));
        assert!(first.is_deleted());
        // Looked up again by name, which no client may send to: refused, not
        // accepted into a queue nobody will read.
        assert!(matches!(
            route.dest(&broker, &crate::core::security::Principal::unrestricted()),
            Err(CoreError::InvalidAddress(_))
        ));
    }
}
