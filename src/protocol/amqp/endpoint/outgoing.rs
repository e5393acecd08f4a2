//! Frames on their way out, encoded as they are queued.
//!
//! Handlers used to queue `Frame` values (224 bytes each, a transfer's payload
//! copied into a staging buffer first) that the flush then encoded into the
//! write buffer, copying the payload a second time. Now a frame is encoded
//! when it is queued, and a delivery's transfer and message are written
//! straight into the bytes that go out: one copy of a short message, none of a
//! long one (its sections are queued in [`WriteParts`] as the slices they are).
//!
//! The last frame queued stays a `Frame` until another one follows or the
//! flush comes, so an acceptance can still widen the disposition before it.

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWrite;
use tokio_util::codec::Framed;

use crate::protocol::amqp::wire::codec::{
    begin_frame, encode_frame_sharing, finish_frame, AmqpFrame, AmqpFrameCodec, Frame,
    FRAME_TYPE_AMQP,
};
use crate::protocol::amqp::wire::error::AmqpCodecError;
use crate::protocol::amqp::wire::performatives::{encode_delivery_start, Performative, Transfer};
use crate::protocol::write_parts::WriteParts;

/// A buffer this large after a flush is given up for a fresh one, so a burst
/// does not leave every connection holding its high-water mark.
const KEEP_AT_MOST: usize = 256 * 1024;

/// Room a buffer starts with (and gets back when it gave up a large one): an
/// idle connection holds it, a busy one grows it by writing.
const START_WITH: usize = 4 * 1024;

/// What a transfer performative may take in a frame, with room to spare.
const TRANSFER_OVERHEAD: usize = 64;

/// Where a delivery went: into the outgoing bytes as one frame, or back to the
/// caller because it needs several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    OneFrame,
    TooLarge,
}

/// The first transfer of a delivery the broker sends.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryStart {
    pub channel: u16,
    pub handle: u32,
    pub delivery_id: u32,
    pub settled: bool,
}

pub struct Outgoing {
    buf: BytesMut,
    parts: WriteParts,
    /// Queued but not yet encoded (see the module comment).
    last: Option<Frame>,
    /// The peer's max-frame-size, as the codec enforces it.
    max_frame: u32,
    /// The peer's max-frame-size as it announced it: what a delivery too
    /// large for one frame is split to.
    split_at: u32,
    /// Where a delivery too large for one frame is built before it is split.
    staging: Staging,
    /// A frame that could not be encoded: nothing after it is queued, and the
    /// flush reports it once what came before is written.
    failed: Option<AmqpCodecError>,
    /// Deliveries queued since the connection opened, for management.
    deliveries: u64,
}

impl Default for Outgoing {
    fn default() -> Self {
        Outgoing {
            buf: BytesMut::with_capacity(START_WITH),
            parts: WriteParts::default(),
            last: None,
            max_frame: u32::MAX,
            split_at: u32::MAX,
            staging: Staging::default(),
            failed: None,
            deliveries: 0,
        }
    }
}

impl Outgoing {
    pub fn set_max_frame(&mut self, max: u32) {
        self.max_frame = max;
    }

    /// The peer's max-frame-size as its `open` gave it (the codec raises it to the
    /// spec's minimum; a split delivery uses it as it is).
    pub fn set_split_at(&mut self, announced: u32) {
        self.split_at = announced;
    }

