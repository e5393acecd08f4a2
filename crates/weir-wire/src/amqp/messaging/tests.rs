use proptest::prelude::*;

use super::*;

/// Roughly what Qpid JMS sends for a BytesMessage in a group.
pub(crate) fn jms_message(body: Bytes) -> Message {
    Message {
        header: Some(Header {
            durable: true,
            ..Header::default()
        }),
        delivery_annotations: None,
        message_annotations: Some(vec![(Value::symbol("x-opt-jms-msg-type"), Value::Byte(3))]),
        properties: Some(Properties {
            message_id: Some(MessageId::String(Str::from(
                "ID:7d8f2c1e-5a4b-4c3d-9e8f-0a1b2c3d4e5f:1:1:1-1",
            ))),
            to: Some(Str::from("orders")),
            content_type: Some(Symbol::from("application/octet-stream")),
            creation_time: Some(1_700_000_000_000),
            group_id: Some(Str::from("customer-42")),
            group_sequence: Some(u32::MAX),
            ..Properties::default()
        }),
        application_properties: Some(vec![
            (Value::string("region"), Value::string("eu-west")),
            (Value::string("attempt"), Value::Int(1)),
        ]),
        body: Body::Data(vec![body]),
        footer: None,
    }
}

#[test]
fn view_gives_typed_parts_and_ranges() {
    let msg = jms_message(Bytes::from(vec![7u8; 256]));
    let raw = msg.to_bytes();
    let view = MessageView::parse(raw.clone()).unwrap();
    assert_eq!(view.to_message().unwrap(), msg);
    assert_eq!(view.properties().unwrap().group_sequence, Some(u32::MAX));
    let r = view.ranges();
    assert_eq!(r.header.as_ref().unwrap().start, 0);
    assert_eq!(r.bare.start, r.properties.as_ref().unwrap().start);
    assert_eq!(r.bare.end, raw.len());
    assert_eq!(r.body.as_ref().unwrap().end, raw.len());

    // The bare message is exactly the encoding of properties + app-properties + body.
    let bare = Message {
        header: None,
        message_annotations: None,
        ..msg.clone()
    }
    .to_bytes();
    assert_eq!(view.bare_message(), bare);

    // Data body is a slice of the payload, not a copy.
    let Body::Data(chunks) = view.body() else {
        panic!()
    };
    let p = chunks[0].as_ptr() as usize;
    assert!(p >= raw.as_ptr() as usize && p < raw.as_ptr() as usize + raw.len());

    // Re-emit with a bumped delivery count: bare bytes unchanged.
    let header = Header {
        delivery_count: 3,
        ..view.header().cloned().unwrap_or_default()
    };
    let mut out = BytesMut::new();
    view.encode_with(Some(&header), None, view.message_annotations(), &mut out);
    let again = MessageView::parse(out.freeze()).unwrap();
    assert_eq!(again.header().unwrap().delivery_count, 3);
    assert_eq!(again.bare_message(), view.bare_message());
}

#[test]
fn jms_group_sequence_minus_one() {
    // properties: 13 fields, group-sequence as uint 0xffffffff, rest null.
    let mut b = vec![0x00, 0x53, 0x73, 0xc0, 0x11, 0x0c];
    b.extend_from_slice(&[0x40; 11]);
    b.extend_from_slice(&[0x70, 0xff, 0xff, 0xff, 0xff]);
    b.extend_from_slice(&[0x00, 0x53, 0x77, 0x40]);
    let v = MessageView::parse(Bytes::from(b)).unwrap();
    assert_eq!(v.properties().unwrap().group_sequence, Some(4_294_967_295));
    assert_eq!(v.body(), &Body::Value(Value::Null));
}

#[test]
fn short_header_takes_defaults() {
    let b = Bytes::from_static(&[
        0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41, 0x00, 0x53, 0x75, 0xa0, 0x00,
    ]);
    let v = MessageView::parse(b).unwrap();
    let h = v.header().unwrap();
    assert!(h.durable);
    assert_eq!((h.priority, h.delivery_count, h.ttl), (4, 0, None));
    assert_eq!(v.body(), &Body::Data(vec![Bytes::new()]));
}

