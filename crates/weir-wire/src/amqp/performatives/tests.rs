use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::amqp::condition;
use crate::amqp::definitions::*;
use crate::amqp::sasl::*;
use crate::amqp::types::{Array, Value};

fn round_trip(p: Performative) {
    let mut buf = BytesMut::new();
    p.encode(&mut buf);
    let mut b = buf.freeze();
    let back = Performative::decode(&mut b).unwrap();
    assert!(b.is_empty());
    assert_eq!(back, p);
}

proptest! {
    #[test]
    fn a_delivery_start_is_the_transfer_it_stands_for(
        handle in any::<u32>(),
        delivery_id in any::<u32>(),
        settled in any::<bool>(),
    ) {
        let mut quick = BytesMut::new();
        encode_delivery_start(&mut quick, handle, delivery_id, settled);
        let full = Performative::from(Transfer {
            handle,
            delivery_id: Some(delivery_id),
            delivery_tag: Some(Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
            message_format: Some(0),
            settled: Some(settled),
            ..Transfer::default()
        });
        let mut expected = BytesMut::new();
        full.encode(&mut expected);
        prop_assert_eq!(&quick[..], &expected[..]);
    }
}

fn decode(b: &[u8]) -> crate::amqp::error::Result<Performative> {
    let mut b = Bytes::copy_from_slice(b);
    Performative::decode(&mut b)
}

fn syms(s: &[&str]) -> Vec<Symbol> {
    s.iter().map(|s| Symbol::from(*s)).collect()
}

fn props() -> Map {
    vec![(Value::symbol("product"), Value::string("QpidJMS"))]
}

fn error() -> AmqpError {
    AmqpError {
        condition: Symbol::from(condition::NOT_FOUND),
        description: Some(Str::from("no such queue")),
        info: Some(props()),
    }
}

#[test]
fn golden_open() {
    let open = Open {
        max_frame_size: 1_048_576,
        channel_max: 32767,
        idle_time_out: Some(30_000),
        ..Open::new("c")
    };
    let expected = [
        0x00, 0x53, 0x10, 0xc0, 0x12, 0x05, 0xa1, 0x01, b'c', 0x40, 0x70, 0x00, 0x10, 0x00, 0x00,
        0x60, 0x7f, 0xff, 0x70, 0x00, 0x00, 0x75, 0x30,
    ];
    assert_eq!(&open.to_bytes()[..], &expected[..]);
    assert_eq!(decode(&expected).unwrap(), open.into());
}

#[test]
fn golden_flow() {
    let b = [
        0x00, 0x53, 0x13, 0xc0, 0x16, 0x07, 0x52, 0x01, 0x70, 0x7f, 0xff, 0xff, 0xff, 0x52, 0x01,
        0x70, 0x7f, 0xff, 0xff, 0xff, 0x43, 0x43, 0x70, 0x00, 0x00, 0x03, 0xe8,
    ];
    let flow = Flow {
        next_incoming_id: Some(1),
        incoming_window: 0x7fff_ffff,
        next_outgoing_id: 1,
        outgoing_window: 0x7fff_ffff,
        handle: Some(0),
        delivery_count: Some(0),
        link_credit: Some(1000),
        ..Flow::default()
    };
    assert_eq!(decode(&b).unwrap(), Performative::Flow(flow.clone()));
    assert_eq!(&flow.to_bytes()[..], &b[..]);
}

/// A receiver attach written by hand from the spec in the long forms some Java clients
/// use: list32 outer list, symbolic source descriptor, explicit ubyte settle modes.
#[test]
fn golden_attach_long_forms() {
    let sym = |s: &str| {
        let mut v = vec![0xa3, s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    };
    let mut source_fields = vec![0xa1, 0x01, b'q', 0x43];
    source_fields.extend(sym("link-detach"));
    source_fields.extend([0x43, 0x42, 0x40, 0x40, 0x40]);
    source_fields.extend([0x00, 0x53, 0x27, 0xc0, 0x02, 0x01, 0x41]); // modified(delivery-failed)
    source_fields.extend([0xe0, 0x28, 0x02, 0xa3, 0x12]);
    source_fields.extend(b"amqp:accepted:list");
    source_fields.push(0x12);
    source_fields.extend(b"amqp:rejected:list");
    source_fields.extend(sym("queue"));
    let mut source = vec![0x00];
    source.extend(sym("amqp:source:list"));
    source.extend([0xc0, source_fields.len() as u8 + 1, 0x0b]);
    source.extend(source_fields);

    let mut fields = vec![0xa1, 0x01, b'r', 0x43, 0x41, 0x50, 0x00, 0x50, 0x00];
    fields.extend(source);
    fields.extend([0x00, 0x53, 0x29, 0x45]);
    let mut b = vec![0x00, 0x53, 0x12, 0xd0];
    b.extend((fields.len() as u32 + 4).to_be_bytes());
    b.extend(7u32.to_be_bytes());
    b.extend(fields);

    let Performative::Attach(a) = decode(&b).unwrap() else {
        panic!()
    };
    let mut expected = Attach::new("r", 0, Role::Receiver);
    expected.snd_settle_mode = SenderSettleMode::Unsettled;
    expected.source = Some(Source {
        address: Some(Str::from("q")),
        expiry_policy: ExpiryPolicy::LinkDetach,
        default_outcome: Some(DeliveryState::Modified {
            delivery_failed: true,
            undeliverable_here: false,
            message_annotations: None,
        }),
        outcomes: syms(&["amqp:accepted:list", "amqp:rejected:list"]),
        capabilities: syms(&["queue"]),
        ..Source::default()
    });
    expected.target = Some(TargetKind::Target(Target::default()));
    assert_eq!(*a, expected);
    // Our encoding is more compact but means the same.
    let ours = expected.to_bytes();
    assert!(ours.len() < b.len());
    assert_eq!(decode(&ours).unwrap(), expected.into());
}

#[test]
fn short_lists_take_defaults() {
    // attach: name "lnk", handle 0, role receiver; everything else absent.
    let p = decode(&[
        0x00, 0x53, 0x12, 0xc0, 0x08, 0x03, 0xa1, 0x03, b'l', b'n', b'k', 0x43, 0x41,
    ])
    .unwrap();
    let Performative::Attach(a) = p else { panic!() };
    assert_eq!(a.role, Role::Receiver);
    assert_eq!(a.snd_settle_mode, SenderSettleMode::Mixed);
    assert_eq!(a.rcv_settle_mode, ReceiverSettleMode::First);
    assert!(!a.incomplete_unsettled);
    assert!(a.source.is_none() && a.target.is_none());

    let p = decode(&[0x00, 0x53, 0x15, 0xc0, 0x03, 0x02, 0x41, 0x43]).unwrap();
    assert_eq!(
        p,
        Performative::Disposition(Disposition {
            role: Role::Receiver,
            first: 0,
            last: None,
            settled: false,
            state: None,
            batchable: false,
        })
    );

    let p = decode(&[0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x43]).unwrap();
    let Performative::Transfer(t) = p else {
        panic!()
    };
    assert_eq!(t.handle, 0);
    assert!(!t.more && !t.aborted && t.settled.is_none());

    // begin with nulls in the middle: handle-max defaults to 2^32-1.
    let p = decode(&[
        0x00, 0x53, 0x11, 0xc0, 0x06, 0x05, 0x40, 0x43, 0x43, 0x43, 0x40,
    ])
    .unwrap();
    let Performative::Begin(b) = p else { panic!() };
    assert_eq!(b.handle_max, u32::MAX);

    // open with only container-id: max-frame-size and channel-max default.
    let p = decode(&[0x00, 0x53, 0x10, 0xc0, 0x04, 0x01, 0xa1, 0x01, b'x']).unwrap();
    let Performative::Open(o) = p else { panic!() };
    assert_eq!((o.max_frame_size, o.channel_max), (u32::MAX, u16::MAX));
}

#[test]
fn symbolic_descriptors_and_single_symbol_capabilities() {
    let mut b = vec![0x00, 0xa3, 15];
    b.extend_from_slice(b"amqp:close:list");
    b.push(0x45);
    assert_eq!(decode(&b).unwrap(), Performative::Close(Close::default()));

    // open("x", offered-capabilities = single symbol instead of an array)
    let b = [
        0x00, 0x53, 0x10, 0xc0, 0x0d, 0x08, 0xa1, 0x01, b'x', 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
        0xa3, 0x01, b'q',
    ];
    let Performative::Open(o) = decode(&b).unwrap() else {
        panic!()
    };
    assert_eq!(o.offered_capabilities, syms(&["q"]));
}

#[test]
fn decode_errors_map_to_decode_error() {
    // Missing mandatory handle.
    let e = decode(&[0x00, 0x53, 0x14, 0x45]).unwrap_err();
    assert!(matches!(
        e,
        AmqpCodecError::MissingField {
            field: "handle",
            ..
        }
    ));
    assert_eq!(e.condition(), condition::DECODE_ERROR);
    // Wrong type: handle as a string.
    let e = decode(&[0x00, 0x53, 0x14, 0xc0, 0x03, 0x01, 0xa1, 0x00]).unwrap_err();
    assert!(matches!(
        e,
        AmqpCodecError::InvalidField {
            field: "handle",
            ..
        }
    ));
    // Unknown descriptor.
    let e = decode(&[0x00, 0x53, 0x99, 0x45]).unwrap_err();
    assert!(matches!(e, AmqpCodecError::UnknownDescriptor(_)));
    assert_eq!(e.condition(), condition::DECODE_ERROR);
    // Not described at all.
    assert!(decode(&[0x45]).is_err());
    // A described non-list.
    assert!(matches!(
        decode(&[0x00, 0x53, 0x18, 0x40]).unwrap_err(),
        AmqpCodecError::NotAList(_)
    ));
    // Wrong nested composite: a source where the error should be.
    let e = decode(&[0x00, 0x53, 0x18, 0xc0, 0x05, 0x01, 0x00, 0x53, 0x28, 0x45]).unwrap_err();
    assert!(matches!(e, AmqpCodecError::UnexpectedDescriptor { .. }));
}

#[test]
fn every_performative_round_trips() {
    round_trip(
        Open {
            hostname: Some(Str::from("localhost")),
            max_frame_size: 65536,
            channel_max: 7,
            idle_time_out: Some(0),
            outgoing_locales: syms(&["en-US"]),
            incoming_locales: syms(&["en-US", "de"]),
            offered_capabilities: syms(&["ANONYMOUS-RELAY"]),
            desired_capabilities: syms(&["DELAYED_DELIVERY", "SHARED-SUBS"]),
            properties: Some(props()),
            ..Open::new("ID:abc")
        }
        .into(),
    );
    round_trip(Open::new("").into());
    round_trip(
        Begin {
            remote_channel: Some(3),
            next_outgoing_id: 1,
            incoming_window: 2048,
            outgoing_window: u32::MAX,
            handle_max: 65535,
            offered_capabilities: vec![],
            desired_capabilities: syms(&["x"]),
            properties: Some(props()),
        }
        .into(),
    );
    let source = Source {
        address: Some(Str::from("orders")),
        durable: TerminusDurability::UnsettledState,
        expiry_policy: ExpiryPolicy::Never,
        timeout: 60,
        dynamic: true,
        dynamic_node_properties: Some(props()),
        distribution_mode: Some(Symbol::from("copy")),
        filter: Some(vec![(
            Value::symbol("jms-selector"),
            Value::described(
                crate::amqp::Descriptor::Code(0x0000_468C_0000_0004),
                Value::string("color = 'red'"),
            ),
        )]),
        default_outcome: Some(DeliveryState::Modified {
            delivery_failed: true,
            undeliverable_here: false,
            message_annotations: None,
        }),
        outcomes: syms(&["amqp:accepted:list", "amqp:rejected:list"]),
        capabilities: syms(&["queue"]),
    };
    let mut attach = Attach::new("sender-1", 5, Role::Sender);
    attach.snd_settle_mode = SenderSettleMode::Settled;
    attach.rcv_settle_mode = ReceiverSettleMode::Second;
    attach.source = Some(source.clone());
    attach.target = Some(TargetKind::Target(Target {
        address: Some(Str::from("q")),
        durable: TerminusDurability::Configuration,
        expiry_policy: ExpiryPolicy::LinkDetach,
        timeout: 1,
        dynamic: false,
        dynamic_node_properties: None,
        capabilities: syms(&["topic"]),
    }));
    attach.unsettled = Some(vec![(
        Value::Binary(Bytes::from_static(b"tag")),
        Value::Null,
    )]);
    attach.incomplete_unsettled = true;
    attach.initial_delivery_count = Some(0);
    attach.max_message_size = Some(1 << 40);
    attach.properties = Some(props());
    round_trip(attach.clone().into());
    attach.source = Some(Source::default());
    attach.target = Some(TargetKind::Coordinator(Coordinator {
        capabilities: syms(&["amqp:local-transactions"]),
    }));
    round_trip(attach.into());
    round_trip(Attach::new("r", 0, Role::Receiver).into());
    round_trip(
        Flow {
            next_incoming_id: None,
            incoming_window: 0,
            next_outgoing_id: 0,
            outgoing_window: 0,
            handle: Some(1),
            delivery_count: Some(10),
            link_credit: Some(0),
            available: Some(5),
            drain: true,
            echo: true,
            properties: Some(props()),
        }
        .into(),
    );
    let states = [
        DeliveryState::Received {
            section_number: 1,
            section_offset: 99,
        },
        DeliveryState::Accepted,
        DeliveryState::Rejected {
            error: Some(error()),
        },
        DeliveryState::Rejected { error: None },
        DeliveryState::Released,
        DeliveryState::Modified {
            delivery_failed: true,
            undeliverable_here: true,
            message_annotations: Some(props()),
        },
        DeliveryState::Declared {
            txn_id: Bytes::from_static(b"tx1"),
        },
        DeliveryState::TransactionalState {
            txn_id: Bytes::from_static(b"tx1"),
            outcome: Some(Box::new(DeliveryState::Accepted)),
        },
        DeliveryState::TransactionalState {
            txn_id: Bytes::from_static(b"tx2"),
            outcome: None,
        },
    ];
    for state in states {
        round_trip(
            Transfer {
                handle: 1,
                delivery_id: Some(7),
                delivery_tag: Some(Bytes::from_static(&[0, 0, 0, 1])),
                message_format: Some(0),
                settled: Some(false),
                more: true,
                rcv_settle_mode: Some(ReceiverSettleMode::Second),
                state: Some(state.clone()),
                resume: true,
                aborted: true,
                batchable: true,
            }
            .into(),
        );
        round_trip(
            Disposition {
                role: Role::Receiver,
                first: 1,
                last: Some(9),
                settled: true,
                state: Some(state),
                batchable: true,
            }
            .into(),
        );
    }
    round_trip(Transfer::default().into());
    round_trip(
        Detach {
            handle: 2,
            closed: true,
            error: Some(error()),
        }
        .into(),
    );
    round_trip(
        End {
            error: Some(error()),
        }
        .into(),
    );
    round_trip(End::default().into());
    round_trip(
        Close {
            error: Some(error()),
        }
        .into(),
    );
}

#[test]
fn transaction_bodies_round_trip() {
    let d = Declare {
        global_id: Some(Value::Binary(Bytes::from_static(b"g"))),
    };
    assert_eq!(Declare::from_value(&d.to_value().unwrap()).unwrap(), d);
    assert_eq!(
        Declare::decode(&mut Declare::default().to_bytes()).unwrap(),
        Declare::default()
    );
    let d = Discharge {
        txn_id: Bytes::from_static(b"tx"),
        fail: true,
    };
    assert_eq!(Discharge::decode(&mut d.to_bytes()).unwrap(), d);
    // Wrong descriptor for the requested type.
    assert!(matches!(
        Discharge::decode(&mut Declare::default().to_bytes()),
        Err(AmqpCodecError::UnexpectedDescriptor { .. })
    ));
}

#[test]
fn sasl_frames_round_trip() {
    let frames = [
        SaslFrame::Mechanisms(SaslMechanisms {
            mechanisms: syms(&["PLAIN", "ANONYMOUS"]),
        }),
        SaslFrame::Init(SaslInit {
            mechanism: Symbol::from("PLAIN"),
            initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
            hostname: Some(Str::from("localhost")),
        }),
        SaslFrame::Challenge(SaslChallenge {
            challenge: Bytes::from_static(b"c"),
        }),
        SaslFrame::Response(SaslResponse {
            response: Bytes::from_static(b"r"),
        }),
        SaslFrame::Outcome(SaslOutcome {
            code: SaslCode::Auth,
            additional_data: None,
        }),
        SaslFrame::Outcome(SaslOutcome {
            code: SaslCode::Ok,
            additional_data: Some(Bytes::from_static(b"welcome")),
        }),
    ];
    for f in frames {
        let mut b = BytesMut::new();
        f.encode(&mut b);
        assert_eq!(SaslFrame::decode(&b.freeze()).unwrap(), f);
    }
    // sasl-mechanisms with a single symbol, as some servers send it.
    let b = Bytes::from_static(&[
        0x00, 0x53, 0x40, 0xc0, 0x08, 0x01, 0xa3, 0x05, b'P', b'L', b'A', b'I', b'N',
    ]);
    assert_eq!(
        SaslFrame::decode(&b).unwrap(),
        SaslFrame::Mechanisms(SaslMechanisms {
            mechanisms: syms(&["PLAIN"])
        })
    );
    // Bad sasl code.
    let b = Bytes::from_static(&[0x00, 0x53, 0x44, 0xc0, 0x03, 0x01, 0x50, 0x09]);
    assert!(SaslFrame::decode(&b).is_err());
}

#[test]
fn capabilities_array_is_compact() {
    let mut open = Open::new("c");
    open.offered_capabilities = syms(&["a"]);
    let b = open.to_bytes();
    // ... 40 x6 (hostname .. incoming-locales) then e0 04 01 a3 01 'a'
    assert!(b.ends_with(&[0xe0, 0x04, 0x01, 0xa3, 0x01, b'a']));
    let v = Value::decode_exact(&b).unwrap();
    let Value::Described(d) = v else { panic!() };
    let Value::List(fields) = &d.value else {
        panic!()
    };
    assert_eq!(fields[7], Value::Array(Array::symbols(syms(&["a"]))));
}

fn transfer() -> impl Strategy<Value = Transfer> {
    (
        any::<u32>(),
        prop::option::of(any::<u32>()),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..32)),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<bool>()),
        any::<[bool; 4]>(),
    )
        .prop_map(|(handle, delivery_id, tag, fmt, settled, flags)| Transfer {
            handle,
            delivery_id,
            delivery_tag: tag.map(Bytes::from),
            message_format: fmt,
            settled,
            more: flags[0],
            rcv_settle_mode: None,
            state: flags[1].then_some(DeliveryState::Accepted),
            resume: flags[2],
            aborted: flags[3],
            batchable: flags[0] && flags[3],
        })
}

proptest! {
    #[test]
    fn transfers_round_trip(t in transfer()) {
        round_trip(t.into());
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..100)) {
        let _ = decode(&b);
        let _ = SaslFrame::decode(&Bytes::from(b));
    }

    #[test]
    fn mutated_performatives_never_panic(t in transfer(), i in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut b = t.to_bytes().to_vec();
        let at = i.index(b.len());
        b[at] = byte;
        let _ = decode(&b);
    }
}
