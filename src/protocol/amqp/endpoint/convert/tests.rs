use super::*;
use crate::core::delay_headers::DelayHeader;
use crate::protocol::amqp::wire::types::strategies::leaf;
use proptest::prelude::*;

fn delay_names() -> DelayHeaderNames {
    DelayHeaderNames::new(&DelayHeader::defaults())
}

#[test]
fn every_property_the_broker_acts_on_passes_the_first_byte_filter() {
    let names = ScheduleProperties::NAMES
        .iter()
        .chain(&GROUP_ID_PROPERTIES)
        .chain(&["JMSXGroupSeq"]);
    for name in names {
        assert!(has_meaning(name), "{name}");
    }
    assert!(!has_meaning("perf-seq"));
    assert!(!has_meaning("delayed")); // the right first byte is not enough
    for name in ["x-delay", "delay"] {
        assert!(!has_meaning(name), "{name}: the core's to read");
        assert!(delay_names().may_start(name.as_bytes()[0]), "{name}");
    }
}

/// NaN is not equal to itself; compare what the core would compare.
fn same(a: &Option<Value>, b: &Option<Value>) -> bool {
    match (a, b) {
        (Some(Value::Double(x)), Some(Value::Double(y))) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

proptest! {
    #[test]
    fn scalars_read_in_place_are_what_the_decoder_makes_of_them(v in leaf()) {
        let encoded = v.to_bytes();
        let decoded = AmqpValue::decode_exact(&encoded).unwrap();
        if let Some(fast) = scalar_core_value(&encoded) {
            prop_assert!(same(&Some(fast.clone()), &core_value(&decoded)), "{:?} vs {:?}", fast, decoded);
        }
    }

    #[test]
    fn malformed_scalars_are_left_to_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..12)) {
        if let Some(fast) = scalar_core_value(&bytes) {
            let decoded = AmqpValue::decode_exact(&bytes::Bytes::from(bytes.clone()));
            prop_assert!(decoded.is_ok(), "{:?} read as {:?}", bytes, fast);
            prop_assert!(same(&Some(fast), &core_value(&decoded.unwrap())));
        }
    }
}

/// The properties `inbound` keeps, as the full decoder reads them.
fn decoded_in_full(view: &MessageView) -> Vec<Property> {
    view.application_property_entries()
        .map(|e| e.unwrap())
        .filter_map(|(key, v)| {
            let name = key.filter(|name| kept_as_property(name))?;
            Some((Arc::from(name), core_value(&v)?))
        })
        .collect()
}

fn property_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        Just("JMSXGroupID".to_string()),
        Just("JMSXGroupSeq".to_string()),
        Just("_AMQ_GROUP_ID".to_string()),
        Just("x-delay".to_string()),
    ]
}

proptest! {
    #[test]
    fn properties_left_encoded_read_as_the_decoder_reads_them(
        entries in prop::collection::vec((property_name(), leaf()), 0..8),
    ) {
        let amqp = AmqpMessage {
            application_properties: Some(
                entries.into_iter().map(|(k, v)| (AmqpValue::string(&k), v)).collect(),
            ),
            body: Body::Value(AmqpValue::Null),
            ..AmqpMessage::default()
        };
        let view = MessageView::parse(amqp.to_bytes()).unwrap();
        // A delay or group it cannot use is refused as a whole; nothing to compare.
        let Ok(m) = inbound(&view, Arc::from("q"), 1000, || 1000, &delay_names()) else { return Ok(()) };
        let expected = decoded_in_full(&view);
        let got = m.properties.list();
        prop_assert_eq!(got.len(), expected.len());
        for ((gk, gv), (ek, ev)) in got.iter().zip(&expected) {
            prop_assert_eq!(gk, ek);
            prop_assert!(same(&Some(gv.clone()), &Some(ev.clone())), "{:?} vs {:?}", gv, ev);
        }
    }
}

/// A message whose application properties are `entries`, parsed.
fn view_with(entries: Vec<(AmqpValue, AmqpValue)>) -> MessageView {
    let amqp = AmqpMessage {
        application_properties: Some(entries.into_iter().collect()),
        body: Body::Value(AmqpValue::Null),
        ..AmqpMessage::default()
    };
    MessageView::parse(amqp.to_bytes()).unwrap()
}

