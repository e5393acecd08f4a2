//! Any bytes through the AMQP frame codec, value decoder and message parser: results or
//! errors, never a panic, and anything decoded must re-encode.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;
use weir::protocol::amqp::{AmqpFrameCodec, MessageView, Value};

fuzz_target!(|data: &[u8]| {
    // As a connection stream, with and without a valid protocol header in front.
    for prefix in [&b""[..], &b"AMQP\x00\x01\x00\x00"[..]] {
        let mut codec = AmqpFrameCodec::new(64 * 1024);
        let mut buf = BytesMut::from(prefix);
        buf.extend_from_slice(data);
        while let Ok(Some(_)) = codec.decode(&mut buf) {}
    }
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(v) = Value::decode_exact(&bytes) {
        let again = Value::decode_exact(&v.to_bytes());
        assert!(again.is_ok(), "re-encoded value must decode");
    }
    let _ = MessageView::parse(bytes);
});
