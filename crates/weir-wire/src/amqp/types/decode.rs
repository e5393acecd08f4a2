//! nom parsers for AMQP values. They run over `&[u8]` slices of one `Bytes` buffer (the
//! frame) and hand out variable-width data as `Bytes` slices of that buffer.

use bytes::Bytes;
use nom::bytes::complete::take;
use nom::number::complete::{
    be_f32, be_f64, be_i16, be_i32, be_i64, be_i8, be_u16, be_u32, be_u64, be_u8,
};
use nom::IResult;

use super::{code, Array, Descriptor, Str, Symbol, TypeCode, Value, MAX_DEPTH};
use crate::amqp::error::{AmqpCodecError, Result};

pub(crate) type PResult<'a, T> = IResult<&'a [u8], T, AmqpCodecError>;

/// The buffer all parsed slices come from, so they can become `Bytes` without copying.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    base: &'a Bytes,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(base: &'a Bytes) -> Self {
        Ctx { base }
    }

    /// The `Bytes` handle for `sub`, which must lie inside the base buffer. Checked rather
    /// than `slice_ref` so a logic error can never become a panic on network input.
    pub(crate) fn bytes(&self, sub: &[u8]) -> Result<Bytes> {
        let start = (sub.as_ptr() as usize).wrapping_sub(self.base.as_ptr() as usize);
        match start.checked_add(sub.len()) {
            Some(end) if end <= self.base.len() && start <= end => Ok(self.base.slice(start..end)),
            _ => Err(AmqpCodecError::Malformed),
        }
    }
}

pub(crate) fn fail<T>(e: AmqpCodecError) -> std::result::Result<T, nom::Err<AmqpCodecError>> {
    Err(nom::Err::Failure(e))
}

/// Turns a nom result into ours.
pub(crate) fn finish<'a, T>(r: PResult<'a, T>) -> Result<(&'a [u8], T)> {
    r.map_err(|e| match e {
        nom::Err::Error(e) | nom::Err::Failure(e) => e,
        nom::Err::Incomplete(_) => AmqpCodecError::Truncated,
    })
}

fn check_depth(depth: usize) -> std::result::Result<(), nom::Err<AmqpCodecError>> {
    if depth > MAX_DEPTH {
        fail(AmqpCodecError::DepthExceeded(MAX_DEPTH))
    } else {
        Ok(())
    }
}

/// One value with its constructor.
pub(crate) fn value<'a>(cx: &Ctx<'a>, i: &'a [u8], depth: usize) -> PResult<'a, Value> {
    let (i, c) = be_u8(i)?;
    if c == code::DESCRIBED {
        check_depth(depth + 1)?;
        let (i, descriptor) = descriptor_after_marker(cx, i, depth)?;
        let (i, value) = value(cx, i, depth + 1)?;
        return Ok((i, Value::described(descriptor, value)));
    }
    body(cx, i, c, depth)
}

/// How many bytes the value at the start of `i` (constructor included) takes,
/// found from its constructor and size fields without decoding it. `None` when
/// `i` is too short, the constructor unknown, or described values nest deeper
/// than [`MAX_DEPTH`].
pub(crate) fn encoded_len(i: &[u8]) -> Option<usize> {
    encoded_len_at(i, 0)
}

fn encoded_len_at(i: &[u8], depth: usize) -> Option<usize> {
    let (&c, rest) = i.split_first()?;
    if c == code::DESCRIBED {
        if depth >= MAX_DEPTH {
            return None;
        }
        let descriptor = encoded_len_at(rest, depth + 1)?;
        let value = encoded_len_at(rest.get(descriptor..)?, depth + 1)?;
        return Some(1 + descriptor + value);
    }
    let len = match c >> 4 {
        0x4 => 0,
        0x5 => 1,
        0x6 => 2,
        0x7 => 4,
        0x8 => 8,
        0x9 => 16,
        0xA | 0xC | 0xE => 1 + usize::from(*rest.first()?),
        0xB | 0xD | 0xF => {
            let size: [u8; 4] = rest.get(..4)?.try_into().ok()?;
            4 + u32::from_be_bytes(size) as usize
        }
        _ => return None,
    };
    (len <= rest.len()).then_some(1 + len)
}

/// The descriptor following a 0x00 marker: a ulong code or a symbol.
pub(crate) fn descriptor_after_marker<'a>(
    cx: &Ctx<'a>,
    i: &'a [u8],
    depth: usize,
) -> PResult<'a, Descriptor> {
    // Every section and performative has a numeric descriptor, nearly always
    // a smallulong: read it without building a value.
    if let [code::SMALLULONG, n, rest @ ..] = i {
        return Ok((rest, Descriptor::Code(u64::from(*n))));
    }
    let (i, c) = be_u8(i)?;
    if c == code::DESCRIBED {
        return fail(AmqpCodecError::InvalidDescriptor);
    }
    let (i, v) = body(cx, i, c, depth + 1)?;
    match v {
        Value::Ulong(n) => Ok((i, Descriptor::Code(n))),
        Value::Symbol(s) => Ok((i, Descriptor::Name(s))),
        _ => fail(AmqpCodecError::InvalidDescriptor),
    }
}

