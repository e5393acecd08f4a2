//! The protocol-neutral broker core.

pub mod message;
pub mod settings;
