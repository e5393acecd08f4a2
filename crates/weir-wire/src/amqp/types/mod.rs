//! The AMQP 1.0 type system: a value model whose strings and binaries are `Bytes` slices of
//! the frame they came from, a nom decoder and a compact encoder.

pub(crate) mod decode;
pub mod encode;

use std::fmt;

use bytes::{Bytes, BytesMut};

use super::error::{AmqpCodecError, Result};

pub(crate) use decode::{descriptor_code_for_name, Ctx};

/// How deep lists, maps, arrays and described values may nest before the decoder refuses:
/// a hostile peer must not be able to blow the stack with a few kilobytes of list headers.
pub const MAX_DEPTH: usize = 32;

/// Constructor codes from the type system section of the specification.
pub mod code {
    pub const DESCRIBED: u8 = 0x00;
    pub const NULL: u8 = 0x40;
    pub const BOOLEAN: u8 = 0x56;
    pub const TRUE: u8 = 0x41;
    pub const FALSE: u8 = 0x42;
    pub const UBYTE: u8 = 0x50;
    pub const USHORT: u8 = 0x60;
    pub const UINT: u8 = 0x70;
    pub const SMALLUINT: u8 = 0x52;
    pub const UINT0: u8 = 0x43;
    pub const ULONG: u8 = 0x80;
    pub const SMALLULONG: u8 = 0x53;
    pub const ULONG0: u8 = 0x44;
    pub const BYTE: u8 = 0x51;
    pub const SHORT: u8 = 0x61;
    pub const INT: u8 = 0x71;
    pub const SMALLINT: u8 = 0x54;
    pub const LONG: u8 = 0x81;
    pub const SMALLLONG: u8 = 0x55;
    pub const FLOAT: u8 = 0x72;
    pub const DOUBLE: u8 = 0x82;
    pub const DECIMAL32: u8 = 0x74;
    pub const DECIMAL64: u8 = 0x84;
    pub const DECIMAL128: u8 = 0x94;
    pub const CHAR: u8 = 0x73;
    pub const TIMESTAMP: u8 = 0x83;
    pub const UUID: u8 = 0x98;
    pub const VBIN8: u8 = 0xa0;
    pub const VBIN32: u8 = 0xb0;
    pub const STR8: u8 = 0xa1;
    pub const STR32: u8 = 0xb1;
    pub const SYM8: u8 = 0xa3;
    pub const SYM32: u8 = 0xb3;
    pub const LIST0: u8 = 0x45;
    pub const LIST8: u8 = 0xc0;
    pub const LIST32: u8 = 0xd0;
    pub const MAP8: u8 = 0xc1;
    pub const MAP32: u8 = 0xd1;
    pub const ARRAY8: u8 = 0xe0;
    pub const ARRAY32: u8 = 0xf0;
}

/// Checks text from the wire. Nearly all of it is short ASCII (property names,
/// addresses, ids): an inline scan for those, the general validator for the
/// rest. Calling the validator for each of a message's property names was 2%
/// of the broker's CPU under AMQP load.
pub fn text(bytes: &[u8]) -> Result<&str> {
    if bytes.len() <= 64 && bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).map_err(|_| AmqpCodecError::InvalidUtf8)
}

/// A UTF-8 string held as a slice of the received buffer (validated once, at decode).
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Str(Bytes);

impl Str {
    pub fn from_bytes(b: Bytes) -> Result<Self> {
        text(&b)?;
        Ok(Str(b))
    }
    pub fn from_static(s: &'static str) -> Self {
        Str(Bytes::from_static(s.as_bytes()))
    }
    pub fn as_str(&self) -> &str {
        // Checking again on every read showed as 4% of the broker's CPU under AMQP
        // load (property names are read per message).
        // SAFETY: every constructor either validates the bytes (`from_bytes`) or
        // starts from a `&str`/`String`; the field is private to this module and
        // `Bytes` is immutable, so the bytes are UTF-8 for the value's lifetime.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Self {
        Str(Bytes::copy_from_slice(s.as_bytes()))
    }
}
impl From<String> for Str {
    fn from(s: String) -> Self {
        Str(Bytes::from(s))
    }
}
impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}
impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A symbolic value (ASCII by the spec; we accept any UTF-8 to be lenient).
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Symbol(Str);

