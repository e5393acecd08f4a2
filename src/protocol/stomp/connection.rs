//! One STOMP connection: CONNECT and negotiation, then the shared connection driver
//! with STOMP's hooks (frames in, deliveries and receipts out, heart-beats both ways),
//! and the goodbye: a receipt for DISCONNECT, an ERROR frame for anything else.

use super::codec::{FrameWriter, Inbound, Limits, Outbound, StompCodec};
use super::convert::{self, DeliveryInfo};
use super::error::StompError;
use super::frame::{Command, Frame, HeaderText, Version};
use super::session::{one_line, receipt_frame, AckMode, Session, SessionError};
use crate::core::connections::{Descriptor, Traffic};
use crate::core::consumer::{ConsumerId, Delivery};
use crate::core::deliveries::Deliveries;
use crate::core::fast_map::FastMap;
use crate::core::queue::{producers_may_go, PendingAcks};
use crate::core::security::audit::{self, LoginOutcome};
use crate::core::security::{AuthError, Authenticator};
use crate::core::{Broker, CoreError, TransactionLimits};
use crate::protocol::admission::{Admission, Ticket};
use crate::protocol::driver::{self, ClientFaults, Connection, Ending, Io, ReadItem, Timing};
use crate::protocol::too_large::MessageTooLarge;
use crate::protocol::Peer;
use futures_util::{SinkExt, StreamExt};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::Instrument;

/// Deliveries stop being added to one write once this much is buffered (large messages).
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// Deliveries written with one flush at most.
const WRITE_BATCH_FRAMES: usize = 256;

/// How this acceptor's STOMP connections behave.
#[derive(Debug, Clone)]
pub struct StompOptions {
    pub limits: Limits,
    /// The heart-beat interval we offer and ask for; zero turns heart-beats off.
    pub heartbeat: Duration,
    /// Time a client has to send CONNECT.
    pub connect_timeout: Duration,
    /// Time a frame that started has to finish; zero: no limit.
    pub frame_timeout: Duration,
    /// Uncompleted receipts before we stop reading from the client.
    pub max_pending_receipts: usize,
    /// What transactions may hold (`[limits]`).
    pub transactions: TransactionLimits,
    /// Subscriptions one connection may hold (`max_subscriptions_per_connection`).
    pub max_subscriptions: usize,
    pub server_name: String,
    /// The connection factory of the acceptor, if it names one; a CONNECT
    /// `host` naming a factory overrides it.
    pub connection_factory: Option<String>,
    /// Which connections may open (shared by every acceptor).
    pub admission: Admission,
}

impl Default for StompOptions {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            heartbeat: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            frame_timeout: Duration::from_secs(60),
            max_pending_receipts: 10_000,
            transactions: TransactionLimits::default(),
            max_subscriptions: 10_000,
            server_name: format!("weir/{}", env!("CARGO_PKG_VERSION")),
            connection_factory: None,
            admission: Admission::default(),
        }
    }
}

/// Why the driver stopped reading a STOMP connection.
pub(super) enum Stop {
    /// The peer closed the connection.
    Closed,
    /// A frame was bad or a write failed: the error, and the receipt it asked for.
    Failed(SessionError, Option<String>),
    /// DISCONNECT, with its receipt.
    Disconnect(Option<String>),
}

impl From<SessionError> for Stop {
    fn from(e: SessionError) -> Self {
        Stop::Failed(e, None)
    }
}

impl From<StompError> for Stop {
    fn from(e: StompError) -> Self {
        Stop::Failed(e.into(), None)
    }
}

/// Serves one connection until it ends. `io` may be any byte stream (TCP, or a
/// stream whose first bytes were peeked by a protocol sniffer).
pub async fn serve<S>(
    io: S,
    peer: Peer,
    broker: Broker,
    options: StompOptions,
    shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let span = driver::connection_span(&peer, "stomp");
    run(io, peer, broker, options, shutdown)
        .instrument(span)
        .await
}