    /// Deliveries queued since the connection opened (once each, however many
    /// frames it took).
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_none() && self.buf.is_empty() && self.parts.is_empty()
    }

    /// Queues `frame`.
    pub fn push(&mut self, frame: Frame) {
        self.encode_last();
        if self.failed.is_none() {
            self.last = Some(frame);
        }
    }

    /// Queues a frame without a payload.
    pub fn frame(&mut self, channel: u16, performative: impl Into<Performative>) {
        self.push(Frame::Amqp(AmqpFrame::bare(channel, performative)));
    }

    /// The frame queued last, while it can still change.
    pub fn last_mut(&mut self) -> Option<&mut Frame> {
        self.last.as_mut()
    }

    /// Forgets everything queued (a connection about to close with an error).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.parts = WriteParts::default();
        self.last = None;
        self.failed = None;
    }

    /// Queues one delivery as a single transfer frame: its head, then what
    /// `write_message` appends to the buffer and, when it returns one, a tail
    /// that follows uncopied. A delivery that does not fit the peer's frame
    /// size leaves nothing behind: the caller splits it.
    pub fn delivery(
        &mut self,
        start: DeliveryStart,
        write_message: impl FnOnce(&mut BytesMut) -> Option<Bytes>,
    ) -> Placed {
        self.encode_last();
        if self.failed.is_some() {
            // Nothing more goes out; the flush reports why.
            return Placed::OneFrame;
        }
        let at = begin_frame(&mut self.buf, FRAME_TYPE_AMQP, start.channel);
        encode_delivery_start(
            &mut self.buf,
            start.handle,
            start.delivery_id,
            start.settled,
        );
        let tail = write_message(&mut self.buf).unwrap_or_default();
        if finish_frame(&mut self.buf, at, tail.len()) > self.max_frame as usize {
            self.buf.truncate(at);
            return Placed::TooLarge;
        }
        self.parts.put_body(&mut self.buf, &tail);
        self.deliveries += 1;
        Placed::OneFrame
    }

    /// Queues a delivery that [`Outgoing::delivery`] found too large for one
    /// frame, split to the peer's frame size: `write_message` fills a buffer of
    /// `len` bytes (and may return a tail). Returns how many frames (transfer
    /// ids) it took.
    pub fn split_delivery(
        &mut self,
        start: DeliveryStart,
        len: usize,
        write_message: impl FnOnce(&mut BytesMut) -> Option<Bytes>,
    ) -> u32 {
        let tail = write_message(self.staging.room(len));
        let payload = self.staging.take();
        self.deliveries += 1;
        self.send_transfer(start, payload, tail.unwrap_or_default())
    }

    /// Queues the transfer frames of one delivery, split to the peer's frame size; returns
    /// how many frames (transfer ids) it took.
    fn send_transfer(&mut self, start: DeliveryStart, payload: Bytes, tail: Bytes) -> u32 {
        let DeliveryStart {
            channel,
            handle,
            delivery_id,
            settled,
        } = start;
        let limit = (self.split_at as usize)
            .saturating_sub(8 + TRANSFER_OVERHEAD)
            .max(64);
        // One frame takes the tail as it is; split over several, the payload is one piece.
        let (mut rest, mut tail) = if payload.len() + tail.len() <= limit || tail.is_empty() {
            (payload, tail)
        } else {
            let whole = self.staging.room(payload.len() + tail.len());
            whole.extend_from_slice(&payload);
            whole.extend_from_slice(&tail);
            (self.staging.take(), Bytes::new())
        };
        let mut first = true;
        let mut frames = 0;
        loop {
            let chunk = rest.split_to(rest.len().min(limit));
            let more = !rest.is_empty();
            let transfer = if first {
                Transfer {
                    handle,
                    delivery_id: Some(delivery_id),
                    delivery_tag: Some({
                        bytes::BufMut::put_u32(self.staging.room(4), delivery_id);
                        self.staging.take()
                    }),
                    message_format: Some(0),
                    settled: Some(settled),
                    more,
                    ..Transfer::default()
                }
            } else {
                Transfer {
                    handle,
                    more,
                    ..Transfer::default()
                }
            };
            self.push(Frame::Amqp(AmqpFrame {
                channel,
                performative: transfer.into(),
                payload: chunk,
                payload_tail: std::mem::take(&mut tail),
            }));
            frames += 1;
            first = false;
            if !more {
                return frames;
            }
        }
    }

    fn encode_last(&mut self) {
        let Some(frame) = self.last.take() else {
            return;
        };
        if let Err(e) = encode_frame_sharing(&frame, self.max_frame, &mut self.buf, &mut self.parts)
        {
            self.failed = Some(e);
        }
    }

    /// Writes everything queued, in order, then returns the error of a frame
    /// that could not be encoded, if one could not.
    pub async fn write_to<S: AsyncWrite + Unpin>(
        &mut self,
        framed: &mut Framed<S, AmqpFrameCodec>,
    ) -> Result<(), AmqpCodecError> {
        use futures_util::SinkExt;
        self.encode_last();
        let wb = framed.write_buffer_mut();
        if wb.is_empty() {
            // Hand the whole buffer over instead of copying it.
            std::mem::swap(wb, &mut self.buf);
        } else {
            wb.extend_from_slice(&self.buf);
            self.buf.clear();
        }
        self.parts.write_framed(framed).await?;
        SinkExt::<crate::protocol::amqp::wire::codec::Outbound>::flush(framed).await?;
        if self.buf.capacity() > KEEP_AT_MOST {
            self.buf = BytesMut::with_capacity(START_WITH);
        }
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Everything queued, as it would be written.
    #[cfg(test)]
    pub(crate) fn gathered(&mut self) -> Vec<u8> {
        self.encode_last();
        let mut all = self.parts.gathered();
        all.extend_from_slice(&self.buf);
        all
    }
}

/// Bytes for outgoing frames, cut from chunks of [`Staging::CHUNK`] bytes:
/// a delivery too large for one frame is built here before it is split, not in
/// an allocation of its own.
#[derive(Default)]
struct Staging(BytesMut);

impl Staging {
    const CHUNK: usize = 64 * 1024;