impl Symbol {
    pub fn from_bytes(b: Bytes) -> Result<Self> {
        Ok(Symbol(Str::from_bytes(b)?))
    }
    pub const fn from_str_value(s: Str) -> Self {
        Symbol(s)
    }
    pub fn from_static(s: &'static str) -> Self {
        Symbol(Str::from_static(s))
    }
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
    pub fn as_bytes(&self) -> &Bytes {
        self.0.as_bytes()
    }
}
impl From<&str> for Symbol {
    fn from(s: &str) -> Self {
        Symbol(Str::from(s))
    }
}
impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ":{}", self.as_str())
    }
}
impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A descriptor: the spec allows any value, every defined type uses a ulong code or a symbol.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Descriptor {
    Code(u64),
    Name(Symbol),
}

impl Descriptor {
    /// The numeric code, translating the symbolic names of the types this codec knows.
    pub fn code(&self) -> Option<u64> {
        match self {
            Descriptor::Code(c) => Some(*c),
            Descriptor::Name(n) => descriptor_code_for_name(n.as_str()),
        }
    }
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Descriptor::Code(c) => write!(f, "0x{:08x}:0x{:08x}", c >> 32, c & 0xffff_ffff),
            Descriptor::Name(n) => f.write_str(n.as_str()),
        }
    }
}

/// A described value: a descriptor naming a (usually composite) type and its underlying value.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub descriptor: Descriptor,
    pub value: Value,
}

/// A map in wire order (AMQP maps are ordered and the broker forwards them unchanged).
pub type Map = Vec<(Value, Value)>;

/// The value under a string or symbol key (annotation maps use symbols, application
/// properties strings); linear, as these maps are small.
pub fn map_get<'m>(map: &'m Map, key: &str) -> Option<&'m Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// The primitive type of array elements (the array shares one constructor for all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeCode {
    Null,
    Boolean,
    Ubyte,
    Ushort,
    Uint,
    Ulong,
    Byte,
    Short,
    Int,
    Long,
    Float,
    Double,
    Decimal32,
    Decimal64,
    Decimal128,
    Char,
    Timestamp,
    Uuid,
    Binary,
    String,
    Symbol,
    List,
    Map,
    Array,
}

/// An AMQP array: elements of one primitive type, optionally all carrying the same descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    descriptor: Option<Descriptor>,
    elem: TypeCode,
    items: Vec<Value>,
}

impl Array {
    /// Builds an array, checking that every item is of `elem` type (and not itself described).
    pub fn new(descriptor: Option<Descriptor>, elem: TypeCode, items: Vec<Value>) -> Result<Self> {
        if items.iter().any(|v| v.type_code() != Some(elem)) {
            return Err(AmqpCodecError::ArrayTypeMismatch);
        }
        Ok(Array {
            descriptor,
            elem,
            items,
        })
    }
    pub fn symbols<I: IntoIterator<Item = Symbol>>(syms: I) -> Self {
        Array {
            descriptor: None,
            elem: TypeCode::Symbol,
            items: syms.into_iter().map(Value::Symbol).collect(),
        }
    }
    pub fn descriptor(&self) -> Option<&Descriptor> {
        self.descriptor.as_ref()
    }
    pub fn elem_type(&self) -> TypeCode {
        self.elem
    }
    pub fn items(&self) -> &[Value] {
        &self.items
    }
    pub fn into_items(self) -> Vec<Value> {
        self.items
    }
}

