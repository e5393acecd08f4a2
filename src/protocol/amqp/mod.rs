//! AMQP 1.0.
//!
//! [`wire`] is protocol data only (type system, composite types, message sections, the
//! transport frame codec) and never imports the core; [`endpoint`] holds the connection,
//! session and link endpoints that serve clients over the core.
//!
//! The wire level is re-exported here so that `protocol::amqp::codec`,
//! `protocol::amqp::Transfer` and the like keep working for the server, perf and benches.

pub mod endpoint;
pub mod wire;

pub use endpoint::{convert, serve, AmqpOptions, ContainerRegistry};
pub use wire::*;