/// What the long way makes of a map: kept count, or an error; and whether
/// it found anything the broker acts on.
fn walked(view: &MessageView) -> (Option<usize>, bool) {
    let mut m = Message::new(Arc::from("q"), Bytes::new(), 0);
    let mut schedule = ScheduleProperties::default();
    let kept = walk_entries(view, &mut m, &mut schedule, &delay_names()).ok();
    let acted = m.group_id.is_some()
        || m.group_seq.is_some()
        || m.may_carry_delay
        || schedule.0.iter().any(Option::is_some);
    (kept, acted)
}

#[test]
fn a_map_of_plain_entries_is_counted_in_one_pass() {
    let view = view_with(vec![
        (AmqpValue::string("perf-run"), AmqpValue::Ulong(7)),
        (AmqpValue::string("perf-p"), AmqpValue::Uint(1)),
        (AmqpValue::string("color"), AmqpValue::string("red")),
        (AmqpValue::symbol("on"), AmqpValue::Bool(true)),
    ]);
    assert_eq!(
        plain_entries(view.application_properties_encoded(), &delay_names()),
        Some(4)
    );
    let grouped = view_with(vec![
        (AmqpValue::string("perf-run"), AmqpValue::Ulong(7)),
        (AmqpValue::string("JMSXGroupID"), AmqpValue::string("g")),
    ]);
    assert_eq!(
        plain_entries(grouped.application_properties_encoded(), &delay_names()),
        None
    );
    assert_eq!(
        plain_entries(&[], &delay_names()),
        None,
        "no map: the long way"
    );
    // {"k": boolean 0x56 with a byte that is neither 0 nor 1}: refused, the long way.
    let odd_boolean = [code::MAP8, 6, 2, code::STR8, 1, b'k', code::BOOLEAN, 2];
    assert_eq!(plain_entries(&odd_boolean, &delay_names()), None);
    let mut payload = vec![0x00, 0x53, 0x74];
    payload.extend_from_slice(&odd_boolean);
    let view = MessageView::parse(Bytes::from(payload)).unwrap();
    assert_eq!(walked(&view), (None, false));
}

proptest! {
    #[test]
    fn a_plain_count_is_what_the_long_way_counts(
        entries in prop::collection::vec((property_name(), leaf()), 0..8),
        symbol_keys in any::<bool>(),
        flip in prop::option::of((any::<prop::sample::Index>(), any::<u8>())),
    ) {
        let key = |k: &str| if symbol_keys { AmqpValue::symbol(k) } else { AmqpValue::string(k) };
        let view = view_with(entries.iter().map(|(k, v)| (key(k), v.clone())).collect());
        // And the same map with one byte changed, when that still parses.
        let view = match flip {
            None => view,
            Some((at, byte)) => {
                let range = view.ranges().bare.clone();
                let mut raw = view.raw().to_vec();
                let at = range.start + at.index(range.len().max(1));
                if at < raw.len() {
                    raw[at] = byte;
                }
                match MessageView::parse(Bytes::from(raw)) {
                    Ok(v) => v,
                    Err(_) => return Ok(()),
                }
            }
        };
        if let Some(kept) = plain_entries(view.application_properties_encoded(), &delay_names()) {
            prop_assert_eq!(walked(&view), (Some(kept), false));
        }
    }
}

#[test]
fn properties_stay_encoded_until_read() {
    let view = MessageView::parse(jms_like().to_bytes()).unwrap();
    let m = inbound(&view, Arc::from("q"), 1000, || 1000, &delay_names()).unwrap();
    assert!(m.properties.is_encoded());
    assert_eq!(m.properties.count(), 2);
    let detached = m.detached();
    assert_eq!(detached.property("n"), Some(&Value::Int(3)));
    assert!(m.properties.is_encoded(), "the copy decodes its own");
    assert_eq!(m.property("color"), Some(&Value::String(Arc::from("red"))));
    assert!(!m.properties.is_encoded());
}

