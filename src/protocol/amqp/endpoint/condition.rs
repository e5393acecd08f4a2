//! The AMQP answer for what the core refused: conditions for core errors, and
//! the rejections and write outcomes built from them.

use crate::core::CoreError;
use crate::protocol::amqp::wire::definitions::{AmqpError, DeliveryState};
use crate::protocol::amqp::wire::error::condition;

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
        CoreError::AddressFull { .. } => condition::RESOURCE_LIMIT_EXCEEDED,
        CoreError::Denied(_) => condition::UNAUTHORIZED_ACCESS,
        CoreError::QueueLimit(_) => condition::RESOURCE_LIMIT_EXCEEDED,
        // Management's refusals; no link operation meets them.
        CoreError::QueueInUse { .. }
        | CoreError::NotDeletable { .. }
        | CoreError::SettingsConflict(_) => condition::ILLEGAL_STATE,
        CoreError::InvalidSettings(_) => condition::INVALID_FIELD,
    }
}

pub fn rejected(condition: &str, description: &str) -> DeliveryState {
    DeliveryState::Rejected {
        error: Some(AmqpError::new(condition, Some(description))),
    }
}

pub fn core_rejection(e: &CoreError) -> DeliveryState {
    rejected(core_condition(e), &e.to_string())
}

/// How a transfer is settled once its disk write is done (or failed).
pub fn write_outcome(result: Result<(), CoreError>) -> DeliveryState {
    match result {
        Ok(()) => DeliveryState::Accepted,
        Err(e) => core_rejection(&e),
    }
}
