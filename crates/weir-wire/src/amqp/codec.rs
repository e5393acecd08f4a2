//! Transport framing (transport section 2.3): protocol headers, frames, and a tokio-util
//! codec that cuts frames out of the read buffer without copying their bodies.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::error::{AmqpCodecError, Result};
use super::performatives::Performative;
use super::sasl::SaslFrame;
use crate::read_ahead;
use crate::write_parts::WriteParts;

/// The smallest max-frame-size a peer may announce; frames up to this size are always
/// accepted before `open` has negotiated anything larger.
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

const FRAME_HEADER: usize = 8;
pub const FRAME_TYPE_AMQP: u8 = 0;
const FRAME_TYPE_SASL: u8 = 1;

/// `AMQP` + protocol id + version, exchanged before any frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolHeader {
    /// 0 = AMQP, 2 = TLS, 3 = SASL.
    pub id: u8,
    pub major: u8,
    pub minor: u8,
    pub revision: u8,
}

impl ProtocolHeader {
    pub const AMQP: ProtocolHeader = ProtocolHeader::v1_0(0);
    pub const TLS: ProtocolHeader = ProtocolHeader::v1_0(2);
    pub const SASL: ProtocolHeader = ProtocolHeader::v1_0(3);

    const fn v1_0(id: u8) -> Self {
        ProtocolHeader {
            id,
            major: 1,
            minor: 0,
            revision: 0,
        }
    }

    pub fn to_bytes(self) -> [u8; 8] {
        [
            b'A',
            b'M',
            b'Q',
            b'P',
            self.id,
            self.major,
            self.minor,
            self.revision,
        ]
    }

    /// Parses any `AMQP`-prefixed header; whether the version is acceptable is the
    /// connection's decision (it answers with its own header either way).
    pub fn parse(b: [u8; 8]) -> Result<Self> {
        if &b[..4] != b"AMQP" {
            return Err(AmqpCodecError::BadProtocolHeader(b));
        }
        Ok(ProtocolHeader {
            id: b[4],
            major: b[5],
            minor: b[6],
            revision: b[7],
        })
    }
}

/// An AMQP frame: channel, performative and, for a transfer, the message bytes (a slice of
/// the read buffer).
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpFrame {
    pub channel: u16,
    pub performative: Performative,
    pub payload: Bytes,
    /// Outgoing only: more of the payload, written after `payload`. A message sent on
    /// as it came (its sections as received) follows its new header from where it
    /// already is, instead of being copied next to it first. Empty when decoded.
    pub payload_tail: Bytes,
}

impl AmqpFrame {
    /// A frame without a payload.
    pub fn bare(channel: u16, performative: impl Into<Performative>) -> Self {
        AmqpFrame {
            channel,
            performative: performative.into(),
            payload: Bytes::new(),
            payload_tail: Bytes::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Amqp(AmqpFrame),
    Sasl(SaslFrame),
}

/// What the decoder yields.
// Boxing the frame would cost an allocation per frame to save a few moves of it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Header(ProtocolHeader),
    Frame(Frame),
    /// An empty AMQP frame: only resets the idle timer.
    Heartbeat,
}

/// What the encoder accepts.
// Boxing the frame would cost an allocation per frame to save a few moves of it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    Header(ProtocolHeader),
    Frame(Frame),
    Heartbeat,
}

/// Decodes one frame whose complete bytes (header included) are `frame`.
pub fn decode_frame(frame: Bytes) -> Result<Inbound> {
    let size = frame.len() as u32;
    if frame.len() < FRAME_HEADER {
        return Err(AmqpCodecError::FrameTooSmall(size));
    }
    let doff = frame[4];
    let frame_type = frame[5];
    let channel = u16::from_be_bytes([frame[6], frame[7]]);
    let body_start = usize::from(doff) * 4;
    if doff < 2 || body_start > frame.len() {
        return Err(AmqpCodecError::BadDataOffset { doff, size });
    }
    // The extended header (between byte 8 and the data offset) has no defined use: skipped.
    // Advanced past, not sliced: a slice is one more reference count up and down per frame.
    let mut body = frame;
    body.advance(body_start);
    match frame_type {
        FRAME_TYPE_AMQP if body.is_empty() => Ok(Inbound::Heartbeat),
        FRAME_TYPE_AMQP => {
            let performative = Performative::decode(&mut body)?;
            if !body.is_empty() && !matches!(performative, Performative::Transfer(_)) {
                return Err(AmqpCodecError::TrailingBytes(body.len()));
            }
            Ok(Inbound::Frame(Frame::Amqp(AmqpFrame {
                channel,
                performative,
                payload: body,
                payload_tail: Bytes::new(),
            })))
        }
        FRAME_TYPE_SASL if body.is_empty() => Err(AmqpCodecError::EmptySaslFrame),
        FRAME_TYPE_SASL => Ok(Inbound::Frame(Frame::Sasl(SaslFrame::decode(&body)?))),
        other => Err(AmqpCodecError::UnknownFrameType(other)),
    }
}

