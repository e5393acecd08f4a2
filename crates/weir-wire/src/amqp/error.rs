//! Codec errors, each mapped to the AMQP error condition the peer should see.

use super::types::Descriptor;

/// Standard AMQP 1.0 error condition symbols (transport, messaging and transaction sections).
pub mod condition {
    pub const INTERNAL_ERROR: &str = "amqp:internal-error";
    pub const NOT_FOUND: &str = "amqp:not-found";
    pub const UNAUTHORIZED_ACCESS: &str = "amqp:unauthorized-access";
    pub const DECODE_ERROR: &str = "amqp:decode-error";
    pub const RESOURCE_LIMIT_EXCEEDED: &str = "amqp:resource-limit-exceeded";
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    pub const INVALID_FIELD: &str = "amqp:invalid-field";
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    pub const RESOURCE_LOCKED: &str = "amqp:resource-locked";
    pub const PRECONDITION_FAILED: &str = "amqp:precondition-failed";
    pub const RESOURCE_DELETED: &str = "amqp:resource-deleted";
    pub const ILLEGAL_STATE: &str = "amqp:illegal-state";
    pub const FRAME_SIZE_TOO_SMALL: &str = "amqp:frame-size-too-small";

    pub const CONNECTION_FORCED: &str = "amqp:connection:forced";
    pub const CONNECTION_FRAMING_ERROR: &str = "amqp:connection:framing-error";
    pub const CONNECTION_REDIRECT: &str = "amqp:connection:redirect";

    pub const SESSION_WINDOW_VIOLATION: &str = "amqp:session:window-violation";
    pub const SESSION_ERRANT_LINK: &str = "amqp:session:errant-link";
    pub const SESSION_HANDLE_IN_USE: &str = "amqp:session:handle-in-use";
    pub const SESSION_UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";

    pub const LINK_DETACH_FORCED: &str = "amqp:link:detach-forced";
    pub const LINK_TRANSFER_LIMIT_EXCEEDED: &str = "amqp:link:transfer-limit-exceeded";
    pub const LINK_MESSAGE_SIZE_EXCEEDED: &str = "amqp:link:message-size-exceeded";
    pub const LINK_REDIRECT: &str = "amqp:link:redirect";
    pub const LINK_STOLEN: &str = "amqp:link:stolen";

    pub const TRANSACTION_UNKNOWN_ID: &str = "amqp:transaction:unknown-id";
    pub const TRANSACTION_ROLLBACK: &str = "amqp:transaction:rollback";
    pub const TRANSACTION_TIMEOUT: &str = "amqp:transaction:timeout";
}

/// Everything that can go wrong turning bytes into AMQP values, frames or messages (and back).
#[derive(Debug, thiserror::Error)]
pub enum AmqpCodecError {
    #[error("input ends inside a value")]
    Truncated,
    #[error("malformed encoding")]
    Malformed,
    #[error("unknown type constructor 0x{0:02x}")]
    UnknownConstructor(u8),
    #[error("invalid {0} value")]
    InvalidValue(&'static str),
    #[error("string or symbol is not valid UTF-8")]
    InvalidUtf8,
    #[error("values nested deeper than {0} levels")]
    DepthExceeded(usize),
    #[error("compound claims {count} elements in {size} bytes")]
    CountTooLarge { count: usize, size: usize },
    #[error("{0} bytes left over after the value")]
    TrailingBytes(usize),
    #[error("descriptor must be a ulong or a symbol")]
    InvalidDescriptor,
    #[error("unknown descriptor {0}")]
    UnknownDescriptor(Descriptor),
    #[error("{expected}: unexpected descriptor {found}")]
    UnexpectedDescriptor {
        expected: &'static str,
        found: Descriptor,
    },
    #[error("{0}: described value is not a list")]
    NotAList(&'static str),
    #[error("{composite}: mandatory field {field} is missing")]
    MissingField {
        composite: &'static str,
        field: &'static str,
    },
    #[error("{composite}: field {field} has the wrong type or value")]
    InvalidField {
        composite: &'static str,
        field: &'static str,
    },
    #[error("array elements do not match the array's element type")]
    ArrayTypeMismatch,
    #[error("message section {0} is out of order or repeated")]
    SectionOrder(&'static str),
    #[error("message section is not a described type")]
    NotASection,
    #[error("protocol header {0:02x?} is not AMQP")]
    BadProtocolHeader([u8; 8]),
    #[error("frame of {size} bytes exceeds the maximum frame size {max}")]
    FrameTooLarge { size: u32, max: u32 },
    #[error("frame size {0} is smaller than the 8-byte frame header")]
    FrameTooSmall(u32),
    #[error("data offset {doff} invalid for a frame of {size} bytes")]
    BadDataOffset { doff: u8, size: u32 },
    #[error("unknown frame type {0}")]
    UnknownFrameType(u8),
    #[error("SASL frame carries no body")]
    EmptySaslFrame,
    #[error("outgoing frame of {size} bytes exceeds the peer's maximum frame size {max}")]
    OutgoingFrameTooLarge { size: usize, max: u32 },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl AmqpCodecError {
    /// The AMQP error condition to put in the `close`/`detach` error sent to the peer.
    pub fn condition(&self) -> &'static str {
        use AmqpCodecError::*;
        match self {
            BadProtocolHeader(_)
            | FrameTooLarge { .. }
            | FrameTooSmall(_)
            | BadDataOffset { .. }
            | UnknownFrameType(_)
            | EmptySaslFrame => condition::CONNECTION_FRAMING_ERROR,
            OutgoingFrameTooLarge { .. } => condition::FRAME_SIZE_TOO_SMALL,
            Io(_) => condition::INTERNAL_ERROR,
            Truncated
            | Malformed
            | UnknownConstructor(_)
            | InvalidValue(_)
            | InvalidUtf8
            | DepthExceeded(_)
            | CountTooLarge { .. }
            | TrailingBytes(_)
            | InvalidDescriptor
            | UnknownDescriptor(_)
            | UnexpectedDescriptor { .. }
            | NotAList(_)
            | MissingField { .. }
            | InvalidField { .. }
            | ArrayTypeMismatch
            | SectionOrder(_)
            | NotASection => condition::DECODE_ERROR,
        }
    }
}

/// Lets nom's own failures (running out of input, mostly) surface as our error type.
impl<'a> nom::error::ParseError<&'a [u8]> for AmqpCodecError {
    fn from_error_kind(_input: &'a [u8], kind: nom::error::ErrorKind) -> Self {
        match kind {
            nom::error::ErrorKind::Eof => AmqpCodecError::Truncated,
            _ => AmqpCodecError::Malformed,
        }
    }

    fn append(_input: &'a [u8], _kind: nom::error::ErrorKind, other: Self) -> Self {
        other
    }
}

pub type Result<T, E = AmqpCodecError> = std::result::Result<T, E>;
