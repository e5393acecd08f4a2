//! Outgoing bytes whose large bodies are not copied into the write buffer.
//!
//! A message body arrives as a `Bytes` slice of some connection's read buffer.
//! Copying a 16 KiB body into the write buffer of every consumer it goes to was
//! a tenth of the broker's CPU at that size. Frame heads are still encoded into
//! the write buffer; a large body is queued after the head written so far as
//! the slice it already is, and the lot goes out in vectored writes.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::codec::Framed;

/// Bodies from this size on are queued rather than copied: below it a copy
/// costs less than one more slice to hand to the kernel.
pub const SHARE_FROM: usize = 4 * 1024;

/// Slices handed to one `writev` (Linux takes up to 1024).
const MAX_SLICES: usize = 64;

/// Encoded heads and shared bodies, in the order they go out.
#[derive(Default)]
pub struct WriteParts {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl WriteParts {
    /// True when only the write buffer holds anything to send.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Bytes queued here (not counting the write buffer).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Queues what `buf` holds so far, then `body` after it, uncopied.
    pub fn share(&mut self, buf: &mut BytesMut, body: Bytes) {
        self.seal(buf);
        self.push(body);
    }

    /// Writes `body` after what `buf` holds: queued when large, copied otherwise.
    pub fn put_body(&mut self, buf: &mut BytesMut, body: &Bytes) {
        if body.len() >= SHARE_FROM {
            self.share(buf, body.clone());
        } else {
            buf.extend_from_slice(body);
        }
    }

    /// Queues what `buf` holds, leaving it empty (its spare room stays with it,
    /// and it gets its whole allocation back once the queued bytes are written).
    pub fn seal(&mut self, buf: &mut BytesMut) {
        if !buf.is_empty() {
            self.push(buf.split().freeze());
        }
    }

    fn push(&mut self, part: Bytes) {
        if !part.is_empty() {
            self.len += part.len();
            self.parts.push_back(part);
        }
    }

    /// Writes everything queued, in order. Call [`WriteParts::seal`] first so
    /// nothing in the write buffer is left behind what follows it.
    pub async fn write_all<W: AsyncWrite + Unpin>(&mut self, io: &mut W) -> io::Result<()> {
        while !self.parts.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let count = self.parts.len().min(MAX_SLICES);
            for (slice, part) in slices.iter_mut().zip(self.parts.iter()) {
                *slice = IoSlice::new(part);
            }
            let written = io.write_vectored(&slices[..count]).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.advance(written);
        }
        Ok(())
    }

    /// Writes what `framed`'s write buffer holds, and everything queued, in order.
    /// With nothing queued it leaves the buffer to the `Framed`'s own flush.
    pub async fn write_framed<W: AsyncWrite + Unpin, C>(
        &mut self,
        framed: &mut Framed<W, C>,
    ) -> io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        self.seal(framed.write_buffer_mut());
        self.write_all(framed.get_mut()).await
    }

    /// Everything queued, in one piece (a copy: for tests, not the write path).
    pub fn gathered(&self) -> Vec<u8> {
        self.parts.iter().flat_map(|p| p.iter().copied()).collect()
    }

    fn advance(&mut self, mut written: usize) {
        self.len -= written;
        while written > 0 {
            let Some(front) = self.parts.front_mut() else {
                return;
            };
            if written < front.len() {
                front.advance(written);
                return;
            }
            written -= front.len();
            self.parts.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Takes at most `step` bytes per write, as a full socket buffer does.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
        calls: usize,
    }

    impl Trickle {
        fn take(&mut self, bufs: &[IoSlice<'_>]) -> usize {
            self.calls += 1;
            let mut room = self.step;
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(room);
                self.out.extend_from_slice(&b[..take]);
                room -= take;
                n += take;
                if room == 0 {
                    break;
                }
            }
            n
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(self.take(&[IoSlice::new(buf)])))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(self.take(bufs)))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn heads_and_shared_bodies_go_out_in_order_however_the_writes_are_cut() {
        let big = Bytes::from((0..10_000u32).map(|i| i as u8).collect::<Vec<_>>());
        let small = Bytes::from_static(b"small body");
        let mut expected = Vec::new();
        let mut buf = BytesMut::new();
        let mut parts = WriteParts::default();
        for (head, body) in [
            (&b"HEAD1\n"[..], &big),
            (b"HEAD2\n", &small),
            (b"HEAD3\n", &big),
        ] {
            buf.extend_from_slice(head);
            parts.put_body(&mut buf, body);
            buf.extend_from_slice(b"\0");
            expected.extend_from_slice(head);
            expected.extend_from_slice(body);
            expected.push(0);
        }
        assert_eq!(
            parts.parts.len(),
            4,
            "both large bodies shared, the small one copied"
        );
        parts.seal(&mut buf);
        assert!(buf.is_empty());
        assert_eq!(parts.len(), expected.len());
        for step in [1, 7, 4096, 1 << 20] {
            let mut copy = WriteParts {
                parts: parts.parts.clone(),
                len: parts.len,
            };
            let mut io = Trickle {
                out: Vec::new(),
                step,
                calls: 0,
            };
            copy.write_all(&mut io).await.expect("written");
            assert_eq!(io.out, expected, "cut every {step} bytes");
            assert!(copy.is_empty());
            assert_eq!(copy.len(), 0);
            if step == 1 << 20 {
                assert_eq!(io.calls, 1, "one vectored write for everything");
            }
        }
    }

    #[tokio::test]
    async fn a_writer_that_takes_nothing_is_an_error_not_a_hang() {
        let mut parts = WriteParts::default();
        parts.share(
            &mut BytesMut::from(&b"head"[..]),
            Bytes::from(vec![1u8; SHARE_FROM]),
        );
        let mut io = Trickle {
            out: Vec::new(),
            step: 0,
            calls: 0,
        };
        let err = parts.write_all(&mut io).await.expect_err("no progress");
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
