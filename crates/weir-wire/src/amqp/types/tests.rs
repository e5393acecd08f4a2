use bytes::Bytes;
use proptest::prelude::*;

use super::strategies::leaf;

use super::*;
use crate::amqp::error::condition;

fn enc(v: &Value) -> Vec<u8> {
    v.to_bytes().to_vec()
}

fn dec(b: &[u8]) -> Result<Value> {
    Value::decode_exact(&Bytes::copy_from_slice(b))
}

#[test]
fn text_accepts_utf8_only() {
    assert_eq!(text(b"perf-run").ok(), Some("perf-run"));
    assert_eq!(text("gr\u{fc}n".as_bytes()).ok(), Some("gr\u{fc}n"));
    let long = "x".repeat(200);
    assert_eq!(text(long.as_bytes()).ok(), Some(long.as_str()));
    for bad in [&b"\xff"[..], b"ok\xc3", b"\xed\xa0\x80"] {
        assert!(
            matches!(text(bad), Err(AmqpCodecError::InvalidUtf8)),
            "{bad:?}"
        );
    }
    let long_bad = [b"x".repeat(100), vec![0xc3]].concat();
    assert!(text(&long_bad).is_err());
}

proptest! {
    #[test]
    fn text_agrees_with_the_standard_validator(b in prop::collection::vec(any::<u8>(), 0..100)) {
        prop_assert_eq!(text(&b).ok(), std::str::from_utf8(&b).ok());
    }
}

