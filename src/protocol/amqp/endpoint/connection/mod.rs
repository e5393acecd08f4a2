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

mod driven;

use bytes::Bytes;

use super::env::Env;
use super::handshake::{self, HandshakeError, Login};
use super::link::Consumers;
use super::options::ContainerClaim;
pub use super::options::{AmqpOptions, ContainerRegistry};
use super::outgoing::Outgoing;
use super::session::{CoreDrain, Session, SessionError};
use super::txn::Txns;
use super::waits::{Settled, Waits};
use crate::core::connections::Descriptor;
use crate::core::consumer::Delivery;
use crate::core::deliveries::Deliveries;
use crate::core::fast_map::FastMap;
use crate::core::message::now_ms;
use crate::core::queue::{PendingAcks, Queue};
use crate::core::security::audit::{self, LoginOutcome};
use crate::core::security::Principal;
use crate::core::{Broker, CoreError};
use crate::protocol::admission::Ticket;
use crate::protocol::amqp::wire::codec::{AmqpFrame, AmqpFrameCodec, Frame, Inbound};
use crate::protocol::amqp::wire::definitions::AmqpError;
use crate::protocol::amqp::wire::error::{condition, AmqpCodecError};
use crate::protocol::amqp::wire::performatives::{Close, Open, Performative};
use crate::protocol::amqp::wire::types::{Symbol, Value};
use crate::protocol::driver::{self, ClientFaults, Ending, Io, Timing};
use crate::protocol::Peer;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::Instrument;

/// Deliveries taken from the core per wake-up beyond the first, so one flush carries a batch.
const DELIVERY_BATCH: usize = 256;

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

/// Why the driver stopped an AMQP connection.
enum Stop {
    /// The peer closed the connection (our `close` is queued).
    Closed,
    Failed(ConnError),
}

impl From<ConnError> for Stop {
    fn from(e: ConnError) -> Self {
        Stop::Failed(e)
    }
}

impl From<AmqpCodecError> for Stop {
    fn from(e: AmqpCodecError) -> Self {
        Stop::Failed(e.into())
    }
}

pub async fn serve<S>(
    io: S,
    peer: Peer,
    broker: Broker,
    options: AmqpOptions,
    shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let span = driver::connection_span(&peer, "amqp");
    run(io, peer, broker, options, shutdown)
        .instrument(span)
        .await
}

async fn run<S>(
    io: S,
    peer: Peer,
    broker: Broker,
    options: AmqpOptions,
    mut shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut framed = Framed::with_capacity(
        io,
        AmqpFrameCodec::new(options.max_frame_size),
        crate::protocol::read_ahead::IDLE_READ_BUFFER,
    );
    let sasl = tokio::select! {
        result = handshake::handshake(&mut framed, &broker, &peer, options.sasl_timeout) => result,
        // Before `open` there is no AMQP frame to say goodbye with.
        _ = shutdown.recv() => return,
    };
    let login = match sasl {
        Ok(login) => login,
        Err(e @ (HandshakeError::Closed | HandshakeError::AuthFailed)) => {
            tracing::debug!(error = %e, "handshake ended");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "handshake failed");
            return;
        }
    };
    tracing::Span::current().record("user", login.user.as_deref().unwrap_or("anonymous"));
    let (sink, deliveries) = crate::core::deliveries::channel();
    let mut io = Io::new(framed, deliveries);
    let mut conn = Connection {
        env: Env {
            broker,
            sink,
            container_id: String::new(),
            principal: Principal::unrestricted(),
            factory: None,
            max_message_size: options.max_message_size,
            link_credit: options.link_credit,
            max_links_per_session: options.max_links_per_session,
            max_unsettled_per_link: options.max_unsettled_per_link,
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
        sessions: FastMap::default(),
        claim: None,
        ticket: None,
        opened: false,
        remote_idle: None,
        faults: ClientFaults::default(),
        withheld_by: None,
        received: 0,
    };
    let opened = tokio::select! {
        result = conn.open(&mut io, &peer, &login) => result,
        _ = shutdown.recv() => Err(close_error(condition::CONNECTION_FORCED, "broker shutting down")),
    };
    let error = match opened {
        Ok(true) => {
            let timing = conn.timing();
            let registration = conn.env.broker.connections().register(Descriptor {
                protocol: "amqp".to_owned(),
                version: "1.0".to_owned(),
                transport: peer.transport,
                peer: peer.addr,
                tls: peer.tls,
                user: conn.env.principal.user().map(str::to_owned),
                client_id: Some(conn.env.container_id.clone()).filter(|c| !c.is_empty()),
            });
            let ending =
                driver::drive(&mut io, &mut conn, timing, &mut shutdown, &registration).await;
            match ending {
                Ending::Stopped(Stop::Closed) => {
                    // The peer closed or went away: what we owe it goes out if it can.
                    let _ = conn.flush(&mut io).await;
                    None
                }
                Ending::Stopped(Stop::Failed(e)) => Some(e),
                Ending::Shutdown => Some(close_error(
                    condition::CONNECTION_FORCED,
                    "broker shutting down",
                )),
                Ending::Closed => Some(close_error(
                    condition::CONNECTION_FORCED,
                    "connection closed by the broker's management",
                )),
                Ending::Silent => Some(close_error(
                    condition::RESOURCE_LIMIT_EXCEEDED,
                    "idle timeout: nothing received",
                )),
                Ending::FrameTimeout(limit) => Some(close_error(
                    condition::CONNECTION_FRAMING_ERROR,
                    format!("a frame was not completed within {limit:?}"),
                )),
            }
        }
        Ok(false) => None,
        Err(e) => Some(e),
    };
    if let Some(e) = error {
        conn.goodbye(&mut io, e).await;
    }
    conn.end_sessions().await;
}