#[test]
fn a_malformed_property_value_is_refused_when_the_message_comes_in() {
    // Application properties {"k": str8 of two bytes that are not UTF-8}, empty body.
    let mut payload = vec![0x00, 0x53, 0x74];
    payload.extend_from_slice(&[0xc1, 0x08, 0x02, 0xa1, 0x01, b'k', 0xa1, 0x02, 0xff, 0xfe]);
    payload.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x00]);
    let view = MessageView::parse(Bytes::from(payload)).unwrap();
    assert!(matches!(
        inbound(&view, Arc::from("q"), 0, || 0, &delay_names()),
        Err(ConvertError::Malformed(_))
    ));
}

#[test]
fn every_wide_and_narrow_form_of_a_number_is_read_in_place() {
    // Encoders may use the long forms for small numbers; all must read the same.
    let cases: [(&[u8], Value); 14] = [
        (&[0x80, 0, 0, 0, 0, 0, 0, 0, 7], Value::Int(7)),
        (&[0x70, 0, 0, 0, 7], Value::Int(7)),
        (&[0x71, 0xff, 0xff, 0xff, 0xff], Value::Int(-1)),
        (
            &[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe],
            Value::Int(-2),
        ),
        (&[0x55, 0xff], Value::Int(-1)),
        (&[0x54, 0x80], Value::Int(-128)),
        (&[0x53, 0xff], Value::Int(255)),
        (&[0x44], Value::Int(0)),
        (&[0x56, 0x01], Value::Bool(true)),
        (&[0x42], Value::Bool(false)),
        (&[0x40], Value::Null),
        (&[0x83, 0, 0, 0, 0, 0, 0, 0x03, 0xe8], Value::Int(1000)),
        (&[0xa1, 2, b'h', b'i'], Value::String(Arc::from("hi"))),
        (&[0x60, 0x01, 0x00], Value::Int(256)),
    ];
    for (encoded, expected) in cases {
        assert_eq!(
            scalar_core_value(encoded),
            Some(expected.clone()),
            "{encoded:x?}"
        );
        let decoded = AmqpValue::decode_exact(&bytes::Bytes::copy_from_slice(encoded)).unwrap();
        assert_eq!(core_value(&decoded), Some(expected), "{encoded:x?}");
    }
    // Not for the fast path: a boolean byte other than 0 or 1, text that is not
    // UTF-8, a truncated number, and what the core does not keep as a scalar.
    for encoded in [
        &[0x56, 0x02][..],
        &[0xa1, 2, 0xff, 0xfe],
        &[0x70, 0, 0],
        &[0xa3, 1, b'x'],
    ] {
        assert_eq!(scalar_core_value(encoded), None, "{encoded:x?}");
    }
}

fn jms_like() -> AmqpMessage {
    AmqpMessage {
        header: Some(Header {
            durable: true,
            priority: 7,
            ttl: Some(60_000),
            ..Header::default()
        }),
        delivery_annotations: None,
        message_annotations: Some(vec![
            (AmqpValue::symbol("x-opt-jms-msg-type"), AmqpValue::Byte(5)),
            (AmqpValue::symbol(DELIVERY_DELAY), AmqpValue::Long(5000)),
        ]),
        properties: Some(Properties {
            message_id: Some(MessageId::String(Str::from("ID:1"))),
            correlation_id: Some(MessageId::Ulong(42)),
            reply_to: Some(Str::from("replies")),
            content_type: Some(Symbol::from("text/plain")),
            group_id: Some(Str::from("g1")),
            group_sequence: Some(u32::MAX),
            ..Properties::default()
        }),
        application_properties: Some(vec![
            (AmqpValue::string("color"), AmqpValue::string("red")),
            (AmqpValue::string("n"), AmqpValue::Int(3)),
        ]),
        body: Body::Value(AmqpValue::string("hello")),
        footer: None,
    }
}