#[test]
fn compact_encodings() {
    assert_eq!(enc(&Value::Null), [0x40]);
    assert_eq!(enc(&Value::Bool(true)), [0x41]);
    assert_eq!(enc(&Value::Bool(false)), [0x42]);
    assert_eq!(enc(&Value::Uint(0)), [0x43]);
    assert_eq!(enc(&Value::Uint(255)), [0x52, 0xff]);
    assert_eq!(enc(&Value::Uint(256)), [0x70, 0, 0, 1, 0]);
    assert_eq!(enc(&Value::Ulong(0)), [0x44]);
    assert_eq!(enc(&Value::Ulong(0x10)), [0x53, 0x10]);
    assert_eq!(enc(&Value::Ulong(256)), [0x80, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(enc(&Value::Int(-1)), [0x54, 0xff]);
    assert_eq!(enc(&Value::Int(128)), [0x71, 0, 0, 0, 0x80]);
    assert_eq!(enc(&Value::Long(-128)), [0x55, 0x80]);
    assert_eq!(enc(&Value::List(vec![])), [0x45]);
    assert_eq!(
        enc(&Value::List(vec![Value::Uint(1)])),
        [0xc0, 0x03, 0x01, 0x52, 0x01]
    );
    assert_eq!(enc(&Value::Map(vec![])), [0xc1, 0x01, 0x00]);
    assert_eq!(enc(&Value::symbol("a")), [0xa3, 0x01, b'a']);
    assert_eq!(enc(&Value::string("hi")), [0xa1, 0x02, b'h', b'i']);
    assert_eq!(
        enc(&Value::Binary(Bytes::from_static(&[1, 2]))),
        [0xa0, 0x02, 1, 2]
    );
    let long = "x".repeat(300);
    let e = enc(&Value::string(&long));
    assert_eq!(&e[..5], &[0xb1, 0, 0, 0x01, 0x2c]);
    assert_eq!(
        enc(&Value::Array(Array::symbols([
            Symbol::from("a"),
            Symbol::from("bc")
        ]))),
        [0xe0, 0x07, 0x02, 0xa3, 0x01, b'a', 0x02, b'b', b'c']
    );
    assert_eq!(
        enc(&Value::described(
            Descriptor::Code(0x24),
            Value::List(vec![])
        )),
        [0x00, 0x53, 0x24, 0x45]
    );
}

#[test]
fn decodes_non_compact_forms() {
    assert_eq!(dec(&[0x70, 0, 0, 0, 5]).unwrap(), Value::Uint(5));
    assert_eq!(dec(&[0x56, 0x01]).unwrap(), Value::Bool(true));
    assert_eq!(dec(&[0x56, 0x00]).unwrap(), Value::Bool(false));
    assert!(matches!(
        dec(&[0x56, 0x02]),
        Err(AmqpCodecError::InvalidValue(_))
    ));
    assert_eq!(
        dec(&[0xd0, 0, 0, 0, 4, 0, 0, 0, 0]).unwrap(),
        Value::List(vec![])
    );
    assert_eq!(
        dec(&[0xd1, 0, 0, 0, 8, 0, 0, 0, 2, 0xa3, 0x01, b'k', 0x43]).unwrap(),
        Value::Map(vec![(Value::symbol("k"), Value::Uint(0))])
    );
    assert_eq!(dec(&[0x54, 0xfe]).unwrap(), Value::Int(-2));
    assert_eq!(
        dec(&[0x00, 0xa3, 0x0e])
            .map(|_| ())
            .unwrap_err()
            .condition(),
        condition::DECODE_ERROR
    );
    // uint array with smalluint element constructor
    assert_eq!(
        dec(&[0xe0, 0x04, 0x02, 0x52, 7, 8]).unwrap(),
        Value::Array(
            Array::new(None, TypeCode::Uint, vec![Value::Uint(7), Value::Uint(8)]).unwrap()
        )
    );
}

#[test]
fn described_with_symbolic_descriptor() {
    let mut b = vec![0x00, 0xa3, 14];
    b.extend_from_slice(b"amqp:open:list");
    b.push(0x45);
    let v = dec(&b).unwrap();
    let Value::Described(d) = v else {
        panic!("not described")
    };
    assert_eq!(d.descriptor.code(), Some(0x10));
}

#[test]
fn accessors() {
    let m: Map = vec![
        (Value::symbol("x-opt-delivery-delay"), Value::Long(5000)),
        (Value::string("color"), Value::string("red")),
    ];
    assert_eq!(
        map_get(&m, "x-opt-delivery-delay").and_then(Value::as_i64),
        Some(5000)
    );
    assert_eq!(map_get(&m, "color").and_then(Value::as_str), Some("red"));
    assert!(map_get(&m, "nope").is_none());
    assert_eq!(Value::Ulong(u64::MAX).as_i64(), None);
    assert_eq!(Value::Int(-3).as_i64(), Some(-3));
}

#[test]
fn strings_share_the_input_buffer() {
    let input = Bytes::from_static(&[0xa1, 0x03, b'a', b'b', b'c']);
    let v = Value::decode_exact(&input).unwrap();
    let Value::String(s) = v else { panic!() };
    assert_eq!(s.as_str(), "abc");
    assert_eq!(s.as_bytes().as_ptr(), input[2..].as_ptr());
}

#[test]
fn errors() {
    assert!(matches!(dec(&[0x70, 0, 0]), Err(AmqpCodecError::Truncated)));
    assert!(matches!(
        dec(&[0xa1, 0x02, 0xff, 0xfe]),
        Err(AmqpCodecError::InvalidUtf8)
    ));
    assert!(matches!(
        dec(&[0x13]),
        Err(AmqpCodecError::UnknownConstructor(0x13))
    ));
    assert!(matches!(
        dec(&[0x73, 0, 0x11, 0, 0]),
        Err(AmqpCodecError::InvalidValue("char"))
    ));
    assert!(matches!(
        dec(&[0x40, 0x40]),
        Err(AmqpCodecError::TrailingBytes(1))
    ));
    // A list32 claiming 4 billion elements in 8 bytes: refused before allocating.
    assert!(matches!(
        dec(&[0xd0, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0x40, 0x40, 0x40, 0x40]),
        Err(AmqpCodecError::CountTooLarge { .. })
    ));
    // Map with an odd number of elements.
    assert!(dec(&[0xc1, 0x02, 0x01, 0x40]).is_err());
    // Size shorter than the count field.
    assert!(dec(&[0xd0, 0, 0, 0, 0]).is_err());
    // Descriptor that is neither ulong nor symbol.
    assert!(matches!(
        dec(&[0x00, 0x41, 0x40]),
        Err(AmqpCodecError::InvalidDescriptor)
    ));
}

#[test]
fn nesting_depth_is_limited() {
    let mut b = Vec::new();
    for _ in 0..200 {
        b.extend_from_slice(&[0x00, 0x53, 0x01]);
    }
    b.push(0x40);
    assert!(matches!(dec(&b), Err(AmqpCodecError::DepthExceeded(_))));

    // Nested lists within the limit decode.
    let mut v = Value::Null;
    for _ in 0..MAX_DEPTH - 1 {
        v = Value::List(vec![v]);
    }
    assert_eq!(dec(&enc(&v)).unwrap(), v);
    let too_deep = Value::List(vec![Value::List(vec![v])]);
    assert!(matches!(
        dec(&enc(&too_deep)),
        Err(AmqpCodecError::DepthExceeded(_))
    ));
}

fn descriptor() -> impl Strategy<Value = Descriptor> {
    prop_oneof![
        any::<u64>().prop_map(Descriptor::Code),
        "[a-z:]{1,20}".prop_map(|s: String| Descriptor::Name(Symbol::from(s.as_str()))),
    ]
}

fn array() -> impl Strategy<Value = Array> {
    let syms = prop::collection::vec("[a-z]{0,8}", 0..5)
        .prop_map(|v| Array::symbols(v.iter().map(|s| Symbol::from(s.as_str()))));
    let uints = (
        prop::option::of(descriptor()),
        prop::collection::vec(any::<u32>(), 0..5),
    )
        .prop_map(|(d, v)| {
            Array::new(d, TypeCode::Uint, v.into_iter().map(Value::Uint).collect())
                .unwrap_or_else(|_| Array::symbols([]))
        });
    let bools = prop::collection::vec(any::<bool>(), 1..5).prop_map(|v| {
        Array::new(
            None,
            TypeCode::Boolean,
            v.into_iter().map(Value::Bool).collect(),
        )
        .unwrap_or_else(|_| Array::symbols([]))
    });
    let lists = prop::collection::vec(prop::collection::vec(leaf(), 0..3), 0..3).prop_map(|v| {
        Array::new(
            None,
            TypeCode::List,
            v.into_iter().map(Value::List).collect(),
        )
        .unwrap_or_else(|_| Array::symbols([]))
    });
    prop_oneof![syms, uints, bools, lists]
}

pub(crate) fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::List),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            array().prop_map(Value::Array),
            (descriptor(), inner).prop_map(|(d, v)| Value::described(d, v)),
        ]
    })
}