async fn run<S>(
    io: S,
    peer: Peer,
    broker: Broker,
    options: StompOptions,
    mut shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let framed = Framed::with_capacity(
        io,
        StompCodec::new(options.limits),
        crate::protocol::read_ahead::IDLE_READ_BUFFER,
    );
    let (deliveries_tx, deliveries) = crate::core::deliveries::channel();
    let mut io = Io::new(framed, deliveries);
    let mut conn = StompConnection {
        session: Session::new(broker, options, deliveries_tx),
        faults: ClientFaults::default(),
    };
    let connected = tokio::select! {
        result = conn.handshake(&mut io, &peer) => result,
        _ = shutdown.recv() => Err(SessionError::ShuttingDown),
    };
    let (timing, _ticket) = match connected {
        Ok(Some(connected)) => connected,
        Ok(None) => return,
        Err(e) => {
            conn.fail(&mut io, &e, None).await;
            return;
        }
    };
    tracing::debug!(version = %conn.session.version, "connected");
    let principal = &conn.session.principal;
    let registration = conn.session.broker.connections().register(Descriptor {
        protocol: "stomp".to_owned(),
        version: conn.session.version.as_str().to_owned(),
        transport: peer.transport,
        peer: peer.addr,
        tls: peer.tls,
        user: principal.user().map(str::to_owned),
        client_id: principal.client_id().map(str::to_owned),
    });
    let ending = driver::drive(&mut io, &mut conn, timing, &mut shutdown, &registration).await;
    let failure = match ending {
        Ending::Stopped(Stop::Closed) => None,
        Ending::Stopped(Stop::Disconnect(receipt)) => {
            match conn.disconnect(&mut io, &receipt).await {
                Ok(()) => None,
                Err(e) => Some((e, receipt)),
            }
        }
        Ending::Stopped(Stop::Failed(e, receipt)) => Some((e, receipt)),
        Ending::Shutdown => Some((SessionError::ShuttingDown, None)),
        Ending::Closed => Some((SessionError::ClosedByManagement, None)),
        Ending::Silent => Some((SessionError::HeartbeatTimeout, None)),
        Ending::FrameTimeout(limit) => Some((SessionError::FrameTimeout(limit), None)),
    };
    if let Some((e, receipt)) = failure {
        conn.fail(&mut io, &e, receipt.as_deref()).await;
    }
    let session = &mut conn.session;
    // Messages written in auto mode are consumed, even if their ack waited.
    session.pending_acks.apply();
    // Nothing of an uncommitted transaction happens; what it acknowledged comes back.
    session.transactions.rollback_all();
    // Dropping the subscriptions returns unacknowledged messages to their queues.
    crate::protocol::fairness::release_in_chunks(session.subs.drain().map(|(_, sub)| sub)).await;
}

/// Who CONNECT logs in as: `login`/`passcode` when given (refused without TLS when the
/// broker keeps passwords to TLS), else the user a verified client certificate names, else
/// anonymous where that is allowed.
fn login(auth: &Authenticator, frame: &Frame, peer: &Peer) -> Result<Option<String>, AuthError> {
    let login = frame.header("login").filter(|l| !l.is_empty());
    match (login, &peer.certified_user) {
        (None, Some(certified)) => auth.authenticate_certified(certified).map(Some),
        _ => auth.authenticate_password(login, frame.header("passcode"), peer.tls),
    }
}

/// What a STOMP connection waits for besides its socket and deliveries.
enum Waited {
    /// A receipt (if one was asked for) whose disk write is done, or failed.
    Receipt((Option<String>, Result<(), CoreError>)),
    /// The queue that blocked this connection's producer lets it go.
    ProducersMayGo,
}

/// A STOMP session as the connection driver runs it.
struct StompConnection {
    session: Session,
    faults: ClientFaults,
}

