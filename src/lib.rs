//! Weir: a message broker that STOMP and AMQP 1.0 clients reach unchanged.
//!
//! Layers, arrows pointing down only:
//! - [`protocol`]: STOMP and AMQP codecs and sessions, converting to [`core::Message`].
//! - [`core`]: protocol-neutral routing, queues, grouping, delays, dispatch.
//! - [`store`]: RocksDB persistence with group commit.
//!
//! Beside the protocols, [`http`] serves the management API on the core API, and
//! [`zaqar`] the OpenStack Zaqar v2 API on the same listener.
//! [`config`] is read once at start and [`server`] wires the layers together.

pub mod config;
pub mod core;
pub mod http;
pub mod protocol;
pub mod server;
pub mod store;
pub mod zaqar;

/// `weir perf`, the load generator: its own crate, over the wire formats only.
pub use weir_perf as perf;