/// Appends a frame, returning its size. Transfer payloads are copied in after the
/// performative.
pub fn encode_frame(frame: &Frame, buf: &mut BytesMut) -> usize {
    let size = encode_head(frame, buf);
    if let Frame::Amqp(f) = frame {
        buf.put_slice(&f.payload_tail);
    }
    size
}

/// Appends `frame` as the encoder does, except that a large payload tail is
/// queued in `parts` instead of copied. A frame larger than `max` (the peer's
/// max-frame-size) is refused and leaves nothing behind.
pub fn encode_frame_sharing(
    frame: &Frame,
    max: u32,
    buf: &mut BytesMut,
    parts: &mut WriteParts,
) -> Result<usize> {
    encode_checked(frame, max, buf, |buf, tail| parts.put_body(buf, tail))
}

fn encode_checked(
    frame: &Frame,
    max: u32,
    buf: &mut BytesMut,
    put_tail: impl FnOnce(&mut BytesMut, &Bytes),
) -> Result<usize> {
    let start = buf.len();
    let size = encode_head(frame, buf);
    if size > max as usize {
        buf.truncate(start);
        return Err(AmqpCodecError::OutgoingFrameTooLarge { size, max });
    }
    if let Frame::Amqp(f) = frame {
        put_tail(buf, &f.payload_tail);
    }
    Ok(size)
}

/// Appends a frame header whose size is still to come; returns where it starts,
/// for [`finish_frame`].
pub fn begin_frame(buf: &mut BytesMut, frame_type: u8, channel: u16) -> usize {
    let start = buf.len();
    buf.put_u32(0);
    buf.put_u8(2);
    buf.put_u8(frame_type);
    buf.put_u16(channel);
    start
}

/// Sets the size of the frame begun at `start`: what `buf` holds since, plus
/// `tail` bytes that will follow it without passing through `buf`; returns it.
pub fn finish_frame(buf: &mut BytesMut, start: usize, tail: usize) -> usize {
    let size = buf.len() - start + tail;
    buf[start..start + 4].copy_from_slice(&(size as u32).to_be_bytes());
    size
}

/// Appends all of a frame but its payload tail, with a size that counts the
/// tail; returns that size.
fn encode_head(frame: &Frame, buf: &mut BytesMut) -> usize {
    let (frame_type, channel, tail) = match frame {
        Frame::Amqp(f) => (FRAME_TYPE_AMQP, f.channel, f.payload_tail.len()),
        Frame::Sasl(_) => (FRAME_TYPE_SASL, 0, 0),
    };
    let start = begin_frame(buf, frame_type, channel);
    match frame {
        Frame::Amqp(f) => {
            f.performative.encode(buf);
            buf.put_slice(&f.payload);
        }
        Frame::Sasl(s) => s.encode(buf),
    }
    finish_frame(buf, start, tail)
}

const HEARTBEAT: [u8; 8] = [0, 0, 0, 8, 2, FRAME_TYPE_AMQP, 0, 0];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHeader,
    Frames,
}

/// tokio-util codec: a protocol header first, then frames.
///
/// After a SASL exchange the client sends a second header; the decoder recognises a header
/// by its `AMQP` prefix at a frame boundary (as a frame size that would be over 1 GiB, it
/// cannot be a legal frame under any sane limit), so the connection needs no extra call.
#[derive(Debug)]
pub struct AmqpFrameCodec {
    state: State,
    max_frame_size: u32,
    remote_max_frame_size: u32,
    /// Length of the last whole frame: what read-ahead may be sized by.
    last_whole: usize,
}

impl Default for AmqpFrameCodec {
    fn default() -> Self {
        Self::new(MIN_MAX_FRAME_SIZE)
    }
}

impl AmqpFrameCodec {
    /// A codec expecting a protocol header, accepting frames up to `max_frame_size` bytes
    /// (never less than 512, the spec's floor).
    pub fn new(max_frame_size: u32) -> Self {
        AmqpFrameCodec {
            state: State::AwaitHeader,
            max_frame_size: max_frame_size.max(MIN_MAX_FRAME_SIZE),
            remote_max_frame_size: u32::MAX,
            last_whole: 0,
        }
    }