fn fixed<'a, const N: usize>(i: &'a [u8]) -> PResult<'a, [u8; N]> {
    let (i, b) = take(N)(i)?;
    let mut out = [0u8; N];
    out.copy_from_slice(b);
    Ok((i, out))
}

/// The bytes of a variable-width value (after its constructor), borrowed.
pub(crate) fn variable_slice(i: &[u8], wide: bool) -> PResult<'_, &[u8]> {
    let (i, len) = if wide {
        be_u32(i)?
    } else {
        let (i, l) = be_u8(i)?;
        (i, u32::from(l))
    };
    take(len as usize)(i)
}

fn variable<'a>(cx: &Ctx<'a>, i: &'a [u8], wide: bool) -> PResult<'a, Bytes> {
    let (i, data) = variable_slice(i, wide)?;
    match cx.bytes(data) {
        Ok(b) => Ok((i, b)),
        Err(e) => fail(e),
    }
}

/// The size and count header of a compound or array, and the bytes after the count.
/// Rejects counts that cannot fit in the declared size: with at least one byte per element
/// (arrays of zero-width elements aside, which we refuse to inflate), count <= size.
pub(crate) fn compound_header<'a>(i: &'a [u8], wide: bool) -> PResult<'a, (&'a [u8], usize)> {
    let (i, size, body_len, count) = if wide {
        let (i, size) = be_u32(i)?;
        let (_, count) = be_u32(i)?;
        (
            i,
            size as usize,
            (size as usize).saturating_sub(4),
            count as usize,
        )
    } else {
        let (i, size) = be_u8(i)?;
        let (_, count) = be_u8(i)?;
        (
            i,
            size as usize,
            (size as usize).saturating_sub(1),
            count as usize,
        )
    };
    let (i, body) = take(size)(i)?;
    let width = if wide { 4 } else { 1 };
    if size < width {
        return fail(AmqpCodecError::Malformed);
    }
    if count > body_len {
        return fail(AmqpCodecError::CountTooLarge {
            count,
            size: body_len,
        });
    }
    Ok((i, (&body[width..], count)))
}

/// Elements reserved up front for a list, map or array: its count is the
/// peer's word (a zero-width element costs no bytes, so a small frame may
/// declare a million), so beyond this the vector grows as elements decode.
const RESERVE_ELEMENTS: usize = 64;

fn sequence<'a>(
    cx: &Ctx<'a>,
    mut i: &'a [u8],
    count: usize,
    depth: usize,
) -> PResult<'a, Vec<Value>> {
    let mut items = Vec::with_capacity(count.min(RESERVE_ELEMENTS));
    for _ in 0..count {
        let (rest, v) = value(cx, i, depth)?;
        items.push(v);
        i = rest;
    }
    Ok((i, items))
}

fn all_consumed(rest: &[u8]) -> std::result::Result<(), nom::Err<AmqpCodecError>> {
    if rest.is_empty() {
        Ok(())
    } else {
        fail(AmqpCodecError::TrailingBytes(rest.len()))
    }
}

pub(crate) fn list_body<'a>(
    cx: &Ctx<'a>,
    i: &'a [u8],
    wide: bool,
    depth: usize,
) -> PResult<'a, Vec<Value>> {
    let (i, (body, count)) = compound_header(i, wide)?;
    let (rest, items) = sequence(cx, body, count, depth + 1)?;
    all_consumed(rest)?;
    Ok((i, items))
}

fn map_body<'a>(cx: &Ctx<'a>, i: &'a [u8], wide: bool, depth: usize) -> PResult<'a, Value> {
    let (i, (mut body, count)) = compound_header(i, wide)?;
    if count % 2 != 0 {
        return fail(AmqpCodecError::InvalidValue("map (odd element count)"));
    }
    let mut pairs = Vec::with_capacity((count / 2).min(RESERVE_ELEMENTS));
    for _ in 0..count / 2 {
        let (rest, k) = value(cx, body, depth + 1)?;
        let (rest, v) = value(cx, rest, depth + 1)?;
        pairs.push((k, v));
        body = rest;
    }
    all_consumed(body)?;
    Ok((i, Value::Map(pairs)))
}

