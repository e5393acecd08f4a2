//! Wire protocols. Each converts its frames to and from [`crate::core::Message`]
//! and talks to the broker only through the core API.

pub mod amqp;
pub mod fairness;
pub mod read_ahead;
pub mod stomp;
pub mod write_parts;
