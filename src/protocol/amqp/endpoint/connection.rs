//! One AMQP connection: a task owning the socket, its sessions, and one channel on which the
//! core hands over deliveries for every link of the connection.
//!
//! Handlers are synchronous and only queue frames in [`Outgoing`]; the loop writes them all
//! with one flush per wake-up. A transfer whose disposition must wait (for its disk write,
//! or a transaction) is held in [`Waits`], and comes back as a disposition.
//!
//! Sessions get only the parts of the connection a handler reads or changes: the
//! [`Env`] to read, and the frames going out, the consumer map, the transactions, the
//! waits or the pending acks to change.

use bytes::Bytes;

use super::env::Env;
use super::handshake::{self, HandshakeError};
use super::link::Consumers;
use super::outgoing::Outgoing;
use super::session::{CoreDrain, Session, SessionError};
use super::txn::Txns;
use super::waits::{oldest_written, Settled, Waits};
use crate::core::consumer::Delivery;
use crate::core::deliveries::WakeBatch;
use crate::core::fast_map::FastMap;
use crate::core::message::now_ms;
use crate::core::queue::{producers_may_go, PendingAcks, Queue};
use crate::core::{Broker, CoreError, TransactionLimits};
use crate::protocol::amqp::wire::codec::{AmqpFrame, AmqpFrameCodec, Frame, Inbound, Outbound};
use crate::protocol::amqp::wire::definitions::AmqpError;
use crate::protocol::amqp::wire::error::{condition, AmqpCodecError};
use crate::protocol::amqp::wire::performatives::{Close, Open, Performative};
use crate::protocol::amqp::wire::types::{Symbol, Value};
use dashmap::DashMap;
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::Instrument;

/// Frames taken per wake-up at most, so one busy peer cannot starve the others.
const MAX_READ_BATCH: usize = 256;

/// Limits and names an AMQP acceptor runs with (from the config's limits).
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    /// Largest frame we accept (announced in `open`).
    pub max_frame_size: u32,
    /// Largest message, over all its transfer frames.
    pub max_message_size: u64,
    /// We close a connection silent for this long; peers are asked to send within half.
    /// Zero: no idle timeout.
    pub idle_timeout: Duration,
    /// Credit each receiving link grants its sender.
    pub link_credit: u32,
    pub channel_max: u16,
    /// Connection factory of the acceptor (an `open` hostname naming one wins).
    pub connection_factory: Option<String>,
    pub handshake_timeout: Duration,
    /// Container ids of open connections that asked to be the only one for their container.
    pub containers: ContainerRegistry,
    /// What transactions may hold (`[limits]`).
    pub transactions: TransactionLimits,
}

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            max_frame_size: 1 << 20,
            max_message_size: 100 << 20,
            idle_timeout: Duration::from_secs(60),
            link_credit: 1000,
            channel_max: 255,
            connection_factory: None,
            handshake_timeout: Duration::from_secs(10),
            containers: ContainerRegistry::default(),
            transactions: TransactionLimits::default(),
        }
    }
}

/// Broker-wide: which container ids have a connection that claimed them
/// (`sole-connection-for-container`). Shared by all AMQP acceptors.
#[derive(Debug, Clone, Default)]
pub struct ContainerRegistry(Arc<DashMap<String, ()>>);

impl ContainerRegistry {
    /// Claims `id`; the guard releases it.
    fn claim(&self, id: &str) -> Option<ContainerClaim> {
        match self.0.entry(id.to_owned()) {
            dashmap::mapref::entry::Entry::Occupied(_) => None,
            dashmap::mapref::entry::Entry::Vacant(v) => {
                v.insert(());
                Some(ContainerClaim {
                    registry: self.clone(),
                    id: id.to_owned(),
                })
            }
        }
    }
}

struct ContainerClaim {
    registry: ContainerRegistry,
    id: String,
}

impl Drop for ContainerClaim {
    fn drop(&mut self) {
        self.registry.0.remove(&self.id);
    }
}

pub const CAP_DELAYED_DELIVERY: &str = "DELAYED_DELIVERY";
pub const CAP_ANONYMOUS_RELAY: &str = "ANONYMOUS-RELAY";
pub const CAP_SHARED_SUBS: &str = "SHARED-SUBS";
pub const CAP_SOLE_CONNECTION: &str = "sole-connection-for-container";

/// Why a connection ends.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("{}", .0.condition.as_str())]
    Close(AmqpError),
    #[error(transparent)]
    Codec(#[from] AmqpCodecError),
}

fn close_error(condition: &str, description: impl Into<String>) -> ConnError {
    ConnError::Close(AmqpError::new(condition, Some(&description.into())))
}

