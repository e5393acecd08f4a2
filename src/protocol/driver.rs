//! The loop every connection runs once its handshake is done, whatever its protocol.
//!
//! One task per connection waits on the socket, on the deliveries the core hands it, on
//! the protocol's own waits (disk writes behind receipts and settlements) and on a ticker
//! for heart-beats and timeouts. What each wake-up does with what it got is the
//! protocol's, through [`Connection`]; the batching is the driver's and the same for all:
//! up to [`MAX_READ_BATCH`] frames read per wake-up with the consumers they feed woken
//! once, deliveries taken while more are ready, and one flush per wake-up.
//!
//! The driver is generic over its byte stream, so each kind is compiled on its own and
//! plain TCP pays nothing for the others: `TcpStream` itself, and TLS over it (a
//! `Rewind<TlsStream>` that gives back the bytes a protocol sniffer read). Nothing in it
//! allocates per frame.

use crate::core::connections::{Registration, Traffic};
use crate::core::consumer::Delivery;
use crate::core::deliveries::{Deliveries, WakeBatch};
use crate::core::queue::PendingAcks;
use futures_util::{FutureExt, StreamExt};
use std::future::Future;
use std::ops::ControlFlow;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::codec::{Decoder, Framed};

use super::fairness::{TimeSlice, MAX_READ_BATCH};
use super::read_ahead::{self, ReadBufferSize};

/// What the socket gave: an item, a decoding error, or `None` when the peer closed.
pub type ReadItem<C> = Option<Result<<C as Decoder>::Item, <C as Decoder>::Error>>;

/// The socket of a connection and what the driver knows about its traffic.
pub struct Io<S, C> {
    pub framed: Framed<S, C>,
    /// Where the core hands over deliveries for every consumer of the connection.
    pub deliveries: Deliveries,
    /// When a frame (or heart-beat) was last read; set once per wake-up.
    pub last_read: Instant,
    /// When something was last written; the protocols set it as they flush.
    pub last_write: Instant,
    /// The read buffer's size: small while idle, larger while frames stream in.
    read_size: ReadBufferSize,
}

impl<S, C> Io<S, C> {
    pub fn new(framed: Framed<S, C>, deliveries: Deliveries) -> Self {
        let now = Instant::now();
        Io {
            framed,
            deliveries,
            last_read: now,
            last_write: now,
            read_size: ReadBufferSize::default(),
        }
    }
}

/// The clocks of a connection, known once its handshake is done.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    /// Write a heart-beat when nothing was written for this long.
    pub send_every: Option<Duration>,
    /// End the connection when nothing was read for this long.
    pub expect_within: Option<Duration>,
    /// End the connection when a frame that started is not complete after this long.
    pub frame_timeout: Option<Duration>,
}

impl Timing {
    /// Often enough to be at most a quarter late on each clock; rarely when there is none.
    fn tick(&self) -> Duration {
        [self.send_every, self.expect_within, self.frame_timeout]
            .into_iter()
            .flatten()
            .min()
            .map_or(Duration::from_secs(3600), |d| d / 4)
            .max(Duration::from_millis(20))
    }
}

/// Why the driver stopped: the protocol's own reason, or one of the driver's.
#[derive(Debug)]
pub enum Ending<E> {
    /// A hook stopped the loop (the peer closed, a bad frame, a failed write...).
    Stopped(E),
    /// The broker is shutting down.
    Shutdown,
    /// Management closed the connection.
    Closed,
    /// Nothing was read within [`Timing::expect_within`].
    Silent,
    /// A frame started and did not finish within [`Timing::frame_timeout`].
    FrameTimeout(Duration),
}

