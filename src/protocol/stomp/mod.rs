//! STOMP 1.0, 1.1 and 1.2: the frame codec, the mapping to core messages, and
//! the per-connection session.

pub mod codec;
mod connection;
pub mod convert;
pub mod error;
mod escape;
pub mod frame;
mod session;

pub use codec::{Inbound, Limits, Outbound, StompCodec};
pub use connection::{serve, StompOptions};
pub use error::{Malformed, StompError};
pub use frame::{Command, Frame, HeaderText, Headers, Version};
