//! Errors the core reports to protocols, which map them to their own error frames.

use crate::store::StoreError;
use std::sync::Arc;

#[derive(Debug, Clone, thiserror::Error)]
pub enum CoreError {
    #[error("queue '{0}' does not exist and auto-create is off")]
    NotFound(String),
    #[error("destination name '{0}' is not allowed")]
    InvalidAddress(String),
    #[error("delay of {requested_ms} ms exceeds the maximum of {max_ms} ms for '{queue}'")]
    DelayTooLong {
        queue: String,
        requested_ms: u64,
        max_ms: u64,
    },
    #[error("invalid delay: {0}")]
    InvalidDelay(String),
    #[error("delivery {0} is not outstanding on this consumer")]
    UnknownDelivery(u64),
    #[error("consumer is closed")]
    ConsumerClosed,
    #[error("{0}")]
    Store(Arc<StoreError>),
    #[error("broker is shutting down")]
    ShuttingDown,
    /// A FAIL queue's memory limit, or the broker's, is reached.
    #[error(
        "queue '{queue}' is full: {setting} of {limit} bytes reached (address_full_policy FAIL)"
    )]
    AddressFull {
        queue: String,
        /// `max_size_bytes` or `global_max_size`.
        setting: &'static str,
        limit: u64,
    },
    /// The client's roles do not grant what it asked (`security.permissions`).
    #[error("{0}")]
    Denied(#[from] crate::core::security::Denied),
    /// A queue to delete still has consumers.
    #[error("queue '{queue}' has {consumers} consumer(s); close them first")]
    QueueInUse { queue: String, consumers: usize },
    /// A queue that lives and dies with something else (a temporary queue, a
    /// subscription's own queue) cannot be deleted on its own.
    #[error("queue '{queue}' is {what}; it goes with its owner")]
    NotDeletable { queue: String, what: &'static str },
    /// Settings refused at run time (management API): what is wrong with them.
    #[error("{0}")]
    InvalidSettings(String),
    /// Settings the queue cannot take in its present state.
    #[error("{0}")]
    SettingsConflict(#[from] crate::core::queue::SettingsConflict),
    /// The client's user has created as many queues as it may.
    #[error("{0}")]
    QueueLimit(#[from] crate::core::security::QueueLimit),
}

impl CoreError {
    /// The disk is past its limits or full: a condition the client can wait
    /// out, not a fault of the broker.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, CoreError::Store(e) if matches!(**e, StoreError::DiskFull(_)))
    }
}

impl CoreError {
    /// Refused because of who the client is, not because of the broker's state.
    pub fn is_access(&self) -> bool {
        matches!(self, CoreError::Denied(_) | CoreError::QueueLimit(_))
    }
}

impl From<Arc<StoreError>> for CoreError {
    fn from(e: Arc<StoreError>) -> Self {
        CoreError::Store(e)
    }
}

impl From<StoreError> for CoreError {
    fn from(e: StoreError) -> Self {
        CoreError::Store(Arc::new(e))
    }
}
