//! Every composite, at its defaults and with every field set: encoded to the
//! same bytes as before the fields were declared through `composite!` (the
//! goldens were written by the hand-written encoders), and decoded back to
//! the same value.

use bytes::Bytes;

use crate::amqp::definitions::*;
use crate::amqp::described::Composite;
use crate::amqp::messaging::{Header, MessageId, Properties};
use crate::amqp::performatives::*;
use crate::amqp::sasl::*;
use crate::amqp::types::{Map, Str, Symbol, Value};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Encodes `v`, compares with `golden` (hex), decodes it back.
fn check<T: Composite + PartialEq + std::fmt::Debug>(v: &T, golden: &str) -> Option<String> {
    let bytes = v.to_bytes();
    let mut rest = bytes.clone();
    let back = T::decode(&mut rest).expect("decodes");
    assert_eq!(&back, v, "{} round trip", T::NAME);
    assert!(rest.is_empty(), "{} leaves bytes", T::NAME);
    let got = hex(&bytes);
    (got != golden).then(|| format!("{}: {got}", T::NAME))
}

fn syms(s: &[&str]) -> Vec<Symbol> {
    s.iter().map(|s| Symbol::from(*s)).collect()
}

fn map() -> Map {
    vec![(Value::symbol("k"), Value::Int(-7))]
}

fn error() -> AmqpError {
    AmqpError {
        condition: Symbol::from("amqp:internal-error"),
        description: Some(Str::from("broken")),
        info: Some(map()),
    }
}

fn source() -> Source {
    Source {
        address: Some(Str::from("orders")),
        durable: TerminusDurability::UnsettledState,
        expiry_policy: ExpiryPolicy::Never,
        timeout: 30,
        dynamic: true,
        dynamic_node_properties: Some(map()),
        distribution_mode: Some(Symbol::from("copy")),
        filter: Some(map()),
        default_outcome: Some(DeliveryState::Released),
        outcomes: syms(&["amqp:accepted:list", "amqp:rejected:list"]),
        capabilities: syms(&["topic"]),
    }
}

fn target() -> Target {
    Target {
        address: Some(Str::from("orders")),
        durable: TerminusDurability::Configuration,
        expiry_policy: ExpiryPolicy::LinkDetach,
        timeout: 1,
        dynamic: true,
        dynamic_node_properties: Some(map()),
        capabilities: syms(&["queue"]),
    }
}

fn transactional() -> DeliveryState {
    DeliveryState::TransactionalState {
        txn_id: Bytes::from_static(&[0, 0, 0, 1]),
        outcome: Some(Box::new(DeliveryState::Rejected {
            error: Some(error()),
        })),
    }
}

