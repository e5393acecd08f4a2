//! Local transactions (the `amqp:local-transactions` coordinator): transactional transfers and
//! dispositions wait in their transaction until it is discharged. Commit applies them all;
//! rollback drops the sends and puts the acknowledged messages back for redelivery.

use super::definitions::DeliveryState;
use crate::core::broker::RoutingType;
use crate::core::consumer::{ConsumerId, Release};
use crate::core::message::Message;
use crate::core::queue::Queue;
use crate::core::{Broker, CoreError};
use crate::store::Completion;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;

/// Where a send goes: routed by address, or straight to a queue the link
/// holds. A link lends its queue (`Dest<&Arc<Queue>>`: no reference count
/// touched per message, which across worker threads is a contended one); a
/// transactional send keeps its own until commit.
pub enum Dest<Q = Arc<Queue>> {
    Routed(RoutingType),
    Queue(Q),
}

impl<Q: std::borrow::Borrow<Arc<Queue>>> Dest<Q> {
    pub fn publish(&self, broker: &Broker, message: Message) -> Result<Completion, CoreError> {
        match self {
            Dest::Routed(routing) => broker.publish(message, *routing),
            Dest::Queue(q) => broker.publish_to(q.borrow(), message),
        }
    }

    pub fn to_owned(&self) -> Dest {
        match self {
            Dest::Routed(routing) => Dest::Routed(*routing),
            Dest::Queue(q) => Dest::Queue(q.borrow().clone()),
        }
    }
}

/// A settlement of a delivery the broker sent, held until commit.
pub struct HeldAck {
    pub queue: Arc<Queue>,
    pub consumer: ConsumerId,
    pub seq: u64,
    pub outcome: DeliveryState,
}

#[derive(Default)]
pub struct Txn {
    sends: Vec<(Message, Dest)>,
    acks: Vec<HeldAck>,
}

#[derive(Default)]
pub struct Transactions {
    next_id: u64,
    open: HashMap<Bytes, Txn>,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown transaction")]
pub struct UnknownTxn;

impl Transactions {
    pub fn declare(&mut self) -> Bytes {
        self.next_id += 1;
        let id = Bytes::copy_from_slice(&self.next_id.to_be_bytes());
        self.open.insert(id.clone(), Txn::default());
        id
    }

    pub fn is_open(&self, id: &[u8]) -> bool {
        self.open.contains_key(id)
    }

    pub fn send(&mut self, id: &[u8], message: Message, dest: Dest) -> Result<(), UnknownTxn> {
        self.open
            .get_mut(id)
            .ok_or(UnknownTxn)?
            .sends
            .push((message, dest));
        Ok(())
    }

    pub fn settle(&mut self, id: &[u8], ack: HeldAck) -> Result<(), HeldAck> {
        match self.open.get_mut(id) {
            Some(t) => {
                t.acks.push(ack);
                Ok(())
            }
            None => Err(ack),
        }
    }

    /// Ends a transaction: commit applies its work and returns what to wait for.
    pub fn discharge(
        &mut self,
        broker: &Broker,
        id: &[u8],
        fail: bool,
    ) -> Result<Result<Completion, CoreError>, UnknownTxn> {
        let txn = self.open.remove(id).ok_or(UnknownTxn)?;
        if fail {
            rollback(txn);
            return Ok(Ok(Completion::ready()));
        }
        Ok(commit(broker, txn))
    }

    /// The connection went away: nothing of an undischarged transaction happens.
    pub fn rollback_all(&mut self) {
        for (_, txn) in self.open.drain() {
            rollback(txn);
        }
    }
}

fn rollback(txn: Txn) {
    for a in txn.acks {
        let _ = a.queue.release(a.consumer, a.seq, Release::Failed);
    }
}

fn commit(broker: &Broker, txn: Txn) -> Result<Completion, CoreError> {
    let mut waits = Vec::new();
    let mut first_error = None;
    for (message, dest) in txn.sends {
        match dest.publish(broker, message) {
            Ok(c) => waits.push(c),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    for a in txn.acks {
        if let Some(c) = super::session::apply_outcome(&a.queue, a.consumer, a.seq, &a.outcome) {
            waits.push(c);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(Completion::all(waits)),
    }
}