fn type_code_of(c: u8) -> Option<TypeCode> {
    use code::*;
    Some(match c {
        NULL => TypeCode::Null,
        BOOLEAN | TRUE | FALSE => TypeCode::Boolean,
        UBYTE => TypeCode::Ubyte,
        USHORT => TypeCode::Ushort,
        UINT | SMALLUINT | UINT0 => TypeCode::Uint,
        ULONG | SMALLULONG | ULONG0 => TypeCode::Ulong,
        BYTE => TypeCode::Byte,
        SHORT => TypeCode::Short,
        INT | SMALLINT => TypeCode::Int,
        LONG | SMALLLONG => TypeCode::Long,
        FLOAT => TypeCode::Float,
        DOUBLE => TypeCode::Double,
        DECIMAL32 => TypeCode::Decimal32,
        DECIMAL64 => TypeCode::Decimal64,
        DECIMAL128 => TypeCode::Decimal128,
        CHAR => TypeCode::Char,
        TIMESTAMP => TypeCode::Timestamp,
        UUID => TypeCode::Uuid,
        VBIN8 | VBIN32 => TypeCode::Binary,
        STR8 | STR32 => TypeCode::String,
        SYM8 | SYM32 => TypeCode::Symbol,
        LIST0 | LIST8 | LIST32 => TypeCode::List,
        MAP8 | MAP32 => TypeCode::Map,
        ARRAY8 | ARRAY32 => TypeCode::Array,
        _ => return None,
    })
}

fn array_body<'a>(cx: &Ctx<'a>, i: &'a [u8], wide: bool, depth: usize) -> PResult<'a, Value> {
    let (i, (body, count)) = compound_header(i, wide)?;
    let (body, c) = be_u8(body)?;
    let (mut body, descriptor, c) = if c == code::DESCRIBED {
        let (body, d) = descriptor_after_marker(cx, body, depth + 1)?;
        let (body, c) = be_u8(body)?;
        (body, Some(d), c)
    } else {
        (body, None, c)
    };
    let elem = match type_code_of(c) {
        Some(t) => t,
        None => return fail(AmqpCodecError::UnknownConstructor(c)),
    };
    // Null elements take no bytes: counted as one each, so that a count is bounded by
    // the bytes that carry it and an array decodes the same whatever its descriptor's
    // encoding (the fuzzer found four nulls accepted after a two-byte descriptor and
    // refused after the one-byte one they re-encode with).
    if count > body.len() {
        return fail(AmqpCodecError::CountTooLarge {
            count,
            size: body.len(),
        });
    }
    let mut items = Vec::with_capacity(count.min(RESERVE_ELEMENTS));
    for _ in 0..count {
        let (rest, v) = self::body(cx, body, c, depth + 1)?;
        items.push(v);
        body = rest;
    }
    all_consumed(body)?;
    Ok((
        i,
        Value::Array(Array {
            descriptor,
            elem,
            items,
        }),
    ))
}

