//! STOMP frame model and nom parser. (placeholder)
