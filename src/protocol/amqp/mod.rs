//! AMQP 1.0.