/// What a protocol does with each thing the driver waited for. Hooks without `io` only
/// change state and queue output; the driver then calls [`Connection::flush`] once.
pub trait Connection<S>: Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    type Codec: Decoder + Send;
    /// Why the loop stops early; handed back in [`Ending::Stopped`].
    type Stop: Send;
    /// What [`Connection::wait`] yields.
    type Waited: Send;

    /// False while the protocol holds its peer back (too much is waiting on the disk).
    fn reading(&self) -> bool {
        true
    }

    /// Called once per wake-up that read something, before its first item.
    fn start_reads(&mut self) {}

    /// One item read from the peer. `deliveries` is there for what the core delivers at
    /// once, while the item is handled (an AMQP drain).
    fn read(
        &mut self,
        deliveries: &mut Deliveries,
        item: ReadItem<Self::Codec>,
    ) -> ControlFlow<Self::Stop>;

    /// After the last item of a batch, while its consumers' wake-ups are still held.
    fn end_reads(&mut self) {}

    /// After a batch of reads, once its consumers are woken: answers that need no wait.
    fn after_reads(
        &mut self,
        io: &mut Io<S, Self::Codec>,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send;

    /// Deliveries from the core: `first`, and more taken from `io.deliveries` while the
    /// protocol wants them in the same flush.
    fn deliver(
        &mut self,
        io: &mut Io<S, Self::Codec>,
        first: Delivery,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send;

    /// Acks of messages written in auto-acknowledge / pre-settled mode, waiting for a
    /// free queue.
    fn pending_acks(&mut self) -> &mut PendingAcks;

    /// Whether [`Connection::wait`] has anything to wait for.
    fn waiting(&self) -> bool;

    /// The next of the protocol's own waits (receipts behind disk writes...).
    fn wait(&mut self) -> impl Future<Output = Self::Waited> + Send;

    /// What to do once a wait is over.
    fn waited(
        &mut self,
        io: &mut Io<S, Self::Codec>,
        waited: Self::Waited,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send;

    /// Writes a heart-beat (when nothing else is about to go out).
    fn heartbeat(
        &mut self,
        io: &mut Io<S, Self::Codec>,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send;

    /// Writes what the hooks queued; called at the end of every wake-up.
    fn flush(
        &mut self,
        io: &mut Io<S, Self::Codec>,
    ) -> impl Future<Output = Result<(), Self::Stop>> + Send;

    /// At the end of every wake-up, after the flush.
    fn end_wake(&mut self) {}

    /// The connection's messages so far, counted in plain fields as the protocol
    /// handles them; the driver publishes them once per wake-up.
    fn traffic(&self) -> Traffic;
}

/// Runs `conn` until it stops, the peer goes quiet or the broker shuts down. The caller
/// says goodbye in its protocol.
pub async fn drive<S, P>(
    io: &mut Io<S, P::Codec>,
    conn: &mut P,
    timing: Timing,
    shutdown: &mut broadcast::Receiver<()>,
    registration: &Registration,
) -> Ending<P::Stop>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    P: Connection<S>,
{
    let mut ticker = tokio::time::interval(timing.tick());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut partial = PartialFrame::default();
    let mut slice = TimeSlice::default();
    loop {
        // Frames remain buffered, which Tokio's budget does not count: once the slice
        // is spent the others run first, after this wake-up's answers (credit,
        // receipts) are out, so the peer is not kept waiting for them meanwhile.
        let mut slice_spent = false;
        let step = tokio::select! {
            item = io.framed.next(), if conn.reading() => {
                io.last_read = Instant::now();
                match read_batch(io, conn, item) {
                    ControlFlow::Continue(full) => {
                        if !full {
                            slice.drained();
                        } else {
                            slice_spent = slice.full_batch(io.last_read);
                        }
                        conn.after_reads(io).await
                    }
                    ControlFlow::Break(stop) => {
                        // Answers for the frames before the one that stopped still go out.
                        let _ = conn.after_reads(io).await;
                        Err(stop)
                    }
                }
            }
            Some(delivery) = io.deliveries.recv() => conn.deliver(io, delivery).await,
            // Lets the tasks holding the queue go first, then acks for sure.
            _ = tokio::task::yield_now(), if !conn.pending_acks().is_empty() => {
                conn.pending_acks().apply();
                Ok(())
            }
            waited = conn.wait(), if conn.waiting() => conn.waited(io, waited).await,
            _ = ticker.tick() => {
                if io.last_read.elapsed() > read_ahead::QUIET {
                    io.read_size.idle(io.framed.read_buffer_mut());
                }
                if let Some(limit) = timing.expect_within {
                    if !conn.reading() {
                        // The peer's frames and heart-beats wait in the socket while the
                        // protocol holds it back (a producer blocked by a full queue):
                        // that silence is ours, not the peer's.
                        io.last_read = Instant::now();
                    } else if io.last_read.elapsed() > limit {
                        return Ending::Silent;
                    }
                }
                if let Some(limit) = timing.frame_timeout {
                    let idle = !conn.reading() || io.framed.read_buffer().is_empty();
                    if partial.overdue(idle, io.last_read, Instant::now(), limit) {
                        return Ending::FrameTimeout(limit);
                    }
                }
                match timing.send_every {
                    Some(every) if io.last_write.elapsed() >= every => conn.heartbeat(io).await,
                    _ => Ok(()),
                }
            }
            _ = shutdown.recv() => return Ending::Shutdown,
            _ = registration.close_requested() => return Ending::Closed,
        };
        if let Err(stop) = step {
            return Ending::Stopped(stop);
        }
        if let Err(stop) = conn.flush(io).await {
            return Ending::Stopped(stop);
        }
        conn.end_wake();
        registration.publish(conn.traffic());
        if slice_spent {
            tokio::task::yield_now().await;
        }
    }
}

/// Takes `first` and the frames already read after it. The consumers the batch feeds
/// are woken once, when it is done (see [`WakeBatch`]).
fn read_batch<S, P>(
    io: &mut Io<S, P::Codec>,
    conn: &mut P,
    first: ReadItem<P::Codec>,
) -> ControlFlow<P::Stop, bool>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    P: Connection<S>,
{
    let _wakes = WakeBatch::begin();
    conn.start_reads();
    let mut item = first;
    let mut taken = 0;
    let result = loop {
        taken += 1;
        if let ControlFlow::Break(stop) = conn.read(&mut io.deliveries, item) {
            break ControlFlow::Break(stop);
        }
        // A frame taken from the stream must be handled: stop before taking one.
        if taken == MAX_READ_BATCH {
            break ControlFlow::Continue(true);
        }
        if !conn.reading() {
            break ControlFlow::Continue(false);
        }
        match io.framed.next().now_or_never() {
            Some(next) => item = next,
            None => break ControlFlow::Continue(false),
        }
    };
    conn.end_reads();
    io.read_size.after_batch(io.framed.read_buffer_mut(), taken);
    result
}

/// The span every log line of a connection runs in; the protocol fills in `user` and
/// `client` (STOMP client-id, AMQP container-id) once its handshake says them.
pub fn connection_span(peer: &super::Peer, protocol: &'static str) -> tracing::Span {
    tracing::info_span!(
        "conn",
        peer = %peer.addr,
        protocol,
        tls = peer.tls,
        user = tracing::field::Empty,
        client = tracing::field::Empty,
    )
}

/// Counts a connection's client mistakes that do not end it (and the one that does), so
/// that a client cannot flood the log: the first few are logged at WARN, the rest at DEBUG.
/// The broker's own faults are not the client's and are logged as they are.
#[derive(Debug, Default)]
pub struct ClientFaults(u32);

impl ClientFaults {
    /// Mistakes a connection may have logged at WARN.
    const LOUD: u32 = 3;

    /// Counts one; true while it should still be logged at WARN.
    pub fn loud(&mut self) -> bool {
        self.0 = self.0.saturating_add(1);
        self.0 <= Self::LOUD
    }
}

/// Watches for a frame that started and does not finish, on the ticker's clock: the
/// read path pays nothing for it.
#[derive(Debug, Default)]
struct PartialFrame {
    /// When the ticker first saw bytes of an unfinished frame in the read buffer.
    seen: Option<Instant>,
}

impl PartialFrame {
    /// `idle`: nothing unfinished is buffered (or the connection is not reading, so it
    /// is not the peer's fault). A frame read since `seen` means progress: start over.
    fn overdue(&mut self, idle: bool, last_read: Instant, now: Instant, limit: Duration) -> bool {
        match self.seen {
            _ if idle => {
                self.seen = None;
                false
            }
            Some(seen) if seen >= last_read => now.duration_since(seen) >= limit,
            _ => {
                self.seen = Some(now);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_follows_the_shortest_clock() {
        let timing = Timing {
            send_every: Some(Duration::from_secs(10)),
            expect_within: Some(Duration::from_secs(21)),
            frame_timeout: Some(Duration::from_secs(60)),
        };
        assert_eq!(timing.tick(), Duration::from_millis(2500));
        assert_eq!(Timing::default().tick(), Duration::from_secs(3600));
    }

    #[test]
    fn a_partial_frame_is_overdue_only_without_progress() {
        let limit = Duration::from_secs(2);
        let ms = Duration::from_millis;
        let mut partial = PartialFrame::default();
        let start = Instant::now();
        let read = start;
        assert!(
            !partial.overdue(false, read, start + ms(10), limit),
            "first seen"
        );
        assert!(!partial.overdue(false, read, start + ms(1010), limit));
        // A frame completed since: the new partial one gets its own time.
        let read = start + ms(1500);
        assert!(!partial.overdue(false, read, start + ms(1600), limit));
        assert!(!partial.overdue(false, read, start + ms(3500), limit));
        assert!(partial.overdue(false, read, start + ms(3600), limit));
        assert!(
            !partial.overdue(true, read, start + ms(3700), limit),
            "buffer drained"
        );
        assert!(
            !partial.overdue(false, read, start + ms(9000), limit),
            "seen anew"
        );
    }
}