impl StompConnection {
    /// Waits for CONNECT/STOMP, admits the client and answers CONNECTED: the clocks the
    /// driver then runs with, and the client's place among the open connections.
    /// `Ok(None)` when the peer left.
    async fn handshake<S>(
        &mut self,
        io: &mut Io<S, StompCodec>,
        peer: &Peer,
    ) -> Result<Option<(Timing, Ticket)>, SessionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let session = &mut self.session;
        let limit = session.options.connect_timeout;
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        let frame = loop {
            tokio::select! {
                _ = &mut deadline => return Err(SessionError::ConnectTimeout(limit)),
                item = io.framed.next() => match item {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(Inbound::Heartbeat)) => continue,
                    Some(Ok(Inbound::Frame(frame))) => break frame,
                }
            }
        };
        if !matches!(frame.command, Command::Connect | Command::Stomp) {
            return Err(SessionError::Protocol(format!(
                "expected CONNECT, got {}",
                frame.command
            )));
        }
        let version = Version::negotiate(frame.header("accept-version"))
            .ok_or(SessionError::NoCommonVersion)?;
        session.version = version;
        let client_id = frame.header("client-id");
        let user = match login(session.broker.auth(), &frame, peer) {
            Ok(user) => {
                audit::login(
                    peer.addr,
                    user.as_deref(),
                    "stomp",
                    peer.tls,
                    client_id,
                    LoginOutcome::Accepted,
                );
                user
            }
            Err(e) => {
                audit::login(
                    peer.addr,
                    frame.header("login"),
                    "stomp",
                    peer.tls,
                    client_id,
                    LoginOutcome::Refused,
                );
                // Guessing passwords gets slow; the delay is fixed so it tells nothing.
                tokio::time::sleep(session.broker.auth().failure_delay()).await;
                return Err(SessionError::Auth(e.to_string()));
            }
        };
        session.principal = session
            .broker
            .principal(user.as_deref(), Some(peer.addr), client_id);
        let span = tracing::Span::current();
        span.record("user", user.as_deref().unwrap_or("anonymous"));
        if let Some(id) = client_id {
            span.record("client", id);
        }
        let ticket = session
            .options
            .admission
            .admit(peer.addr.ip(), user.as_deref())?;
        if version != Version::V1_0
            && frame.command == Command::Connect
            && frame.header("host").is_none()
        {
            // 1.1+ requires host; tolerate its absence as most brokers do.
            tracing::debug!("CONNECT without host header");
        }
        let factory = frame
            .header("host")
            .and_then(|host| session.broker.connection_factory(host))
            .or_else(|| {
                session
                    .options
                    .connection_factory
                    .as_deref()
                    .and_then(|name| session.broker.connection_factory(name))
            });
        if let Some(factory) = factory {
            session.producer = factory.new_producer();
        }
        let (client_sends, client_wants) = parse_heartbeat(frame.header("heart-beat"))?;
        let ours = session.options.heartbeat.as_millis() as u64;
        let mut timing = Timing {
            frame_timeout: Some(session.options.frame_timeout).filter(|t| !t.is_zero()),
            ..Timing::default()
        };
        let mut connected = Frame::new(Command::Connected)
            .with_header("version", version.as_str())
            .with_header(
                "server",
                HeaderText::copy_from(&session.options.server_name),
            )
            .with_header(
                "session",
                format!("{:x}", session.broker.next_consumer_id()),
            );
        if version != Version::V1_0 {
            connected.add_header("heart-beat", format!("{ours},{ours}"));
            if ours > 0 && client_wants > 0 {
                timing.send_every = Some(Duration::from_millis(ours.max(client_wants)));
            }
            if ours > 0 && client_sends > 0 {
                // Allow for network delay, as the spec suggests.
                timing.expect_within =
                    Some(Duration::from_millis(ours.max(client_sends) * 2 + 1000));
            }
        }
        io.framed.send(Outbound::Frame(connected)).await?;
        io.framed.codec_mut().set_version(version);
        io.last_write = Instant::now();
        io.last_read = Instant::now();
        Ok(Some((timing, ticket)))
    }

    /// Writes the MESSAGE frame of a delivery into the write buffer; false when its
    /// subscription is gone.
    fn write_delivery<S>(
        &mut self,
        io: &mut Io<S, StompCodec>,
        delivery: &Delivery,
    ) -> Result<bool, StompError> {
        let session = &mut self.session;
        let Some(sub) = session
            .sub_of_consumer
            .get(&delivery.consumer)
            .and_then(|id| session.subs.get_mut(id))
        else {
            return Ok(false);
        };
        // "consumer.seq", written without `fmt`: this runs for every delivery.
        let mut digits = itoa::Buffer::new();
        session.ack_id.clear();
        session.ack_id.push_str(digits.format(delivery.consumer));
        session.ack_id.push('.');
        session.ack_id.push_str(digits.format(delivery.seq));
        if sub.ack != AckMode::Auto {
            session.delivery_counter += 1;
            sub.outstanding
                .insert(session.delivery_counter, delivery.seq);
            sub.order_of.insert(delivery.seq, session.delivery_counter);
        }
        let ack = session.version == Version::V1_2 && sub.ack != AckMode::Auto;
        let escape = io.framed.codec().escapes(Command::Message);
        convert::write_message(
            &delivery.message,
            DeliveryInfo {
                subscription: &sub.id_text,
                message_id: &session.ack_id,
                ack,
                destination: &sub.destination_text,
                redelivered: delivery.redelivered(),
                group_first_key: sub
                    .group_first_key
                    .as_deref()
                    .filter(|_| delivery.group_first),
            },
            FrameWriter::new(Command::Message, escape, io.framed.write_buffer_mut()),
            &mut session.parts,
        )?;
        Ok(true)
    }

    /// Answers DISCONNECT only after everything before it is settled on disk.
    async fn disconnect<S>(
        &mut self,
        io: &mut Io<S, StompCodec>,
        receipt: &Option<String>,
    ) -> Result<(), SessionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let session = &mut self.session;
        if let Some(completion) = session.unconfirmed.take() {
            completion.wait().await?;
        }
        while let Some((r, result)) = session.receipts.next().await {
            result?;
            if let Some(id) = r {
                write(io, receipt_frame(&id)).await?;
            }
        }
        if let Some(id) = receipt {
            write(io, receipt_frame(id)).await?;
        }
        Ok(())
    }

    /// Sends ERROR (best effort) and lets the connection close.
    async fn fail<S>(
        &mut self,
        io: &mut Io<S, StompCodec>,
        error: &SessionError,
        receipt: Option<&str>,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let too_large;
        let error = match error {
            // The transport refused a message too large (WebSocket): said as over TCP.
            SessionError::Codec(StompError::Io(e)) => match MessageTooLarge::of(e) {
                Some(refused) => {
                    too_large = SessionError::Codec(StompError::FrameTooLarge {
                        limit: refused.limit,
                    });
                    &too_large
                }
                // The connection is gone: nobody to tell.
                None => return,
            },
            other => other,
        };
        if !error.is_clients() {
            tracing::info!(%error, "closing connection with ERROR");
        } else if self.faults.loud() {
            tracing::warn!(%error, "closing connection with ERROR");
        } else {
            tracing::debug!(%error, "closing connection with ERROR");
        }
        let mut frame =
            Frame::new(Command::Error).with_header("message", one_line(&error.to_string()));
        if let SessionError::NoCommonVersion = error {
            // The spec's example: tell the client which versions we speak.
            frame.add_header("version", "1.0,1.1,1.2");
        }
        if let Some(r) = receipt {
            frame.add_header("receipt-id", HeaderText::copy_from(r));
        }
        frame.add_header("content-type", "text/plain");
        frame.body = bytes::Bytes::from(error.to_string());
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            io.framed.send(Outbound::Frame(frame)),
        )
        .await;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::io::AsyncWriteExt::shutdown(io.framed.get_mut()),
        )
        .await;
    }
}

