//! JMS message selectors (JMS 2.0 §3.8.1), protocol-neutral.
//!
//! AMQP receivers bring them as the `apache.org:selector-filter:string` filter,
//! STOMP subscribers as the `selector` header; both parse once with
//! [`Selector::parse`] and test each message with [`Selector::matches`].
//!
//! Semantics follow the specification, with ActiveMQ/Artemis as the reference
//! where it is silent:
//! - SQL three-valued logic: a comparison with a missing property is unknown,
//!   and unknown never selects (`NOT` of unknown is still unknown).
//! - Comparing values of unlike types (`'a' = 1`, `TRUE > 1`) is false, not an
//!   error; where the parser can already see the mismatch (a literal string in
//!   arithmetic, `<` between strings, a number under AND/OR/NOT, a selector
//!   that is not a condition at all) it refuses the selector instead.
//! - A string *property* compared with a number (or boolean) is read as one
//!   if it spells one, so `price > 10` works for STOMP, whose headers are all
//!   text. String literals are never converted: `'10' = 10` is false.
//! - Integer arithmetic that overflows continues in floating point; integer
//!   division by zero is unknown.
//! - Extensions, as in ActiveMQ: `"double-quoted"` identifiers (for header
//!   names JMS cannot spell) and numbers as well as strings in an `IN` list.
//!
//! JMS header names map to [`Message`] fields: `JMSMessageID`, `JMSCorrelationID`,
//! `JMSPriority`, `JMSTimestamp`, `JMSType` (property `JMSType`, else the
//! subject), `JMSDeliveryMode` (`'PERSISTENT'`/`'NON_PERSISTENT'`),
//! `JMSXGroupID`, `JMSXGroupSeq`, `JMSExpiration` (0 when the message never
//! expires). Every other identifier names a property.

mod ast;
mod eval;
mod lexer;
mod like;
mod parser;

use std::fmt;
use std::str::FromStr;

use crate::core::message::Message;

/// Longest selector accepted, in bytes. Real selectors are a line or two; the
/// limit bounds parse time and memory for a hostile subscriber.
pub const MAX_LEN: usize = 8 * 1024;

/// Deepest nesting accepted (parentheses, unary operators and the height of
/// the expression tree), so neither parsing nor evaluation can exhaust a stack.
pub const MAX_DEPTH: usize = 64;

/// A parsed selector, cheap to evaluate against many messages.
#[derive(Debug, Clone)]
pub struct Selector {
    text: Box<str>,
    expr: ast::Expr,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if text.len() > MAX_LEN {
            return Err(SelectorError::TooLong {
                len: text.len(),
                max: MAX_LEN,
            });
        }
        let expr = parser::parse(text)?;
        Ok(Selector {
            text: text.into(),
            expr,
        })
    }

    /// JMS treats an empty (or blank) selector as no selector at all.
    pub fn parse_optional(text: &str) -> Result<Option<Selector>, SelectorError> {
        match Self::parse(text) {
            Ok(selector) => Ok(Some(selector)),
            Err(SelectorError::Empty) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// True only when the selector evaluates to TRUE; FALSE and unknown both
    /// leave the message for other consumers.
    pub fn matches(&self, message: &Message) -> bool {
        eval::matches(&self.expr, message)
    }

    /// The selector as the client wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Selector::parse(text)
    }
}

/// Why a selector was refused. Columns count characters from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("selector: empty")]
    Empty,
    #[error("selector: {len} bytes long, the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error("selector: nested deeper than {max} levels at column {column}")]
    TooDeep { column: usize, max: usize },
    #[error("selector: unexpected token '{token}' at column {column}, expected {expected}")]
    UnexpectedToken {
        token: String,
        column: usize,
        expected: &'static str,
    },
    #[error("selector: unexpected end, expected {expected}")]
    UnexpectedEnd { expected: &'static str },
    #[error("selector: invalid character '{ch}' at column {column}")]
    InvalidCharacter { ch: char, column: usize },
    #[error("selector: unterminated quote at column {column}")]
    UnterminatedString { column: usize },
    #[error("selector: invalid number '{text}' at column {column}: {reason}")]
    InvalidNumber {
        text: String,
        column: usize,
        reason: &'static str,
    },
    #[error("selector: ESCAPE must be a single character at column {column}")]
    InvalidEscape { column: usize },
    #[error("selector: invalid LIKE pattern at column {column}: {reason}")]
    InvalidPattern { column: usize, reason: &'static str },
    #[error("selector: expected {expected} at column {column}")]
    TypeMismatch {
        expected: &'static str,
        column: usize,
    },
}

impl SelectorError {
    /// Where in the selector the problem is, when it is at one place.
    pub fn column(&self) -> Option<usize> {
        match self {
            SelectorError::Empty
            | SelectorError::TooLong { .. }
            | SelectorError::UnexpectedEnd { .. } => None,
            SelectorError::TooDeep { column, .. }
            | SelectorError::UnexpectedToken { column, .. }
            | SelectorError::InvalidCharacter { column, .. }
            | SelectorError::UnterminatedString { column }
            | SelectorError::InvalidNumber { column, .. }
            | SelectorError::InvalidEscape { column }
            | SelectorError::InvalidPattern { column, .. }
            | SelectorError::TypeMismatch { column, .. } => Some(*column),
        }
    }
}

/// 1-based character column of a byte offset.
fn column(input: &str, offset: usize) -> usize {
    input.get(..offset).map_or(0, |s| s.chars().count()) + 1
}

#[cfg(test)]
mod tests;

impl crate::core::consumer::MessageFilter for Selector {
    fn matches(&self, message: &Message) -> bool {
        Selector::matches(self, message)
    }

    fn text(&self) -> Option<&str> {
        Some(self.as_str())
    }
}
