//! STOMP 1.0, 1.1 and 1.2.

pub mod codec;
pub mod frame;
