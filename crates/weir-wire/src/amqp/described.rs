//! Composite types: described lists whose fields are read and written in order. Decoding
//! reads fields straight from the frame bytes (no intermediate `Vec<Value>`), and encoding
//! drops trailing null fields, as the spec allows.

use bytes::{Bytes, BytesMut};

use super::error::{AmqpCodecError, Result};
use super::types::decode::{self, compound_header, descriptor_after_marker, finish, Ctx};
use super::types::{code, encode, Descriptor, Map, Str, Symbol, TypeCode, Value, MAX_DEPTH};

/// A composite type with a fixed descriptor and list-encoded fields.
pub trait Composite: Sized {
    /// Numeric descriptor (domain 0x00000000, so just the low 32 bits).
    const CODE: u64;
    /// Type name, used in errors.
    const NAME: &'static str;

    #[doc(hidden)]
    fn decode_fields(r: &mut FieldReader<'_>) -> Result<Self>;
    #[doc(hidden)]
    fn encode_fields(&self, w: &mut ListWriter<'_>);

    /// Appends the described list encoding.
    fn encode(&self, buf: &mut BytesMut) {
        let mut w = ListWriter::begin(buf, Self::CODE);
        self.encode_fields(&mut w);
        w.finish();
    }

    fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }

    /// Decodes from the front of `buf`, advancing it.
    fn decode(buf: &mut Bytes) -> Result<Self> {
        let base = buf.clone();
        let cx = Ctx::new(&base);
        let (rest, d, mut r) = read_described(cx, &base, 0, Self::NAME)?;
        if d.code() != Some(Self::CODE) {
            return Err(AmqpCodecError::UnexpectedDescriptor {
                expected: Self::NAME,
                found: d,
            });
        }
        let v = Self::decode_fields(&mut r)?;
        let used = base.len() - rest.len();
        let _ = buf.split_to(used);
        Ok(v)
    }

    /// Converts from an already decoded value (e.g. an `amqp-value` body). Re-encodes, so
    /// meant for rare paths such as transaction control messages.
    fn from_value(v: &Value) -> Result<Self> {
        let mut b = v.to_bytes();
        Self::decode(&mut b)
    }

    fn to_value(&self) -> Result<Value> {
        Value::decode_exact(&self.to_bytes())
    }
}

/// Reads a described list: returns the rest of the input after it, its descriptor, and a
/// reader over its fields. Non-list bodies are a decode error.
pub(crate) fn read_described<'a>(
    cx: Ctx<'a>,
    i: &'a [u8],
    depth: usize,
    what: &'static str,
) -> Result<(&'a [u8], Descriptor, FieldReader<'a>)> {
    if depth + 2 > MAX_DEPTH {
        return Err(AmqpCodecError::DepthExceeded(MAX_DEPTH));
    }
    match i.first() {
        Some(&code::DESCRIBED) => {}
        Some(_) => return Err(AmqpCodecError::NotAList(what)),
        None => return Err(AmqpCodecError::Truncated),
    }
    let (i, d) = finish(descriptor_after_marker(&cx, &i[1..], depth))?;
    let (i, list) = list_fields(cx, i, depth + 1, what)?;
    Ok((i, d, list))
}

pub(crate) fn list_fields<'a>(
    cx: Ctx<'a>,
    i: &'a [u8],
    depth: usize,
    what: &'static str,
) -> Result<(&'a [u8], FieldReader<'a>)> {
    let (&c, i) = i.split_first().ok_or(AmqpCodecError::Truncated)?;
    let (i, (body, count)) = match c {
        code::LIST0 => (i, (&i[..0], 0)),
        code::LIST8 | code::LIST32 => finish(compound_header(i, c == code::LIST32))?,
        _ => return Err(AmqpCodecError::NotAList(what)),
    };
    Ok((
        i,
        FieldReader {
            cx,
            rest: body,
            remaining: count,
            depth: depth + 1,
            composite: what,
        },
    ))
}

/// Conversion from a decoded field value; `None` means the value has the wrong type.
pub(crate) trait FromValue: Sized {
    fn from_value(v: Value) -> Option<Self>;

    /// Reads the most common encodings of the type straight from the bytes (with how many
    /// it took), skipping the general decoder: transfer and disposition fields are read per
    /// message. `None` leaves the bytes to [`FromValue::from_value`].
    fn read_simple(_cx: &Ctx<'_>, _i: &[u8]) -> Option<(usize, Self)> {
        None
    }
}

