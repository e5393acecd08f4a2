//! The writing half of one AMQP sink connection: the frames its reading half
//! answers with, and the deliveries other connections route to its consumer
//! links, in the order they arrive on its channel. Delivery ids are given
//! here, as deliveries are written, so they go out in sequence whichever
//! producer a delivery came from.
//!
//! Everything queued when a write starts goes out in that write: frame heads
//! are encoded into one buffer, large bodies follow as the slices of the
//! producer's read buffer they are ([`WriteParts`]).

use bytes::{Bytes, BytesMut};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use weir_wire::amqp::codec::{begin_frame, finish_frame, FRAME_TYPE_AMQP};
use weir_wire::amqp::performatives::encode_delivery_start;
use weir_wire::amqp::{Composite, Transfer};
use weir_wire::write_parts::WriteParts;

/// Bytes gathered for one write at most.
const WRITE_AT: usize = 1 << 20;
/// Room left in a frame for its header and transfer performative.
const TRANSFER_HEAD: usize = 64;
/// An empty AMQP frame.
const HEARTBEAT: [u8; 8] = [0, 0, 0, 8, 2, FRAME_TYPE_AMQP, 0, 0];

/// One message for a consumer link of this connection.
#[derive(Debug)]
pub struct Forward {
    pub channel: u16,
    pub handle: u32,
    /// Sent pre-settled (the link's sender settle mode is `settled`).
    pub settled: bool,
    /// The message as the producer sent it, not decoded.
    pub payload: Bytes,
}

/// What the writer is handed.
#[derive(Debug)]
pub enum Chunk {
    /// Frames the reading half encoded.
    Frames(Bytes),
    /// One producer batch's messages for this connection.
    Deliveries(Vec<Forward>),
    /// From the peer's open: its max-frame-size, and how often it must hear
    /// from us (half its idle timeout).
    Peer {
        max_frame: u32,
        keepalive: Option<Duration>,
    },
}

/// How many transfer frames a message of `len` bytes takes under a peer's
/// max-frame-size (the session window counts frames, not messages).
pub fn frames(len: usize, max_frame: u32) -> u32 {
    let room = room(max_frame);
    len.div_ceil(room).max(1) as u32
}

fn room(max_frame: u32) -> usize {
    (max_frame as usize).saturating_sub(TRANSFER_HEAD).max(1)
}

/// Encodes what it is handed, ready for one write.
pub struct Encoder {
    buf: BytesMut,
    parts: WriteParts,
    max_frame: u32,
    /// Next delivery id, by channel.
    next_delivery: Vec<u32>,
    keepalive: Option<Duration>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            buf: BytesMut::with_capacity(64 * 1024),
            parts: WriteParts::default(),
            max_frame: u32::MAX,
            next_delivery: Vec::new(),
            keepalive: None,
        }
    }
}

impl Encoder {
    pub fn put(&mut self, chunk: Chunk) {
        match chunk {
            Chunk::Frames(bytes) => self.parts.put_body(&mut self.buf, &bytes),
            Chunk::Deliveries(deliveries) => {
                for d in deliveries {
                    self.delivery(d);
                }
            }
            Chunk::Peer {
                max_frame,
                keepalive,
            } => {
                self.max_frame = max_frame;
                self.keepalive = keepalive;
            }
        }
    }

    fn delivery(&mut self, d: Forward) {
        let slot = usize::from(d.channel);
        if self.next_delivery.len() <= slot {
            self.next_delivery.resize(slot + 1, 0);
        }
        let id = self.next_delivery[slot];
        self.next_delivery[slot] = id.wrapping_add(1);
        let room = room(self.max_frame);
        if d.payload.len() <= room {
            let at = begin_frame(&mut self.buf, FRAME_TYPE_AMQP, d.channel);
            encode_delivery_start(&mut self.buf, d.handle, id, d.settled);
            finish_frame(&mut self.buf, at, d.payload.len());
            self.parts.put_body(&mut self.buf, &d.payload);
            return;
        }
        // Larger than the consumer's frames: the first transfer carries the
        // delivery's id, tag and settlement, continuations only the handle.
        let mut rest = d.payload;
        let mut transfer = Transfer {
            handle: d.handle,
            delivery_id: Some(id),
            delivery_tag: Some(Bytes::copy_from_slice(&id.to_be_bytes())),
            message_format: Some(0),
            settled: Some(d.settled),
            ..Transfer::default()
        };
        while !rest.is_empty() {
            let part = rest.split_to(rest.len().min(room));
            transfer.more = !rest.is_empty();
            let at = begin_frame(&mut self.buf, FRAME_TYPE_AMQP, d.channel);
            transfer.encode(&mut self.buf);
            finish_frame(&mut self.buf, at, part.len());
            self.parts.put_body(&mut self.buf, &part);
            transfer = Transfer {
                handle: d.handle,
                ..Transfer::default()
            };
        }
    }

    fn pending(&self) -> usize {
        self.buf.len() + self.parts.len()
    }

