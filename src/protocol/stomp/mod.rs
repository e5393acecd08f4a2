//! STOMP 1.0, 1.1 and 1.2: the mapping to core messages and the per-connection
//! session. Frames and their codec are in the `weir-wire` crate, re-exported here.

mod connection;
pub mod convert;
mod session;

pub use weir_wire::stomp::{codec, error, frame};

pub use codec::{Inbound, Limits, Outbound, StompCodec};
pub use connection::{serve, StompOptions};
pub use error::{Malformed, StompError};
pub use frame::{Command, Frame, HeaderText, Headers, Version};
