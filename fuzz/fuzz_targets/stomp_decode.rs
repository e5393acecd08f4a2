//! Any bytes into the STOMP decoder: it must never panic, must give the same
//! frames however the input is split into reads, and every frame it yields must
//! encode and decode back to itself.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::{Decoder, Encoder};
use weir::protocol::stomp::{Frame, Inbound, Limits, StompCodec, Version};

const LIMITS: Limits = Limits {
    max_frame_size: 4096,
    max_headers: 16,
    max_header_length: 512,
};

fn codec(version: Version, limits: Limits) -> StompCodec {
    let mut codec = StompCodec::new(limits);
    codec.set_version(version);
    codec
}

/// Items decoded from `input` fed in reads of `chunk` bytes, and whether the
/// decoder stopped on an error. EOLs split across reads may come out as several
/// heart-beats, so runs of them count as one.
fn decode(input: &[u8], chunk: usize, version: Version) -> (Vec<Inbound>, bool) {
    let mut codec = codec(version, LIMITS);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => break,
                Err(_) => return (merge_heartbeats(items), true),
            }
        }
        // Nothing beyond one frame's worth may pile up.
        assert!(buf.len() < LIMITS.max_frame_size + chunk);
    }
    (merge_heartbeats(items), false)
}

fn merge_heartbeats(mut items: Vec<Inbound>) -> Vec<Inbound> {
    items.dedup_by(|a, b| matches!((a, b), (Inbound::Heartbeat, Inbound::Heartbeat)));
    items
}

fn round_trip(frame: &Frame, version: Version) {
    let mut codec = codec(version, Limits::default());
    let mut wire = BytesMut::new();
    // Some decoded text cannot be re-encoded (a raw CR where nothing is escaped).
    if codec.encode(frame, &mut wire).is_err() {
        return;
    }
    let mut expected = frame.clone();
    if !frame.body.is_empty() && frame.header("content-length").is_none() {
        expected.add_header("content-length", frame.body.len().to_string());
    }
    match codec.decode(&mut wire) {
        Ok(Some(Inbound::Frame(again))) => assert_eq!(again, expected),
        other => panic!("re-encoded frame did not decode: {other:?}"),
    }
    assert!(wire.is_empty());
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let version = match control % 3 {
        0 => Version::V1_0,
        1 => Version::V1_1,
        _ => Version::V1_2,
    };
    let chunk = usize::from(control / 3) + 1;

    let whole = decode(input, input.len().max(1), version);
    let split = decode(input, chunk, version);
    assert_eq!(whole, split);

    for item in &whole.0 {
        if let Inbound::Frame(frame) = item {
            round_trip(frame, version);
        }
    }
});