/// One AMQP value. Variable-width data is a `Bytes` slice of the input, never a copy.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    /// IEEE 754 decimal encodings kept as raw big-endian bytes.
    Decimal32([u8; 4]),
    Decimal64([u8; 8]),
    Decimal128([u8; 16]),
    Char(char),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(Bytes),
    String(Str),
    Symbol(Symbol),
    List(Vec<Value>),
    Map(Map),
    Array(Array),
    Described(Box<Described>),
}

impl Value {
    /// The primitive type, `None` for a described value.
    pub fn type_code(&self) -> Option<TypeCode> {
        Some(match self {
            Value::Null => TypeCode::Null,
            Value::Bool(_) => TypeCode::Boolean,
            Value::Ubyte(_) => TypeCode::Ubyte,
            Value::Ushort(_) => TypeCode::Ushort,
            Value::Uint(_) => TypeCode::Uint,
            Value::Ulong(_) => TypeCode::Ulong,
            Value::Byte(_) => TypeCode::Byte,
            Value::Short(_) => TypeCode::Short,
            Value::Int(_) => TypeCode::Int,
            Value::Long(_) => TypeCode::Long,
            Value::Float(_) => TypeCode::Float,
            Value::Double(_) => TypeCode::Double,
            Value::Decimal32(_) => TypeCode::Decimal32,
            Value::Decimal64(_) => TypeCode::Decimal64,
            Value::Decimal128(_) => TypeCode::Decimal128,
            Value::Char(_) => TypeCode::Char,
            Value::Timestamp(_) => TypeCode::Timestamp,
            Value::Uuid(_) => TypeCode::Uuid,
            Value::Binary(_) => TypeCode::Binary,
            Value::String(_) => TypeCode::String,
            Value::Symbol(_) => TypeCode::Symbol,
            Value::List(_) => TypeCode::List,
            Value::Map(_) => TypeCode::Map,
            Value::Array(_) => TypeCode::Array,
            Value::Described(_) => return None,
        })
    }

    pub fn described(descriptor: Descriptor, value: Value) -> Self {
        Value::Described(Box::new(Described { descriptor, value }))
    }

    /// Text of a string or symbol.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s.as_str()),
            Value::Symbol(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// Any integer type widened to i64 (ulong above i64::MAX gives `None`). Handy for
    /// annotations such as `x-opt-delivery-delay`, which clients send as long or int.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Ubyte(v) => Some(v.into()),
            Value::Ushort(v) => Some(v.into()),
            Value::Uint(v) => Some(v.into()),
            Value::Ulong(v) => i64::try_from(v).ok(),
            Value::Byte(v) => Some(v.into()),
            Value::Short(v) => Some(v.into()),
            Value::Int(v) => Some(v.into()),
            Value::Long(v) | Value::Timestamp(v) => Some(v),
            _ => None,
        }
    }

    pub fn string(s: &str) -> Self {
        Value::String(Str::from(s))
    }

    pub fn symbol(s: &str) -> Self {
        Value::Symbol(Symbol::from(s))
    }

    /// Decodes one value from the front of `buf`, advancing it. Strings, symbols and
    /// binaries in the result share `buf`'s memory.
    pub fn decode(buf: &mut Bytes) -> Result<Value> {
        let base = buf.clone();
        let cx = Ctx::new(&base);
        let (rest, v) = decode::finish(decode::value(&cx, &base, 0))?;
        let used = base.len() - rest.len();
        let _ = buf.split_to(used);
        Ok(v)
    }

    /// Decodes exactly one value that must fill `buf`.
    pub fn decode_exact(buf: &Bytes) -> Result<Value> {
        let mut b = buf.clone();
        let v = Value::decode(&mut b)?;
        if !b.is_empty() {
            return Err(AmqpCodecError::TrailingBytes(b.len()));
        }
        Ok(v)
    }

    /// Appends the most compact encoding of this value.
    pub fn encode(&self, buf: &mut BytesMut) {
        encode::value(self, buf)
    }

    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }
}

#[cfg(any(test, feature = "proptest"))]
pub mod strategies;
#[cfg(test)]
mod tests;