    /// Our limit for inbound frames (what we announced in `open`).
    pub fn set_max_frame_size(&mut self, size: u32) {
        self.max_frame_size = size.max(MIN_MAX_FRAME_SIZE);
    }

    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// The largest frame the peer takes.
    pub fn remote_max_frame_size(&self) -> u32 {
        self.remote_max_frame_size
    }

    /// The peer's limit for frames we send (from its `open`).
    pub fn set_remote_max_frame_size(&mut self, size: u32) {
        self.remote_max_frame_size = size.max(MIN_MAX_FRAME_SIZE);
    }

    /// Require a protocol header next (e.g. after a SASL outcome).
    pub fn expect_header(&mut self) {
        self.state = State::AwaitHeader;
    }
}

impl Decoder for AmqpFrameCodec {
    type Item = Inbound;
    type Error = AmqpCodecError;

    #[inline]
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>> {
        let prefix = &src[..src.len().min(4)];
        let is_header = prefix == &b"AMQP"[..prefix.len()];
        if self.state == State::AwaitHeader || (src.len() >= 4 && is_header) {
            if !is_header {
                let mut got = [0u8; 8];
                let n = src.len().min(8);
                got[..n].copy_from_slice(&src[..n]);
                return Err(AmqpCodecError::BadProtocolHeader(got));
            }
            if src.len() < 8 {
                return Ok(None);
            }
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&src[..8]);
            src.advance(8);
            self.state = State::Frames;
            return ProtocolHeader::parse(raw).map(|h| Some(Inbound::Header(h)));
        }
        if src.len() < 4 {
            return Ok(None);
        }
        let size = u32::from_be_bytes([src[0], src[1], src[2], src[3]]);
        if (size as usize) < FRAME_HEADER {
            return Err(AmqpCodecError::FrameTooSmall(size));
        }
        if size > self.max_frame_size {
            return Err(AmqpCodecError::FrameTooLarge {
                size,
                max: self.max_frame_size,
            });
        }
        let size = size as usize;
        if src.len() < size {
            read_ahead::reserve_frame(src, size, self.last_whole);
            return Ok(None);
        }
        self.last_whole = size;
        decode_frame(src.split_to(size).freeze()).map(Some)
    }
}

impl Encoder<Outbound> for AmqpFrameCodec {
    type Error = AmqpCodecError;

