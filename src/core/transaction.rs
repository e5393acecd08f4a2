//! Local transactions, one implementation for every protocol: a
//! transaction holds sends and settlements until it ends, then commit applies
//! all of them or none.
//!
//! Everything that can refuse an operation is checked when the operation is
//! added (the destination, the delay, the limits, a full FAIL queue), so a
//! transaction knows it is doomed long before its commit. The first refusal
//! is kept: the commit then fails with it and nothing of the transaction
//! takes effect. At commit what can have changed since (a settlement's
//! delivery taken back when its consumer left, a queue deleted or become a
//! full FAIL queue, a topic gained a full FAIL subscriber queue) is checked
//! again before anything is applied. A send that finds its DROP queue (or a
//! topic subscriber's DROP queue) full as the commit applies it is dropped
//! there, as outside a transaction.

use super::broker::{address_full, admit, validate_name, Broker, RoutingType};
use super::consumer::{ConsumerId, Release};
use super::error::CoreError;
use super::memory::AddressFullPolicy;
use super::message::Message;
use super::queue::Queue;
use super::receipt::Receipt;
use super::security::{Principal, QueueSlot};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// How much one connection may hold in transactions; each field is a
/// `[limits]` setting of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionLimits {
    /// Sends and settlements in one transaction (`max_transaction_ops`).
    pub max_ops: usize,
    /// Bytes of messages one transaction holds (`max_transaction_bytes`),
    /// counted as [`Message::weight`].
    pub max_bytes: usize,
    /// Transactions open at once on one connection (`max_open_transactions`).
    pub max_open: usize,
}

impl Default for TransactionLimits {
    fn default() -> Self {
        Self {
            max_ops: 100_000,
            max_bytes: 64 << 20,
            max_open: 64,
        }
    }
}

/// Why a transaction operation, or a whole transaction, was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransactionError {
    #[error("no such transaction is open")]
    Unknown,
    #[error("the transaction is open already")]
    AlreadyOpen,
    #[error("more than {max} transactions open on this connection (limits.max_open_transactions)")]
    TooManyOpen { max: usize },
    #[error("the transaction holds more than {max} operations (limits.max_transaction_ops)")]
    TooManyOps { max: usize },
    #[error(
        "the transaction holds more than {max} bytes of messages (limits.max_transaction_bytes)"
    )]
    TooManyBytes { max: usize },
    #[error("{0}")]
    Core(#[from] CoreError),
    /// An operation the protocol refused before it reached the core (an
    /// acknowledgement of a message that is not outstanding, a message that
    /// does not convert or is too large).
    #[error("{0}")]
    Protocol(Arc<dyn std::error::Error + Send + Sync>),
}

/// Where a send goes: routed by address, or straight to a known queue.
#[derive(Debug, Clone)]
pub enum Target {
    Routed(RoutingType),
    Queue(Arc<Queue>),
}

/// How a delivery is settled when its transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    Ack,
    Release(Release),
}

/// A send checked when it was added: its delay resolved, its queue known
/// (or, for a queue auto-created on first use, allowed to be created).
struct HeldSend {
    message: Message,
    to: Checked,
}

enum Checked {
    Queue(Arc<Queue>),
    /// An anycast address whose queue does not exist yet and may be
    /// auto-created: created at commit, so a rolled-back transaction leaves
    /// no queue behind.
    Create,
    Topic,
}

struct HeldSettlement {
    queue: Arc<Queue>,
    consumer: ConsumerId,
    seq: u64,
    how: Settlement,
}

#[derive(Default)]
struct Transaction {
    sends: Vec<HeldSend>,
    settlements: Vec<HeldSettlement>,
    ops: usize,
    bytes: usize,
    /// The first refusal: the transaction can only roll back now.
    doomed: Option<TransactionError>,
}

impl Transaction {
    fn doom(&mut self, error: TransactionError) -> TransactionError {
        // A doomed transaction's messages will never be sent: free them now.
        self.sends = Vec::new();
        self.bytes = 0;
        self.doomed.get_or_insert(error).clone()
    }

