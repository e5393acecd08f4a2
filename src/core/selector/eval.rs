//! Evaluates a parsed selector against a message, with SQL three-valued
//! logic: `None` is "unknown", which never selects a message.
//!
//! Nothing here allocates: values borrow from the selector or the message.

use super::ast::{ArithOp, CmpOp, Expr, Field, Literal};
use crate::core::message::{Message, Value};

/// A value during evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(&'a str),
    /// A string property. STOMP carries every header as text, so (like
    /// ActiveMQ does for STOMP) such a string is read as a number or boolean
    /// when compared with one: `price > 10` works when `price` is `"12.5"`.
    /// AMQP string properties are indistinguishable and get the same treatment.
    Loose(&'a str),
    /// A value selectors have no type for (binary): never equal to anything.
    Opaque,
}

/// Three-valued truth: `None` is SQL's unknown.
type Truth = Option<bool>;

pub(super) fn matches(expr: &Expr, message: &Message) -> bool {
    truth(expr, message) == Some(true)
}

/// An expression in a boolean position.
fn truth(expr: &Expr, m: &Message) -> Truth {
    match expr {
        Expr::And(items) => {
            let mut result = Some(true);
            for item in items.iter() {
                match truth(item, m) {
                    Some(false) => return Some(false),
                    None => result = None,
                    Some(true) => {}
                }
            }
            result
        }
        Expr::Or(items) => {
            let mut result = Some(false);
            for item in items.iter() {
                match truth(item, m) {
                    Some(true) => return Some(true),
                    None => result = None,
                    Some(false) => {}
                }
            }
            result
        }
        Expr::Not(inner) => truth(inner, m).map(|b| !b),
        Expr::Cmp(op, left, right) => compare(*op, value(left, m), value(right, m)),
        Expr::Between {
            value: v,
            low,
            high,
            negated,
        } => {
            let v = value(v, m);
            let above = compare(CmpOp::Ge, v, value(low, m));
            let below = compare(CmpOp::Le, v, value(high, m));
            let between = match (above, below) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            between.map(|b| b != *negated)
        }
        Expr::In {
            value: v,
            list,
            negated,
        } => {
            let v = value(v, m);
            if v == Val::Null {
                return None;
            }
            let found = list
                .iter()
                .any(|item| compare(CmpOp::Eq, v, literal(item)) == Some(true));
            Some(found != *negated)
        }
        Expr::Like {
            value: v,
            pattern,
            negated,
        } => match value(v, m) {
            Val::Null => None,
            Val::Str(s) | Val::Loose(s) => Some(pattern.matches(s) != *negated),
            // JMS: an operation on non-like types is false; NOT LIKE negates it.
            _ => Some(*negated),
        },
        Expr::IsNull { value: v, negated } => Some((value(v, m) == Val::Null) != *negated),
        Expr::Lit(_) | Expr::Field(_) | Expr::Arith(..) | Expr::Neg(_) => as_truth(value(expr, m)),
    }
}

/// An expression in a value position.
fn value<'a>(expr: &'a Expr, m: &'a Message) -> Val<'a> {
    match expr {
        Expr::Lit(l) => literal(l),
        Expr::Field(f) => field(f, m),
        Expr::Arith(op, left, right) => arith(*op, value(left, m), value(right, m)),
        Expr::Neg(inner) => match number(value(inner, m)) {
            Some(Num::Int(i)) => i.checked_neg().map_or(Val::Double(-(i as f64)), Val::Int),
            Some(Num::Double(d)) => Val::Double(-d),
            None => Val::Null,
        },
        _ => truth(expr, m).map_or(Val::Null, Val::Bool),
    }
}

fn literal(l: &Literal) -> Val<'_> {
    match l {
        Literal::Null => Val::Null,
        Literal::Bool(b) => Val::Bool(*b),
        Literal::Int(i) => Val::Int(*i),
        Literal::Double(d) => Val::Double(*d),
        Literal::Str(s) => Val::Str(s),
    }
}