    #[inline]
    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> Result<()> {
        match item {
            Outbound::Header(h) => dst.extend_from_slice(&h.to_bytes()),
            Outbound::Heartbeat => dst.extend_from_slice(&HEARTBEAT),
            Outbound::Frame(f) => {
                encode_checked(&f, self.remote_max_frame_size, dst, |buf, tail| {
                    buf.put_slice(tail)
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::amqp::condition;
    use crate::amqp::described::Composite;
    use crate::amqp::performatives::{Close, Open, Transfer};
    use crate::amqp::sasl::{SaslCode, SaslOutcome};

    fn amqp(channel: u16, p: Performative, payload: &'static [u8]) -> Frame {
        Frame::Amqp(AmqpFrame {
            channel,
            performative: p,
            payload: Bytes::from_static(payload),
            payload_tail: Bytes::new(),
        })
    }

    fn encode_all(items: Vec<Outbound>) -> BytesMut {
        let mut c = AmqpFrameCodec::new(1 << 20);
        let mut buf = BytesMut::new();
        for i in items {
            c.encode(i, &mut buf).unwrap();
        }
        buf
    }

    fn sample() -> (Vec<Outbound>, Vec<Inbound>) {
        let open = amqp(0, Open::new("c").into(), b"");
        let transfer = amqp(
            3,
            Transfer {
                handle: 1,
                delivery_id: Some(0),
                delivery_tag: Some(Bytes::from_static(b"t")),
                ..Transfer::default()
            }
            .into(),
            b"\x00\x53\x75\xa0\x02hi",
        );
        let sasl = Frame::Sasl(SaslFrame::Outcome(SaslOutcome {
            code: SaslCode::Ok,
            additional_data: None,
        }));
        let out = vec![
            Outbound::Header(ProtocolHeader::SASL),
            Outbound::Frame(sasl.clone()),
            Outbound::Header(ProtocolHeader::AMQP),
            Outbound::Frame(open.clone()),
            Outbound::Heartbeat,
            Outbound::Frame(transfer.clone()),
        ];
        let inb = vec![
            Inbound::Header(ProtocolHeader::SASL),
            Inbound::Frame(sasl),
            Inbound::Header(ProtocolHeader::AMQP),
            Inbound::Frame(open),
            Inbound::Heartbeat,
            Inbound::Frame(transfer),
        ];
        (out, inb)
    }

    #[test]
    fn headers_on_the_wire() {
        assert_eq!(&ProtocolHeader::AMQP.to_bytes(), b"AMQP\x00\x01\x00\x00");
        assert_eq!(&ProtocolHeader::SASL.to_bytes(), b"AMQP\x03\x01\x00\x00");
        assert_eq!(
            ProtocolHeader::parse(*b"AMQP\x00\x01\x00\x00").unwrap(),
            ProtocolHeader::AMQP
        );
        assert!(ProtocolHeader::parse(*b"HTTP/1.1").is_err());
    }

    #[test]
    fn whole_buffer_and_byte_by_byte_decode_agree() {
        let (out, expected) = sample();
        let wire = encode_all(out);

        let mut c = AmqpFrameCodec::default();
        let mut buf = wire.clone();
        let mut got = Vec::new();
        while let Some(item) = c.decode(&mut buf).unwrap() {
            got.push(item);
        }
        assert_eq!(got, expected);
        assert!(buf.is_empty());

        let mut c = AmqpFrameCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in wire.iter() {
            buf.extend_from_slice(&[*b]);
            while let Some(item) = c.decode(&mut buf).unwrap() {
                got.push(item);
            }
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn golden_frames() {
        // close on channel 0, list0: 8-byte header + 00 53 18 45
        let wire = encode_all(vec![Outbound::Frame(amqp(0, Close::default().into(), b""))]);
        assert_eq!(
            &wire[..],
            &[0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x18, 0x45]
        );
        let hb = encode_all(vec![Outbound::Heartbeat]);
        assert_eq!(&hb[..], &[0, 0, 0, 8, 2, 0, 0, 0]);
    }

    #[test]
    fn transfer_payload_is_a_slice_of_the_read_buffer() {
        let (out, _) = sample();
        let wire = encode_all(out).freeze();
        let mut c = AmqpFrameCodec::default();
        let mut buf = BytesMut::from(&wire[..]);
        let base = buf.as_ptr() as usize;
        let end = base + buf.len();
        let mut payload = None;
        while let Some(item) = c.decode(&mut buf).unwrap() {
            if let Inbound::Frame(Frame::Amqp(f)) = item {
                if matches!(f.performative, Performative::Transfer(_)) {
                    payload = Some(f.payload);
                }
            }
        }
        let p = payload.unwrap();
        let at = p.as_ptr() as usize;
        assert!(at >= base && at + p.len() <= end, "payload was copied");
    }

    #[test]
    fn extended_header_is_skipped_and_channel_kept() {
        let mut f = vec![0, 0, 0, 16, 3, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef];
        f.extend_from_slice(&[0x00, 0x53, 0x18, 0x45]);
        let got = decode_frame(Bytes::from(f)).unwrap();
        assert_eq!(got, Inbound::Frame(amqp(9, Close::default().into(), b"")));
    }

    #[test]
    fn framing_errors() {
        let mut c = AmqpFrameCodec::default();
        let mut buf = BytesMut::from(&b"AMQP\x00\x01\x00\x00"[..]);
        c.decode(&mut buf).unwrap();
        // Oversize: rejected as soon as the size field is visible.
        buf.extend_from_slice(&[0, 0x10, 0, 0]);
        let e = c.decode(&mut buf).unwrap_err();
        assert!(matches!(
            e,
            AmqpCodecError::FrameTooLarge {
                size: 0x0010_0000,
                max: 512
            }
        ));
        assert_eq!(e.condition(), condition::CONNECTION_FRAMING_ERROR);

        c.set_max_frame_size(1 << 21);
        assert!(c.decode(&mut buf).unwrap().is_none());

        let mut buf = BytesMut::from(&[0, 0, 0, 4][..]);
        assert!(matches!(
            c.decode(&mut buf),
            Err(AmqpCodecError::FrameTooSmall(4))
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 8, 1, 0, 0, 0][..]);
        assert!(matches!(
            c.decode(&mut buf),
            Err(AmqpCodecError::BadDataOffset { .. })
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 8, 3, 0, 0, 0][..]);
        assert!(matches!(
            c.decode(&mut buf),
            Err(AmqpCodecError::BadDataOffset { .. })
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 9, 2, 7, 0, 0, 0x40][..]);
        assert!(matches!(
            c.decode(&mut buf),
            Err(AmqpCodecError::UnknownFrameType(7))
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 8, 2, 1, 0, 0][..]);
        assert!(matches!(
            c.decode(&mut buf),
            Err(AmqpCodecError::EmptySaslFrame)
        ));
        // Bytes after a non-transfer performative.
        let mut buf = BytesMut::from(&[0, 0, 0, 13, 2, 0, 0, 0, 0x00, 0x53, 0x18, 0x45, 0x40][..]);
        assert!(c.decode(&mut buf).is_err());

        // Not AMQP at all: refused after the first wrong byte.
        let mut c = AmqpFrameCodec::default();
        let mut buf = BytesMut::from(&b"CON"[..]);
        let e = c.decode(&mut buf).unwrap_err();
        assert!(matches!(e, AmqpCodecError::BadProtocolHeader(_)));
    }

    #[test]
    fn a_payload_tail_is_sent_after_the_payload() {
        let frame = Frame::Amqp(AmqpFrame {
            channel: 3,
            performative: Transfer::default().into(),
            payload: Bytes::from_static(b"head"),
            payload_tail: Bytes::from_static(b"and tail"),
        });
        let mut buf = BytesMut::new();
        let size = encode_frame(&frame, &mut buf);
        assert_eq!(size, buf.len());
        match decode_frame(buf.freeze()).unwrap() {
            Inbound::Frame(Frame::Amqp(f)) => {
                assert_eq!(&f.payload[..], b"headand tail");
                assert!(f.payload_tail.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_large_payload_tail_is_queued_uncopied_and_the_frame_reads_back_the_same() {
        let tail = Bytes::from((0..20_000u32).map(|i| i as u8).collect::<Vec<_>>());
        let frame = Frame::Amqp(AmqpFrame {
            channel: 3,
            performative: Transfer::default().into(),
            payload: Bytes::from_static(b"head"),
            payload_tail: tail.clone(),
        });
        let mut copied = BytesMut::new();
        encode_frame(&frame, &mut copied);
        let mut buf = BytesMut::new();
        let mut parts = WriteParts::default();
        let size = encode_frame_sharing(&frame, u32::MAX, &mut buf, &mut parts).unwrap();
        assert_eq!(size, copied.len());
        assert!(
            buf.is_empty(),
            "the head went ahead of the tail, the tail was not copied"
        );
        parts.seal(&mut buf);
        assert_eq!(parts.gathered(), copied.to_vec());
        // Refused when too large, leaving what was there before.
        let mut buf = BytesMut::from(&b"xy"[..]);
        let mut parts = WriteParts::default();
        let e = encode_frame_sharing(&frame, 16_384, &mut buf, &mut parts).unwrap_err();
        assert!(matches!(e, AmqpCodecError::OutgoingFrameTooLarge { .. }));
        assert_eq!(&buf[..], b"xy");
        assert!(parts.is_empty());
    }

    #[test]
    fn outgoing_frames_respect_the_peer_limit() {
        let mut c = AmqpFrameCodec::default();
        c.set_remote_max_frame_size(512);
        let big = Frame::Amqp(AmqpFrame {
            channel: 0,
            performative: Transfer::default().into(),
            payload: Bytes::from(vec![0u8; 600]),
            payload_tail: Bytes::new(),
        });
        let mut buf = BytesMut::from(&b"xy"[..]);
        let e = c.encode(Outbound::Frame(big), &mut buf).unwrap_err();
        assert_eq!(e.condition(), condition::FRAME_SIZE_TOO_SMALL);
        assert_eq!(&buf[..], b"xy");
        let open = Frame::Amqp(AmqpFrame {
            channel: 0,
            performative: Open::new("c").into(),
            payload: Bytes::new(),
            payload_tail: Bytes::new(),
        });
        c.encode(Outbound::Frame(open), &mut buf).unwrap();
        assert_eq!(buf.len(), 2 + 8 + Open::new("c").to_bytes().len());
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(b in prop::collection::vec(any::<u8>(), 0..300), header in any::<bool>()) {
            let mut c = AmqpFrameCodec::new(1024);
            let mut buf = BytesMut::new();
            if header {
                buf.extend_from_slice(b"AMQP\x00\x01\x00\x00");
            }
            buf.extend_from_slice(&b);
            while let Ok(Some(_)) = c.decode(&mut buf) {}
        }

        #[test]
        fn frames_with_random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..200), ty in 0u8..3) {
            let mut f = vec![0u8, 0, 0, 0, 2, ty, 0, 1];
            f.extend_from_slice(&body);
            let size = f.len() as u32;
            f[..4].copy_from_slice(&size.to_be_bytes());
            let _ = decode_frame(Bytes::from(f));
        }
    }
}