    /// Puts every held delivery back for redelivery, as an abort does.
    fn roll_back(self) {
        let releases = self
            .settlements
            .into_iter()
            .map(|s| (s.queue, s.consumer, s.seq, Release::Failed));
        release_together(releases);
    }
}

/// The open transactions of one connection, by the protocol's transaction id.
/// Dropping it rolls back whatever is still open (the connection went away).
pub struct Transactions<K: Hash + Eq> {
    limits: TransactionLimits,
    open: HashMap<K, Transaction>,
}

impl<K: Hash + Eq> Transactions<K> {
    pub fn new(limits: TransactionLimits) -> Self {
        Self {
            limits,
            open: HashMap::new(),
        }
    }

    pub fn begin(&mut self, id: K) -> Result<(), TransactionError> {
        if self.open.contains_key(&id) {
            return Err(TransactionError::AlreadyOpen);
        }
        if self.open.len() >= self.limits.max_open {
            return Err(TransactionError::TooManyOpen {
                max: self.limits.max_open,
            });
        }
        self.open.insert(id, Transaction::default());
        Ok(())
    }

    pub fn is_open<Q>(&self, id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.open.contains_key(id)
    }

    /// Adds a send. `Err(Unknown)` when no such transaction is open; any
    /// other error means the transaction is doomed (by this send or an
    /// earlier operation) and its commit will fail with that error.
    pub fn send<Q>(
        &mut self,
        broker: &Broker,
        id: &Q,
        mut message: Message,
        target: Target,
    ) -> Result<(), TransactionError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let limits = self.limits;
        let txn = self.open.get_mut(id).ok_or(TransactionError::Unknown)?;
        if let Some(e) = &txn.doomed {
            return Err(e.clone());
        }
        if txn.ops >= limits.max_ops {
            return Err(txn.doom(TransactionError::TooManyOps {
                max: limits.max_ops,
            }));
        }
        let weight = message.weight();
        if txn.bytes.saturating_add(weight) > limits.max_bytes {
            return Err(txn.doom(TransactionError::TooManyBytes {
                max: limits.max_bytes,
            }));
        }
        let checked = broker
            .refuse_on_full_disk(&message)
            .and_then(|()| check_send(broker, &mut message, target));
        match checked {
            Ok(to) => {
                txn.ops += 1;
                txn.bytes += weight;
                // Held until commit, maybe long: keep only its own bytes, not
                // the whole read buffer it was cut from (the byte limit is
                // then what it costs).
                let message = message.detached();
                txn.sends.push(HeldSend { message, to });
                Ok(())
            }
            Err(e) => Err(txn.doom(e.into())),
        }
    }

    /// Adds the settlement of a delivery. `Err(Unknown)` when no such
    /// transaction is open (nothing is held then). A settlement is held even
    /// in a doomed transaction, so that its delivery is returned when the
    /// transaction ends; there are never more of those than deliveries in
    /// flight to the connection.
    pub fn settle<Q>(
        &mut self,
        id: &Q,
        queue: &Arc<Queue>,
        consumer: ConsumerId,
        seq: u64,
        how: Settlement,
    ) -> Result<(), TransactionError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let max_ops = self.limits.max_ops;
        let txn = self.open.get_mut(id).ok_or(TransactionError::Unknown)?;
        txn.settlements.push(HeldSettlement {
            queue: queue.clone(),
            consumer,
            seq,
            how,
        });
        txn.ops += 1;
        if let Some(e) = &txn.doomed {
            return Err(e.clone());
        }
        if txn.ops > max_ops {
            return Err(txn.doom(TransactionError::TooManyOps { max: max_ops }));
        }
        Ok(())
    }

    /// Dooms a transaction for an operation the protocol refused itself.
    /// `Err(Unknown)` when no such transaction is open.
    pub fn refuse<Q>(&mut self, id: &Q, error: TransactionError) -> Result<(), TransactionError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let txn = self.open.get_mut(id).ok_or(TransactionError::Unknown)?;
        txn.doom(error);
        Ok(())
    }

    /// Ends a transaction by applying all of it. The receipt resolves when
    /// every durable send is on disk and every acknowledgement's delete is
    /// done. On an error nothing was applied and the held deliveries went
    /// back for redelivery, as on [`Transactions::rollback`]. The queues the
    /// transaction creates count against `who`'s queue limit.
    pub fn commit<Q>(
        &mut self,
        broker: &Broker,
        id: &Q,
        who: &Principal,
    ) -> Result<Receipt, TransactionError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut txn = self.open.remove(id).ok_or(TransactionError::Unknown)?;
        if let Err(e) = still_valid(broker, &txn) {
            txn.doom(e);
        }
        let mut created = Vec::new();
        if txn.doomed.is_none() {
            match claim_created(broker, &txn, who) {
                Ok(claimed) => created = claimed,
                Err(e) => {
                    txn.doom(e.into());
                }
            }
        }
        if let Some(e) = txn.doomed.take() {
            txn.roll_back();
            return Err(e);
        }
        // Nothing below can be refused: the session that owns these
        // consumers is the one committing, so their deliveries stay put.
        // Settlements first: a message the transaction NACKs is back in its
        // place before a newer message of its group, sent by the same
        // transaction, can be dispatched past it.
        let mut receipts = Vec::with_capacity(txn.sends.len() + 1);
        let mut acks: Vec<(Arc<Queue>, ConsumerId, Vec<u64>)> = Vec::new();
        let mut releases = Vec::new();
        for s in txn.settlements {
            match s.how {
                Settlement::Ack => match acks
                    .iter_mut()
                    .find(|(q, c, _)| *c == s.consumer && Arc::ptr_eq(q, &s.queue))
                {
                    Some((_, _, seqs)) => seqs.push(s.seq),
                    None => acks.push((s.queue, s.consumer, vec![s.seq])),
                },
                Settlement::Release(how) => releases.push((s.queue, s.consumer, s.seq, how)),
            }
        }
        release_together(releases);
        for (queue, consumer, seqs) in acks {
            match queue.ack(consumer, &seqs) {
                Ok(receipt) => receipts.push(receipt),
                Err(e) => tracing::warn!(error = %e, "committed acknowledgement failed"),
            }
        }
        for send in txn.sends {
            receipts.push(match send.to {
                // A full DROP queue drops it (a full FAIL queue refused the
                // whole transaction above, and cannot refuse part of it now).
                Checked::Queue(queue) => match admit(&queue) {
                    Ok(false) => continue,
                    _ => broker.publish_checked(&queue, send.message),
                },
                Checked::Create => match create(broker, &send.message.address, &mut created) {
                    Ok(queue) => broker.publish_checked(&queue, send.message),
                    Err(e) => {
                        // Checked at send time; settings do not change.
                        tracing::warn!(error = %e, "committed send lost its queue");
                        continue;
                    }
                },
                Checked::Topic => broker.fan_out(send.message),
            });
        }
        Ok(Receipt::all(receipts))
    }

    /// Ends a transaction without applying any of it: its sends are dropped
    /// and the deliveries it settled go back for redelivery.
    pub fn rollback<Q>(&mut self, id: &Q) -> Result<(), TransactionError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.open
            .remove(id)
            .ok_or(TransactionError::Unknown)?
            .roll_back();
        Ok(())
    }

    /// Rolls back every open transaction (the connection is going away).
    pub fn rollback_all(&mut self) {
        for (_, txn) in self.open.drain() {
            txn.roll_back();
        }
    }
}

