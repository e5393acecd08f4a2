//! Weir's wire formats: protocol data only, with no broker in it.
//!
//! - [`stomp`]: STOMP 1.0–1.2 frames, header escaping and the frame codec.
//! - [`amqp`]: the AMQP 1.0 type system, composite types (performatives, SASL, delivery
//!   states, termini, transactions), message sections and the transport frame codec.
//! - [`read_ahead`] and [`write_parts`]: the buffering both codecs share.
//!
//! The broker (`weir`) and the load generator (`weir-perf`) both build on it; nothing
//! here knows about queues, the store or the configuration.

pub mod amqp;
pub mod read_ahead;
pub mod stomp;
pub mod write_parts;
