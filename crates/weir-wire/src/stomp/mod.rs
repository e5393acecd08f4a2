//! STOMP 1.0, 1.1 and 1.2 frames and their codec.

pub mod codec;
pub mod error;
mod escape;
pub mod frame;

pub use codec::{Inbound, Limits, Outbound, StompCodec};
pub use error::{Malformed, StompError};
pub use frame::{Command, Frame, HeaderText, Headers, Version};
