//! The encoder: always the most compact constructor that fits (uint0, smalluint, list0,
//! list8 ...), since peers pay for every byte on every frame.

use bytes::{BufMut, BytesMut};

use super::{code, Array, Descriptor, TypeCode, Value};

pub(crate) fn value(v: &Value, buf: &mut BytesMut) {
    match v {
        Value::Null => buf.put_u8(code::NULL),
        Value::Bool(b) => buf.put_u8(if *b { code::TRUE } else { code::FALSE }),
        Value::Ubyte(n) => {
            buf.put_u8(code::UBYTE);
            buf.put_u8(*n);
        }
        Value::Ushort(n) => {
            buf.put_u8(code::USHORT);
            buf.put_u16(*n);
        }
        Value::Uint(n) => uint(*n, buf),
        Value::Ulong(n) => ulong(*n, buf),
        Value::Byte(n) => {
            buf.put_u8(code::BYTE);
            buf.put_i8(*n);
        }
        Value::Short(n) => {
            buf.put_u8(code::SHORT);
            buf.put_i16(*n);
        }
        Value::Int(n) => match i8::try_from(*n) {
            Ok(small) => {
                buf.put_u8(code::SMALLINT);
                buf.put_i8(small);
            }
            Err(_) => {
                buf.put_u8(code::INT);
                buf.put_i32(*n);
            }
        },
        Value::Long(n) => match i8::try_from(*n) {
            Ok(small) => {
                buf.put_u8(code::SMALLLONG);
                buf.put_i8(small);
            }
            Err(_) => {
                buf.put_u8(code::LONG);
                buf.put_i64(*n);
            }
        },
        Value::Binary(b) => variable(code::VBIN8, code::VBIN32, b, buf),
        Value::String(s) => variable(code::STR8, code::STR32, s.as_bytes(), buf),
        Value::Symbol(s) => variable(code::SYM8, code::SYM32, s.as_bytes(), buf),
        Value::List(items) => list(items, buf),
        Value::Map(pairs) => map(pairs, buf),
        Value::Array(a) => array(a, buf),
        Value::Described(d) => {
            descriptor(&d.descriptor, buf);
            value(&d.value, buf);
        }
        // Fixed-width types whose only encoding is also their array element encoding.
        other => {
            buf.put_u8(fixed_code(other));
            elem_body(other, buf);
        }
    }
}

pub fn uint(n: u32, buf: &mut BytesMut) {
    let mut out = [0u8; 5];
    let len = uint_at(&mut out, 0, n);
    buf.extend_from_slice(&out[..len]);
}

/// The smallest uint encoding of `n` (uint0, smalluint or uint) written at
/// `out[at..]`, which has room for five bytes; returns where it ends. [`uint`]
/// and the encoders that lay out a whole composite on the stack share it.
pub(crate) fn uint_at(out: &mut [u8], at: usize, n: u32) -> usize {
    match u8::try_from(n) {
        Ok(0) => {
            out[at] = code::UINT0;
            at + 1
        }
        Ok(small) => {
            out[at] = code::SMALLUINT;
            out[at + 1] = small;
            at + 2
        }
        Err(_) => {
            out[at] = code::UINT;
            out[at + 1..at + 5].copy_from_slice(&n.to_be_bytes());
            at + 5
        }
    }
}

pub fn ulong(n: u64, buf: &mut BytesMut) {
    if n == 0 {
        buf.put_u8(code::ULONG0);
    } else if let Ok(small) = u8::try_from(n) {
        buf.put_u8(code::SMALLULONG);
        buf.put_u8(small);
    } else {
        buf.put_u8(code::ULONG);
        buf.put_u64(n);
    }
}

/// The 0x00 marker and the descriptor of a described value.
pub fn descriptor(d: &Descriptor, buf: &mut BytesMut) {
    buf.put_u8(code::DESCRIBED);
    match d {
        Descriptor::Code(c) => ulong(*c, buf),
        Descriptor::Name(n) => variable(code::SYM8, code::SYM32, n.as_bytes(), buf),
    }
}