impl<K: Hash + Eq> Drop for Transactions<K> {
    fn drop(&mut self) {
        self.rollback_all();
    }
}

/// Releases deliveries a queue at a time, each queue's all at once, so that
/// what comes back of one group goes out again oldest first. A delivery whose
/// consumer left came back then and is skipped.
fn release_together(releases: impl IntoIterator<Item = (Arc<Queue>, ConsumerId, u64, Release)>) {
    type Returns = Vec<(ConsumerId, u64, Release)>;
    let mut by_queue: Vec<(Arc<Queue>, Returns)> = Vec::new();
    for (queue, consumer, seq, how) in releases {
        match by_queue.iter_mut().find(|(q, _)| Arc::ptr_eq(q, &queue)) {
            Some((_, items)) => items.push((consumer, seq, how)),
            None => by_queue.push((queue, vec![(consumer, seq, how)])),
        }
    }
    for (queue, items) in by_queue {
        queue.release_all(&items);
    }
}

/// Everything about its target that could refuse a send, checked when it is
/// added (the disk is checked once before, whatever the target).
fn check_send(
    broker: &Broker,
    message: &mut Message,
    target: Target,
) -> Result<Checked, CoreError> {
    match target {
        Target::Queue(queue) => {
            if queue.is_deleted() {
                return Err(CoreError::NotFound(queue.name().to_string()));
            }
            refuse_when_full(&queue)?;
            broker.resolve_delay(message, &queue.settings())?;
            Ok(Checked::Queue(queue))
        }
        Target::Routed(RoutingType::Anycast) => match broker.queue(&message.address) {
            Some(queue) => check_send(broker, message, Target::Queue(queue)),
            None => {
                validate_name(&message.address)?;
                let settings = broker.settings_for(&message.address);
                if !settings.auto_create {
                    return Err(CoreError::NotFound(message.address.to_string()));
                }
                broker.resolve_delay(message, &settings)?;
                Ok(Checked::Create)
            }
        },
        Target::Routed(RoutingType::Multicast) => {
            validate_name(&message.address)?;
            broker.resolve_delay(message, &broker.settings_for(&message.address))?;
            broker.refuse_when_a_subscriber_fails(&message.address)?;
            Ok(Checked::Topic)
        }
    }
}

