//! The transaction coordinator (`amqp:local-transactions`) translated into the
//! core's transactions, which hold transactional transfers and dispositions
//! and apply them whole at discharge, or not at all.

use super::condition::core_condition;
use crate::core::broker::RoutingType;
use crate::core::consumer::Release;
use crate::core::queue::Queue;
use crate::core::{Settlement, Target, TransactionError, TransactionLimits, Transactions};
use crate::protocol::amqp::wire::definitions::DeliveryState;
use crate::protocol::amqp::wire::error::condition;
use bytes::Bytes;
use std::sync::Arc;

/// Where a send goes: routed by address, or straight to a queue the link
/// holds. A link lends its queue (`Dest<&Arc<Queue>>`: no reference count
/// touched per message, which across worker threads is a contended one).
pub enum Dest<Q = Arc<Queue>> {
    Routed(RoutingType),
    Queue(Q),
}

impl<Q: std::borrow::Borrow<Arc<Queue>>> Dest<Q> {
    /// The same destination for a transaction, which keeps it until commit.
    pub fn target(&self) -> Target {
        match self {
            Dest::Routed(routing) => Target::Routed(*routing),
            Dest::Queue(q) => Target::Queue(q.borrow().clone()),
        }
    }
}

/// A connection's open transactions, by the ids it declared.
pub struct Txns {
    pub open: Transactions<Bytes>,
    declared: u64,
}

impl Txns {
    pub fn new(limits: TransactionLimits) -> Self {
        Txns {
            open: Transactions::new(limits),
            declared: 0,
        }
    }

    /// Opens a transaction under a new id; ids are never reused on a connection.
    pub fn declare(&mut self) -> Result<Bytes, TransactionError> {
        self.declared += 1;
        let id = Bytes::copy_from_slice(&self.declared.to_be_bytes());
        self.open.begin(id.clone())?;
        Ok(id)
    }
}

/// What a peer's outcome does to a delivery.
pub fn settlement(outcome: &DeliveryState) -> Settlement {
    match outcome {
        DeliveryState::Accepted => Settlement::Ack,
        DeliveryState::Rejected { .. } => Settlement::Release(Release::Reject),
        DeliveryState::Modified {
            undeliverable_here: true,
            ..
        } => Settlement::Release(Release::NotHere),
        DeliveryState::Modified {
            delivery_failed: true,
            ..
        } => Settlement::Release(Release::Failed),
        _ => Settlement::Release(Release::Unused),
    }
}

/// A transactional transfer the session refused before it reached the
/// transaction (it did not decode, or was too large): it dooms the transaction.
#[derive(Debug, thiserror::Error)]
#[error("a transfer was refused: {0}")]
pub struct RefusedTransfer(pub String);

/// The AMQP condition for a refused transaction operation.
pub fn condition_of(e: &TransactionError) -> &'static str {
    match e {
        TransactionError::Unknown => condition::TRANSACTION_UNKNOWN_ID,
        TransactionError::AlreadyOpen => condition::ILLEGAL_STATE,
        TransactionError::TooManyOpen { .. }
        | TransactionError::TooManyOps { .. }
        | TransactionError::TooManyBytes { .. } => condition::RESOURCE_LIMIT_EXCEEDED,
        TransactionError::Core(e) => core_condition(e),
        TransactionError::Protocol(_) => condition::INVALID_FIELD,
    }
}
