//! Acceptors, connection limits and graceful shutdown.