/// A queue a commit creates, and its place in its creator's queue limit.
type Claimed = (Arc<str>, Option<QueueSlot>);

/// A place in `who`'s queue limit for each queue the transaction creates (each
/// address once; `None` for a user without a limit), all or none: taken before
/// anything is applied, so a transaction over the limit changes nothing.
fn claim_created(
    broker: &Broker,
    txn: &Transaction,
    who: &Principal,
) -> Result<Vec<Claimed>, CoreError> {
    let mut claimed: Vec<Claimed> = Vec::new();
    for send in &txn.sends {
        let address = &send.message.address;
        if !matches!(send.to, Checked::Create)
            || claimed.iter().any(|(name, _)| **name == **address)
            || broker.queue(address).is_some()
        {
            continue;
        }
        // On an error the places claimed so far are given back as they drop.
        claimed.push((address.clone(), who.claim_queue()?));
    }
    Ok(claimed)
}

/// The queue a committed send creates, owned by the place claimed for it.
fn create(
    broker: &Broker,
    address: &str,
    claimed: &mut [Claimed],
) -> Result<Arc<Queue>, CoreError> {
    let queue = broker.queue_or_create(address, true)?;
    let slot = claimed
        .iter_mut()
        .find(|(name, _)| **name == *address)
        .and_then(|(_, slot)| slot.take());
    // A queue someone else created meanwhile keeps its owner; the place drops.
    if let Some(slot) = slot {
        queue.set_owner(slot);
    }
    Ok(queue)
}

/// What may have changed since the operations were added.
fn still_valid(broker: &Broker, txn: &Transaction) -> Result<(), TransactionError> {
    for s in &txn.settlements {
        if !s.queue.is_outstanding(s.consumer, s.seq) {
            return Err(CoreError::UnknownDelivery(s.seq).into());
        }
    }
    for send in &txn.sends {
        // The disk may have filled since the send was added.
        broker.refuse_on_full_disk(&send.message)?;
        match &send.to {
            Checked::Queue(queue) => {
                if queue.is_deleted() {
                    return Err(CoreError::NotFound(queue.name().to_string()).into());
                }
                refuse_when_full(queue)?;
            }
            Checked::Topic => broker.refuse_when_a_subscriber_fails(&send.message.address)?,
            Checked::Create => {}
        }
    }
    Ok(())
}

/// A full FAIL queue refuses a send as outside a transaction (a DROP queue
/// drops it only when the commit applies it).
fn refuse_when_full(queue: &Queue) -> Result<(), CoreError> {
    let memory = queue.memory();
    match memory.is_full() && memory.policy() == AddressFullPolicy::Fail {
        true => Err(address_full(queue)),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests;
