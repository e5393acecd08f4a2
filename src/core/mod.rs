//! The protocol-neutral broker core.

pub mod message;
pub mod selector;
pub mod settings;