pub async fn serve<S>(
    io: S,
    peer: SocketAddr,
    broker: Broker,
    options: AmqpOptions,
    shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let span = tracing::info_span!("amqp", %peer);
    run(io, broker, options, shutdown).instrument(span).await
}

async fn run<S>(io: S, broker: Broker, options: AmqpOptions, mut shutdown: broadcast::Receiver<()>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut framed =
        Framed::with_capacity(io, AmqpFrameCodec::new(options.max_frame_size), 64 * 1024);
    match handshake::handshake(&mut framed, &broker, options.handshake_timeout).await {
        Ok(user) => tracing::debug!(?user, "authenticated"),
        Err(e @ (HandshakeError::Closed | HandshakeError::AuthFailed)) => {
            tracing::debug!(error = %e, "handshake ended");
            return;
        }
        Err(e) => {
            tracing::info!(error = %e, "handshake failed");
            return;
        }
    }
    let (sink, deliveries) = crate::core::deliveries::channel();
    let mut conn = Connection {
        framed,
        env: Env {
            broker,
            sink,
            container_id: String::new(),
            factory: None,
            max_message_size: options.max_message_size,
            link_credit: options.link_credit,
            read_at_ms: now_ms(),
        },
        out: Outgoing::default(),
        consumers: Consumers::default(),
        waits: Waits::default(),
        txns: Txns::new(options.transactions),
        pending_acks: PendingAcks::default(),
        drain: CoreDrain::Idle,
        next_generation: 0,
        options,
        deliveries,
        sessions: FastMap::default(),
        claim: None,
        remote_idle: None,
        last_read: Instant::now(),
        last_write: Instant::now(),
        withheld_by: None,
    };
    let result = match conn.open().await {
        Ok(true) => conn.main_loop(&mut shutdown).await,
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let error = match &e {
            ConnError::Close(err) => err.clone(),
            ConnError::Codec(AmqpCodecError::Io(_)) => return conn.end_sessions(),
            ConnError::Codec(c) => AmqpError::from(c),
        };
        tracing::info!(condition = error.condition.as_str(), description = ?error.description, "closing connection");
        conn.out.clear();
        conn.out.frame(0, Close { error: Some(error) });
        let _ = conn.flush().await;
    }
    conn.end_sessions();
}

