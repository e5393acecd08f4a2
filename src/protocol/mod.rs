//! Wire protocols. Each converts its frames to and from [`crate::core::Message`]
//! and talks to the broker only through the core API.

pub mod admission;
pub mod amqp;
pub mod driver;
pub mod read_ahead;
pub mod stomp;
pub mod write_parts;
