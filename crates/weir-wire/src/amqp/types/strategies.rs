//! proptest strategies for AMQP values, shared with the broker's conversion
//! tests (feature `proptest`).

use proptest::prelude::*;

use super::Value;

/// Any scalar value, with sizes around the one-byte/four-byte encoding boundaries.
pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u8>().prop_map(Value::Ubyte),
        any::<u16>().prop_map(Value::Ushort),
        prop_oneof![Just(0u32), 0u32..300, any::<u32>()].prop_map(Value::Uint),
        prop_oneof![Just(0u64), 0u64..300, any::<u64>()].prop_map(Value::Ulong),
        any::<i8>().prop_map(Value::Byte),
        any::<i16>().prop_map(Value::Short),
        prop_oneof![-200i32..200, any::<i32>()].prop_map(Value::Int),
        prop_oneof![-200i64..200, any::<i64>()].prop_map(Value::Long),
        (prop::num::f32::NORMAL | prop::num::f32::ZERO | prop::num::f32::INFINITE)
            .prop_map(Value::Float),
        (prop::num::f64::NORMAL | prop::num::f64::ZERO).prop_map(Value::Double),
        any::<[u8; 4]>().prop_map(Value::Decimal32),
        any::<[u8; 8]>().prop_map(Value::Decimal64),
        any::<[u8; 16]>().prop_map(Value::Decimal128),
        any::<char>().prop_map(Value::Char),
        any::<i64>().prop_map(Value::Timestamp),
        any::<[u8; 16]>().prop_map(Value::Uuid),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(|v| Value::Binary(v.into())),
        prop_oneof![".{0,10}", "[a-z]{250,270}"].prop_map(|s: String| Value::string(&s)),
        "[a-z:.-]{0,20}".prop_map(|s: String| Value::symbol(&s)),
    ]
}
