//! How much room a decoder asks for when a frame is only partly read.
//!
//! Frames are cut from the read buffer and their bodies travel on as slices of
//! it, so once a frame is cut the buffer is shared, and the next reserve
//! allocates a new one and copies what has been read of the current frame.
//! `bytes` sizes that new buffer at most 64 KiB: a connection carrying 16 KiB
//! messages then takes about three per read system call and copies a partial
//! frame every fourth. A large frame asks for room for a run of frames like it,
//! so reads and copies come once per many frames; small frames ask only for
//! what they lack, and their connections keep the default buffer.
//!
//! A frame's length is what the peer declares, not what it sent: room beyond
//! [`UNEARNED_ROOM`] is granted only for bytes that arrived, as much again as
//! is buffered (so the buffer doubles while the bytes keep coming), or room
//! for more frames like the last whole one. A peer announcing a 10 MiB frame
//! and sending 1 KiB gets 64 KiB.

use bytes::BytesMut;
use std::time::Duration;

/// A connection that read nothing for this long gives its large read buffer back.
pub const QUIET: Duration = Duration::from_secs(1);

/// Frames from this size on get room for more frames like them.
const LARGE_FRAME: usize = 8 * 1024;
/// Room asked for a large frame: this many frames of its size...
const FRAMES_AHEAD: usize = 16;
/// ...but no more room than this in all (a frame larger than it gets just its own).
const MAX_AHEAD: usize = 512 * 1024;
/// Room granted whatever has arrived.
const UNEARNED_ROOM: usize = 64 * 1024;

/// The read buffer a connection starts with: what an idle connection holds.
/// A large buffer is resident in full once used, so 10,000 idle connections
/// at 64 KiB each would hold 640 MiB.
pub const IDLE_READ_BUFFER: usize = 4 * 1024;

/// The read buffer of a connection with traffic: one read system call takes
/// many frames. `bytes` sizes each buffer after the first frame is cut by the
/// capacity the buffer was created with, so this is set by replacing the
/// buffer, not by growing it.
const BUSY_READ_BUFFER: usize = 64 * 1024;

/// Sizes a connection's read buffer by its traffic: small while idle, large
/// once a read brings several frames, small again once it goes quiet.
#[derive(Debug, Default)]
pub struct ReadBufferSize {
    busy: bool,
}

impl ReadBufferSize {
    /// After a read batch of `frames` frames: a connection with traffic gets
    /// the large buffer, once, when nothing is buffered (so nothing is copied).
    pub fn after_batch(&mut self, buf: &mut BytesMut, frames: usize) {
        if !self.busy && frames > 1 && buf.is_empty() {
            self.busy = true;
            *buf = BytesMut::with_capacity(BUSY_READ_BUFFER);
        }
    }

    /// Nothing was read for a while: give the large buffer back.
    pub fn idle(&mut self, buf: &mut BytesMut) {
        if self.busy && buf.is_empty() {
            self.busy = false;
            *buf = BytesMut::with_capacity(IDLE_READ_BUFFER);
        }
    }
}

/// Makes room in `src` for the rest of a frame of `frame_len` bytes (and, for a
/// large one, for the frames likely to follow it), within what the bytes
/// received so far justify: those buffered, and `last_whole`, the length of
/// the last whole frame the connection sent (0 before the first).
pub fn reserve_frame(src: &mut BytesMut, frame_len: usize, last_whole: usize) {
    let missing = frame_len.saturating_sub(src.len());
    let earned = src
        .len()
        .max(UNEARNED_ROOM)
        .max(last_whole.saturating_mul(FRAMES_AHEAD).min(MAX_AHEAD));
    if frame_len > MAX_AHEAD {
        // The body travels on as a slice of this buffer and keeps all of it
        // alive for as long as the message lives (in a queue, for hours):
        // room beyond the frame would be memory held and counted nowhere
        // (growing a `Vec` doubles it: 2.5 MiB held for a 1 MiB message).
        // A frame no larger than the last whole one has earned its room at once.
        let earned = if frame_len <= last_whole {
            missing
        } else {
            earned
        };
        grow_exactly(src, missing.min(earned));
        return;
    }
    let wanted = if frame_len >= LARGE_FRAME {
        missing.max(frame_len.saturating_mul(FRAMES_AHEAD).min(MAX_AHEAD))
    } else {
        missing
    };
    src.reserve(wanted.min(earned));
}