#[test]
fn a_single_data_section_is_a_slice_of_the_payload() {
    let one = Message::with_data(Bytes::from_static(b"hello")).to_bytes();
    let v = MessageView::parse(one.clone()).unwrap();
    let data = v.single_data().unwrap();
    assert_eq!(&data[..], b"hello");
    let at = data.as_ptr() as usize - one.as_ptr() as usize;
    assert_eq!(&one[at..at + 5], b"hello", "not a copy");

    let two = Message {
        body: Body::Data(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]),
        ..Message::default()
    };
    let v = MessageView::parse(two.to_bytes()).unwrap();
    assert_eq!(v.single_data(), None);
    assert_eq!(v.body(), &two.body);
    let v = MessageView::parse(Message::default().to_bytes()).unwrap();
    assert_eq!((v.single_data(), v.body()), (None, &Body::Empty));
}

#[test]
fn a_data_section_must_hold_a_binary() {
    // data: null; data: a string; data: a binary whose length runs past the end.
    for raw in [
        &[0x00, 0x53, 0x75, 0x40][..],
        &[0x00, 0x53, 0x75, 0xa1, 0x01, b'x'][..],
        &[0x00, 0x53, 0x75, 0xa0, 0x05, b'x'][..],
    ] {
        assert!(
            MessageView::parse(Bytes::copy_from_slice(raw)).is_err(),
            "{raw:x?}"
        );
    }
}

#[test]
fn other_bodies_and_footer_round_trip() {
    for body in [
        Body::Empty,
        Body::Value(Value::string("hello")),
        Body::Sequence(vec![vec![Value::Uint(1)], vec![]]),
        Body::Data(vec![Bytes::from_static(b"a"), Bytes::from(vec![1u8; 300])]),
    ] {
        let msg = Message {
            delivery_annotations: Some(vec![(Value::symbol("x"), Value::Null)]),
            footer: Some(vec![(Value::symbol("sig"), Value::Binary(Bytes::new()))]),
            body,
            ..Message::default()
        };
        let v = MessageView::parse(msg.to_bytes()).unwrap();
        assert_eq!(v.to_message().unwrap(), msg);
        assert!(v.ranges().footer.is_some());
        assert_eq!(v.tail(), v.raw().slice(v.ranges().footer.clone().unwrap()));
    }
}

/// application-properties holding `map`, then an empty data body.
fn with_app_properties(map: &[u8]) -> Bytes {
    let mut b = vec![0x00, 0x53, 0x74];
    b.extend_from_slice(map);
    b.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x00]);
    Bytes::from(b)
}

#[test]
fn application_property_entries_match_the_decoded_map() {
    let msg = jms_message(Bytes::from_static(b"body"));
    let v = MessageView::parse(msg.to_bytes()).unwrap();
    let entries: Vec<_> = v
        .application_property_entries()
        .map(|e| e.unwrap())
        .map(|(k, val)| (Value::string(k.unwrap()), val))
        .collect();
    assert_eq!(Some(entries), msg.application_properties);
    // A symbol key reads as text too; other keys as none.
    let v = MessageView::parse(with_app_properties(&[
        0xc1, 0x08, 0x04, 0xa3, 0x01, b'k', 0x40, 0x53, 0x07, 0x41,
    ]))
    .unwrap();
    let entries: Vec<_> = v
        .application_property_entries()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(
        entries,
        vec![(Some("k"), Value::Null), (None, Value::Bool(true))]
    );
}

#[test]
fn malformed_application_properties_fail_when_read() {
    // An odd element count is caught by the bounds check in `parse`.
    assert!(MessageView::parse(with_app_properties(&[0xc1, 0x02, 0x01, 0x40])).is_err());
    // A key that is not UTF-8.
    let v = MessageView::parse(with_app_properties(&[
        0xc1, 0x05, 0x02, 0xa1, 0x01, 0xff, 0x40,
    ]))
    .unwrap();
    let mut entries = v.application_property_entries();
    assert!(matches!(
        entries.next(),
        Some(Err(AmqpCodecError::InvalidUtf8))
    ));
    assert!(entries.next().is_none());
    // A key longer than the map.
    let v = MessageView::parse(with_app_properties(&[0xc1, 0x04, 0x02, 0xa1, 0x09, 0x40])).unwrap();
    assert!(matches!(
        v.application_property_entries().next(),
        Some(Err(AmqpCodecError::Truncated))
    ));
    // Bytes the count does not cover.
    let v = MessageView::parse(with_app_properties(&[0xc1, 0x03, 0x00, 0x40, 0x40])).unwrap();
    assert!(matches!(
        v.application_property_entries().next(),
        Some(Err(AmqpCodecError::TrailingBytes(2)))
    ));
    assert!(v.application_properties().is_err());
    // Not a map at all.
    assert!(MessageView::parse(with_app_properties(&[0x41])).is_err());
}

