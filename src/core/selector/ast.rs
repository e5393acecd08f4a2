//! The parsed form of a selector. Names are resolved to [`Field`]s at parse
//! time so evaluation never compares header names.

use std::sync::Arc;

use super::like::LikePattern;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Lit(Literal),
    Field(Field),
    Not(Box<Expr>),
    /// AND/OR chains are n-ary so a long `a OR b OR c ...` stays shallow.
    And(Box<[Expr]>),
    Or(Box<[Expr]>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Between {
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    In {
        value: Box<Expr>,
        list: Box<[Literal]>,
        negated: bool,
    },
    Like {
        value: Box<Expr>,
        pattern: LikePattern,
        negated: bool,
    },
    IsNull {
        value: Box<Expr>,
        negated: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(Box<str>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// What an identifier refers to: a JMS header mapped onto a [`Message`] field,
/// or a user property.
///
/// [`Message`]: crate::core::message::Message
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Field {
    MessageId,
    CorrelationId,
    Priority,
    Timestamp,
    Type,
    DeliveryMode,
    GroupId,
    GroupSeq,
    Expiration,
    Property(Arc<str>),
}

/// What the parser knows about an expression's type before any message is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bool,
    Num,
    Str,
    /// A property or NULL: only a message can tell.
    Any,
}

impl Field {
    /// Header names are case-sensitive, like every identifier.
    pub fn resolve(name: &str) -> Field {
        match name {
            "JMSMessageID" => Field::MessageId,
            "JMSCorrelationID" => Field::CorrelationId,
            "JMSPriority" => Field::Priority,
            "JMSTimestamp" => Field::Timestamp,
            "JMSType" => Field::Type,
            "JMSDeliveryMode" => Field::DeliveryMode,
            "JMSXGroupID" => Field::GroupId,
            "JMSXGroupSeq" => Field::GroupSeq,
            "JMSExpiration" => Field::Expiration,
            other => Field::Property(other.into()),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Field::Priority | Field::Timestamp | Field::Expiration | Field::GroupSeq => Kind::Num,
            Field::MessageId
            | Field::CorrelationId
            | Field::Type
            | Field::DeliveryMode
            | Field::GroupId => Kind::Str,
            Field::Property(_) => Kind::Any,
        }
    }
}

impl Literal {
    pub fn kind(&self) -> Kind {
        match self {
            Literal::Null => Kind::Any,
            Literal::Bool(_) => Kind::Bool,
            Literal::Int(_) | Literal::Double(_) => Kind::Num,
            Literal::Str(_) => Kind::Str,
        }
    }
}