macro_rules! from_value {
    ($t:ty, $variant:ident) => {
        from_value!($t, $variant, |_cx, _i| None);
    };
    ($t:ty, $variant:ident, $simple:expr) => {
        impl FromValue for $t {
            fn from_value(v: Value) -> Option<Self> {
                match v {
                    Value::$variant(x) => Some(x),
                    _ => None,
                }
            }

            fn read_simple(cx: &Ctx<'_>, i: &[u8]) -> Option<(usize, Self)> {
                let simple: fn(&Ctx<'_>, &[u8]) -> Option<(usize, Self)> = $simple;
                simple(cx, i)
            }
        }
    };
}
from_value!(bool, Bool, |_, i| match *i.first()? {
    code::TRUE => Some((1, true)),
    code::FALSE => Some((1, false)),
    _ => None,
});
from_value!(u8, Ubyte, |_, i| match i {
    [code::UBYTE, n, ..] => Some((2, *n)),
    _ => None,
});
from_value!(u16, Ushort);
from_value!(u32, Uint, |_, i| match i {
    [code::UINT0, ..] => Some((1, 0)),
    [code::SMALLUINT, n, ..] => Some((2, u32::from(*n))),
    [code::UINT, a, b, c, d, ..] => Some((5, u32::from_be_bytes([*a, *b, *c, *d]))),
    _ => None,
});
from_value!(u64, Ulong, |_, i| match i {
    [code::ULONG0, ..] => Some((1, 0)),
    [code::SMALLULONG, n, ..] => Some((2, u64::from(*n))),
    _ => None,
});
from_value!(Bytes, Binary, |cx, i| match i {
    [code::VBIN8, len, rest @ ..] if rest.len() >= usize::from(*len) => {
        let len = usize::from(*len);
        Some((2 + len, cx.bytes(&rest[..len]).ok()?))
    }
    _ => None,
});
from_value!(Str, String);
from_value!(Symbol, Symbol);
from_value!(Map, Map);

impl FromValue for Value {
    fn from_value(v: Value) -> Option<Self> {
        Some(v)
    }
}

/// Sequential access to the fields of a composite's list. Missing trailing fields read as
/// null, so the typed getters return `None` (or the default) for them.
pub struct FieldReader<'a> {
    cx: Ctx<'a>,
    rest: &'a [u8],
    remaining: usize,
    depth: usize,
    composite: &'static str,
}

impl<'a> FieldReader<'a> {
    fn invalid(&self, field: &'static str) -> AmqpCodecError {
        AmqpCodecError::InvalidField {
            composite: self.composite,
            field,
        }
    }

    fn missing(&self, field: &'static str) -> AmqpCodecError {
        AmqpCodecError::MissingField {
            composite: self.composite,
            field,
        }
    }