struct Connection {
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
    /// By the peer's channel number (ours is the same).
    sessions: FastMap<u16, Session>,
    claim: Option<ContainerClaim>,
    /// The connection's place among the open ones.
    ticket: Option<Ticket>,
    /// Whether our `open` went out (a `close` must follow one).
    opened: bool,
    /// Send something at least this often.
    remote_idle: Option<Duration>,
    faults: ClientFaults,
    /// A queue that blocks producers on one of this connection's links: while
    /// it does, those links get no credit (see `Session::regrant`); every
    /// other link, and every consumer, goes on.
    withheld_by: Option<Arc<Queue>>,
    /// Whole messages the peer transferred, for management.
    received: u64,
}

impl Connection {
    /// Waits for the peer's `open`, admits the connection and answers it. `Ok(false)` when
    /// the connection is refused (already answered) or the peer left.
    async fn open<S>(
        &mut self,
        io: &mut Io<S, AmqpFrameCodec>,
        peer: &Peer,
        login: &Login,
    ) -> Result<bool, ConnError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let limit = self.options.open_timeout;
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        let open = loop {
            let item = tokio::select! {
                item = io.framed.next() => item,
                _ = &mut deadline => return Err(close_error(
                    condition::CONNECTION_FORCED,
                    format!("no open within {limit:?}"),
                )),
            };
            match item {
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
        tracing::Span::current().record("client", self.env.container_id.as_str());
        let user = login.user.as_deref();
        // Logged once the container id is known, so the line says which client it is.
        audit::login(
            peer.addr,
            user,
            login.mechanism,
            peer.tls,
            Some(&self.env.container_id),
            LoginOutcome::Accepted,
        );
        self.env.principal =
            self.env
                .broker
                .principal(user, Some(peer.addr), Some(&self.env.container_id));
        let mut reply = self.reply_open();
        reply.channel_max = reply.channel_max.min(open.channel_max);
        match self.options.admission.admit(peer.addr.ip(), user) {
            Ok(ticket) => self.ticket = Some(ticket),
            Err(refusal) => {
                tracing::info!(%refusal, "connection refused");
                self.out.frame(0, reply);
                self.opened = true;
                let error = AmqpError::new(
                    condition::RESOURCE_LIMIT_EXCEEDED,
                    Some(&refusal.to_string()),
                );
                self.out.frame(0, Close { error: Some(error) });
                let _ = self.flush(io).await;
                return Ok(false);
            }
        }
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
                    self.opened = true;
                    let mut error = AmqpError::new(
                        condition::INVALID_FIELD,
                        Some("a connection with this container id is already open"),
                    );
                    error.info = Some(vec![(
                        Value::symbol("invalid-field"),
                        Value::symbol("container-id"),
                    )]);
                    self.out.frame(0, Close { error: Some(error) });
                    let _ = self.flush(io).await;
                    return Ok(false);
                }
            }
        }
        let options = &self.options;
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
        io.framed
            .codec_mut()
            .set_remote_max_frame_size(open.max_frame_size);
        self.out
            .set_max_frame(io.framed.codec().remote_max_frame_size());
        // Heart-beat at half the peer's timeout, as the spec suggests.
        self.remote_idle = open
            .idle_time_out
            .filter(|t| *t > 0)
            .map(|t| Duration::from_millis(u64::from(t) / 2));
        tracing::debug!("open");
        self.out.frame(0, reply);
        self.opened = true;
        self.flush(io).await?;
        Ok(true)
    }

    /// Our `open`, before it is fitted to the peer's.
    fn reply_open(&self) -> Open {
        let options = &self.options;
        let mut reply = Open::new(&format!("weir-{:x}", self.env.broker.next_consumer_id()));
        reply.max_frame_size = options.max_frame_size;
        reply.channel_max = options.channel_max();
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
        reply
    }

    /// The driver's clocks once `open` is answered.
    fn timing(&self) -> Timing {
        let ours = self.options.idle_timeout;
        Timing {
            send_every: self.remote_idle,
            // Twice the announced timeout: peers heart-beat at half of it at best, and
            // a busy client's event loop may run late.
            expect_within: (!ours.is_zero()).then_some(ours * 2),
            frame_timeout: Some(self.options.frame_timeout).filter(|t| !t.is_zero()),
        }
    }

    /// Closes the connection with `e` (after our `open`, which must come first), best effort.
    async fn goodbye<S>(&mut self, io: &mut Io<S, AmqpFrameCodec>, e: ConnError)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let error = match &e {
            ConnError::Close(err) => err.clone(),
            ConnError::Codec(AmqpCodecError::Io(_)) => return,
            ConnError::Codec(c) => AmqpError::from(c),
        };
        let description = error.description.as_ref().map_or("", |d| d.as_str());
        let condition = error.condition.as_str();
        if condition == condition::INTERNAL_ERROR || condition == condition::CONNECTION_FORCED {
            tracing::info!(condition, description, "closing connection");
        } else if self.faults.loud() {
            tracing::warn!(condition, description, "closing connection");
        } else {
            tracing::debug!(condition, description, "closing connection");
        }
        self.out.clear();
        if !self.opened {
            self.out.frame(0, self.reply_open());
            self.opened = true;
        }
        self.out.frame(0, Close { error: Some(error) });
        let _ = tokio::time::timeout(Duration::from_secs(5), self.flush(io)).await;
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
        deliveries: &mut Deliveries,
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
            Some(Ok(Inbound::Frame(Frame::Amqp(frame)))) => self.handle(deliveries, frame),
        }
    }

    /// Routes one frame. `Ok(true)` when the peer closed the connection.
    fn handle(&mut self, deliveries: &mut Deliveries, frame: AmqpFrame) -> Result<bool, ConnError> {
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
                if channel > self.options.channel_max()
                    || self.sessions.len() >= self.options.max_sessions
                {
                    return Err(close_error(
                        condition::RESOURCE_LIMIT_EXCEEDED,
                        format!(
                            "more than {} sessions on this connection (limits.max_sessions_per_connection)",
                            self.options.max_sessions
                        ),
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
                    self.complete_drains(deliveries);
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
            Performative::Transfer(transfer) => {
                // A message may span several transfers: its last one counts it.
                self.received += u64::from(!transfer.more && !transfer.aborted);
                session.transfer(
                    &self.env,
                    &mut self.out,
                    &mut self.txns,
                    &mut self.waits,
                    transfer,
                    payload,
                )?
            }
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
    fn complete_drains(&mut self, deliveries: &mut Deliveries) {
        if self.drain == CoreDrain::Idle {
            return;
        }
        while let Ok(d) = deliveries.try_recv() {
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
    async fn flush<S>(&mut self, io: &mut Io<S, AmqpFrameCodec>) -> Result<(), ConnError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        self.out.write_to(&mut io.framed).await?;
        io.last_write = Instant::now();
        Ok(())
    }

    /// Publishes what each session has batched (see [`Session::flush_sends`]).
    fn flush_sends(&mut self) {
        for session in self.sessions.values_mut() {
            session.flush_sends(&self.env.broker, &mut self.out, &mut self.waits);
        }
    }

    /// Drops every link: unsettled messages go back to their queues. A
    /// session may hold many links: other connections run between sessions.
    async fn end_sessions(&mut self) {
        // Messages received whole are published even as the connection ends.
        self.flush_sends();
        self.pending_acks.apply();
        // Nothing of an undischarged transaction happens; what it settled comes back.
        self.txns.open.rollback_all();
        for (_, mut session) in self.sessions.drain() {
            session.release_all(&mut self.consumers);
            tokio::task::yield_now().await;
        }
    }
}
