//! AMQP 1.0 wire level: type system, composite types (performatives, SASL, delivery states,
//! termini, transactions), message sections, and the transport frame codec.
//!
//! The wire level (types, codec, messaging, sasl) is protocol data only; `connection`,
//! `session`, `attach`, `link` and `txn` are the endpoints that serve clients over the core.

mod attach;
pub mod codec;
pub mod connection;
pub mod convert;
pub mod definitions;
pub mod described;
pub mod error;
mod handshake;
mod link;
pub mod messaging;
mod outgoing;
pub mod performatives;
mod quick_transfer;
pub mod sasl;
mod send_batch;
mod session;
mod terminus;
mod txn;
pub mod types;

pub use codec::{AmqpFrame, AmqpFrameCodec, Frame, Inbound, Outbound, ProtocolHeader};
pub use connection::{serve, AmqpOptions, ContainerRegistry};
pub use definitions::{
    AmqpError, Coordinator, Declare, DeliveryState, Discharge, ExpiryPolicy, ReceiverSettleMode,
    Role, SenderSettleMode, Source, Target, TargetKind, TerminusDurability,
};
pub use described::Composite;
pub use error::{condition, AmqpCodecError};
pub use messaging::{Body, Header, Message, MessageId, MessageView, Properties, SectionRanges};
pub use performatives::{
    sender_credit, Attach, Begin, Close, Detach, Disposition, End, Flow, Open, Performative,
    Transfer,
};
pub use sasl::{
    SaslChallenge, SaslCode, SaslFrame, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse,
};
pub use types::{map_get, Array, Described, Descriptor, Map, Str, Symbol, TypeCode, Value};