/// The data following constructor `c`.
pub(crate) fn body<'a>(cx: &Ctx<'a>, i: &'a [u8], c: u8, depth: usize) -> PResult<'a, Value> {
    use code::*;
    Ok(match c {
        NULL => (i, Value::Null),
        BOOLEAN => {
            let (i, b) = be_u8(i)?;
            match b {
                0 => (i, Value::Bool(false)),
                1 => (i, Value::Bool(true)),
                _ => return fail(AmqpCodecError::InvalidValue("boolean")),
            }
        }
        TRUE => (i, Value::Bool(true)),
        FALSE => (i, Value::Bool(false)),
        UBYTE => {
            let (i, v) = be_u8(i)?;
            (i, Value::Ubyte(v))
        }
        USHORT => {
            let (i, v) = be_u16(i)?;
            (i, Value::Ushort(v))
        }
        UINT => {
            let (i, v) = be_u32(i)?;
            (i, Value::Uint(v))
        }
        SMALLUINT => {
            let (i, v) = be_u8(i)?;
            (i, Value::Uint(v.into()))
        }
        UINT0 => (i, Value::Uint(0)),
        ULONG => {
            let (i, v) = be_u64(i)?;
            (i, Value::Ulong(v))
        }
        SMALLULONG => {
            let (i, v) = be_u8(i)?;
            (i, Value::Ulong(v.into()))
        }
        ULONG0 => (i, Value::Ulong(0)),
        BYTE => {
            let (i, v) = be_i8(i)?;
            (i, Value::Byte(v))
        }
        SHORT => {
            let (i, v) = be_i16(i)?;
            (i, Value::Short(v))
        }
        INT => {
            let (i, v) = be_i32(i)?;
            (i, Value::Int(v))
        }
        SMALLINT => {
            let (i, v) = be_i8(i)?;
            (i, Value::Int(v.into()))
        }
        LONG => {
            let (i, v) = be_i64(i)?;
            (i, Value::Long(v))
        }
        SMALLLONG => {
            let (i, v) = be_i8(i)?;
            (i, Value::Long(v.into()))
        }
        FLOAT => {
            let (i, v) = be_f32(i)?;
            (i, Value::Float(v))
        }
        DOUBLE => {
            let (i, v) = be_f64(i)?;
            (i, Value::Double(v))
        }
        DECIMAL32 => {
            let (i, v) = fixed::<4>(i)?;
            (i, Value::Decimal32(v))
        }
        DECIMAL64 => {
            let (i, v) = fixed::<8>(i)?;
            (i, Value::Decimal64(v))
        }
        DECIMAL128 => {
            let (i, v) = fixed::<16>(i)?;
            (i, Value::Decimal128(v))
        }
        CHAR => {
            let (i, v) = be_u32(i)?;
            match char::from_u32(v) {
                Some(ch) => (i, Value::Char(ch)),
                None => return fail(AmqpCodecError::InvalidValue("char")),
            }
        }
        TIMESTAMP => {
            let (i, v) = be_i64(i)?;
            (i, Value::Timestamp(v))
        }
        UUID => {
            let (i, v) = fixed::<16>(i)?;
            (i, Value::Uuid(v))
        }
        VBIN8 | VBIN32 => {
            let (i, b) = variable(cx, i, c == VBIN32)?;
            (i, Value::Binary(b))
        }
        STR8 | STR32 => {
            let (i, b) = variable(cx, i, c == STR32)?;
            match Str::from_bytes(b) {
                Ok(s) => (i, Value::String(s)),
                Err(e) => return fail(e),
            }
        }
        SYM8 | SYM32 => {
            let (i, b) = variable(cx, i, c == SYM32)?;
            match Symbol::from_bytes(b) {
                Ok(s) => (i, Value::Symbol(s)),
                Err(e) => return fail(e),
            }
        }
        LIST0 => (i, Value::List(Vec::new())),
        LIST8 | LIST32 => {
            check_depth(depth + 1)?;
            let (i, items) = list_body(cx, i, c == LIST32, depth)?;
            (i, Value::List(items))
        }
        MAP8 | MAP32 => {
            check_depth(depth + 1)?;
            map_body(cx, i, c == MAP32, depth)?
        }
        ARRAY8 | ARRAY32 => {
            check_depth(depth + 1)?;
            array_body(cx, i, c == ARRAY32, depth)?
        }
        DESCRIBED => {
            // Only reachable for array elements, whose constructor cannot be described twice.
            return fail(AmqpCodecError::InvalidDescriptor);
        }
        other => return fail(AmqpCodecError::UnknownConstructor(other)),
    })
}

/// Numeric codes of the symbolic descriptor names this codec understands.
pub(crate) fn descriptor_code_for_name(name: &str) -> Option<u64> {
    Some(match name {
        "amqp:open:list" => 0x10,
        "amqp:begin:list" => 0x11,
        "amqp:attach:list" => 0x12,
        "amqp:flow:list" => 0x13,
        "amqp:transfer:list" => 0x14,
        "amqp:disposition:list" => 0x15,
        "amqp:detach:list" => 0x16,
        "amqp:end:list" => 0x17,
        "amqp:close:list" => 0x18,
        "amqp:error:list" => 0x1d,
        "amqp:received:list" => 0x23,
        "amqp:accepted:list" => 0x24,
        "amqp:rejected:list" => 0x25,
        "amqp:released:list" => 0x26,
        "amqp:modified:list" => 0x27,
        "amqp:source:list" => 0x28,
        "amqp:target:list" => 0x29,
        "amqp:delete-on-close:list" => 0x2b,
        "amqp:delete-on-no-links:list" => 0x2c,
        "amqp:delete-on-no-messages:list" => 0x2d,
        "amqp:delete-on-no-links-or-messages:list" => 0x2e,
        "amqp:coordinator:list" => 0x30,
        "amqp:declare:list" => 0x31,
        "amqp:discharge:list" => 0x32,
        "amqp:declared:list" => 0x33,
        "amqp:transactional-state:list" => 0x34,
        "amqp:sasl-mechanisms:list" => 0x40,
        "amqp:sasl-init:list" => 0x41,
        "amqp:sasl-challenge:list" => 0x42,
        "amqp:sasl-response:list" => 0x43,
        "amqp:sasl-outcome:list" => 0x44,
        "amqp:header:list" => 0x70,
        "amqp:delivery-annotations:map" => 0x71,
        "amqp:message-annotations:map" => 0x72,
        "amqp:properties:list" => 0x73,
        "amqp:application-properties:map" => 0x74,
        "amqp:data:binary" => 0x75,
        "amqp:amqp-sequence:list" => 0x76,
        "amqp:amqp-value:*" => 0x77,
        "amqp:footer:map" => 0x78,
        _ => return None,
    })
}