proptest! {
    #[test]
    fn round_trip(v in value()) {
        let bytes = v.to_bytes();
        let back = Value::decode_exact(&bytes).unwrap();
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(back.to_bytes(), bytes);
    }

    #[test]
    fn encoded_len_is_what_the_decoder_consumes(v in value(), cut in any::<prop::sample::Index>()) {
        let bytes = v.to_bytes();
        prop_assert_eq!(super::decode::encoded_len(&bytes), Some(bytes.len()));
        // Followed by more bytes: still only this value.
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&[0x40, 0x41]);
        prop_assert_eq!(super::decode::encoded_len(&longer), Some(bytes.len()));
        // Cut short: never a length beyond what is there.
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert_eq!(super::decode::encoded_len(short), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut buf = Bytes::from(b);
        let _ = Value::decode(&mut buf);
    }

    #[test]
    fn mutated_encodings_never_panic(v in value(), idx in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut b = v.to_bytes().to_vec();
        let i = idx.index(b.len());
        b[i] = byte;
        let _ = Value::decode_exact(&Bytes::from(b));
    }
}

#[test]
fn an_array_of_nulls_is_bounded_by_its_bytes_whatever_its_descriptor() {
    // Found by fuzz/amqp_decode: four described nulls, descriptor 0 as a smallulong.
    assert!(dec(&[0xe0, 0x05, 0x04, 0x00, 0x53, 0x00, 0x40]).is_err());
    assert!(dec(&[0xe0, 0x04, 0x04, 0x00, 0x44, 0x40]).is_err());
    // No bytes follow null elements: only an empty array of nulls decodes, and re-encodes.
    assert!(dec(&[0xe0, 0x04, 0x01, 0x00, 0x44, 0x40]).is_err());
    let empty = dec(&[0xe0, 0x02, 0x00, 0x40]).unwrap();
    assert!(dec(&empty.to_bytes()).is_ok(), "{empty:?}");
}
