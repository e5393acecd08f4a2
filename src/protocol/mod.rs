//! Wire protocols. Each converts its frames to and from [`crate::core::Message`]
//! and talks to the broker only through the core API.

pub mod admission;
pub mod amqp;
pub mod driver;
pub mod fairness;
pub mod peer;
pub mod stomp;
pub mod too_large;

pub use peer::Peer;
pub use weir_wire::{read_ahead, write_parts};
