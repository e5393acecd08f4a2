//! The AMQP 1.0 relay ceiling: an endpoint that answers the handshake, mirrors
//! attaches, and forwards each message a producer link transfers to one
//! consumer link of the same address (round robin; every consumer of a
//! topic), as the bytes it came as. No queue, no storage: unsettled
//! deliveries are accepted once routed, the consumers' dispositions ignored.
//!
//! Each connection reads a batch of frames (all its read buffer holds), routes
//! them under one short lock, then hands each peer connection one chunk per
//! batch over a bounded channel; the peer's writer gives the delivery ids and
//! writes all it has in one go. A consumer without credit holds its producers
//! back: the delivery waits in its producer's connection, which grants that
//! producer no more credit meanwhile.

mod peer;
mod registry;
mod writer;

use crate::error::PerfError;
use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use peer::{Held, Out, Peer, MAX_FRAME};
use registry::Registry;
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use weir_wire::amqp::codec::encode_frame;
use weir_wire::amqp::{AmqpError, AmqpFrame, AmqpFrameCodec, Close, Frame, Inbound};
use writer::Chunk;

/// Frames read per batch at most, so one busy producer cannot starve others.
const MAX_BATCH: usize = 512;
/// Chunks queued to one connection's writer before senders wait.
const CHANNEL_DEPTH: usize = 64;
/// Frames held at most before the connection stops reading: within its
/// credit a producer never gets there.
const HELD_MAX: usize = 4 * 1024;
/// Held deliveries are retried this often even without a wake-up.
const RETRY: Duration = Duration::from_millis(50);

/// Serves the relay on `addr` until the process is stopped.
pub async fn serve(addr: SocketAddr) -> Result<(), PerfError> {
    serve_on(super::listen(addr, "AMQP 1.0").await?).await
}

pub async fn serve_on(listener: TcpListener) -> Result<(), PerfError> {
    let registry = Arc::new(Registry::default());
    super::accept_each(listener, move |stream, id| {
        let registry = registry.clone();
        async move {
            let _ = connection(stream, id, &registry).await;
        }
    })
    .await
}

type Wake<'a> = Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>;

/// Waits for a consumer to take more (or [`RETRY`]); forever when nothing is held.
async fn woken(wake: &mut Wake<'_>) {
    match wake {
        Some(w) => {
            let _ = tokio::time::timeout(RETRY, w.as_mut()).await;
        }
        None => std::future::pending().await,
    }
}

async fn connection(stream: TcpStream, id: u64, registry: &Registry) -> Result<(), PerfError> {
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Chunk>(CHANNEL_DEPTH);
    let writer = tokio::spawn(writer::run(write, rx));
    let mut reader = FramedRead::with_capacity(read, AmqpFrameCodec::new(MAX_FRAME), 256 * 1024);
    let mut peer = Peer::new(id, tx.clone());
    let mut out = Out::default();
    let mut held: VecDeque<Held> = VecDeque::new();
    let mut wake: Wake<'_> = None;
    let mut failed = None;
    // The peer is gone, but what it sent is still held: deliver that first.
    let mut eof = false;
    let mut items = Vec::with_capacity(MAX_BATCH);
    while !peer.closed && failed.is_none() && !(eof && held.is_empty()) {
        // Frames, or (while deliveries are held) a consumer that may take them.
        let first = if eof || held.len() >= HELD_MAX {
            woken(&mut wake).await;
            None
        } else {
            tokio::select! {
                item = reader.next() => Some(item),
                _ = woken(&mut wake) => None,
            }
        };
        match first {
            Some(None) => eof = true,
            Some(Some(first)) => {
                items.push(first);
                while items.len() < MAX_BATCH {
                    match reader.next().now_or_never() {
                        Some(Some(item)) => items.push(item),
                        _ => break,
                    }
                }
            }
            None => {}
        }
        {
            let mut st = registry.state.lock();
            while let Some(h) = held.pop_front() {
                if let Some(h) = peer.handle(h, &mut st, &mut out) {
                    held.push_front(h);
                    break;
                }
                if peer.closed {
                    break;
                }
            }
            for item in items.drain(..) {
                if peer.closed {
                    break;
                }
                match item {
                    Ok(Inbound::Frame(Frame::Amqp(f))) => {
                        if !held.is_empty() && Held::waits(&f) {
                            held.push_back(Held::Frame(f));
                        } else if let Some(h) = peer.handle(Held::Frame(f), &mut st, &mut out) {
                            held.push_back(h);
                        }
                    }
                    Ok(other) => peer.preamble(other, &mut out),
                    Err(e) => {
                        let close = Close {
                            error: Some(AmqpError::from(&e)),
                        };
                        out.flush_accepted();
                        encode_frame(&Frame::Amqp(AmqpFrame::bare(0, close)), &mut out.own);
                        failed = Some(e);
                        break;
                    }
                }
            }
            if held.is_empty() {
                peer.refill(&st, &mut out);
                wake = None;
            } else {
                // Registered before the lock goes, so no wake-up is missed.
                wake = Some(Box::pin(registry.wake.notified()));
            }
        }
        if std::mem::take(&mut out.wake) {
            registry.wake.notify_waiters();
        }
        out.flush_accepted();
        // Forward before answering, so an acceptance means the message was relayed.
        for (_, peer_tx, deliveries) in out.peers.list.drain(..) {
            let _ = peer_tx.send(Chunk::Deliveries(deliveries)).await;
        }
        if let Some(setup) = out.setup.take() {
            if tx.send(setup).await.is_err() {
                break;
            }
        }
        if !out.own.is_empty()
            && tx
                .send(Chunk::Frames(out.own.split().freeze()))
                .await
                .is_err()
        {
            break;
        }
        if !out.activate.is_empty() {
            // Their attach is on its way: deliveries may follow it.
            registry.state.lock().activate(&out.activate);
            out.activate.clear();
            registry.wake.notify_waiters();
        }
        if out.own.capacity() > 1 << 20 {
            out.own = BytesMut::new();
        }
    }
    drop(wake);
    registry.state.lock().end(id, None);
    registry.wake.notify_waiters();
    drop(peer);
    drop(tx);
    let _ = writer.await;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