    /// The next field as a value; `None` if absent or null.
    pub(crate) fn value(&mut self) -> Result<Option<Value>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        self.remaining -= 1;
        let (rest, v) = finish(decode::value(&self.cx, self.rest, self.depth))?;
        self.rest = rest;
        Ok(match v {
            Value::Null => None,
            v => Some(v),
        })
    }

    pub(crate) fn get<T: FromValue>(&mut self, field: &'static str) -> Result<Option<T>> {
        if self.remaining > 0 {
            let simple = match self.rest.first() {
                Some(&code::NULL) => Some((1, None)),
                Some(_) => T::read_simple(&self.cx, self.rest).map(|(n, v)| (n, Some(v))),
                None => None,
            };
            if let Some((used, v)) = simple {
                self.remaining -= 1;
                self.rest = &self.rest[used..];
                return Ok(v);
            }
        }
        match self.value()? {
            None => Ok(None),
            Some(v) => T::from_value(v)
                .map(Some)
                .ok_or_else(|| self.invalid(field)),
        }
    }

    pub(crate) fn req<T: FromValue>(&mut self, field: &'static str) -> Result<T> {
        self.get(field)?.ok_or_else(|| self.missing(field))
    }

    pub(crate) fn get_or<T: FromValue>(&mut self, field: &'static str, default: T) -> Result<T> {
        Ok(self.get(field)?.unwrap_or(default))
    }

    pub(crate) fn timestamp(&mut self, field: &'static str) -> Result<Option<i64>> {
        match self.value()? {
            None => Ok(None),
            Some(Value::Timestamp(t)) => Ok(Some(t)),
            Some(_) => Err(self.invalid(field)),
        }
    }

    /// A multiple-valued symbol field: a single symbol, an array of symbols, or null.
    pub(crate) fn symbols(&mut self, field: &'static str) -> Result<Vec<Symbol>> {
        match self.value()? {
            None => Ok(Vec::new()),
            Some(Value::Symbol(s)) => Ok(vec![s]),
            Some(Value::Array(a)) if a.elem_type() == TypeCode::Symbol => Ok(a
                .into_items()
                .into_iter()
                .filter_map(|v| match v {
                    Value::Symbol(s) => Some(s),
                    _ => None,
                })
                .collect()),
            Some(_) => Err(self.invalid(field)),
        }
    }

    /// A field holding a described list (a nested composite), decoded in place by `f`,
    /// which receives the numeric descriptor and a reader over its fields.
    pub(crate) fn described<T>(
        &mut self,
        field: &'static str,
        f: impl FnOnce(u64, &mut FieldReader<'a>) -> Result<T>,
    ) -> Result<Option<T>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        match self.rest.first() {
            Some(&code::NULL) => {
                self.remaining -= 1;
                self.rest = &self.rest[1..];
                Ok(None)
            }
            Some(&code::DESCRIBED) => {
                self.remaining -= 1;
                let (rest, d, mut r) = read_described(self.cx, self.rest, self.depth, field)?;
                self.rest = rest;
                let c = d.code().ok_or(AmqpCodecError::UnknownDescriptor(d))?;
                f(c, &mut r).map(Some)
            }
            Some(_) => Err(self.invalid(field)),
            None => Err(AmqpCodecError::Truncated),
        }
    }

    /// A field holding composite `T`.
    pub(crate) fn composite<T: Composite>(&mut self, field: &'static str) -> Result<Option<T>> {
        self.described(field, |c, r| {
            if c == T::CODE {
                T::decode_fields(r)
            } else {
                Err(AmqpCodecError::UnexpectedDescriptor {
                    expected: T::NAME,
                    found: Descriptor::Code(c),
                })
            }
        })
    }
}

/// Writes the fields of a composite; see [`Composite::encode`].
pub struct ListWriter<'b> {
    buf: &'b mut BytesMut,
    start: usize,
    body_start: usize,
    committed: usize,
    committed_count: usize,
    count: usize,
}

impl<'b> ListWriter<'b> {
    pub(crate) fn begin(buf: &'b mut BytesMut, descriptor: u64) -> Self {
        encode::descriptor(&Descriptor::Code(descriptor), buf);
        let start = buf.len();
        buf.extend_from_slice(&[code::LIST32, 0, 0, 0, 0, 0, 0, 0, 0]);
        let body_start = buf.len();
        ListWriter {
            buf,
            start,
            body_start,
            committed: body_start,
            committed_count: 0,
            count: 0,
        }
    }

    pub(crate) fn null(&mut self) {
        self.buf.extend_from_slice(&[code::NULL]);
        self.count += 1;
    }

    /// A non-null field written by `f`.
    pub(crate) fn with(&mut self, f: impl FnOnce(&mut BytesMut)) {
        f(self.buf);
        self.count += 1;
        self.committed = self.buf.len();
        self.committed_count = self.count;
    }

