//! `composite!`: a composite type's [`Composite`] impl from its field list.
//!
//! A composite is a described list whose fields are read and written in order,
//! so the field list says it all: each field's name on the wire and how it is
//! carried. The kinds expand to the same [`FieldReader`] and [`ListWriter`]
//! calls a hand-written impl makes, so the bytes and the speed are the same:
//!
//! - `req`: mandatory; a null is a missing-field error.
//! - `opt`: an `Option`, null when `None`.
//! - `default(value)`: null (or absent) means `value`, and `value` is written as null.
//! - `symbols`: a multiple-valued symbol field (`Vec<Symbol>`), null when empty.
//! - `composite`: an optional nested composite.
//! - `timestamp`: an optional timestamp (`Option<i64>`).
//! - `with(read, write)`: anything irregular: `read(&mut FieldReader)` gives the
//!   field, `write(&field, &mut ListWriter)` writes it.
//!
//! Extra items for the impl (e.g. an `encode` laid out by hand) follow in an
//! `extra { .. }` block.
//!
//! [`Composite`]: super::described::Composite
//! [`FieldReader`]: super::described::FieldReader
//! [`ListWriter`]: super::described::ListWriter

use bytes::Bytes;

use super::described::ListWriter;
use super::types::{Map, Str, Symbol};

/// How a field's Rust type is written into a composite's list.
pub(crate) trait ToField {
    fn put(v: Option<&Self>, w: &mut ListWriter<'_>);

    /// An optional field, as `with(.., ToField::put_opt)` takes it.
    fn put_opt(v: &Option<Self>, w: &mut ListWriter<'_>)
    where
        Self: Sized,
    {
        Self::put(v.as_ref(), w)
    }
}

macro_rules! to_field {
    ($($t:ty => |$v:ident, $w:ident| $put:expr;)*) => {$(
        impl ToField for $t {
            #[inline]
            fn put($v: Option<&Self>, $w: &mut ListWriter<'_>) {
                $put
            }
        }
    )*};
}

to_field! {
    bool => |v, w| w.boolean(v.copied());
    u8 => |v, w| w.ubyte(v.copied());
    u16 => |v, w| w.ushort(v.copied());
    u32 => |v, w| w.uint(v.copied());
    u64 => |v, w| w.ulong(v.copied());
    Bytes => |v, w| w.binary(v);
    Str => |v, w| w.string(v);
    Symbol => |v, w| w.symbol(v);
    Map => |v, w| w.map(v);
}

macro_rules! composite {
    (
        $ty:ident = $code:expr, $name:literal {
            $($field:ident $(= $fname:literal)?: $kind:ident $(($($arg:expr),+))?),+ $(,)?
        }
        $(extra { $($extra:item)* })?
    ) => {
        impl $crate::amqp::described::Composite for $ty {
            const CODE: u64 = $code;
            const NAME: &'static str = $name;

            fn decode_fields(
                r: &mut $crate::amqp::described::FieldReader<'_>,
            ) -> $crate::amqp::error::Result<Self> {
                Ok($ty {
                    $($field: $crate::amqp::composite::composite!(
                        @read r; $kind $(($($arg),+))?; $($fname)?
                    ),)+
                })
            }

            fn encode_fields(&self, w: &mut $crate::amqp::described::ListWriter<'_>) {
                $($crate::amqp::composite::composite!(
                    @write w; self.$field; $kind $(($($arg),+))?
                );)+
            }

            $($($extra)*)?
        }
    };

    (@read $r:ident; req; $f:literal) => { $r.req($f)? };
    (@read $r:ident; opt; $f:literal) => { $r.get($f)? };
    (@read $r:ident; default($d:expr); $f:literal) => { $r.get_or($f, $d)? };
    (@read $r:ident; symbols; $f:literal) => { $r.symbols($f)? };
    (@read $r:ident; composite; $f:literal) => { $r.composite($f)? };
    (@read $r:ident; timestamp; $f:literal) => { $r.timestamp($f)? };
    (@read $r:ident; with($read:expr, $write:expr); ) => { ($read)($r)? };

    (@write $w:ident; $v:expr; req) => {
        $crate::amqp::composite::ToField::put(Some(&$v), $w)
    };
    (@write $w:ident; $v:expr; opt) => {
        $crate::amqp::composite::ToField::put($v.as_ref(), $w)
    };
    (@write $w:ident; $v:expr; default($d:expr)) => {
        $crate::amqp::composite::ToField::put(($v != $d).then_some(&$v), $w)
    };
    (@write $w:ident; $v:expr; symbols) => { $w.symbols(&$v) };
    (@write $w:ident; $v:expr; composite) => { $w.composite($v.as_ref()) };
    (@write $w:ident; $v:expr; timestamp) => { $w.timestamp($v) };
    (@write $w:ident; $v:expr; with($read:expr, $write:expr)) => { ($write)(&$v, $w) };
}

pub(crate) use composite;

#[cfg(test)]
mod tests;