fn field<'a>(f: &'a Field, m: &'a Message) -> Val<'a> {
    let text = |s: &'a Option<std::sync::Arc<str>>, fallback: &str| match s {
        Some(s) => Val::Str(s),
        None => property(m, fallback),
    };
    match f {
        Field::Property(name) => property(m, name),
        Field::Priority => Val::Int(i64::from(m.priority)),
        Field::Timestamp => Val::Int(i64::try_from(m.timestamp).unwrap_or(i64::MAX)),
        Field::Expiration => Val::Int(
            m.expires_at
                .map_or(0, |at| i64::try_from(at).unwrap_or(i64::MAX)),
        ),
        Field::DeliveryMode => Val::Str(if m.durable {
            "PERSISTENT"
        } else {
            "NON_PERSISTENT"
        }),
        // A header field the message lacks falls back to a property of the
        // same name, which is where a protocol that does not map it leaves it.
        Field::MessageId => text(&m.message_id, "JMSMessageID"),
        Field::CorrelationId => text(&m.correlation_id, "JMSCorrelationID"),
        Field::GroupId => text(&m.group_id, "JMSXGroupID"),
        Field::GroupSeq => m.group_seq.map_or_else(
            || property(m, "JMSXGroupSeq"),
            |seq| Val::Int(i64::from(seq)),
        ),
        Field::Type => match property(m, "JMSType") {
            Val::Null => m.subject.as_deref().map_or(Val::Null, Val::Str),
            found => found,
        },
    }
}

fn property<'a>(m: &'a Message, name: &str) -> Val<'a> {
    match m.property(name) {
        None | Some(Value::Null) => Val::Null,
        Some(Value::Bool(b)) => Val::Bool(*b),
        Some(Value::Int(i)) => Val::Int(*i),
        Some(Value::Double(d)) => Val::Double(*d),
        Some(Value::String(s)) => Val::Loose(s),
        Some(Value::Binary(_)) => Val::Opaque,
    }
}

#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Double(f64),
}

/// The value as a number, reading a string property as one if it spells one.
fn number(v: Val<'_>) -> Option<Num> {
    match v {
        Val::Int(i) => Some(Num::Int(i)),
        Val::Double(d) => Some(Num::Double(d)),
        Val::Loose(s) => parse_number(s),
        _ => None,
    }
}

fn parse_number(s: &str) -> Option<Num> {
    let s = s.trim();
    if let Ok(i) = s.parse::<i64>() {
        return Some(Num::Int(i));
    }
    // Rust also reads "inf" and "NaN"; a header that says so is not a number.
    if !s.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<f64>().ok().map(Num::Double)
}

fn as_truth(v: Val<'_>) -> Truth {
    match v {
        Val::Bool(b) => Some(b),
        Val::Loose(s) => parse_bool(s),
        _ => None,
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn compare(op: CmpOp, left: Val<'_>, right: Val<'_>) -> Truth {
    use Val::*;
    let equality = |equal: bool| match op {
        CmpOp::Eq => Some(equal),
        CmpOp::Ne => Some(!equal),
        // JMS restricts strings and booleans to = and <>.
        _ => Some(false),
    };
    match (left, right) {
        (Null, _) | (_, Null) => None,
        (Str(a) | Loose(a), Str(b) | Loose(b)) => equality(a == b),
        (Bool(a), Bool(b)) => equality(a == b),
        (Loose(s), Bool(b)) | (Bool(b), Loose(s)) => match parse_bool(s) {
            Some(a) => equality(a == b),
            None => Some(false),
        },
        (Opaque, _) | (_, Opaque) | (Str(_), _) | (_, Str(_)) | (Bool(_), _) | (_, Bool(_)) => {
            // Non-like types: JMS says the comparison is false (not unknown).
            Some(false)
        }
        _ => match (number(left), number(right)) {
            (Some(a), Some(b)) => Some(compare_numbers(op, a, b)),
            _ => Some(false),
        },
    }
}

fn compare_numbers(op: CmpOp, a: Num, b: Num) -> bool {
    match (a, b) {
        (Num::Int(a), Num::Int(b)) => match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        },
        // Numeric promotion: an integer meeting a float is compared as a float.
        (a, b) => {
            let (a, b) = (a.as_f64(), b.as_f64());
            match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                CmpOp::Lt => a < b,
                CmpOp::Le => a <= b,
                CmpOp::Gt => a > b,
                CmpOp::Ge => a >= b,
            }
        }
    }
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Double(d) => d,
        }
    }
}

fn arith<'a>(op: ArithOp, left: Val<'a>, right: Val<'a>) -> Val<'a> {
    let (Some(a), Some(b)) = (number(left), number(right)) else {
        return Val::Null;
    };
    match (a, b) {
        (Num::Int(a), Num::Int(b)) => {
            let exact = match op {
                ArithOp::Add => a.checked_add(b),
                ArithOp::Sub => a.checked_sub(b),
                ArithOp::Mul => a.checked_mul(b),
                // Integer division by zero has no value (Java would throw).
                ArithOp::Div if b == 0 => return Val::Null,
                ArithOp::Div => a.checked_div(b),
            };
            // Overflow widens to a float rather than wrapping as Java's long would.
            exact.map_or_else(|| Val::Double(float_op(op, a as f64, b as f64)), Val::Int)
        }
        (a, b) => Val::Double(float_op(op, a.as_f64(), b.as_f64())),
    }
}

fn float_op(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
    }
}