struct Connection<S> {
    framed: Framed<S, AmqpFrameCodec>,
    options: AmqpOptions,
    /// What sessions read.
    env: Env,
    /// Frames to write at the next flush, already encoded.
    out: Outgoing,
    consumers: Consumers,
    waits: Waits,
    txns: Txns,
    /// Acks of pre-settled deliveries waiting for a free queue.
    pending_acks: PendingAcks,
    drain: CoreDrain,
    next_generation: u64,
    deliveries: crate::core::deliveries::Deliveries,
    /// By the peer's channel number (ours is the same).
    sessions: FastMap<u16, Session>,
    claim: Option<ContainerClaim>,
    /// Send something at least this often.
    remote_idle: Option<Duration>,
    last_read: Instant,
    last_write: Instant,
    /// A queue that blocks producers on one of this connection's links: while
    /// it does, those links get no credit (see `Session::regrant`); every
    /// other link, and every consumer, goes on.
    withheld_by: Option<Arc<Queue>>,
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    /// Waits for the peer's `open` and answers it. `Ok(false)` when the connection is refused
    /// (already answered) or the peer left.
    async fn open(&mut self) -> Result<bool, ConnError> {
        let open = loop {
            match self.framed.next().await {
                None => return Ok(false),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Inbound::Heartbeat)) => continue,
                Some(Ok(Inbound::Frame(Frame::Amqp(AmqpFrame {
                    performative: Performative::Open(open),
                    ..
                })))) => break open,
                Some(Ok(_)) => {
                    return Err(close_error(condition::ILLEGAL_STATE, "expected open"));
                }
            }
        };
        self.env.container_id = open.container_id.as_str().to_owned();
        let options = &self.options;
        let mut reply = Open::new(&format!("weir-{:x}", self.env.broker.next_consumer_id()));
        reply.max_frame_size = options.max_frame_size;
        reply.channel_max = options.channel_max.min(open.channel_max);
        if !options.idle_timeout.is_zero() {
            reply.idle_time_out = Some(options.idle_timeout.as_millis() as u32);
        }
        reply.offered_capabilities = [
            CAP_DELAYED_DELIVERY,
            CAP_ANONYMOUS_RELAY,
            CAP_SHARED_SUBS,
            CAP_SOLE_CONNECTION,
        ]
        .into_iter()
        .map(Symbol::from_static)
        .collect();
        let sole = open
            .desired_capabilities
            .iter()
            .any(|c| c.as_str() == CAP_SOLE_CONNECTION);
        if sole {
            match self.options.containers.claim(&self.env.container_id) {
                Some(claim) => self.claim = Some(claim),
                None => {
                    // Qpid JMS reads this pair as InvalidClientIDException.
                    reply.properties = Some(vec![(
                        Value::symbol("amqp:connection-establishment-failed"),
                        Value::Bool(true),
                    )]);
                    self.out.frame(0, reply);
                    let mut error = AmqpError::new(
                        condition::INVALID_FIELD,
                        Some("a connection with this container id is already open"),
                    );
                    error.info = Some(vec![(
                        Value::symbol("invalid-field"),
                        Value::symbol("container-id"),
                    )]);
                    self.out.frame(0, Close { error: Some(error) });
                    let _ = self.flush().await;
                    return Ok(false);
                }
            }
        }
        self.env.factory = open
            .hostname
            .as_ref()
            .and_then(|h| self.env.broker.connection_factory(h.as_str()))
            .or_else(|| {
                options
                    .connection_factory
                    .as_deref()
                    .and_then(|n| self.env.broker.connection_factory(n))
            })
            .cloned();
        self.out.set_split_at(open.max_frame_size);
        self.framed
            .codec_mut()
            .set_remote_max_frame_size(open.max_frame_size);
        self.out
            .set_max_frame(self.framed.codec().remote_max_frame_size());
        // Heart-beat at half the peer's timeout, as the spec suggests.
        self.remote_idle = open
            .idle_time_out
            .filter(|t| *t > 0)
            .map(|t| Duration::from_millis(u64::from(t) / 2));
        tracing::debug!(container = %self.env.container_id, "open");
        self.out.frame(0, reply);
        self.flush().await?;
        Ok(true)
    }

    async fn main_loop(&mut self, shutdown: &mut broadcast::Receiver<()>) -> Result<(), ConnError> {
        let ours = self.options.idle_timeout;
        let tick = [self.remote_idle, (!ours.is_zero()).then_some(ours)]
            .into_iter()
            .flatten()
            .min()
            .map_or(Duration::from_secs(3600), |d| d / 4)
            .max(Duration::from_millis(20));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                item = self.framed.next() => {
                    // Once per wake-up, not per frame: the idle check needs no finer clock.
                    self.last_read = Instant::now();
                    self.env.read_at_ms = now_ms();
                    if self.read_batch(item)? {
                        // The peer closed or went away: what we owe it goes out if it can.
                        let _ = self.flush().await;
                        return Ok(());
                    }
                }
                Some(delivery) = self.deliveries.recv() => {
                    self.deliver(delivery);
                    // Take what else is ready so one flush carries a batch.
                    for _ in 0..256 {
                        match self.deliveries.try_recv() {
                            Ok(d) => self.deliver(d),
                            Err(_) => break,
                        }
                    }
                    self.complete_drains();
                }
                // Lets the tasks holding the queue go first, then acks for sure.
                _ = tokio::task::yield_now(), if !self.pending_acks.is_empty() => {
                    self.pending_acks.apply();
                }
                () = producers_may_go(&self.withheld_by), if self.withheld_by.is_some() => {
                    self.withheld_by = None;
                    for session in self.sessions.values_mut() {
                        session.regrant(&self.env.broker, &mut self.out, self.env.link_credit);
                    }
                }
                result = oldest_written(&mut self.waits.written), if !self.waits.written.is_empty() => {
                    self.written(result);
                    // The rest of a group commit is answered already: one flush for all.
                    for _ in 0..1024 {
                        match self.waits.answered() {
                            Some(result) => self.written(result),
                            None => break,
                        }
                    }
                }
                Some(settled) = self.waits.waiting.next(), if !self.waits.waiting.is_empty() => {
                    self.settled(settled);
                    // One disk write completes a whole window of transfers at once: answer
                    // them all with one flush (ranged dispositions), not a write each.
                    for _ in 0..1024 {
                        match self.waits.waiting.next().now_or_never() {
                            Some(Some(settled)) => self.settled(settled),
                            _ => break,
                        }
                    }
                }
                _ = ticker.tick() => {
                    // Twice the announced timeout: peers heart-beat at half of it at best, and
                    // a busy client's event loop may run late.
                    if !ours.is_zero() && self.last_read.elapsed() > ours * 2 {
                        return Err(close_error(condition::RESOURCE_LIMIT_EXCEEDED, "idle timeout: nothing received"));
                    }
                    if let Some(every) = self.remote_idle {
                        if self.out.is_empty() && self.last_write.elapsed() >= every {
                            self.framed.send(Outbound::Heartbeat).await?;
                            self.last_write = Instant::now();
                        }
                    }
                }
                _ = shutdown.recv() => {
                    return Err(close_error(condition::CONNECTION_FORCED, "broker shutting down"));
                }
            }
            if self.withheld_by.is_none() {
                self.withheld_by = self.sessions.values().find_map(Session::withheld_queue);
            }
            if !self.out.is_empty() {
                self.flush().await?;
            }
            // Pre-settled deliveries count as consumed once written: one ack for the batch.
            if !self.pending_acks.is_empty() {
                self.pending_acks.try_apply();
            }
        }
    }

    /// Takes `first` and the frames already read after it, so one flush answers
    /// them all (a disposition per transfer would otherwise be a write each) and
    /// the consumers they feed are woken once. `Ok(true)` when the connection is
    /// over; what the batch sent is published either way.
    fn read_batch(
        &mut self,
        first: Option<Result<Inbound, AmqpCodecError>>,
    ) -> Result<bool, ConnError> {
        let _wakes = WakeBatch::begin();
        let mut item = first;
        let mut taken = 0;
        loop {
            let over = self.inbound(item);
            taken += 1;
            if !matches!(over, Ok(false)) {
                self.flush_sends();
                return over;
            }
            // A frame taken from the stream must be handled: count before taking.
            if taken == MAX_READ_BATCH {
                break;
            }
            match self.framed.next().now_or_never() {
                Some(next) => item = next,
                None => break,
            }
        }
        self.flush_sends();
        Ok(false)
    }

    /// The oldest waiting write is on disk (or failed): settle its transfer.
    fn written(&mut self, result: Result<(), CoreError>) {
        if let Some(settled) = self.waits.take_written(result) {
            self.settled(settled);
        }
    }

    /// A disk write (or transaction) finished for a transfer the peer sent.
    fn settled(&mut self, settled: Settled) {
        if let Some(session) = self.sessions.get_mut(&settled.received.channel) {
            session.settled(&mut self.out, settled);
        }
    }

    /// Takes one item from the peer. `Ok(true)` when the connection is over.
    fn inbound(
        &mut self,
        item: Option<Result<Inbound, AmqpCodecError>>,
    ) -> Result<bool, ConnError> {
        match item {
            None => Ok(true),
            Some(Err(e)) => Err(e.into()),
            Some(Ok(Inbound::Heartbeat)) => Ok(false),
            Some(Ok(Inbound::Header(_))) => Err(close_error(
                condition::CONNECTION_FRAMING_ERROR,
                "unexpected protocol header",
            )),
            Some(Ok(Inbound::Frame(Frame::Sasl(_)))) => Err(close_error(
                condition::CONNECTION_FRAMING_ERROR,
                "SASL frame after SASL",
            )),
            Some(Ok(Inbound::Frame(Frame::Amqp(frame)))) => self.handle(frame),
        }
    }

    /// Routes one frame. `Ok(true)` when the peer closed the connection.
    fn handle(&mut self, frame: AmqpFrame) -> Result<bool, ConnError> {
        let AmqpFrame {
            channel,
            performative,
            payload,
            ..
        } = frame;
        if !matches!(performative, Performative::Transfer(_)) {
            // Transfers batched so far are published before any other frame
            // can see or change what they did (a detach, a flow, a disposition).
            self.flush_sends();
        }
        if matches!(
            performative,
            Performative::Detach(_) | Performative::End(_) | Performative::Close(_)
        ) {
            // A consumer may be going away: what it was sent is consumed.
            self.pending_acks.apply();
        }
        match performative {
            Performative::Close(close) => {
                if let Some(e) = close.error {
                    tracing::debug!(condition = e.condition.as_str(), "peer closed with error");
                }
                self.out.frame(0, Close::default());
                Ok(true)
            }
            Performative::Open(_) => Err(close_error(condition::ILLEGAL_STATE, "second open")),
            Performative::Begin(begin) => {
                if begin.remote_channel.is_some() {
                    return Err(close_error(
                        condition::NOT_ALLOWED,
                        "begin with a remote-channel: we never begin sessions",
                    ));
                }
                if self.sessions.contains_key(&channel) {
                    return Err(close_error(
                        condition::NOT_ALLOWED,
                        "channel already in use",
                    ));
                }
                if channel > self.options.channel_max {
                    return Err(close_error(
                        condition::NOT_ALLOWED,
                        "channel over channel-max",
                    ));
                }
                self.next_generation += 1;
                let session = Session::begin(&mut self.out, channel, self.next_generation, &begin);
                self.sessions.insert(channel, session);
                Ok(false)
            }
            other => {
                let Some(session) = self.sessions.get_mut(&channel) else {
                    return Err(close_error(
                        condition::NOT_ALLOWED,
                        format!("{} on channel {channel} with no session", other.name()),
                    ));
                };
                let ending = session.is_ending();
                let is_flow = matches!(other, Performative::Flow(_));
                let result = self.session_frame(channel, other, payload);
                if is_flow && result.is_ok() {
                    self.complete_drains();
                }
                let Some(session) = self.sessions.get_mut(&channel) else {
                    return Ok(false);
                };
                match result {
                    Ok(true) => {
                        if let Some(mut s) = self.sessions.remove(&channel) {
                            if !ending {
                                s.end(&mut self.out, &mut self.consumers, None);
                            }
                        }
                    }
                    Ok(false) => {}
                    // Kept until the peer's end, so its frames in flight still find it.
                    Err(SessionError::End(error)) => {
                        session.end(&mut self.out, &mut self.consumers, Some(error))
                    }
                    Err(SessionError::Connection(error)) => return Err(ConnError::Close(error)),
                }
                Ok(false)
            }
        }
    }

    /// Hands a frame to the session on `channel`, with what its handler works with.
    /// `Ok(true)` when the session is over.
    fn session_frame(
        &mut self,
        channel: u16,
        performative: Performative,
        payload: Bytes,
    ) -> Result<bool, SessionError> {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Ok(false);
        };
        if session.is_ending() {
            // Everything but the peer's end is moot now.
            return Ok(matches!(performative, Performative::End(_)));
        }
        match performative {
            Performative::End(end) => {
                if let Some(e) = end.error {
                    tracing::debug!(
                        condition = e.condition.as_str(),
                        "peer ended session with error"
                    );
                }
                return Ok(true);
            }
            Performative::Attach(attach) => {
                session.attach(&self.env, &mut self.out, &mut self.consumers, *attach)?
            }
            Performative::Detach(detach) => {
                session.detach(&self.env, &mut self.out, &mut self.consumers, detach)?
            }
            Performative::Flow(flow) => {
                self.drain =
                    session.flow(&mut self.out, &mut self.pending_acks, self.drain, flow)?
            }
            Performative::Transfer(transfer) => session.transfer(
                &self.env,
                &mut self.out,
                &mut self.txns,
                &mut self.waits,
                transfer,
                payload,
            )?,
            Performative::Disposition(d) => session.disposition(&mut self.out, &mut self.txns, d),
            other => {
                return Err(SessionError::Connection(AmqpError::new(
                    condition::ILLEGAL_STATE,
                    Some(&format!("{} on a session channel", other.name())),
                )))
            }
        }
        Ok(false)
    }

    /// A drain makes the core dispatch at once into our channel: send all of
    /// that before telling the peer the drain is over.
    fn complete_drains(&mut self) {
        if self.drain == CoreDrain::Idle {
            return;
        }
        while let Ok(d) = self.deliveries.try_recv() {
            self.deliver(d);
        }
        self.drain = CoreDrain::Idle;
        for session in self.sessions.values_mut() {
            session.finish_drains(&mut self.out);
        }
    }

    fn deliver(&mut self, delivery: Delivery) {
        let Some(&(channel, handle)) = self.consumers.get(&delivery.consumer) else {
            // The link went away; the core returns the message when the consumer detaches.
            return;
        };
        if let Some(session) = self.sessions.get_mut(&channel) {
            self.drain = session.deliver(
                &mut self.out,
                &mut self.pending_acks,
                self.drain,
                handle,
                delivery,
            );
        }
    }

    /// Writes every frame waiting, in one vectored write when large payloads
    /// are queued beside the encoded frames (see [`Outgoing`]).
    async fn flush(&mut self) -> Result<(), ConnError> {
        self.out.write_to(&mut self.framed).await?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Publishes what each session has batched (see [`Session::flush_sends`]).
    fn flush_sends(&mut self) {
        for session in self.sessions.values_mut() {
            session.flush_sends(&self.env.broker, &mut self.out, &mut self.waits);
        }
    }

    /// Drops every link: unsettled messages go back to their queues.
    fn end_sessions(&mut self) {
        // Messages received whole are published even as the connection ends.
        self.flush_sends();
        self.pending_acks.apply();
        // Nothing of an undischarged transaction happens; what it settled comes back.
        self.txns.open.rollback_all();
        for (_, mut session) in self.sessions.drain() {
            session.release_all(&mut self.consumers);
        }
    }
}
