//! The AMQP 1.0 wire format lives in the `weir-wire` crate; re-exported here so that
//! the endpoints read `wire::Transfer`, `wire::codec` and the like.

pub use weir_wire::amqp::*;
