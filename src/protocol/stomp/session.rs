//! One STOMP connection: CONNECT and negotiation, then frames in, deliveries
//! out, heart-beats both ways. Talks to the broker only through the core API.

use super::codec::{FrameWriter, Inbound, Limits, Outbound, StompCodec};
use super::convert::{self, ConvertError, DeliveryInfo, Destination};
use super::error::StompError;
use super::frame::{Command, Frame, HeaderText, Version};
use crate::core::consumer::{
    ConsumerId, ConsumerOptions, CreditMode, Delivery, MessageFilter, Release,
};
use crate::core::deliveries::WakeBatch;
use crate::core::factory::ProducerGroup;
use crate::core::fast_map::FastMap;
use crate::core::queue::PendingAcks;
use crate::core::selector::Selector;
use crate::core::{
    Broker, CoreError, Receipt, RoutingType, Settlement, Subscription, Target, TransactionError,
    TransactionLimits, Transactions,
};
use crate::protocol::write_parts::WriteParts;
use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio_util::codec::Framed;
use tracing::Instrument;

/// Frames taken per wake-up at most, so one busy client cannot starve the others.
const MAX_READ_BATCH: usize = 256;

/// Deliveries stop being added to one write once this much is buffered (large messages).
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// How this acceptor's STOMP connections behave.
#[derive(Debug, Clone)]
pub struct StompOptions {
    pub limits: Limits,
    /// The heart-beat interval we offer and ask for; zero turns heart-beats off.
    pub heartbeat: Duration,
    /// Time a client has to send CONNECT.
    pub connect_timeout: Duration,
    /// Uncompleted receipts before we stop reading from the client.
    pub max_pending_receipts: usize,
    /// What transactions may hold (`[limits]`).
    pub transactions: TransactionLimits,
    pub server_name: String,
    /// The connection factory of the acceptor, if it names one; a CONNECT
    /// `host` naming a factory overrides it.
    pub connection_factory: Option<String>,
}

impl Default for StompOptions {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            heartbeat: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            max_pending_receipts: 10_000,
            transactions: TransactionLimits::default(),
            server_name: format!("weir/{}", env!("CARGO_PKG_VERSION")),
            connection_factory: None,
        }
    }
}

/// Why a connection ends with an ERROR frame.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Codec(#[from] StompError),
    #[error("{0}")]
    Convert(#[from] ConvertError),
    #[error("{0}")]
    Core(#[from] CoreError),
    #[error("{0}")]
    Protocol(String),
    #[error("transaction '{0}': {1}")]
    Transaction(String, TransactionError),
    #[error("transaction '{0}' rolled back: {1}")]
    RolledBack(String, TransactionError),
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("no common version: this server speaks 1.0, 1.1 and 1.2")]
    NoCommonVersion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckMode {
    Auto,
    Client,
    ClientIndividual,
}

struct Sub {
    /// The subscription id and destination as they go into every MESSAGE.
    id_text: HeaderText,
    destination_text: HeaderText,
    ack: AckMode,
    subscription: Subscription,
    /// Delivered, not yet acknowledged: delivery order -> queue sequence.
    outstanding: BTreeMap<u64, u64>,
    order_of: FastMap<u64, u64>,
    group_first_key: Option<String>,
}

type PendingReceipt = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Option<String>, Result<(), CoreError>)> + Send>,
>;

