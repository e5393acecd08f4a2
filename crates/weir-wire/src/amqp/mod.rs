//! The AMQP 1.0 wire format: type system, composite types (performatives, SASL, delivery
//! states, termini, transactions), message sections, and the transport frame codec.
//!
//! Protocol data only: nothing here knows about queues, the store or the configuration.

pub mod codec;
mod composite;
pub mod definitions;
pub mod described;
pub mod error;
pub mod messaging;
pub mod performatives;
mod quick_transfer;
pub mod sasl;
pub mod types;

pub use codec::{AmqpFrame, AmqpFrameCodec, Frame, Inbound, Outbound, ProtocolHeader};
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