    /// A buffer with room for `len` bytes, to fill and then `take`.
    fn room(&mut self, len: usize) -> &mut BytesMut {
        if self.0.capacity() < len {
            // What is still unused of the old chunk stays with the slices cut from it.
            self.0 = BytesMut::with_capacity(len.max(Self::CHUNK));
        }
        &mut self.0
    }

    /// What was written since the last `take`.
    fn take(&mut self) -> Bytes {
        self.0.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::amqp::wire::codec::{decode_frame, AmqpFrame, Inbound};
    use crate::protocol::amqp::wire::definitions::Role;
    use crate::protocol::amqp::wire::performatives::{Disposition, Flow, Performative, Transfer};

    fn start() -> DeliveryStart {
        DeliveryStart {
            channel: 3,
            handle: 7,
            delivery_id: 0x0102_0304,
            settled: false,
        }
    }

    /// The frames in `bytes`, decoded one by one.
    fn frames(bytes: &[u8]) -> Vec<AmqpFrame> {
        let mut rest = Bytes::copy_from_slice(bytes);
        let mut out = Vec::new();
        while !rest.is_empty() {
            let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            match decode_frame(rest.split_to(size)).unwrap() {
                Inbound::Frame(Frame::Amqp(f)) => out.push(f),
                other => panic!("not an AMQP frame: {other:?}"),
            }
        }
        out
    }

    #[test]
    fn a_delivery_is_the_transfer_the_frame_encoder_writes() {
        let body = Bytes::from(vec![0x5a; 300]);
        let tail = Bytes::from(vec![0xa5; 5000]);
        let mut out = Outgoing::default();
        let placed = out.delivery(start(), |buf| {
            buf.extend_from_slice(&body);
            Some(tail.clone())
        });
        assert_eq!(placed, Placed::OneFrame);
        let mut expected = BytesMut::new();
        let transfer = Transfer {
            handle: 7,
            delivery_id: Some(0x0102_0304),
            delivery_tag: Some(Bytes::from_static(&[1, 2, 3, 4])),
            message_format: Some(0),
            settled: Some(false),
            ..Transfer::default()
        };
        crate::protocol::amqp::wire::codec::encode_frame(
            &Frame::Amqp(AmqpFrame {
                channel: 3,
                performative: transfer.into(),
                payload: body,
                payload_tail: tail,
            }),
            &mut expected,
        );
        assert_eq!(out.gathered(), expected.to_vec());
    }

    #[test]
    fn a_delivery_larger_than_the_peers_frames_leaves_nothing_behind() {
        let mut out = Outgoing::default();
        out.set_max_frame(512);
        out.push(Frame::Amqp(AmqpFrame::bare(0, Flow::default())));
        let placed = out.delivery(start(), |_| Some(Bytes::from(vec![0; 600])));
        assert_eq!(placed, Placed::TooLarge);
        let left = frames(&out.gathered());
        assert_eq!(left.len(), 1, "only the flow");
        assert!(matches!(left[0].performative, Performative::Flow(_)));
    }

    #[test]
    fn frames_go_out_in_the_order_queued_and_the_last_can_still_change() {
        let mut out = Outgoing::default();
        out.push(Frame::Amqp(AmqpFrame::bare(
            1,
            Disposition {
                role: Role::Receiver,
                first: 4,
                last: None,
                settled: true,
                state: None,
                batchable: false,
            },
        )));
        if let Some(Frame::Amqp(f)) = out.last_mut() {
            if let Performative::Disposition(d) = &mut f.performative {
                d.last = Some(9);
            }
        }
        out.delivery(start(), |buf| {
            buf.extend_from_slice(b"m");
            None
        });
        out.push(Frame::Amqp(AmqpFrame::bare(2, Flow::default())));
        let got = frames(&out.gathered());
        assert_eq!(got.len(), 3);
        match &got[0].performative {
            Performative::Disposition(d) => assert_eq!((d.first, d.last), (4, Some(9))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(got[1].performative, Performative::Transfer(_)));
        assert_eq!(&got[1].payload[..], b"m");
        assert!(matches!(got[2].performative, Performative::Flow(_)));
    }

    #[test]
    fn nothing_is_queued_after_a_frame_that_could_not_be_encoded() {
        let mut out = Outgoing::default();
        out.set_max_frame(512);
        out.push(Frame::Amqp(AmqpFrame::bare(0, Flow::default())));
        let mut huge = AmqpFrame::bare(0, Transfer::default());
        huge.payload = Bytes::from(vec![0; 1000]);
        out.push(Frame::Amqp(huge));
        out.push(Frame::Amqp(AmqpFrame::bare(0, Flow::default())));
        assert_eq!(frames(&out.gathered()).len(), 1);
        assert!(matches!(
            out.failed,
            Some(AmqpCodecError::OutgoingFrameTooLarge { .. })
        ));
    }
}