struct Session<S> {
    broker: Broker,
    options: StompOptions,
    framed: Framed<S, StompCodec>,
    deliveries_tx: crate::core::deliveries::DeliverySink,
    /// Property names and destinations seen last, shared between messages.
    names: crate::core::names::Names,
    /// The queue this connection last sent to: a producer sends to one queue
    /// again and again, and looking it up by name per message (a shared map,
    /// contended across worker threads) showed in profiles.
    sending_to: Option<Arc<crate::core::queue::Queue>>,
    deliveries: crate::core::deliveries::Deliveries,
    subs: HashMap<String, Sub>,
    sub_of_consumer: FastMap<ConsumerId, String>,
    transactions: Transactions<String>,
    receipts: FuturesOrdered<PendingReceipt>,
    /// Receipts that need no wait, written right after the frame that asked,
    /// so e.g. a SUBSCRIBE's receipt precedes the messages it brings.
    ready_receipts: Vec<String>,
    /// The newest durable write no receipt asked about (see `receipt_after`).
    unconfirmed: Option<Receipt>,
    delivery_counter: u64,
    /// The ack id of the MESSAGE frame being written (kept to reuse its allocation).
    ack_id: String,
    /// Large bodies of the MESSAGE frames being written, queued uncopied after
    /// what the write buffer held before them.
    parts: WriteParts,
    version: Version,
    /// Send a heart-beat when nothing was written for this long.
    send_every: Option<Duration>,
    /// Drop the peer when nothing was read for this long.
    expect_within: Option<Duration>,
    last_read: Instant,
    last_write: Instant,
    /// Group defaults from the connection factory; a STOMP connection is one producer.
    producer: ProducerGroup,
    /// Auto-mode acks waiting for a free queue; applied with the next batch
    /// or when the session is idle.
    pending_acks: PendingAcks,
    /// A queue this connection sent to whose producers must wait (BLOCK
    /// policy, memory limit reached): nothing more is read until it lets
    /// them go. Deliveries and receipts still go out.
    blocked_by: Option<Arc<crate::core::queue::Queue>>,
}

/// Serves one connection until it ends. `io` may be any byte stream (TCP, or a
/// stream whose first bytes were peeked by a protocol sniffer).
pub async fn serve<S>(
    io: S,
    peer: SocketAddr,
    broker: Broker,
    options: StompOptions,
    shutdown: broadcast::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let span = tracing::info_span!("stomp", %peer);
    run(io, broker, options, shutdown).instrument(span).await
}

async fn run<S>(io: S, broker: Broker, options: StompOptions, mut shutdown: broadcast::Receiver<()>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let framed = Framed::with_capacity(io, StompCodec::new(options.limits), 64 * 1024);
    let (deliveries_tx, deliveries) = crate::core::deliveries::channel();
    let now = Instant::now();
    let transactions = Transactions::new(options.transactions);
    let mut session = Session {
        broker,
        options,
        framed,
        deliveries_tx,
        names: crate::core::names::Names::default(),
        sending_to: None,
        deliveries,
        subs: HashMap::new(),
        sub_of_consumer: FastMap::default(),
        transactions,
        receipts: FuturesOrdered::new(),
        ready_receipts: Vec::new(),
        unconfirmed: None,
        delivery_counter: 0,
        ack_id: String::new(),
        parts: WriteParts::default(),
        version: Version::V1_0,
        send_every: None,
        expect_within: None,
        last_read: now,
        last_write: now,
        producer: ProducerGroup::default(),
        pending_acks: PendingAcks::default(),
        blocked_by: None,
    };
    match session.handshake().await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            session.fail(&e, None).await;
            return;
        }
    }
    tracing::debug!(version = %session.version, "connected");
    if let Err((e, receipt)) = session.main_loop(&mut shutdown).await {
        session.fail(&e, receipt.as_deref()).await;
    }
    // Messages written in auto mode are consumed, even if their ack waited.
    session.pending_acks.apply();
    // Nothing of an uncommitted transaction happens; what it acknowledged comes back.
    session.transactions.rollback_all();
    // Dropping the subscriptions returns unacknowledged messages to their queues.
    session.subs.clear();
}

