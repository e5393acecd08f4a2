//! tokio-util codec for STOMP. (placeholder)
