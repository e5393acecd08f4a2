//! Decode and encode of typical SEND / MESSAGE frames, small and large bodies.
//! Small frames report frames per second, large ones bytes per second.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tokio_util::codec::{Decoder, Encoder};
use weir::protocol::stomp::{Command, Frame, Inbound, StompCodec, Version};

const SIZES: [(&str, usize); 2] = [("256B", 256), ("64KiB", 64 * 1024)];

fn send(body: usize) -> Frame {
    Frame::new(Command::Send)
        .with_header("destination", "/queue/orders")
        .with_header("content-type", "application/octet-stream")
        .with_header("receipt", "r-1042")
        .with_header("JMSXGroupID", "customer-17")
        .with_body(Bytes::from(vec![b'x'; body]))
}

fn message(body: usize) -> Frame {
    Frame::new(Command::Message)
        .with_header("destination", "/queue/orders")
        .with_header("message-id", "ID:weir-1-1042")
        .with_header("subscription", "sub-0")
        .with_header("ack", "ID:weir-1-1042")
        .with_header("content-type", "application/octet-stream")
        .with_body(Bytes::from(vec![b'x'; body]))
}

fn codec() -> StompCodec {
    let mut codec = StompCodec::default();
    codec.set_version(Version::V1_2);
    codec
}

fn throughput(body: usize, wire: usize) -> Throughput {
    if body < 4096 {
        Throughput::Elements(1)
    } else {
        Throughput::Bytes(wire as u64)
    }
}

fn bench_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("stomp_decode");
    for (kind, make) in [("SEND", send as fn(usize) -> Frame), ("MESSAGE", message)] {
        for (label, body) in SIZES {
            let mut wire = BytesMut::new();
            codec()
                .encode(make(body), &mut wire)
                .expect("benchmark frame encodes");
            group.throughput(throughput(body, wire.len()));
            let mut decoder = codec();
            group.bench_function(format!("{kind}/{label}"), |b| {
                b.iter_batched_ref(
                    || wire.clone(),
                    |buf| match decoder.decode(buf) {
                        Ok(Some(Inbound::Frame(frame))) => black_box(frame),
                        other => panic!("benchmark frame did not decode: {other:?}"),
                    },
                    BatchSize::SmallInput,
                );
            });
        }
    }
    group.finish();
}

fn bench_encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("stomp_encode");
    for (kind, make) in [("SEND", send as fn(usize) -> Frame), ("MESSAGE", message)] {
        for (label, body) in SIZES {
            let frame = make(body);
            let mut encoder = codec();
            let mut dst = BytesMut::new();
            encoder
                .encode(&frame, &mut dst)
                .expect("benchmark frame encodes");
            group.throughput(throughput(body, dst.len()));
            group.bench_function(format!("{kind}/{label}"), |b| {
                b.iter(|| {
                    dst.clear();
                    encoder.encode(&frame, &mut dst).expect("encodes");
                    black_box(dst.len())
                });
            });
        }
    }
    group.finish();
}

/// A decoded SEND into a core message: the header pass, broker headers,
/// properties. The frame is a `weir perf` one plus a group id and a type.
fn bench_convert(c: &mut Criterion) {
    use weir::core::delay_headers::{DelayHeader, DelayHeaderNames};
    use weir::core::names::Names;
    use weir::protocol::stomp::convert::{message_from_send, parse_destination};
    let frame = send(256)
        .with_header("persistent", "false")
        .with_header("perf-run", "7301")
        .with_header("perf-p", "0")
        .with_header("perf-seq", "1042")
        .with_header("perf-ts", "1796025276000000");
    let dest = parse_destination("/queue/orders").expect("a queue name");
    let mut names = Names::default();
    // The names every queue reads as a delay by default.
    let delay_names = DelayHeaderNames::new(&DelayHeader::defaults());
    c.bench_function("stomp_convert/send_to_message", |b| {
        b.iter(|| {
            message_from_send(
                black_box(&frame),
                &dest,
                1_796_025_276_000,
                &mut names,
                &delay_names,
            )
        })
    });
}

criterion_group!(benches, bench_decode, bench_encode, bench_convert);
criterion_main!(benches);
