//! Decode and encode of a transfer frame carrying a 256 B data-body message with header,
//! properties and application-properties, as Qpid JMS sends one.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tokio_util::codec::{Decoder, Encoder};
use weir::core::delay_headers::{DelayHeader, DelayHeaderNames};
use weir::protocol::amqp::codec::decode_frame;
use weir::protocol::amqp::convert::inbound;
use weir::protocol::amqp::{
    AmqpFrame, AmqpFrameCodec, Body, Frame, Header, Inbound, Message, MessageId, MessageView,
    Outbound, Performative, Properties, ProtocolHeader, Str, Symbol, Transfer, Value,
};

fn message() -> Message {
    Message {
        header: Some(Header {
            durable: true,
            ..Header::default()
        }),
        message_annotations: Some(vec![(Value::symbol("x-opt-jms-msg-type"), Value::Byte(3))]),
        properties: Some(Properties {
            message_id: Some(MessageId::String(Str::from(
                "ID:7d8f2c1e-5a4b-4c3d-9e8f-0a1b2c3d4e5f:1:1:1-1",
            ))),
            to: Some(Str::from("orders")),
            content_type: Some(Symbol::from("application/octet-stream")),
            creation_time: Some(1_700_000_000_000),
            group_id: Some(Str::from("customer-42")),
            group_sequence: Some(7),
            ..Properties::default()
        }),
        application_properties: Some(vec![
            (Value::string("region"), Value::string("eu-west")),
            (Value::string("attempt"), Value::Int(1)),
            (Value::string("priority-class"), Value::string("gold")),
        ]),
        body: Body::Data(vec![Bytes::from(vec![0x5a; 256])]),
        ..Message::default()
    }
}

/// What `weir perf` sends: a durable 256 B body with four numeric application properties.
fn perf_message() -> Message {
    Message {
        header: Some(Header {
            durable: true,
            ..Header::default()
        }),
        application_properties: Some(vec![
            (Value::string("perf-run"), Value::Ulong(0x1234_5678_9abc)),
            (Value::string("perf-p"), Value::Uint(3)),
            (Value::string("perf-seq"), Value::Ulong(1_000_000)),
            (
                Value::string("perf-ts"),
                Value::Ulong(1_700_000_000_000_000),
            ),
        ]),
        body: Body::Data(vec![Bytes::from(vec![0x5a; 256])]),
        ..Message::default()
    }
}

fn transfer(payload: Bytes) -> Outbound {
    Outbound::Frame(Frame::Amqp(AmqpFrame {
        channel: 1,
        performative: Transfer {
            handle: 0,
            delivery_id: Some(12345),
            delivery_tag: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0x30, 0x39])),
            message_format: Some(0),
            settled: Some(false),
            ..Transfer::default()
        }
        .into(),
        payload,
        payload_tail: Bytes::new(),
    }))
}

fn bench(c: &mut Criterion) {
    let payload = message().to_bytes();
    let mut codec = AmqpFrameCodec::new(1 << 20);
    // A decoder expects the protocol header first; the frame follows it.
    let mut wire = BytesMut::new();
    codec
        .encode(Outbound::Header(ProtocolHeader::AMQP), &mut wire)
        .unwrap();
    codec.encode(transfer(payload.clone()), &mut wire).unwrap();
    let wire = wire.freeze();

    let mut g = c.benchmark_group("amqp_transfer_256B");
    g.throughput(Throughput::Bytes(wire.len() as u64));

    g.bench_function("decode_frame", |b| {
        b.iter_batched_ref(
            || BytesMut::from(&wire[..]),
            |buf| {
                let mut codec = AmqpFrameCodec::new(1 << 20);
                codec.decode(buf).unwrap();
                black_box(codec.decode(buf).unwrap())
            },
            BatchSize::SmallInput,
        )
    });

    // Parse cost alone: the frame is already cut out of the read buffer.
    let frame = wire.slice(8..);
    g.bench_function("parse_cut_frame", |b| {
        b.iter(|| black_box(decode_frame(black_box(frame.clone())).unwrap()))
    });
    g.bench_function("parse_cut_frame_and_message", |b| {
        b.iter(|| {
            let Inbound::Frame(Frame::Amqp(f)) = decode_frame(black_box(frame.clone())).unwrap()
            else {
                unreachable!()
            };
            black_box(MessageView::parse(f.payload).unwrap())
        })
    });

    g.bench_function("decode_frame_and_message", |b| {
        b.iter_batched_ref(
            || BytesMut::from(&wire[..]),
            |buf| {
                let mut codec = AmqpFrameCodec::new(1 << 20);
                codec.decode(buf).unwrap();
                let Some(Inbound::Frame(Frame::Amqp(f))) = codec.decode(buf).unwrap() else {
                    unreachable!()
                };
                assert!(matches!(f.performative, Performative::Transfer(_)));
                black_box(MessageView::parse(f.payload).unwrap())
            },
            BatchSize::SmallInput,
        )
    });

    // What the broker does with each message it takes in: parse, then convert
    // to a core message (application properties checked, left encoded until read).
    let address: std::sync::Arc<str> = std::sync::Arc::from("orders");
    // The names every queue reads as a delay by default.
    let delay_names = DelayHeaderNames::new(&DelayHeader::defaults());
    for (name, body) in [
        ("parse_and_convert_jms_message", payload.clone()),
        ("parse_and_convert_perf_message", perf_message().to_bytes()),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let view = MessageView::parse(black_box(body.clone())).unwrap();
                black_box(
                    inbound(
                        &view,
                        address.clone(),
                        1_700_000_000_000,
                        || 1_700_000_000_000,
                        &delay_names,
                    )
                    .unwrap(),
                )
            })
        });
    }

    let msg = message();
    let mut out = BytesMut::with_capacity(4096);
    g.bench_function("encode_message_and_frame", |b| {
        b.iter(|| {
            out.clear();
            let payload = black_box(&msg).to_bytes();
            let mut codec = AmqpFrameCodec::new(1 << 20);
            codec.encode(transfer(payload), &mut out).unwrap();
            black_box(out.len())
        })
    });

    g.bench_function("encode_frame_prebuilt_payload", |b| {
        b.iter(|| {
            out.clear();
            codec.encode(transfer(payload.clone()), &mut out).unwrap();
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