#[test]
fn composites_encode_as_before_and_round_trip() {
    let open = Open {
        container_id: Str::from("c1"),
        hostname: Some(Str::from("host")),
        max_frame_size: 65536,
        channel_max: 9,
        idle_time_out: Some(30_000),
        outgoing_locales: syms(&["en-US"]),
        incoming_locales: syms(&["en-GB", "de"]),
        offered_capabilities: syms(&["ANONYMOUS-RELAY"]),
        desired_capabilities: syms(&["DELAYED_DELIVERY"]),
        properties: Some(map()),
    };
    let begin = Begin {
        remote_channel: Some(3),
        next_outgoing_id: 1,
        incoming_window: 2048,
        outgoing_window: u32::MAX,
        handle_max: 7,
        offered_capabilities: syms(&["a"]),
        desired_capabilities: syms(&["b"]),
        properties: Some(map()),
    };
    let mut attach = Attach::new("link", 5, Role::Receiver);
    attach.snd_settle_mode = SenderSettleMode::Settled;
    attach.rcv_settle_mode = ReceiverSettleMode::Second;
    attach.source = Some(source());
    attach.target = Some(TargetKind::Target(target()));
    attach.unsettled = Some(map());
    attach.incomplete_unsettled = true;
    attach.initial_delivery_count = Some(4);
    attach.max_message_size = Some(1 << 40);
    attach.offered_capabilities = syms(&["x"]);
    attach.desired_capabilities = syms(&["y"]);
    attach.properties = Some(map());
    let mut coordinated = Attach::new("txn", 0, Role::Sender);
    coordinated.target = Some(TargetKind::Coordinator(Coordinator {
        capabilities: syms(&["amqp:local-transactions"]),
    }));
    let flow = Flow {
        next_incoming_id: Some(10),
        incoming_window: 100,
        next_outgoing_id: 11,
        outgoing_window: 200,
        handle: Some(1),
        delivery_count: Some(300),
        link_credit: Some(70_000),
        available: Some(0),
        drain: true,
        echo: true,
        properties: Some(map()),
    };
    let transfer = Transfer {
        handle: 2,
        delivery_id: Some(9),
        delivery_tag: Some(Bytes::from_static(b"tag")),
        message_format: Some(0),
        settled: Some(false),
        more: true,
        rcv_settle_mode: Some(ReceiverSettleMode::Second),
        state: Some(transactional()),
        resume: true,
        aborted: true,
        batchable: true,
    };
    let disposition = Disposition {
        role: Role::Receiver,
        first: 1,
        last: Some(100),
        settled: true,
        state: Some(DeliveryState::Modified {
            delivery_failed: true,
            undeliverable_here: true,
            message_annotations: Some(map()),
        }),
        batchable: true,
    };
    let detach = Detach {
        handle: 3,
        closed: true,
        error: Some(error()),
    };
    let header = Header {
        durable: true,
        priority: 9,
        ttl: Some(1000),
        first_acquirer: true,
        delivery_count: 2,
    };
    let properties = Properties {
        message_id: Some(MessageId::String(Str::from("id-1"))),
        user_id: Some(Bytes::from_static(b"user")),
        to: Some(Str::from("orders")),
        subject: Some(Str::from("subject")),
        reply_to: Some(Str::from("replies")),
        correlation_id: Some(MessageId::Ulong(42)),
        content_type: Some(Symbol::from("text/plain")),
        content_encoding: Some(Symbol::from("gzip")),
        absolute_expiry_time: Some(1_700_000_000_000),
        creation_time: Some(1_600_000_000_000),
        group_id: Some(Str::from("g")),
        group_sequence: Some(u32::MAX),
        reply_to_group_id: Some(Str::from("rg")),
    };
    let mut wrong = Vec::new();
    let mut go = |r: Option<String>| wrong.extend(r);
    go(check(&open, "005310c0600aa1026331a104686f737470000100006000097000007530e00801a305656e2d5553e00b02a305656e2d4742026465e01201a30f414e4f4e594d4f55532d52454c4159e01301a31044454c415945445f44454c4956455259c10602a3016b54f9"));
    go(check(&Open::new("c2"), "005310c00501a1026332"));
    go(check(
        &begin,
        "005311c026086000035201700000080070ffffffff5207e00401a30161e00401a30162c10602a3016b54f9",
    ));
    go(check(
        &Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 0,
            outgoing_window: 0,
            handle_max: u32::MAX,
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: None,
        },
        "005311c0050440434343",
    ));
    go(check(&attach, "005312c0d00ea1046c696e6b52054150015001005328c0630ba1066f72646572735202a3056e65766572521e41c10602a3016b54f9a304636f7079c10602a3016b54f900532645e02802a312616d71703a61636365707465643a6c69737412616d71703a72656a65637465643a6c697374e00801a305746f706963005329c02d07a1066f72646572735201a30b6c696e6b2d646574616368520141c10602a3016b54f9e00801a3057175657565c10602a3016b54f9415204800000010000000000e00401a30178e00401a30179c10602a3016b54f9"));
    go(check(&coordinated, "005312c02d07a10374786e4342404040005330c01d01e01a01a317616d71703a6c6f63616c2d7472616e73616374696f6e73"));
    go(check(
        &Attach::new("plain", 0, Role::Sender),
        "005312c00a03a105706c61696e4342",
    ));
    go(check(
        &flow,
        "005313c0200b520a5264520b52c85201700000012c7000011170434141c10602a3016b54f9",
    ));
    go(check(&Flow::default(), "005313c0050440434343"));
    go(check(&transfer, "005314c04f0b52025209a0037461674342415001005334c03802a00400000001005325c02c0100531dc02603a313616d71703a696e7465726e616c2d6572726f72a10662726f6b656ec10602a3016b54f9414141"));
    go(check(&Transfer::default(), "005314c0020143"));
    go(check(
        &disposition,
        "005315c01806415201526441005327c00b034141c10602a3016b54f941",
    ));
    go(check(
        &Disposition::accepted(4, 4),
        "005315c00a05415204404100532445",
    ));
    go(check(&detach, "005316c02f0352034100531dc02603a313616d71703a696e7465726e616c2d6572726f72a10662726f6b656ec10602a3016b54f9"));
    go(check(
        &Detach {
            handle: 0,
            closed: false,
            error: None,
        },
        "005316c0020143",
    ));
    go(check(&End { error: Some(error()) }, "005317c02c0100531dc02603a313616d71703a696e7465726e616c2d6572726f72a10662726f6b656ec10602a3016b54f9"));
    go(check(&End::default(), "00531745"));
    go(check(&Close { error: Some(error()) }, "005318c02c0100531dc02603a313616d71703a696e7465726e616c2d6572726f72a10662726f6b656ec10602a3016b54f9"));
    go(check(&Close::default(), "00531845"));
    go(check(
        &error(),
        "00531dc02603a313616d71703a696e7465726e616c2d6572726f72a10662726f6b656ec10602a3016b54f9",
    ));
    go(check(
        &AmqpError::new("amqp:not-found", None),
        "00531dc01101a30e616d71703a6e6f742d666f756e64",
    ));
    go(check(&source(), "005328c0630ba1066f72646572735202a3056e65766572521e41c10602a3016b54f9a304636f7079c10602a3016b54f900532645e02802a312616d71703a61636365707465643a6c69737412616d71703a72656a65637465643a6c697374e00801a305746f706963"));
    go(check(&Source::default(), "00532845"));
    go(check(&target(), "005329c02d07a1066f72646572735201a30b6c696e6b2d646574616368520141c10602a3016b54f9e00801a3057175657565"));
    go(check(&Target::default(), "00532945"));
    go(check(&Coordinator::default(), "00533045"));
    go(check(
        &Declare {
            global_id: Some(Value::Binary(Bytes::from_static(b"g"))),
        },
        "005331c00401a00167",
    ));
    go(check(&Declare::default(), "00533145"));
    go(check(
        &Discharge {
            txn_id: Bytes::from_static(&[1, 2]),
            fail: true,
        },
        "005332c00602a002010241",
    ));
    go(check(
        &Discharge {
            txn_id: Bytes::new(),
            fail: false,
        },
        "005332c00301a000",
    ));
    go(check(&header, "005370c00c0541500970000003e8415202"));
    go(check(&Header::default(), "00537045"));
    go(check(&properties, "005373c0590da10469642d31a00475736572a1066f7264657273a1077375626a656374a1077265706c696573532aa30a746578742f706c61696ea304677a6970830000018bcfe568008300000174876e8000a1016770ffffffffa1027267"));
    go(check(&Properties::default(), "00537345"));
    go(check(
        &SaslMechanisms {
            mechanisms: syms(&["PLAIN", "ANONYMOUS"]),
        },
        "005340c01501e01202a305504c41494e09414e4f4e594d4f5553",
    ));
    go(check(
        &SaslInit {
            mechanism: Symbol::from("PLAIN"),
            initial_response: Some(Bytes::from_static(b"\0u\0p")),
            hostname: Some(Str::from("host")),
        },
        "005341c01403a305504c41494ea00400750070a104686f7374",
    ));
    go(check(
        &SaslInit {
            mechanism: Symbol::from("ANONYMOUS"),
            initial_response: None,
            hostname: None,
        },
        "005341c00c01a309414e4f4e594d4f5553",
    ));
    go(check(
        &SaslChallenge {
            challenge: Bytes::from_static(b"c"),
        },
        "005342c00401a00163",
    ));
    go(check(
        &SaslResponse {
            response: Bytes::from_static(b"r"),
        },
        "005343c00401a00172",
    ));
    go(check(
        &SaslOutcome {
            code: SaslCode::SysTemp,
            additional_data: Some(Bytes::from_static(b"d")),
        },
        "005344c006025004a00164",
    ));
    go(check(
        &SaslOutcome {
            code: SaslCode::Ok,
            additional_data: None,
        },
        "005344c003015000",
    ));
    assert!(wrong.is_empty(), "encodings changed:\n{}", wrong.join("\n"));
}