impl<S> Connection<S> for StompConnection
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    type Codec = StompCodec;
    type Stop = Stop;
    type Waited = Waited;

    /// Not while too many receipts wait for the disk, nor while a queue this
    /// connection sent to blocks its producers (the SEND that hit the limit
    /// was the last frame read).
    fn reading(&self) -> bool {
        self.session.receipts.len() < self.session.options.max_pending_receipts
            && self.session.blocked_by.is_none()
    }

    /// Every frame but DISCONNECT, which waits for the disk: see
    /// [`StompConnection::disconnect`].
    fn read(&mut self, _: &mut Deliveries, item: ReadItem<StompCodec>) -> ControlFlow<Stop> {
        match item {
            None => ControlFlow::Break(Stop::Closed),
            Some(Err(e)) => ControlFlow::Break(e.into()),
            Some(Ok(Inbound::Heartbeat)) => ControlFlow::Continue(()),
            Some(Ok(Inbound::Frame(frame))) if frame.command == Command::Disconnect => {
                ControlFlow::Break(Stop::Disconnect(frame.header("receipt").map(str::to_owned)))
            }
            Some(Ok(Inbound::Frame(frame))) => {
                let receipt = frame.header("receipt").map(str::to_owned);
                match self.session.handle(frame) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => ControlFlow::Break(Stop::Failed(e, receipt)),
                }
            }
        }
    }

    /// Receipts for frames that needed no disk write, in one flush.
    async fn after_reads(&mut self, io: &mut Io<S, StompCodec>) -> Result<(), Stop> {
        if self.session.ready_receipts.is_empty() {
            return Ok(());
        }
        for id in std::mem::take(&mut self.session.ready_receipts) {
            io.framed.feed(Outbound::Frame(receipt_frame(&id))).await?;
        }
        Ok(())
    }

    /// Writes a batch of deliveries with one flush (one syscall for many frames).
    async fn deliver(&mut self, io: &mut Io<S, StompCodec>, first: Delivery) -> Result<(), Stop> {
        let mut auto_acks: FastMap<ConsumerId, (Arc<crate::core::queue::Queue>, Vec<u64>)> =
            FastMap::default();
        let mut next = Some(first);
        let mut written = 0;
        let mut failed = None;
        while let Some(delivery) = next.take() {
            let wrote = match self.write_delivery(io, &delivery) {
                Ok(wrote) => wrote,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            if wrote {
                written += 1;
                let session = &self.session;
                let auto = session
                    .sub_of_consumer
                    .get(&delivery.consumer)
                    .and_then(|id| session.subs.get(id))
                    .is_some_and(|s| s.ack == AckMode::Auto);
                if auto {
                    auto_acks
                        .entry(delivery.consumer)
                        .or_insert_with(|| (delivery.queue.clone(), Vec::new()))
                        .1
                        .push(delivery.seq);
                }
            }
            let buffered = self.session.parts.len() + io.framed.write_buffer().len();
            if written < WRITE_BATCH_FRAMES && buffered < WRITE_BATCH_BYTES {
                next = io.deliveries.try_recv().ok();
            }
        }
        self.session.traffic.sent += written as u64;
        // The frames before a failed one still go out, ahead of the ERROR frame.
        self.session
            .parts
            .write_framed(&mut io.framed)
            .await
            .map_err(StompError::from)?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        SinkExt::<Outbound>::flush(&mut io.framed).await?;
        io.last_write = Instant::now();
        // Auto mode: a message counts as consumed once it is written.
        for (consumer, (queue, mut seqs)) in auto_acks {
            self.session.pending_acks.add(&queue, consumer, &mut seqs);
        }
        Ok(())
    }

    fn pending_acks(&mut self) -> &mut PendingAcks {
        &mut self.session.pending_acks
    }

    fn waiting(&self) -> bool {
        !self.session.receipts.is_empty() || self.session.blocked_by.is_some()
    }

    async fn wait(&mut self) -> Self::Waited {
        let session = &mut self.session;
        tokio::select! {
            Some(done) = session.receipts.next(), if !session.receipts.is_empty() => {
                Waited::Receipt(done)
            }
            () = producers_may_go(&session.blocked_by), if session.blocked_by.is_some() => {
                Waited::ProducersMayGo
            }
            // Not polled while neither (see `waiting`).
            else => std::future::pending().await,
        }
    }

    async fn waited(&mut self, io: &mut Io<S, StompCodec>, waited: Waited) -> Result<(), Stop> {
        let (receipt, result) = match waited {
            Waited::Receipt(done) => done,
            Waited::ProducersMayGo => {
                self.session.blocked_by = None;
                // Its heart-beats waited in the socket meanwhile.
                io.last_read = Instant::now();
                return Ok(());
            }
        };
        match result {
            Ok(()) => {
                if let Some(id) = receipt {
                    io.framed.feed(Outbound::Frame(receipt_frame(&id))).await?;
                }
                Ok(())
            }
            Err(e) => Err(Stop::Failed(e.into(), receipt)),
        }
    }

    async fn heartbeat(&mut self, io: &mut Io<S, StompCodec>) -> Result<(), Stop> {
        io.framed.feed(Outbound::Heartbeat).await?;
        Ok(())
    }

    async fn flush(&mut self, io: &mut Io<S, StompCodec>) -> Result<(), Stop> {
        if io.framed.write_buffer().is_empty() {
            return Ok(());
        }
        SinkExt::<Outbound>::flush(&mut io.framed).await?;
        io.last_write = Instant::now();
        Ok(())
    }

    fn traffic(&self) -> Traffic {
        self.session.traffic
    }
}

/// Writes one frame now.
async fn write<S>(io: &mut Io<S, StompCodec>, frame: Frame) -> Result<(), SessionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    io.framed.send(Outbound::Frame(frame)).await?;
    io.last_write = Instant::now();
    Ok(())
}

/// `heart-beat: cx,cy` — what the client can send and what it wants, in ms.
fn parse_heartbeat(value: Option<&str>) -> Result<(u64, u64), SessionError> {
    let Some(value) = value else {
        return Ok((0, 0));
    };
    let bad = || SessionError::Protocol(format!("invalid heart-beat header '{value}'"));
    let (a, b) = value.split_once(',').ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}