pub fn variable(small: u8, large: u8, data: &[u8], buf: &mut BytesMut) {
    match u8::try_from(data.len()) {
        Ok(len) => {
            buf.put_u8(small);
            buf.put_u8(len);
        }
        Err(_) => {
            buf.put_u8(large);
            buf.put_u32(data.len() as u32);
        }
    }
    buf.put_slice(data);
}

pub(crate) fn map(pairs: &[(Value, Value)], buf: &mut BytesMut) {
    compound(buf, code::MAP8, code::MAP32, pairs.len() * 2, |buf| {
        for (k, v) in pairs {
            value(k, buf);
            value(v, buf);
        }
    });
}

pub(crate) fn list(items: &[Value], buf: &mut BytesMut) {
    if items.is_empty() {
        buf.put_u8(code::LIST0);
        return;
    }
    compound(buf, code::LIST8, code::LIST32, items.len(), |buf| {
        for v in items {
            value(v, buf);
        }
    });
}

/// Writes a compound (list, map, array) whose body `f` produces: reserves the 32-bit header,
/// then shrinks it to the 8-bit form when body and count fit, so one pass suffices.
pub fn compound(
    buf: &mut BytesMut,
    small: u8,
    large: u8,
    count: usize,
    f: impl FnOnce(&mut BytesMut),
) {
    let start = buf.len();
    buf.put_u8(large);
    buf.put_u64(0);
    let body_start = buf.len();
    f(buf);
    finish_compound(buf, start, body_start, small, count);
}

/// Patches the header reserved at `start` (code + size32 + count32) for a body beginning at
/// `body_start`, converting to the 8-bit form when it fits.
pub(crate) fn finish_compound(
    buf: &mut BytesMut,
    start: usize,
    body_start: usize,
    small: u8,
    count: usize,
) {
    let body_len = buf.len() - body_start;
    match (u8::try_from(body_len + 1), u8::try_from(count)) {
        (Ok(size), Ok(count)) => {
            buf.copy_within(body_start.., start + 3);
            buf.truncate(start + 3 + body_len);
            buf[start] = small;
            buf[start + 1] = size;
            buf[start + 2] = count;
        }
        _ => {
            let size = (body_len + 4) as u32;
            buf[start + 1..start + 5].copy_from_slice(&size.to_be_bytes());
            buf[start + 5..start + 9].copy_from_slice(&(count as u32).to_be_bytes());
        }
    }
}

fn fixed_code(v: &Value) -> u8 {
    match v {
        Value::Float(_) => code::FLOAT,
        Value::Double(_) => code::DOUBLE,
        Value::Decimal32(_) => code::DECIMAL32,
        Value::Decimal64(_) => code::DECIMAL64,
        Value::Decimal128(_) => code::DECIMAL128,
        Value::Char(_) => code::CHAR,
        Value::Timestamp(_) => code::TIMESTAMP,
        Value::Uuid(_) => code::UUID,
        _ => code::NULL,
    }
}

/// The one constructor shared by all elements of an array of `elem`.
fn array_elem_code(a: &Array) -> u8 {
    let all_small = |f: fn(&Value) -> usize| a.items.iter().all(|v| f(v) <= 255);
    fn var_len(v: &Value) -> usize {
        match v {
            Value::Binary(b) => b.len(),
            Value::String(s) => s.len(),
            Value::Symbol(s) => s.as_bytes().len(),
            _ => 0,
        }
    }
    match a.elem {
        TypeCode::Null => code::NULL,
        TypeCode::Boolean => code::BOOLEAN,
        TypeCode::Ubyte => code::UBYTE,
        TypeCode::Ushort => code::USHORT,
        TypeCode::Uint => code::UINT,
        TypeCode::Ulong => code::ULONG,
        TypeCode::Byte => code::BYTE,
        TypeCode::Short => code::SHORT,
        TypeCode::Int => code::INT,
        TypeCode::Long => code::LONG,
        TypeCode::Float => code::FLOAT,
        TypeCode::Double => code::DOUBLE,
        TypeCode::Decimal32 => code::DECIMAL32,
        TypeCode::Decimal64 => code::DECIMAL64,
        TypeCode::Decimal128 => code::DECIMAL128,
        TypeCode::Char => code::CHAR,
        TypeCode::Timestamp => code::TIMESTAMP,
        TypeCode::Uuid => code::UUID,
        TypeCode::Binary if all_small(var_len) => code::VBIN8,
        TypeCode::Binary => code::VBIN32,
        TypeCode::String if all_small(var_len) => code::STR8,
        TypeCode::String => code::STR32,
        TypeCode::Symbol if all_small(var_len) => code::SYM8,
        TypeCode::Symbol => code::SYM32,
        TypeCode::List => code::LIST32,
        TypeCode::Map => code::MAP32,
        TypeCode::Array => code::ARRAY32,
    }
}

