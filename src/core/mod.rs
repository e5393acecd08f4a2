//! The protocol-neutral broker core: messages, queues, grouping, delays and
//! dispatch. Nothing here knows which protocol a message came from.

mod access;
pub mod broker;
pub mod claims;
pub mod connections;
pub mod consumer;
pub mod delay_headers;
pub mod deliveries;
pub mod error;
pub mod factory;
pub(crate) mod fast_map;
pub mod grouping;
pub mod manage;
pub mod memory;
pub mod message;
pub mod message_ops;
pub mod names;
pub mod persist;
pub mod producers;
pub mod properties;
pub mod queue;
pub mod queue_record;
pub mod rates;
pub mod receipt;
mod recovery_progress;
pub mod schedule;
pub mod security;
pub mod selector;
pub mod settings;
pub mod store_stats;
pub mod transaction;

pub use broker::{Broker, BrokerOptions, RoutingType, Subscription};
pub use consumer::{ConsumerOptions, CreditMode, Delivery, Release};
pub use error::CoreError;
pub use message::{Message, Value};
pub use receipt::Receipt;
pub use recovery_progress::{RecoverySnapshot, RecoveryStatus};
pub use transaction::{Settlement, Target, TransactionError, TransactionLimits, Transactions};

#[cfg(test)]
pub(crate) mod tests;