#[test]
fn inbound_maps_fields() {
    let view = MessageView::parse(jms_like().to_bytes()).unwrap();
    let m = inbound(&view, Arc::from("q"), 1000, || 1000, &delay_names()).unwrap();
    assert!(m.durable);
    assert_eq!(m.priority, 7);
    assert_eq!(m.expires_at, Some(61_000));
    assert_eq!(m.due_at, Some(6000));
    assert_eq!(m.message_id.as_deref(), Some("ID:1"));
    assert_eq!(m.correlation_id.as_deref(), Some("42"));
    assert_eq!(m.reply_to.as_deref(), Some("replies"));
    assert_eq!(m.group_id.as_deref(), Some("g1"));
    assert_eq!(m.group_seq, Some(-1));
    assert_eq!(&m.body[..], b"hello");
    assert_eq!(m.property("color"), Some(&Value::String(Arc::from("red"))));
    assert_eq!(m.property("n"), Some(&Value::Int(3)));
    let wire = m.wire.unwrap();
    assert_eq!(wire.format, WIRE_FORMAT);
    // The stored bytes start at the message annotations: the header is not kept.
    assert_eq!(
        wire.bytes[..],
        view.raw()[view.ranges().message_annotations.clone().unwrap().start..]
    );
}

#[test]
fn a_delay_and_a_time_to_live_count_from_the_clock_not_the_stamp() {
    // The stamp is read before the frames of a wake-up are; a message read
    // later must not be due (or expire) before it came in.
    let view = MessageView::parse(jms_like().to_bytes()).unwrap();
    let m = inbound(&view, Arc::from("q"), 1000, || 1700, &delay_names()).unwrap();
    assert_eq!(m.timestamp, 1000);
    assert_eq!(m.due_at, Some(6700), "delay 5000 from 1700");
    assert_eq!(m.expires_at, Some(61_700), "ttl 60000 from 1700");
}

#[test]
fn outbound_keeps_the_bare_message_and_rewrites_the_header() {
    let view = MessageView::parse(jms_like().to_bytes()).unwrap();
    let m = inbound(&view, Arc::from("q"), 1000, || 1000, &delay_names()).unwrap();
    let mut buf = BytesMut::new();
    assert!(
        outbound(&m, 3, 2000, None, &mut buf).is_none(),
        "short: copied"
    );
    let out = MessageView::parse(buf.freeze()).unwrap();
    assert_eq!(out.bare_message(), view.bare_message());
    assert_eq!(out.message_annotations(), view.message_annotations());
    let h = out.header().unwrap();
    assert_eq!(h.delivery_count, 2);
    assert_eq!(h.ttl, Some(59_000));
}

#[test]
fn negative_or_garbage_delay_is_refused() {
    let mut msg = jms_like();
    msg.message_annotations = Some(vec![(
        AmqpValue::symbol(DELIVERY_DELAY),
        AmqpValue::Long(-5),
    )]);
    let view = MessageView::parse(msg.to_bytes()).unwrap();
    assert!(inbound(&view, Arc::from("q"), 0, || 0, &delay_names()).is_err());
    msg.message_annotations = None;
    for name in ScheduleProperties::NAMES {
        msg.application_properties =
            Some(vec![(AmqpValue::string(name), AmqpValue::string("soon"))]);
        let view = MessageView::parse(msg.to_bytes()).unwrap();
        assert!(
            inbound(&view, Arc::from("q"), 0, || 0, &delay_names()).is_err(),
            "{name}"
        );
    }
}

#[test]
fn other_brokers_delay_names_stay_properties_for_the_core_to_read() {
    let mut msg = jms_like();
    msg.message_annotations = None;
    for (name, value) in [
        ("x-delay", AmqpValue::string("soon")),
        ("x-delay", AmqpValue::Long(300)),
        ("delay", AmqpValue::Int(-2)),
    ] {
        msg.application_properties = Some(vec![
            (AmqpValue::string("color"), AmqpValue::string("red")),
            (AmqpValue::string(name), value.clone()),
        ]);
        let view = MessageView::parse(msg.to_bytes()).unwrap();
        let m = inbound(&view, Arc::from("q"), 0, || 0, &delay_names())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m.due_at, None, "{name}");
        assert!(m.may_carry_delay, "{name}");
        assert_eq!(m.property(name), core_value(&value).as_ref(), "{name}");
        // Where no queue reads it, it is a property like any other: the fast path.
        let m = inbound(&view, Arc::from("q"), 0, || 0, &DelayHeaderNames::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!m.may_carry_delay, "{name}");
        assert_eq!(m.properties.count(), 2);
    }
    let plain = view_with(vec![(AmqpValue::string("delays"), AmqpValue::Int(1))]);
    assert_eq!(
        walked(&plain),
        (Some(1), false),
        "the right first byte is not enough"
    );
}