    async fn write<W: AsyncWrite + Unpin>(&mut self, io: &mut W) -> std::io::Result<()> {
        self.parts.seal(&mut self.buf);
        self.parts.write_all(io).await
    }

    /// Everything encoded so far, as it would be written.
    #[cfg(test)]
    pub(crate) fn gathered(&mut self) -> Vec<u8> {
        self.parts.seal(&mut self.buf);
        self.parts.gathered()
    }
}

/// Writes what comes over `rx` until every sender is gone or the socket fails;
/// a heart-beat whenever the peer asked for one and nothing else went out.
pub async fn run<W: AsyncWrite + Unpin>(mut io: W, mut rx: mpsc::Receiver<Chunk>) {
    let mut out = Encoder::default();
    loop {
        let chunk = match out.keepalive {
            None => rx.recv().await,
            Some(every) => match tokio::time::timeout(every, rx.recv()).await {
                Ok(chunk) => chunk,
                Err(_) => {
                    out.buf.extend_from_slice(&HEARTBEAT);
                    if out.write(&mut io).await.is_err() {
                        return;
                    }
                    continue;
                }
            },
        };
        let Some(chunk) = chunk else {
            return;
        };
        out.put(chunk);
        while out.pending() < WRITE_AT {
            match rx.try_recv() {
                Ok(chunk) => out.put(chunk),
                Err(_) => break,
            }
        }
        if out.write(&mut io).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::amqp::codec::decode_frame;
    use weir_wire::amqp::{Frame, Inbound, Performative};

    fn transfers(bytes: &[u8]) -> Vec<(u16, Transfer, Bytes)> {
        let mut rest = Bytes::copy_from_slice(bytes);
        let mut out = Vec::new();
        while !rest.is_empty() {
            let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            match decode_frame(rest.split_to(size)) {
                Ok(Inbound::Frame(Frame::Amqp(f))) => match f.performative {
                    Performative::Transfer(t) => out.push((f.channel, t, f.payload)),
                    other => panic!("not a transfer: {other:?}"),
                },
                other => panic!("not an AMQP frame: {other:?}"),
            }
        }
        out
    }

    #[test]
    fn delivery_ids_follow_on_per_channel_and_bodies_stay_whole() {
        let mut e = Encoder::default();
        let small = Bytes::from_static(b"\x00\x53\x75\xa0\x02hi");
        let large = Bytes::from(vec![7u8; 20_000]);
        e.put(Chunk::Deliveries(vec![
            Forward {
                channel: 1,
                handle: 3,
                settled: false,
                payload: small.clone(),
            },
            Forward {
                channel: 0,
                handle: 0,
                settled: true,
                payload: large.clone(),
            },
        ]));
        e.put(Chunk::Deliveries(vec![Forward {
            channel: 1,
            handle: 3,
            settled: false,
            payload: small.clone(),
        }]));
        let got = transfers(&e.gathered());
        assert_eq!(got.len(), 3);
        assert_eq!(
            (got[0].0, got[0].1.delivery_id, got[0].1.handle),
            (1, Some(0), 3)
        );
        assert_eq!(got[0].1.settled, Some(false));
        assert_eq!(got[0].2, small);
        assert_eq!((got[1].0, got[1].1.delivery_id), (0, Some(0)));
        assert_eq!(got[1].1.settled, Some(true));
        assert_eq!(got[1].2, large);
        assert_eq!((got[2].0, got[2].1.delivery_id), (1, Some(1)));
    }

    #[test]
    fn a_message_larger_than_the_peers_frames_is_split_and_rejoins() {
        let mut e = Encoder::default();
        e.put(Chunk::Peer {
            max_frame: 4096,
            keepalive: None,
        });
        let body = Bytes::from((0..10_000u32).map(|i| i as u8).collect::<Vec<_>>());
        e.put(Chunk::Deliveries(vec![Forward {
            channel: 2,
            handle: 5,
            settled: false,
            payload: body.clone(),
        }]));
        let wire = e.gathered();
        let got = transfers(&wire);
        assert_eq!(got.len() as u32, frames(body.len(), 4096));
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].1.delivery_id, Some(0));
        assert!(got[0].1.more && got[1].1.more && !got[2].1.more);
        assert!(got.iter().all(|(c, t, _)| *c == 2 && t.handle == 5));
        let joined: Vec<u8> = got.iter().flat_map(|(_, _, p)| p.iter().copied()).collect();
        assert_eq!(joined, body.to_vec());
        // Every frame within the limit.
        let mut at = 0;
        while at < wire.len() {
            let size = u32::from_be_bytes([wire[at], wire[at + 1], wire[at + 2], wire[at + 3]]);
            assert!(size <= 4096, "{size}");
            at += size as usize;
        }
    }

    #[test]
    fn frame_counts() {
        assert_eq!(frames(0, 512), 1);
        assert_eq!(frames(448, 512), 1);
        assert_eq!(frames(449, 512), 2);
        assert_eq!(frames(16_384, 1 << 20), 1);
        assert_eq!(frames(1_500_000, 1 << 20), 2);
    }
}
