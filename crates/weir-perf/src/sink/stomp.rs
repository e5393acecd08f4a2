//! The STOMP relay ceiling: an endpoint that only cuts frames, answers
//! CONNECTED and RECEIPTs, and forwards each SEND as a MESSAGE to one
//! subscriber of its destination (every subscriber for `/topic/...`). No
//! queue, no storage, no acknowledgement tracking: what a broker could reach
//! on this machine if it did nothing but move frames.
//!
//! Each connection reads a batch of frames (all that its read buffer holds),
//! routes them under one short lock, then hands each peer one buffer per
//! batch over a bounded channel, so a slow subscriber slows its producers
//! instead of growing memory.

use crate::error::PerfError;
use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, StreamExt};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{Encoder, FramedRead};
use weir_wire::stomp::{Command, Frame, HeaderText, Inbound, StompCodec, Version};

/// Frames routed per batch at most, so one busy producer cannot starve others.
const MAX_BATCH: usize = 512;
/// Buffers queued to one connection's writer before senders wait.
const CHANNEL_DEPTH: usize = 64;

#[derive(Clone)]
struct Route {
    conn: u64,
    subscription: HeaderText,
    tx: mpsc::Sender<Bytes>,
}

#[derive(Default)]
struct Destination {
    routes: Vec<Route>,
    next: usize,
}

#[derive(Default)]
struct Registry {
    destinations: Mutex<HashMap<String, Destination>>,
}

/// Serves the relay on `addr` until the process is stopped.
pub async fn serve(addr: SocketAddr) -> Result<(), PerfError> {
    serve_on(super::listen(addr, "STOMP").await?).await
}

pub async fn serve_on(listener: TcpListener) -> Result<(), PerfError> {
    let registry = Arc::new(Registry::default());
    super::accept_each(listener, move |stream, conn| {
        let registry = registry.clone();
        async move {
            let _ = connection(stream, conn, &registry).await;
            registry.unregister(conn);
        }
    })
    .await
}

impl Registry {
    fn unregister(&self, conn: u64) {
        let mut destinations = self.destinations.lock();
        for d in destinations.values_mut() {
            d.routes.retain(|r| r.conn != conn);
        }
        destinations.retain(|_, d| !d.routes.is_empty());
    }
}

/// Where one batch's frames go: a buffer per peer connection.
struct Outgoing {
    own: BytesMut,
    peers: Vec<(u64, mpsc::Sender<Bytes>, BytesMut)>,
}

impl Outgoing {
    fn peer(&mut self, route: &Route) -> &mut BytesMut {
        let at = match self.peers.iter().position(|(c, _, _)| *c == route.conn) {
            Some(at) => at,
            None => {
                self.peers
                    .push((route.conn, route.tx.clone(), BytesMut::new()));
                self.peers.len() - 1
            }
        };
        &mut self.peers[at].2
    }
}

async fn connection(stream: TcpStream, conn: u64, registry: &Registry) -> Result<(), PerfError> {
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
    let writer = tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            if write.write_all(&chunk).await.is_err() {
                break;
            }
        }
    });
    let mut reader = FramedRead::with_capacity(read, StompCodec::default(), 256 * 1024);
    let mut encoder = StompCodec::default();
    let mut message_id = 0u64;
    let mut out = Outgoing {
        own: BytesMut::with_capacity(4096),
        peers: Vec::new(),
    };
    let mut closing = false;
    while !closing {
        let Some(first) = reader.next().await else {
            break;
        };
        let mut frames = vec![first?];
        while frames.len() < MAX_BATCH {
            match reader.next().now_or_never() {
                Some(Some(item)) => frames.push(item?),
                _ => break,
            }
        }
        {
            let mut destinations = registry.destinations.lock();
            for item in frames {
                let Inbound::Frame(frame) = item else {
                    continue;
                };
                let receipt = frame
                    .headers
                    .entries()
                    .iter()
                    .find(|(n, _)| n == "receipt")
                    .map(|(_, v)| v.clone());
                match frame.command {
                    Command::Connect | Command::Stomp => {
                        let version = Version::negotiate(frame.header("accept-version"))
                            .unwrap_or(Version::V1_2);
                        let connected = Frame::new(Command::Connected)
                            .with_header("version", version.as_str())
                            .with_header("server", "weir-perf-sink")
                            .with_header("heart-beat", "0,0");
                        encoder.encode(connected, &mut out.own)?;
                        encoder.set_version(version);
                        reader.decoder_mut().set_version(version);
                    }
                    Command::Subscribe => {
                        let (Some(dest), Some(id)) = (
                            frame.header("destination"),
                            frame.headers.entries().iter().find(|(n, _)| n == "id"),
                        ) else {
                            continue;
                        };
                        destinations
                            .entry(dest.to_owned())
                            .or_default()
                            .routes
                            .push(Route {
                                conn,
                                subscription: id.1.clone(),
                                tx: tx.clone(),
                            });
                    }
                    Command::Unsubscribe => {
                        if let Some(id) = frame.header("id") {
                            for d in destinations.values_mut() {
                                d.routes.retain(|r| r.conn != conn || r.subscription != id);
                            }
                        }
                    }
                    Command::Send => {
                        let Some(dest) = frame.header("destination") else {
                            continue;
                        };
                        let topic = dest.starts_with("/topic/");
                        let Some(d) = destinations.get_mut(dest) else {
                            continue;
                        };
                        if d.routes.is_empty() {
                            continue;
                        }
                        let targets: Vec<Route> = if topic {
                            d.routes.clone()
                        } else {
                            d.next = (d.next + 1) % d.routes.len();
                            d.routes.get(d.next).cloned().into_iter().collect()
                        };
                        for route in targets {
                            message_id += 1;
                            let id = HeaderText::from(format!("{conn}-{message_id}"));
                            let mut message = Frame {
                                command: Command::Message,
                                headers: frame.headers.clone(),
                                body: frame.body.clone(),
                            };
                            message.headers.remove("receipt");
                            message.add_header("subscription", route.subscription.clone());
                            message.add_header("message-id", id.clone());
                            message.add_header("ack", id);
                            encoder.encode(message, out.peer(&route))?;
                        }
                    }
                    Command::Disconnect => closing = true,
                    _ => {}
                }
                if let Some(id) = receipt {
                    encoder.encode(
                        Frame::new(Command::Receipt).with_header("receipt-id", id),
                        &mut out.own,
                    )?;
                }
            }
        }
        // Forward before answering, so a receipt means the frames were relayed.
        for (_, peer, buf) in out.peers.iter_mut() {
            if !buf.is_empty() && peer.send(buf.split().freeze()).await.is_err() {
                buf.clear();
            }
        }
        // Holding no sender past the batch lets a closed peer's writer end.
        out.peers.clear();
        if !out.own.is_empty() && tx.send(out.own.split().freeze()).await.is_err() {
            break;
        }
    }
    drop(tx);
    registry.unregister(conn);
    let _ = writer.await;
    Ok(())
}