#[test]
fn malformed_application_properties_are_a_decode_error() {
    // application-properties { "k" (not UTF-8): null }, then an empty data body.
    let raw = Bytes::from_static(&[
        0x00, 0x53, 0x74, 0xc1, 0x05, 0x02, 0xa1, 0x01, 0xff, 0x40, 0x00, 0x53, 0x75, 0xa0, 0x00,
    ]);
    let view = MessageView::parse(raw).unwrap();
    let e = inbound(&view, Arc::from("q"), 0, || 0, &delay_names()).unwrap_err();
    assert_eq!(e.condition(), "amqp:decode-error");
}

#[test]
fn absolute_delivery_time_beats_delay() {
    let mut msg = jms_like();
    msg.message_annotations = Some(vec![
        (AmqpValue::symbol(DELIVERY_DELAY), AmqpValue::Long(5)),
        (AmqpValue::symbol(DELIVERY_TIME), AmqpValue::Timestamp(9999)),
    ]);
    let view = MessageView::parse(msg.to_bytes()).unwrap();
    assert_eq!(
        inbound(&view, Arc::from("q"), 0, || 0, &delay_names())
            .unwrap()
            .due_at,
        Some(9999)
    );
}

#[test]
fn a_long_message_follows_its_new_header_uncopied() {
    let mut amqp = jms_like();
    amqp.body = Body::Data(vec![Bytes::from(vec![7u8; SHARE_FROM])]);
    let view = MessageView::parse(amqp.to_bytes()).unwrap();
    let m = inbound(&view, Arc::from("q"), 1000, || 1000, &delay_names()).unwrap();
    let wire = m.wire.clone().unwrap().bytes;
    let mut buf = BytesMut::new();
    let tail = outbound(&m, 3, 2000, None, &mut buf).expect("shared, not copied");
    assert_eq!(
        tail.as_ptr(),
        wire.as_ptr(),
        "the received bytes themselves"
    );
    buf.extend_from_slice(&tail);
    let out = MessageView::parse(buf.freeze()).unwrap();
    assert_eq!(out.bare_message(), view.bare_message());
    assert_eq!(out.header().unwrap().delivery_count, 2);
}

#[test]
fn stomp_message_becomes_amqp() {
    let m = Message {
        body: Bytes::from_static(b"hi"),
        address: Arc::from("q"),
        content_type: Some(Arc::from("text/plain")),
        correlation_id: Some(Arc::from("c-1")),
        reply_to: Some(Arc::from("/queue/r")),
        group_id: Some(Arc::from("g")),
        group_seq: Some(2),
        properties: vec![(Arc::from("k"), Value::String(Arc::from("v")))].into(),
        priority: 4,
        ..Message::default()
    };
    let mut buf = BytesMut::new();
    outbound(&m, 1, 0, None, &mut buf);
    let v = MessageView::parse(buf.freeze()).unwrap();
    let p = v.properties().unwrap();
    assert_eq!(
        p.content_type.as_ref().map(Symbol::as_str),
        Some("text/plain")
    );
    assert_eq!(p.correlation_id, Some(MessageId::String(Str::from("c-1"))));
    assert_eq!(p.group_id.as_ref().map(Str::as_str), Some("g"));
    assert_eq!(p.group_sequence, Some(2));
    assert_eq!(v.body(), &Body::Data(vec![Bytes::from_static(b"hi")]));
    assert_eq!(
        v.application_properties().unwrap().unwrap()[0],
        (AmqpValue::string("k"), AmqpValue::string("v"))
    );
}