#[test]
fn section_order_is_enforced() {
    let props = Properties::default().to_bytes();
    let header = Header::default().to_bytes();
    let mut b = BytesMut::new();
    b.extend_from_slice(&props);
    b.extend_from_slice(&header);
    assert!(matches!(
        MessageView::parse(b.freeze()),
        Err(AmqpCodecError::SectionOrder("header"))
    ));
    let mut b = BytesMut::new();
    b.extend_from_slice(&props);
    b.extend_from_slice(&props);
    assert!(MessageView::parse(b.freeze()).is_err());
    // data then amqp-value
    let b = Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 0x00, 0x00, 0x53, 0x77, 0x40]);
    assert!(MessageView::parse(b).is_err());
    // Not a described section.
    assert!(matches!(
        MessageView::parse(Bytes::from_static(&[0x40])),
        Err(AmqpCodecError::NotASection)
    ));
    // Unknown section descriptor.
    assert!(matches!(
        MessageView::parse(Bytes::from_static(&[0x00, 0x53, 0x79, 0x40])),
        Err(AmqpCodecError::UnknownDescriptor(_))
    ));
    // data section holding a string.
    assert!(MessageView::parse(Bytes::from_static(&[0x00, 0x53, 0x75, 0xa1, 0x00])).is_err());
}

fn message_id() -> impl Strategy<Value = MessageId> {
    prop_oneof![
        any::<u64>().prop_map(MessageId::Ulong),
        any::<[u8; 16]>().prop_map(MessageId::Uuid),
        prop::collection::vec(any::<u8>(), 0..20).prop_map(|v| MessageId::Binary(v.into())),
        ".{0,20}".prop_map(|s: String| MessageId::String(Str::from(s))),
    ]
}

fn properties() -> impl Strategy<Value = Properties> {
    (
        prop::option::of(message_id()),
        prop::option::of(message_id()),
        prop::option::of("[a-z/]{0,12}"),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<u32>()),
        prop::option::of("[a-z]{0,8}"),
    )
        .prop_map(|(id, corr, to, ts, seq, group)| Properties {
            message_id: id,
            correlation_id: corr,
            to: to.map(Str::from),
            reply_to: Some(Str::from("r")),
            subject: None,
            user_id: Some(Bytes::from_static(b"u")),
            content_type: Some(Symbol::from("text/plain")),
            content_encoding: None,
            absolute_expiry_time: ts,
            creation_time: ts,
            group_id: group.map(Str::from),
            group_sequence: seq,
            reply_to_group_id: None,
        })
}

fn header() -> impl Strategy<Value = Header> {
    (
        any::<bool>(),
        any::<u8>(),
        prop::option::of(any::<u32>()),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_map(
            |(durable, priority, ttl, first_acquirer, delivery_count)| Header {
                durable,
                priority,
                ttl,
                first_acquirer,
                delivery_count,
            },
        )
}

proptest! {
    #[test]
    fn a_header_encodes_as_the_list_writer_would(
        durable in any::<bool>(),
        priority in prop_oneof![Just(4u8), any::<u8>()],
        ttl in prop::option::of(prop_oneof![Just(0u32), 1..256u32, any::<u32>()]),
        first_acquirer in any::<bool>(),
        delivery_count in prop_oneof![Just(0u32), 1..256u32, any::<u32>()],
    ) {
        let h = Header { durable, priority, ttl, first_acquirer, delivery_count };
        let mut quick = BytesMut::new();
        h.encode(&mut quick);
        let mut generic = BytesMut::new();
        let mut w = ListWriter::begin(&mut generic, HEADER);
        h.encode_fields(&mut w);
        w.finish();
        prop_assert_eq!(&quick[..], &generic[..]);
    }

    #[test]
    fn messages_round_trip(h in prop::option::of(header()), p in prop::option::of(properties()),
                           data in prop::collection::vec(any::<u8>(), 0..400)) {
        let msg = Message { header: h, properties: p, body: Body::Data(vec![data.into()]), ..Message::default() };
        let v = MessageView::parse(msg.to_bytes()).unwrap();
        prop_assert_eq!(v.to_message().unwrap(), msg);
    }

    #[test]
    fn arbitrary_payloads_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = MessageView::parse(Bytes::from(b));
    }

    #[test]
    fn mutated_messages_never_panic(i in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut b = jms_message(Bytes::from_static(b"body")).to_bytes().to_vec();
        let at = i.index(b.len());
        b[at] = byte;
        let _ = MessageView::parse(Bytes::from(b));
    }
}