fn array(a: &Array, buf: &mut BytesMut) {
    let elem_code = array_elem_code(a);
    compound(buf, code::ARRAY8, code::ARRAY32, a.items.len(), |buf| {
        if let Some(d) = &a.descriptor {
            descriptor(d, buf);
        }
        buf.put_u8(elem_code);
        for v in &a.items {
            array_elem(v, elem_code, buf);
        }
    });
}

/// An array element: the value's data for constructor `c`, without the constructor.
fn array_elem(v: &Value, c: u8, buf: &mut BytesMut) {
    match v {
        Value::Null => {}
        Value::Bool(b) => buf.put_u8(u8::from(*b)),
        Value::Ubyte(n) => buf.put_u8(*n),
        Value::Ushort(n) => buf.put_u16(*n),
        Value::Uint(n) => buf.put_u32(*n),
        Value::Ulong(n) => buf.put_u64(*n),
        Value::Byte(n) => buf.put_i8(*n),
        Value::Short(n) => buf.put_i16(*n),
        Value::Int(n) => buf.put_i32(*n),
        Value::Long(n) => buf.put_i64(*n),
        Value::Binary(b) => var_elem(c, b, buf),
        Value::String(s) => var_elem(c, s.as_bytes(), buf),
        Value::Symbol(s) => var_elem(c, s.as_bytes(), buf),
        Value::List(items) => wide_compound(buf, items.len(), |buf| {
            for v in items {
                value(v, buf);
            }
        }),
        Value::Map(pairs) => wide_compound(buf, pairs.len() * 2, |buf| {
            for (k, v) in pairs {
                value(k, buf);
                value(v, buf);
            }
        }),
        Value::Array(inner) => {
            let elem_code = array_elem_code(inner);
            wide_compound(buf, inner.items.len(), |buf| {
                if let Some(d) = &inner.descriptor {
                    descriptor(d, buf);
                }
                buf.put_u8(elem_code);
                for v in &inner.items {
                    array_elem(v, elem_code, buf);
                }
            })
        }
        // Array::new forbids described items; nothing sensible to write.
        Value::Described(_) => {}
        other => elem_body(other, buf),
    }
}

fn var_elem(c: u8, data: &[u8], buf: &mut BytesMut) {
    if matches!(c, code::VBIN8 | code::STR8 | code::SYM8) {
        buf.put_u8(data.len() as u8);
    } else {
        buf.put_u32(data.len() as u32);
    }
    buf.put_slice(data);
}

/// A compound body with a 32-bit size and count (the form used inside arrays).
fn wide_compound(buf: &mut BytesMut, count: usize, f: impl FnOnce(&mut BytesMut)) {
    let start = buf.len();
    buf.put_u64(0);
    f(buf);
    let size = (buf.len() - start - 4) as u32;
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
    buf[start + 4..start + 8].copy_from_slice(&(count as u32).to_be_bytes());
}

fn elem_body(v: &Value, buf: &mut BytesMut) {
    match v {
        Value::Float(f) => buf.put_f32(*f),
        Value::Double(f) => buf.put_f64(*f),
        Value::Decimal32(b) => buf.put_slice(b),
        Value::Decimal64(b) => buf.put_slice(b),
        Value::Decimal128(b) => buf.put_slice(b),
        Value::Char(c) => buf.put_u32(u32::from(*c)),
        Value::Timestamp(t) => buf.put_i64(*t),
        Value::Uuid(u) => buf.put_slice(u),
        _ => {}
    }
}
