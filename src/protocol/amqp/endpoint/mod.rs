//! The AMQP endpoints that serve clients over the core: the connection (handshake, serve
//! loop, outgoing frames), its sessions and links, attach, transactions, and the conversion
//! between AMQP messages and the core's.

mod attach;
mod condition;
pub mod connection;
pub mod convert;
mod env;
mod handshake;
mod link;
mod options;
mod outgoing;
mod send_batch;
mod session;
mod terminus;
mod txn;
mod waits;

pub use connection::{serve, AmqpOptions, ContainerRegistry};