    pub(crate) fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(T, &mut BytesMut)) {
        match v {
            Some(v) => self.with(|b| f(v, b)),
            None => self.null(),
        }
    }

    pub(crate) fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.null(),
            v => self.with(|b| v.encode(b)),
        }
    }

    pub(crate) fn uint(&mut self, v: Option<u32>) {
        self.opt(v, encode::uint)
    }

    /// A field with a default: written as null when equal to it.
    pub(crate) fn uint_default(&mut self, v: u32, default: u32) {
        self.uint((v != default).then_some(v))
    }

    pub(crate) fn ulong(&mut self, v: Option<u64>) {
        self.opt(v, encode::ulong)
    }

    pub(crate) fn ubyte(&mut self, v: Option<u8>) {
        self.opt(v, |v, b| Value::Ubyte(v).encode(b))
    }

    pub(crate) fn ushort(&mut self, v: Option<u16>) {
        self.opt(v, |v, b| Value::Ushort(v).encode(b))
    }

    pub(crate) fn boolean(&mut self, v: Option<bool>) {
        self.opt(v, |v, b| Value::Bool(v).encode(b))
    }

    pub(crate) fn bool_default(&mut self, v: bool, default: bool) {
        self.boolean((v != default).then_some(v))
    }

    pub(crate) fn timestamp(&mut self, v: Option<i64>) {
        self.opt(v, |v, b| Value::Timestamp(v).encode(b))
    }

    pub(crate) fn binary(&mut self, v: Option<impl AsRef<[u8]>>) {
        self.opt(v, |v, b| {
            encode::variable(code::VBIN8, code::VBIN32, v.as_ref(), b)
        })
    }

    pub(crate) fn string(&mut self, v: Option<&Str>) {
        self.opt(v, |v, b| {
            encode::variable(code::STR8, code::STR32, v.as_bytes(), b)
        })
    }

    pub(crate) fn symbol(&mut self, v: Option<&Symbol>) {
        self.opt(v, |v, b| {
            encode::variable(code::SYM8, code::SYM32, v.as_bytes(), b)
        })
    }

    /// A multiple-valued symbol field: null when empty, otherwise an array.
    pub(crate) fn symbols(&mut self, v: &[Symbol]) {
        if v.is_empty() {
            self.null();
        } else {
            self.with(|b| {
                encode::compound(b, code::ARRAY8, code::ARRAY32, v.len(), |b| {
                    let wide = v.iter().any(|s| s.as_bytes().len() > 255);
                    b.extend_from_slice(&[if wide { code::SYM32 } else { code::SYM8 }]);
                    for s in v {
                        let d = s.as_bytes();
                        if wide {
                            b.extend_from_slice(&(d.len() as u32).to_be_bytes());
                        } else {
                            b.extend_from_slice(&[d.len() as u8]);
                        }
                        b.extend_from_slice(d);
                    }
                })
            });
        }
    }

    pub(crate) fn map(&mut self, v: Option<&Map>) {
        self.opt(v, |m, b| encode::map(m, b))
    }

    pub(crate) fn composite<T: Composite>(&mut self, v: Option<&T>) {
        self.opt(v, |v, b| v.encode(b))
    }

    /// Drops trailing nulls and patches the list header (list0/list8/list32).
    pub(crate) fn finish(self) {
        self.buf.truncate(self.committed);
        if self.committed_count == 0 {
            self.buf.truncate(self.start);
            self.buf.extend_from_slice(&[code::LIST0]);
        } else {
            encode::finish_compound(
                self.buf,
                self.start,
                self.body_start,
                code::LIST8,
                self.committed_count,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list holding `field` once, read back as `T` by the shortcut and by the general
    /// decoder (the shortcut skipped).
    fn both<T: FromValue + std::fmt::Debug + PartialEq>(field: &[u8]) -> [Result<Option<T>>; 2] {
        let mut list = vec![code::LIST8, (field.len() + 1) as u8, 1];
        list.extend_from_slice(field);
        let raw = Bytes::from(list);
        let read = |simple: bool| {
            let (_, mut r) = list_fields(Ctx::new(&raw), &raw, 0, "test")?;
            if simple {
                r.get::<T>("f")
            } else {
                r.value()?
                    .map(|v| T::from_value(v).ok_or(r.invalid("f")))
                    .transpose()
            }
        };
        [read(true), read(false)]
    }

    fn agree<T: FromValue + std::fmt::Debug + PartialEq>(field: &[u8]) {
        let [simple, general] = both::<T>(field);
        assert_eq!(
            format!("{simple:?}"),
            format!("{general:?}"),
            "{field:02x?}"
        );
    }

    #[test]
    fn shortcut_readers_agree_with_the_decoder() {
        for f in [
            &[0x40][..],
            &[0x43],
            &[0x52, 7],
            &[0x70, 0, 1, 0, 2],
            &[0x80, 0, 0, 0, 0, 0, 0, 0, 9],
            &[0x41],
        ] {
            agree::<u32>(f);
            agree::<u64>(f);
            agree::<bool>(f);
        }
        for f in [
            &[0x44][..],
            &[0x53, 200],
            &[0x42],
            &[0x41],
            &[0x56, 1],
            &[0x50, 3],
            &[0xa0, 2, 1, 2],
            &[0xa0, 0],
        ] {
            agree::<u32>(f);
            agree::<u64>(f);
            agree::<bool>(f);
            agree::<u8>(f);
            agree::<Bytes>(f);
        }
        // Truncated: the list's own size hides nothing here, the field is cut short.
        assert!(both::<u32>(&[0x70, 0, 1])[0].is_err());
        assert!(both::<Bytes>(&[0xa0, 5, 1])[0].is_err());
        assert_eq!(
            both::<Bytes>(&[0xa0, 2, 1, 2])[0]
                .as_ref()
                .unwrap()
                .as_deref(),
            Some(&[1u8, 2][..])
        );
    }
}