impl<S> Session<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    /// Waits for CONNECT/STOMP and answers CONNECTED. `Ok(false)` when the peer left.
    async fn handshake(&mut self) -> Result<bool, SessionError> {
        let deadline = tokio::time::sleep(self.options.connect_timeout);
        tokio::pin!(deadline);
        let frame = loop {
            tokio::select! {
                _ = &mut deadline => return Err(SessionError::Protocol("no CONNECT frame in time".into())),
                item = self.framed.next() => match item {
                    None => return Ok(false),
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
        self.version = version;
        let login = frame.header("login");
        let passcode = frame.header("passcode");
        self.broker
            .auth()
            .authenticate(login, passcode)
            .map_err(|e| SessionError::Auth(e.to_string()))?;
        if version != Version::V1_0
            && frame.command == Command::Connect
            && frame.header("host").is_none()
        {
            // 1.1+ requires host; tolerate its absence as most brokers do.
            tracing::debug!("CONNECT without host header");
        }
        let factory = frame
            .header("host")
            .and_then(|host| self.broker.connection_factory(host))
            .or_else(|| {
                self.options
                    .connection_factory
                    .as_deref()
                    .and_then(|name| self.broker.connection_factory(name))
            });
        if let Some(factory) = factory {
            self.producer = factory.new_producer();
        }
        let (client_sends, client_wants) = parse_heartbeat(frame.header("heart-beat"))?;
        let ours = self.options.heartbeat.as_millis() as u64;
        let mut connected = Frame::new(Command::Connected)
            .with_header("version", version.as_str())
            .with_header("server", HeaderText::copy_from(&self.options.server_name))
            .with_header("session", format!("{:x}", self.broker.next_consumer_id()));
        if version != Version::V1_0 {
            connected.add_header("heart-beat", format!("{ours},{ours}"));
            if ours > 0 && client_wants > 0 {
                self.send_every = Some(Duration::from_millis(ours.max(client_wants)));
            }
            if ours > 0 && client_sends > 0 {
                // Allow for network delay, as the spec suggests.
                self.expect_within = Some(Duration::from_millis(ours.max(client_sends) * 2 + 1000));
            }
        }
        self.framed.send(Outbound::Frame(connected)).await?;
        self.framed.codec_mut().set_version(version);
        self.last_write = Instant::now();
        self.last_read = Instant::now();
        Ok(true)
    }

    async fn main_loop(
        &mut self,
        shutdown: &mut broadcast::Receiver<()>,
    ) -> Result<(), (SessionError, Option<String>)> {
        let tick = self
            .send_every
            .into_iter()
            .chain(self.expect_within)
            .min()
            .map(|d| d / 4)
            .unwrap_or(Duration::from_secs(3600))
            .max(Duration::from_millis(20));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let reading = self.receipts.len() < self.options.max_pending_receipts
                && self.blocked_by.is_none();
            tokio::select! {
                item = self.framed.next(), if reading => {
                    self.last_read = Instant::now();
                    let batch = self.read_batch(item);
                    // Receipts for the frames before a failed one still go out, ahead of the ERROR.
                    self.write_ready_receipts().await.map_err(|e| (e, None))?;
                    match batch {
                        Batch::Read => {}
                        Batch::Closed => return Ok(()),
                        Batch::Failed(e, receipt) => return Err((e, receipt)),
                        Batch::Disconnect(receipt) => {
                            return self.disconnect(receipt.clone()).await.map_err(|e| (e, receipt));
                        }
                    }
                }
                Some(delivery) = self.deliveries.recv() => {
                    self.write_deliveries(delivery).await.map_err(|e| (e, None))?;
                }
                () = crate::core::queue::producers_may_go(&self.blocked_by), if self.blocked_by.is_some() => {
                    self.blocked_by = None;
                    // Its heart-beats waited in the socket meanwhile.
                    self.last_read = Instant::now();
                }
                // Lets the tasks holding the queue go first, then acks for sure.
                _ = tokio::task::yield_now(), if !self.pending_acks.is_empty() => {
                    self.pending_acks.apply();
                }
                Some((receipt, result)) = self.receipts.next(), if !self.receipts.is_empty() => {
                    match result {
                        Ok(()) => {
                            if let Some(id) = receipt {
                                self.write(receipt_frame(&id)).await.map_err(|e| (e, None))?;
                            }
                        }
                        Err(e) => return Err((e.into(), receipt)),
                    }
                }
                _ = ticker.tick() => {
                    if let Some(limit) = self.expect_within {
                        if self.last_read.elapsed() > limit && self.blocked_by.is_none() {
                            tracing::info!("heart-beat missed; closing");
                            return Err((SessionError::Protocol("heart-beat timeout".into()), None));
                        }
                    }
                    if let Some(every) = self.send_every {
                        if self.last_write.elapsed() >= every {
                            self.framed.send(Outbound::Heartbeat).await.map_err(|e| (e.into(), None))?;
                            self.last_write = Instant::now();
                        }
                    }
                }
                _ = shutdown.recv() => {
                    let _ = self.write(Frame::new(Command::Error).with_header("message", "broker shutting down")).await;
                    return Ok(());
                }
            }
        }
    }

    /// Writes a batch of deliveries with one flush (one syscall for many frames).
    async fn write_deliveries(&mut self, first: Delivery) -> Result<(), SessionError> {
        let mut auto_acks: FastMap<ConsumerId, (Arc<crate::core::queue::Queue>, Vec<u64>)> =
            FastMap::default();
        let mut next = Some(first);
        let mut written = 0;
        let mut failed = None;
        while let Some(delivery) = next.take() {
            let wrote = match self.write_delivery(&delivery) {
                Ok(wrote) => wrote,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            if wrote {
                written += 1;
                let auto = self
                    .sub_of_consumer
                    .get(&delivery.consumer)
                    .and_then(|id| self.subs.get(id))
                    .is_some_and(|s| s.ack == AckMode::Auto);
                if auto {
                    auto_acks
                        .entry(delivery.consumer)
                        .or_insert_with(|| (delivery.queue.clone(), Vec::new()))
                        .1
                        .push(delivery.seq);
                }
            }
            let buffered = self.parts.len() + self.framed.write_buffer().len();
            if written < 256 && buffered < WRITE_BATCH_BYTES {
                next = self.deliveries.try_recv().ok();
            }
        }
        // The frames before a failed one still go out, ahead of the ERROR frame.
        self.parts
            .write_framed(&mut self.framed)
            .await
            .map_err(StompError::from)?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        SinkExt::<Outbound>::flush(&mut self.framed).await?;
        self.last_write = Instant::now();
        // Auto mode: a message counts as consumed once it is written.
        for (consumer, (queue, mut seqs)) in auto_acks {
            self.pending_acks.add(&queue, consumer, &mut seqs);
        }
        Ok(())
    }

    /// Writes the MESSAGE frame of a delivery into the write buffer; false when its
    /// subscription is gone.
    fn write_delivery(&mut self, delivery: &Delivery) -> Result<bool, StompError> {
        let Some(sub) = self
            .sub_of_consumer
            .get(&delivery.consumer)
            .and_then(|id| self.subs.get_mut(id))
        else {
            return Ok(false);
        };
        self.ack_id.clear();
        let _ = write!(self.ack_id, "{}.{}", delivery.consumer, delivery.seq);
        if sub.ack != AckMode::Auto {
            self.delivery_counter += 1;
            sub.outstanding.insert(self.delivery_counter, delivery.seq);
            sub.order_of.insert(delivery.seq, self.delivery_counter);
        }
        let ack = self.version == Version::V1_2 && sub.ack != AckMode::Auto;
        let escape = self.framed.codec().escapes(Command::Message);
        convert::write_message(
            &delivery.message,
            DeliveryInfo {
                subscription: &sub.id_text,
                message_id: &self.ack_id,
                ack,
                destination: &sub.destination_text,
                redelivered: delivery.redelivered(),
                group_first_key: sub
                    .group_first_key
                    .as_deref()
                    .filter(|_| delivery.group_first),
            },
            FrameWriter::new(Command::Message, escape, self.framed.write_buffer_mut()),
            &mut self.parts,
        )?;
        Ok(true)
    }

    /// Takes `first` and the frames already read after it, all but a DISCONNECT
    /// (which waits for the disk: see [`Session::disconnect`]). Consumers the
    /// batch feeds are woken once, when it is done (see [`WakeBatch`]).
    fn read_batch(&mut self, first: Option<Result<Inbound, StompError>>) -> Batch {
        let _wakes = WakeBatch::begin();
        let mut item = first;
        let mut taken = 0;
        loop {
            taken += 1;
            match item {
                None => return Batch::Closed,
                Some(Err(e)) => return Batch::Failed(e.into(), None),
                Some(Ok(Inbound::Heartbeat)) => {}
                Some(Ok(Inbound::Frame(frame))) if frame.command == Command::Disconnect => {
                    return Batch::Disconnect(frame.header("receipt").map(str::to_owned));
                }
                Some(Ok(Inbound::Frame(frame))) => {
                    let receipt = frame.header("receipt").map(str::to_owned);
                    if let Err(e) = self.handle(frame) {
                        return Batch::Failed(e, receipt);
                    }
                }
            }
            // A frame taken from the stream must be handled: stop before taking one.
            if taken == MAX_READ_BATCH
                || self.receipts.len() >= self.options.max_pending_receipts
                || self.blocked_by.is_some()
            {
                break;
            }
            match self.framed.next().now_or_never() {
                Some(next) => item = next,
                None => break,
            }
        }
        Batch::Read
    }

    /// Receipts for frames that needed no disk write, in one flush.
    async fn write_ready_receipts(&mut self) -> Result<(), SessionError> {
        if self.ready_receipts.is_empty() {
            return Ok(());
        }
        for id in std::mem::take(&mut self.ready_receipts) {
            self.framed
                .feed(Outbound::Frame(receipt_frame(&id)))
                .await?;
        }
        SinkExt::<Outbound>::flush(&mut self.framed).await?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Answers DISCONNECT only after everything before it is settled on disk.
    async fn disconnect(&mut self, receipt: Option<String>) -> Result<(), SessionError> {
        if let Some(completion) = self.unconfirmed.take() {
            completion.wait().await?;
        }
        while let Some((r, result)) = self.receipts.next().await {
            result?;
            if let Some(id) = r {
                self.write(receipt_frame(&id)).await?;
            }
        }
        if let Some(id) = receipt {
            self.write(receipt_frame(&id)).await?;
        }
        Ok(())
    }

    /// Every client frame but DISCONNECT (taken in [`Session::read_batch`]).
    fn handle(&mut self, frame: Frame) -> Result<(), SessionError> {
        let receipt = frame.header("receipt").map(str::to_owned);
        match frame.command {
            Command::Send => self.on_send(&frame, receipt)?,
            Command::Subscribe => {
                self.on_subscribe(&frame)?;
                self.receipt_now(receipt);
            }
            Command::Unsubscribe => {
                self.on_unsubscribe(&frame)?;
                self.receipt_now(receipt);
            }
            Command::Ack | Command::Nack => self.on_ack(&frame, receipt)?,
            Command::Begin => {
                let tx = required(&frame, "transaction")?;
                self.transactions
                    .begin(tx.to_owned())
                    .map_err(|e| SessionError::Transaction(tx.to_owned(), e))?;
                self.receipt_now(receipt);
            }
            Command::Commit => {
                let tx = required(&frame, "transaction")?;
                match self.transactions.commit(&self.broker, tx) {
                    Ok(done) => self.receipt_after(receipt, done),
                    Err(e @ TransactionError::Unknown) => {
                        return Err(SessionError::Transaction(tx.to_owned(), e))
                    }
                    // Nothing of it took effect; the ERROR carries the COMMIT's receipt-id.
                    Err(e) => return Err(SessionError::RolledBack(tx.to_owned(), e)),
                }
            }
            Command::Abort => {
                let tx = required(&frame, "transaction")?;
                self.transactions
                    .rollback(tx)
                    .map_err(|e| SessionError::Transaction(tx.to_owned(), e))?;
                self.receipt_now(receipt);
            }
            // Taken by `read_batch`, which waits for the disk first.
            Command::Disconnect => {
                return Err(SessionError::Protocol("DISCONNECT out of turn".into()));
            }
            Command::Connect | Command::Stomp => {
                return Err(SessionError::Protocol("already connected".into()));
            }
            other => {
                return Err(SessionError::Protocol(format!("{other} is a server frame")));
            }
        }
        Ok(())
    }

    fn on_send(&mut self, frame: &Frame, receipt: Option<String>) -> Result<(), SessionError> {
        let dest = convert::parse_destination(required(frame, "destination")?)?;
        let mut message = convert::message_from_send(
            frame,
            &dest,
            convert::now(),
            &mut self.names,
            self.broker.delay_header_names(),
        )?;
        self.producer.apply(&mut message);
        if let Some(tx) = frame.header("transaction") {
            // Any other refusal dooms the transaction; its COMMIT reports it.
            let target = Target::Routed(dest.routing);
            if let Err(e @ TransactionError::Unknown) =
                self.transactions.send(&self.broker, tx, message, target)
            {
                return Err(SessionError::Transaction(tx.to_owned(), e));
            }
            self.receipt_now(receipt);
            return Ok(());
        }
        let completion = match dest.routing {
            RoutingType::Anycast => {
                let kept = self
                    .sending_to
                    .as_ref()
                    .is_some_and(|q| *q.name() == message.address && !q.is_deleted());
                if !kept {
                    self.sending_to = Some(self.broker.queue_or_create(&message.address, false)?);
                }
                match &self.sending_to {
                    Some(queue) => self.broker.publish_to(queue, message)?,
                    None => self.broker.publish(message, dest.routing)?,
                }
            }
            RoutingType::Multicast => {
                let topic = message.address.clone();
                let receipt = self.broker.publish(message, dest.routing)?;
                if self.broker.may_block_producers() {
                    self.blocked_by = self.broker.blocking_subscriber(&topic);
                }
                receipt
            }
        };
        if let Some(queue) = self.sending_to.as_ref().filter(|q| q.blocks_producers()) {
            if dest.routing == RoutingType::Anycast {
                self.blocked_by = Some(queue.clone());
            }
        }
        self.receipt_after(receipt, completion);
        Ok(())
    }

    fn on_subscribe(&mut self, frame: &Frame) -> Result<(), SessionError> {
        let dest_text = required(frame, "destination")?;
        let dest: Destination = convert::parse_destination(dest_text)?;
        // 1.0 makes `id` optional; then the destination identifies the subscription.
        let id = match frame.header("id") {
            Some(id) => id.to_owned(),
            None if self.version == Version::V1_0 => dest_text.to_owned(),
            None => {
                return Err(SessionError::Protocol(
                    "missing required header 'id'".into(),
                ))
            }
        };
        if self.subs.contains_key(&id) {
            return Err(SessionError::Protocol(format!(
                "subscription '{id}' already exists"
            )));
        }
        let ack = match frame.header("ack").unwrap_or("auto") {
            "auto" => AckMode::Auto,
            "client" => AckMode::Client,
            "client-individual" => AckMode::ClientIndividual,
            other => {
                return Err(SessionError::Protocol(format!(
                    "unknown ack mode '{other}'"
                )))
            }
        };
        let settings = self.broker.settings_for(&dest.name);
        let prefetch = match frame
            .header("prefetch")
            .or_else(|| frame.header("activemq.prefetchSize"))
            .or_else(|| frame.header("prefetch-count"))
        {
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    SessionError::Protocol(format!(
                        "invalid prefetch '{v}': use a positive integer"
                    ))
                })?,
            None => settings.default_prefetch,
        };
        let priority = match frame
            .header("consumer-priority")
            .or_else(|| frame.header("priority"))
        {
            Some(v) => v
                .trim()
                .parse::<i32>()
                .map_err(|_| SessionError::Protocol(format!("invalid consumer priority '{v}'")))?,
            None => 0,
        };
        let filter = match frame.header("selector") {
            Some(text) => Selector::parse_optional(text)
                .map_err(|e| SessionError::Protocol(e.to_string()))?
                .map(|s| Arc::new(s) as Arc<dyn MessageFilter>),
            None => None,
        };
        let options = ConsumerOptions {
            credit: CreditMode::Window(prefetch),
            priority,
            filter,
            browse: frame.header("browser").is_some_and(|v| v == "true"),
        };
        let subscription = self.broker.subscribe(
            &dest.name,
            dest.routing,
            options,
            self.deliveries_tx.clone(),
        )?;
        self.sub_of_consumer
            .insert(subscription.consumer(), id.clone());
        self.subs.insert(
            id.clone(),
            Sub {
                id_text: HeaderText::copy_from(&id),
                destination_text: HeaderText::from(convert::format_destination(
                    &dest.name,
                    dest.routing,
                )),
                ack,
                subscription,
                outstanding: BTreeMap::new(),
                order_of: FastMap::default(),
                group_first_key: settings.group_first_key.clone(),
            },
        );
        Ok(())
    }

    fn on_unsubscribe(&mut self, frame: &Frame) -> Result<(), SessionError> {
        let id = match frame.header("id") {
            Some(id) => id.to_owned(),
            None if self.version == Version::V1_0 => required(frame, "destination")?.to_owned(),
            None => {
                return Err(SessionError::Protocol(
                    "missing required header 'id'".into(),
                ))
            }
        };
        self.pending_acks.apply();
        let sub = self
            .subs
            .remove(&id)
            .ok_or_else(|| SessionError::Protocol(format!("no subscription '{id}'")))?;
        self.sub_of_consumer.remove(&sub.subscription.consumer());
        Ok(())
    }

    fn on_ack(&mut self, frame: &Frame, receipt: Option<String>) -> Result<(), SessionError> {
        let nack = frame.command == Command::Nack;
        let tx = frame.header("transaction");
        if let Some(tx) = tx.filter(|tx| !self.transactions.is_open(*tx)) {
            return Err(SessionError::Transaction(
                tx.to_owned(),
                TransactionError::Unknown,
            ));
        }
        let taken = self.take_acknowledged(frame);
        if let Some(tx) = tx {
            // Held until COMMIT. A refusal dooms the transaction (nothing of
            // it will take effect) and its COMMIT reports it.
            match taken {
                Ok((queue, consumer, seqs)) => {
                    let how = match nack {
                        true => Settlement::Release(Release::Failed),
                        false => Settlement::Ack,
                    };
                    for seq in seqs {
                        let _ = self.transactions.settle(tx, &queue, consumer, seq, how);
                    }
                }
                Err(e) => {
                    let _ = self
                        .transactions
                        .refuse(tx, TransactionError::Protocol(Arc::new(e)));
                }
            }
            self.receipt_now(receipt);
            return Ok(());
        }
        let (queue, consumer, seqs) = taken?;
        if nack {
            for seq in seqs {
                queue.release(consumer, seq, Release::Failed)?;
            }
            self.receipt_now(receipt);
        } else {
            let done = queue.ack(consumer, &seqs)?;
            match receipt {
                Some(_) => self.receipt_after(receipt, done),
                None => drop(done),
            }
        }
        Ok(())
    }

    /// The deliveries an ACK or NACK settles, no longer outstanding on their
    /// subscription: its queue, its consumer and their sequences.
    fn take_acknowledged(
        &mut self,
        frame: &Frame,
    ) -> Result<(Arc<crate::core::queue::Queue>, ConsumerId, Vec<u64>), SessionError> {
        let ack_id = match self.version {
            Version::V1_2 => required(frame, "id")?,
            _ => required(frame, "message-id")?,
        };
        let unknown = || SessionError::Protocol(format!("unknown message id '{ack_id}'"));
        let (consumer, seq) = parse_ack_id(ack_id).ok_or_else(unknown)?;
        let sub_id = self
            .sub_of_consumer
            .get(&consumer)
            .cloned()
            .ok_or_else(unknown)?;
        let sub = self.subs.get_mut(&sub_id).ok_or_else(unknown)?;
        let order = sub.order_of.get(&seq).copied().ok_or_else(|| {
            SessionError::Protocol(format!(
                "message '{ack_id}' is not awaiting acknowledgement"
            ))
        })?;
        // Client mode acknowledges everything delivered up to this message.
        let orders: Vec<u64> = match sub.ack {
            AckMode::Client => sub.outstanding.range(..=order).map(|(o, _)| *o).collect(),
            _ => vec![order],
        };
        let seqs: Vec<u64> = orders
            .iter()
            .filter_map(|o| sub.outstanding.remove(o))
            .inspect(|s| {
                sub.order_of.remove(s);
            })
            .collect();
        Ok((sub.subscription.queue().clone(), consumer, seqs))
    }

    fn receipt_now(&mut self, receipt: Option<String>) {
        match receipt {
            Some(id) if self.receipts.is_empty() => self.ready_receipts.push(id),
            Some(id) => self.receipt_after(Some(id), Receipt::ready()),
            None => {}
        }
    }

    /// Queues a receipt behind earlier ones, sent once `completion` resolves.
    fn receipt_after(&mut self, receipt: Option<String>, completion: Receipt) {
        if receipt.is_none() {
            // Nobody asked: keep only the newest write. The store applies writes
            // in order, so it being on disk means every earlier one is, which is
            // all DISCONNECT needs; tracking each would cost a future per message.
            let completion = completion.durability();
            if !completion.is_ready() {
                self.unconfirmed = Some(completion);
            }
            return;
        }
        self.receipts.push_back(Box::pin(async move {
            let result = completion.wait().await;
            (receipt, result)
        }));
    }

    async fn write(&mut self, frame: Frame) -> Result<(), SessionError> {
        self.framed.send(Outbound::Frame(frame)).await?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Sends ERROR (best effort) and lets the connection close.
    async fn fail(&mut self, error: &SessionError, receipt: Option<&str>) {
        if let SessionError::Codec(StompError::Io(_)) = error {
            return;
        }
        tracing::info!(%error, "closing connection with ERROR");
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
            self.framed.send(Outbound::Frame(frame)),
        )
        .await;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.framed.get_mut().shutdown_write(),
        )
        .await;
    }
}

/// How a batch of read frames ended.
enum Batch {
    /// All taken; read on.
    Read,
    /// The peer closed the connection.
    Closed,
    /// A frame was bad: the error, and the receipt it asked for.
    Failed(SessionError, Option<String>),
    /// DISCONNECT, with its receipt.
    Disconnect(Option<String>),
}

trait ShutdownWrite {
    async fn shutdown_write(&mut self) -> std::io::Result<()>;
}

impl<S: AsyncWrite + Unpin + Send> ShutdownWrite for S {
    async fn shutdown_write(&mut self) -> std::io::Result<()> {
        tokio::io::AsyncWriteExt::shutdown(self).await
    }
}

fn receipt_frame(id: &str) -> Frame {
    Frame::new(Command::Receipt).with_header("receipt-id", HeaderText::copy_from(id))
}

fn required<'f>(frame: &'f Frame, name: &'static str) -> Result<&'f str, SessionError> {
    frame
        .header(name)
        .ok_or(SessionError::Convert(ConvertError::MissingHeader(name)))
}

fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

fn parse_ack_id(id: &str) -> Option<(ConsumerId, u64)> {
    let (consumer, seq) = id.split_once('.')?;
    Some((consumer.parse().ok()?, seq.parse().ok()?))
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
