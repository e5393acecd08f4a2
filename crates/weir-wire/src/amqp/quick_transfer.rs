//! The usual transfer, read without the generic field reader.
//!
//! A transfer comes with every message a producer sends. Nearly all of them are a
//! list8 of the first few fields (handle, delivery-id, delivery-tag,
//! message-format, settled, more) in their everyday encodings, and reading those
//! through `FieldReader` (a call, a type dispatch and a bounds check per field)
//! was two thirds of decoding the performative. [`decode`] reads that shape
//! directly (each field with the reader's own `read_simple`) and returns `None` for anything else, which the caller then decodes
//! in full: it can be faster, never different (the tests hold it to that).

use super::described::FromValue;
use super::performatives::Transfer;
use super::types::{code, Ctx};

/// The transfer at the front of `i` and the bytes it takes, when it has the
/// usual shape; `None` otherwise (including every malformed input).
#[inline]
pub(super) fn decode(cx: &Ctx<'_>, i: &[u8]) -> Option<(Transfer, usize)> {
    let [code::DESCRIBED, code::SMALLULONG, 0x14, code::LIST8, size, count, ..] = *i else {
        return None;
    };
    // The size counts the count byte and the fields, all after the size byte.
    let end = 5 + usize::from(size);
    let mut fields = i.get(6..end)?;
    if count == 0 || count > 6 {
        return None;
    }
    let r = &mut fields;
    let mut t = Transfer {
        // Required: a null handle is an error the full decoder names.
        handle: field(cx, r)??,
        ..Transfer::default()
    };
    if count >= 2 {
        t.delivery_id = field(cx, r)?;
    }
    if count >= 3 {
        t.delivery_tag = field(cx, r)?;
    }
    if count >= 4 {
        t.message_format = field(cx, r)?;
    }
    if count >= 5 {
        t.settled = field(cx, r)?;
    }
    if count >= 6 {
        t.more = field(cx, r)?.unwrap_or(false);
    }
    // Anything left over in the list is for the full decoder to judge.
    fields.is_empty().then_some((t, end))
}

/// A field in an encoding the field reader's own fast path reads
/// ([`FromValue::read_simple`]), or null: `Some(None)` for null, `None` for
/// anything else.
fn field<T: FromValue>(cx: &Ctx<'_>, i: &mut &[u8]) -> Option<Option<T>> {
    if let [code::NULL, rest @ ..] = *i {
        *i = rest;
        return Some(None);
    }
    let (used, value) = T::read_simple(cx, i)?;
    *i = &i[used..];
    Some(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::definitions::{DeliveryState, ReceiverSettleMode};
    use crate::amqp::described::Composite;
    use crate::amqp::performatives::{encode_delivery_start, Performative};
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;

    /// What the full decoder makes of `bytes`, with the bytes it took.
    fn full(bytes: &Bytes) -> Option<(Transfer, usize)> {
        let mut b = bytes.clone();
        match Performative::decode_in_full(&mut b) {
            Ok(Performative::Transfer(t)) => Some((t, bytes.len() - b.len())),
            _ => None,
        }
    }

    fn quick(bytes: &Bytes) -> Option<(Transfer, usize)> {
        decode(&Ctx::new(bytes), bytes)
    }

    fn small_uint() -> impl Strategy<Value = u32> {
        prop_oneof![Just(0u32), 1..256u32, any::<u32>()]
    }

    fn transfer() -> impl Strategy<Value = Transfer> {
        (
            small_uint(),
            prop::option::of(small_uint()),
            prop::option::of(prop_oneof![
                3 => prop::collection::vec(any::<u8>(), 0..=32),
                1 => prop::collection::vec(any::<u8>(), 33..300),
            ]),
            prop::option::of(small_uint()),
            prop::option::of(any::<bool>()),
            any::<bool>(),
            // Fields past `more`: the quick path leaves these to the full decoder.
            prop::option::of(Just(ReceiverSettleMode::Second)),
            prop::option::of(Just(DeliveryState::Accepted)),
            any::<bool>(),
        )
            .prop_map(
                |(
                    handle,
                    delivery_id,
                    tag,
                    message_format,
                    settled,
                    more,
                    rsm,
                    state,
                    batchable,
                )| {
                    Transfer {
                        handle,
                        delivery_id,
                        delivery_tag: tag.map(Bytes::from),
                        message_format,
                        settled,
                        more,
                        rcv_settle_mode: rsm,
                        state,
                        batchable,
                        ..Transfer::default()
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn the_quick_read_is_the_full_read(t in transfer(), payload in prop::collection::vec(any::<u8>(), 0..8)) {
            let mut buf = BytesMut::new();
            t.encode(&mut buf);
            buf.extend_from_slice(&payload);
            let bytes = buf.freeze();
            let usual = t.rcv_settle_mode.is_none() && t.state.is_none() && !t.batchable
                && t.delivery_tag.as_ref().is_none_or(|tag| tag.len() <= 32); // the spec's limit
            match quick(&bytes) {
                Some(q) => prop_assert_eq!(Some(q), full(&bytes)),
                // The usual shape must take the quick path, or it is not tested here.
                None => prop_assert!(!usual, "usual transfer not read quickly: {:?}", t),
            }
        }

        #[test]
        fn a_quick_read_of_any_bytes_agrees_with_the_full_read(
            tail in prop::collection::vec(prop_oneof![
                Just(code::NULL), Just(code::UINT0), Just(code::SMALLUINT), Just(code::UINT),
                Just(code::TRUE), Just(code::FALSE), Just(code::BOOLEAN), Just(code::VBIN8),
                any::<u8>(),
            ], 0..24),
        ) {
            // A transfer's descriptor and list8 marker, then anything.
            let mut buf = vec![code::DESCRIBED, code::SMALLULONG, 0x14, code::LIST8];
            buf.extend_from_slice(&tail);
            let bytes = Bytes::from(buf);
            if let Some(q) = quick(&bytes) {
                prop_assert_eq!(Some(q), full(&bytes));
            }
        }

        #[test]
        fn the_broker_s_own_delivery_start_is_read_quickly(handle in any::<u32>(), id in any::<u32>(), settled in any::<bool>()) {
            let mut buf = BytesMut::new();
            encode_delivery_start(&mut buf, handle, id, settled);
            let bytes = buf.freeze();
            prop_assert!(quick(&bytes).is_some());
            prop_assert_eq!(quick(&bytes), full(&bytes));
        }
    }
}