/// Makes room for `additional` more bytes and no more: a new buffer of
/// exactly that size when there is not room already, what is buffered
/// copied over (as growing would).
fn grow_exactly(src: &mut BytesMut, additional: usize) {
    if src.capacity() - src.len() >= additional {
        return;
    }
    let mut grown = BytesMut::with_capacity(src.len() + additional);
    grown.extend_from_slice(src);
    *src = grown;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_frame_asks_only_for_what_it_lacks() {
        let mut src = BytesMut::with_capacity(64);
        src.extend_from_slice(&[0; 10]);
        reserve_frame(&mut src, 100, 0);
        assert!(src.capacity() >= 100);
        assert!(src.capacity() < LARGE_FRAME);
    }

    #[test]
    fn a_large_frame_leaves_room_for_more_like_it_in_a_shared_buffer() {
        let mut src = BytesMut::with_capacity(64 * 1024);
        src.extend_from_slice(&[1; 16 * 1024 + 100]);
        // The first frame is cut and still in use elsewhere: the buffer is shared.
        let first = src.split_to(16 * 1024).freeze();
        reserve_frame(&mut src, 16 * 1024, 16 * 1024);
        assert!(src.capacity() - src.len() >= 15 * 16 * 1024);
        assert_eq!(
            &src[..],
            &[1; 100][..],
            "what was read of the frame is kept"
        );
        assert_eq!(first.len(), 16 * 1024);
    }

    #[test]
    fn a_frame_larger_than_the_read_ahead_is_read_into_a_buffer_of_its_own_size() {
        let frame = 1024 * 1024 + 60;
        let mut src = BytesMut::new();
        src.extend_from_slice(&[2; 1000]);
        let mut reserves = 0;
        while src.len() < frame {
            reserve_frame(&mut src, frame, frame);
            reserves += 1;
            assert!(
                src.capacity() <= frame,
                "{} bytes for a {frame}-byte frame",
                src.capacity()
            );
            // A read takes all the room there is (here: the rest of the frame
            // and nothing of the next, as there is no room for it).
            let n = src.capacity() - src.len();
            src.extend_from_slice(&vec![1; n]);
        }
        assert_eq!(src.capacity(), frame, "the frame, and all of the buffer");
        assert!(reserves < 12, "{reserves} reserves");
    }

    #[test]
    fn read_ahead_is_bounded() {
        let mut src = BytesMut::new();
        src.extend_from_slice(&[0; 4 * 1024 * 1024]);
        reserve_frame(&mut src, 8 * 1024 * 1024, 0);
        assert!(src.capacity() >= 8 * 1024 * 1024);
        assert!(src.capacity() < 8 * 1024 * 1024 + 2 * MAX_AHEAD);
    }

    #[test]
    fn the_read_buffer_grows_with_traffic_and_shrinks_when_idle() {
        let mut size = ReadBufferSize::default();
        let mut buf = BytesMut::with_capacity(IDLE_READ_BUFFER);
        size.after_batch(&mut buf, 1);
        assert!(
            buf.capacity() < BUSY_READ_BUFFER,
            "one frame is not traffic"
        );
        buf.extend_from_slice(b"partial");
        size.after_batch(&mut buf, 5);
        assert_eq!(&buf[..], b"partial", "a partial frame is never dropped");
        buf.clear();
        size.after_batch(&mut buf, 5);
        assert!(buf.capacity() >= BUSY_READ_BUFFER);
        size.idle(&mut buf);
        assert!(buf.capacity() < BUSY_READ_BUFFER);
    }

    #[test]
    fn a_declared_length_alone_buys_no_room() {
        let mut src = BytesMut::new();
        src.extend_from_slice(&[0; 1024]);
        reserve_frame(&mut src, 10 * 1024 * 1024, 0);
        assert!(src.capacity() <= 2 * UNEARNED_ROOM);
        // A whole frame sent before earns read-ahead for frames like it, no more.
        let mut src = BytesMut::new();
        src.extend_from_slice(&[0; 1024]);
        reserve_frame(&mut src, 10 * 1024 * 1024, 16 * 1024);
        assert!(src.capacity() >= 16 * 16 * 1024);
        assert!(src.capacity() <= 2 * MAX_AHEAD);
    }

    #[test]
    fn room_grows_with_the_bytes_that_arrive() {
        let frame = 10 * 1024 * 1024;
        let mut src = BytesMut::new();
        let mut reserves = 0;
        while src.len() < frame {
            reserve_frame(&mut src, frame, 0);
            reserves += 1;
            assert!(src.capacity() <= (2 * src.len()).max(UNEARNED_ROOM) + frame / 8);
            let n = (src.capacity() - src.len()).min(frame - src.len());
            src.extend_from_slice(&vec![1; n]);
        }
        // Doubling: a handful of reallocations, not one per read.
        assert!(reserves < 12, "{reserves} reserves");
    }
}
