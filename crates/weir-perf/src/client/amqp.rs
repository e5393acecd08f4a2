//! AMQP 1.0 producer and consumer connections for `weir perf`, on our own codec
//! ([`AmqpFrameCodec`] over a tokio-util `Framed`).
//!
//! One connection, one session (channel 0), one link (handle 0). Transfers are
//! encoded straight into the `Framed` write buffer and go out in one write per
//! batch, as the STOMP client does. A producer's flow control is the broker's
//! link credit and session window plus our own window of unsettled transfers
//! (`--receipt-every K`: at most K awaiting their `accepted`); a consumer grants
//! `--prefetch` credit, tops it up when half is used, and settles in ranges.

use super::stomp::{Login, SendSettings, SubscribeSettings};
use super::{headers, Delivery, Publisher, Stamp, Subscriber};
use crate::args::{AckMode, Destination};
use crate::error::PerfError;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use weir_wire::amqp::codec::{begin_frame, encode_frame, finish_frame, FRAME_TYPE_AMQP};
use weir_wire::amqp::described::Composite;
use weir_wire::amqp::messaging;
use weir_wire::amqp::performatives::{encode_delivery_start, sender_credit};
use weir_wire::amqp::types::{code, encode, Descriptor};
use weir_wire::amqp::{
    map_get, AmqpFrame, AmqpFrameCodec, Attach, Begin, Close, DeliveryState, Disposition, Flow,
    Frame, Header, Inbound, Message, MessageView, Open, Outbound, Performative, ProtocolHeader,
    ReceiverSettleMode, Role, SaslCode, SaslFrame, SaslInit, SenderSettleMode, Source, Str, Symbol,
    Target, TargetKind, Transfer, Value,
};
use weir_wire::write_parts::{WriteParts, SHARE_FROM};

/// How long to wait for the broker's half of the handshake and attach.
/// Numbers the container ids of this process's connections.
static NEXT_CONTAINER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// What we accept per frame; brokers split larger deliveries.
const MAX_FRAME_SIZE: u32 = 1 << 20;
/// Our session incoming window, renewed long before it could run out.
const SESSION_WINDOW: u32 = 1 << 30;
const HANDLE: u32 = 0;
const DELIVERY_DELAY: &str = "x-opt-delivery-delay";

/// What AMQP adds to the protocol-neutral settings.
#[derive(Debug, Clone, Copy)]
pub struct AmqpSettings {
    /// Producers send pre-settled (no dispositions awaited).
    pub settled: bool,
    /// Unsettled transfers a producer keeps in flight at most.
    pub window: u64,
}

/// One connection with its session: the framed socket and the session
/// counters both ends need (transport section 2.5.6).
struct Connection {
    framed: Framed<TcpStream, AmqpFrameCodec>,
    /// Large message bodies queued uncopied after the frames before them.
    parts: WriteParts,
    remote_max_frame: u32,
    /// Half the broker's idle timeout: we must send something this often.
    keepalive: Option<Duration>,
    next_outgoing_id: u32,
    /// Transfer frames the broker's session still accepts from us.
    remote_incoming_window: u32,
    /// The broker's next transfer id, echoed in our flows.
    next_incoming_id: u32,
    incoming_window: u32,
    /// We sent close: the broker's close is the answer, not an error.
    closing: bool,
}

impl Connection {
    async fn open(addr: &str, login: &Login) -> Result<Connection, PerfError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let codec = AmqpFrameCodec::new(MAX_FRAME_SIZE);
        let mut conn = Connection {
            framed: Framed::with_capacity(stream, codec, 256 * 1024),
            parts: WriteParts::default(),
            remote_max_frame: u32::MAX,
            keepalive: None,
            next_outgoing_id: 0,
            remote_incoming_window: 0,
            next_incoming_id: 0,
            incoming_window: SESSION_WINDOW,
            closing: false,
        };
        tokio::time::timeout(ANSWER_TIMEOUT, conn.handshake(addr, login))
            .await
            .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))??;
        Ok(conn)
    }

    async fn handshake(&mut self, addr: &str, login: &Login) -> Result<(), PerfError> {
        self.framed
            .send(Outbound::Header(ProtocolHeader::SASL))
            .await?;
        self.expect_header(ProtocolHeader::SASL).await?;
        let offered = match self.sasl().await? {
            SaslFrame::Mechanisms(m) => m.mechanisms,
            _ => return Err(PerfError::Unexpected("SASL frame (wanted sasl-mechanisms)")),
        };
        let init = sasl_init(&offered, login)?;
        self.framed
            .send(Outbound::Frame(Frame::Sasl(SaslFrame::Init(init))))
            .await?;
        match self.sasl().await? {
            SaslFrame::Outcome(o) if o.code == SaslCode::Ok => {}
            SaslFrame::Outcome(_) => return Err(PerfError::AuthFailed),
            _ => return Err(PerfError::Unexpected("SASL frame (wanted sasl-outcome)")),
        }
        self.framed.codec_mut().expect_header();
        self.framed
            .feed(Outbound::Header(ProtocolHeader::AMQP))
            .await?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let open = Open {
            hostname: Some(Str::from(host)),
            max_frame_size: MAX_FRAME_SIZE,
            channel_max: 0,
            // One container per connection: ActiveMQ Classic takes the
            // container id for a JMS client id and refuses a second one.
            ..Open::new(&format!(
                "weir-perf-{}-{}",
                std::process::id(),
                NEXT_CONTAINER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ))
        };
        self.feed(open.into()).await?;
        let begin = Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: SESSION_WINDOW,
            outgoing_window: u32::MAX,
            handle_max: 0,
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: None,
        };
        self.feed(begin.into()).await?;
        self.framed.flush().await?;
        self.expect_header(ProtocolHeader::AMQP).await?;
        match self.frame().await? {
            Performative::Open(open) => {
                self.remote_max_frame = open.max_frame_size;
                self.framed
                    .codec_mut()
                    .set_remote_max_frame_size(open.max_frame_size);
                self.keepalive = open
                    .idle_time_out
                    .filter(|ms| *ms > 0)
                    .map(|ms| Duration::from_millis(u64::from(ms / 2).max(1)));
            }
            other => return Err(PerfError::Unexpected(other.name())),
        }
        match self.frame().await? {
            Performative::Begin(begin) => {
                self.remote_incoming_window = begin.incoming_window;
                self.next_incoming_id = begin.next_outgoing_id;
            }
            other => return Err(PerfError::Unexpected(other.name())),
        }
        Ok(())
    }

    async fn expect_header(&mut self, want: ProtocolHeader) -> Result<(), PerfError> {
        match self.framed.next().await {
            Some(Ok(Inbound::Header(h))) if h == want => Ok(()),
            Some(Ok(Inbound::Header(_))) => Err(PerfError::Unexpected("protocol header")),
            Some(Ok(_)) => Err(PerfError::Unexpected("frame before the protocol header")),
            Some(Err(e)) => Err(e.into()),
            None => Err(PerfError::Closed),
        }
    }

    async fn sasl(&mut self) -> Result<SaslFrame, PerfError> {
        match self.framed.next().await {
            Some(Ok(Inbound::Frame(Frame::Sasl(s)))) => Ok(s),
            Some(Ok(_)) => Err(PerfError::Unexpected("non-SASL frame during SASL")),
            Some(Err(e)) => Err(e.into()),
            None => Err(PerfError::Closed),
        }
    }

    async fn feed(&mut self, p: Performative) -> Result<(), PerfError> {
        self.framed.feed(outbound(p)).await?;
        Ok(())
    }

    /// Encodes a frame into the write buffer without writing it.
    fn queue(&mut self, p: Performative) {
        let buf = self.framed.write_buffer_mut();
        encode_frame(&Frame::Amqp(AmqpFrame::bare(0, p)), buf);
    }

    fn buffered(&self) -> usize {
        self.framed.write_buffer().len() + self.parts.len()
    }

    async fn flush(&mut self) -> Result<(), PerfError> {
        self.parts.write_framed(&mut self.framed).await?;
        self.framed.flush().await?;
        Ok(())
    }

    /// A flow for our session, and for the link if `link` gives
    /// (delivery-count, link-credit).
    fn flow(&self, link: Option<(u32, u32)>) -> Flow {
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: link.map(|_| HANDLE),
            delivery_count: link.map(|(count, _)| count),
            link_credit: link.map(|(_, credit)| credit),
            ..Flow::default()
        }
    }

    /// Turns an item from the decoder into a performative (with its payload);
    /// `None` for a heart-beat. Close, end and detach from the broker are errors.
    fn inbound(
        &mut self,
        item: Option<Result<Inbound, weir_wire::amqp::AmqpCodecError>>,
    ) -> Result<Option<(Performative, Bytes)>, PerfError> {
        match item {
            Some(Ok(Inbound::Frame(Frame::Amqp(f)))) => {
                match &f.performative {
                    Performative::Close(c) if !(self.closing && c.error.is_none()) => {
                        return Err(broker_error("close", c.error.as_ref()))
                    }
                    Performative::End(e) => return Err(broker_error("end", e.error.as_ref())),
                    Performative::Detach(d) => {
                        return Err(broker_error("detach", d.error.as_ref()))
                    }
                    Performative::Transfer(_) => {
                        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
                        self.incoming_window = self.incoming_window.saturating_sub(1);
                    }
                    _ => {}
                }
                Ok(Some((f.performative, f.payload)))
            }
            Some(Ok(Inbound::Heartbeat)) => Ok(None),
            Some(Ok(Inbound::Header(_))) => Err(PerfError::Unexpected("protocol header")),
            Some(Ok(Inbound::Frame(Frame::Sasl(_)))) => Err(PerfError::Unexpected("SASL frame")),
            Some(Err(e)) => Err(e.into()),
            None => Err(PerfError::Closed),
        }
    }

    /// The next frame, waiting for it; writes a heart-beat whenever the broker's
    /// idle timeout asks for one.
    async fn next(&mut self) -> Result<(Performative, Bytes), PerfError> {
        loop {
            let item = match self.keepalive {
                None => self.framed.next().await,
                Some(every) => match tokio::time::timeout(every, self.framed.next()).await {
                    Ok(item) => item,
                    Err(_) => {
                        self.framed.send(Outbound::Heartbeat).await?;
                        continue;
                    }
                },
            };
            if let Some(frame) = self.inbound(item)? {
                return Ok(frame);
            }
        }
    }

    /// A frame already read, if any: never waits.
    fn ready(&mut self) -> Result<Option<(Performative, Bytes)>, PerfError> {
        loop {
            match self.framed.next().now_or_never() {
                None => return Ok(None),
                Some(item) => {
                    if let Some(frame) = self.inbound(item)? {
                        return Ok(Some(frame));
                    }
                }
            }
        }
    }

    /// The next performative during setup, bounded by [`ANSWER_TIMEOUT`].
    async fn frame(&mut self) -> Result<Performative, PerfError> {
        tokio::time::timeout(ANSWER_TIMEOUT, self.next())
            .await
            .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))?
            .map(|(p, _)| p)
    }

    /// Closes the connection and waits for the broker's close: frames are
    /// handled in order, so everything sent before has been taken in.
    async fn close(&mut self) -> Result<(), PerfError> {
        self.closing = true;
        self.queue(Close::default().into());
        self.flush().await?;
        loop {
            if let (Performative::Close(_), _) = self.next().await? {
                return Ok(());
            }
        }
    }

    /// Attaches our link and returns the flows that came before the broker's
    /// attach. A refusal (no terminus in the answer) is followed by a detach,
    /// which carries the error.
    async fn attach(&mut self, attach: Attach) -> Result<Vec<Flow>, PerfError> {
        let sender = attach.role == Role::Sender;
        self.feed(attach.into()).await?;
        self.flush().await?;
        let mut flows = Vec::new();
        loop {
            match self.frame().await? {
                Performative::Attach(a) => {
                    let refused = if sender {
                        a.target.is_none()
                    } else {
                        a.source.is_none()
                    };
                    if !refused {
                        return Ok(flows);
                    }
                }
                Performative::Flow(flow) => flows.push(flow),
                other => return Err(PerfError::Unexpected(other.name())),
            }
        }
    }
}

fn outbound(p: Performative) -> Outbound {
    Outbound::Frame(Frame::Amqp(AmqpFrame::bare(0, p)))
}

fn broker_error(what: &str, error: Option<&weir_wire::amqp::AmqpError>) -> PerfError {
    PerfError::Broker(match error {
        Some(e) => format!(
            "{what}: {} {}",
            e.condition.as_str(),
            e.description.as_ref().map_or("", |d| d.as_str())
        ),
        None => what.to_owned(),
    })
}

/// PLAIN with --login/--passcode, else ANONYMOUS.
fn sasl_init(offered: &[Symbol], login: &Login) -> Result<SaslInit, PerfError> {
    let has = |m: &str| offered.iter().any(|s| s.as_str() == m);
    if let Some(user) = &login.login {
        if has("PLAIN") {
            let pass = login.passcode.as_deref().unwrap_or_default();
            let mut response = Vec::with_capacity(user.len() + pass.len() + 2);
            response.push(0);
            response.extend_from_slice(user.as_bytes());
            response.push(0);
            response.extend_from_slice(pass.as_bytes());
            return Ok(SaslInit {
                mechanism: Symbol::from_static("PLAIN"),
                initial_response: Some(Bytes::from(response)),
                hostname: None,
            });
        }
    }
    if has("ANONYMOUS") {
        return Ok(SaslInit {
            mechanism: Symbol::from_static("ANONYMOUS"),
            initial_response: None,
            hostname: None,
        });
    }
    Err(PerfError::AuthFailed)
}

/// The node's address and the capability that says queue or topic.
fn terminus(destination: &Destination) -> (Str, Vec<Symbol>) {
    match destination {
        Destination::Queue(n) => (Str::from(n.as_str()), vec![Symbol::from_static("queue")]),
        Destination::Topic(n) => (Str::from(n.as_str()), vec![Symbol::from_static("topic")]),
    }
}

/// Transfers sent and not yet settled by the broker, by delivery id.
#[derive(Debug, Default)]
struct InFlight {
    /// Delivery id of the front of `settled`.
    oldest: u32,
    settled: VecDeque<bool>,
    count: u64,
}

impl InFlight {
    fn sent(&mut self, id: u32) {
        if self.settled.is_empty() {
            self.oldest = id;
        }
        self.settled.push_back(false);
        self.count += 1;
    }

    /// Settles `first..=last` (serial numbers), ignoring ids not in flight.
    fn settle(&mut self, first: u32, last: u32) {
        let len = self.settled.len() as u32;
        let from = first.wrapping_sub(self.oldest);
        let to = last.wrapping_sub(self.oldest);
        if from >= len && to >= len {
            return;
        }
        let (from, to) = if from >= len {
            (0, to)
        } else {
            (from, to.min(len - 1))
        };
        for at in from..=to {
            if let Some(s) = self.settled.get_mut(at as usize) {
                if !*s {
                    *s = true;
                    self.count -= 1;
                }
            }
        }
        while self.settled.front() == Some(&true) {
            self.settled.pop_front();
            self.oldest = self.oldest.wrapping_add(1);
        }
    }
}

pub struct AmqpPublisher {
    conn: Connection,
    settled: bool,
    window: u64,
    credit: u32,
    delivery_count: u32,
    next_delivery_id: u32,
    in_flight: InFlight,
    /// Header and message annotations: the same for every message.
    prefix: Bytes,
    run_id: u64,
    /// One message's encoding, reused.
    scratch: BytesMut,
    /// A push that could not be encoded, reported by the next flush.
    failed: Option<PerfError>,
}

impl AmqpPublisher {
    pub async fn connect(
        addr: &str,
        login: &Login,
        settings: &SendSettings,
        amqp: AmqpSettings,
    ) -> Result<AmqpPublisher, PerfError> {
        let mut conn = Connection::open(addr, login).await?;
        let (address, capabilities) = terminus(&settings.destination);
        let mut attach = Attach::new("weir-perf-sender", HANDLE, Role::Sender);
        attach.snd_settle_mode = if amqp.settled {
            SenderSettleMode::Settled
        } else {
            SenderSettleMode::Unsettled
        };
        attach.source = Some(Source::default());
        attach.target = Some(TargetKind::Target(Target {
            address: Some(address),
            capabilities,
            ..Target::default()
        }));
        attach.initial_delivery_count = Some(0);
        let flows = conn.attach(attach).await?;
        let prefix = Message {
            header: settings.persistent.then(|| Header {
                durable: true,
                ..Header::default()
            }),
            message_annotations: settings.delay_ms.map(|ms| {
                vec![(
                    Value::symbol(DELIVERY_DELAY),
                    Value::Long(i64::try_from(ms).unwrap_or(i64::MAX)),
                )]
            }),
            ..Message::default()
        }
        .to_bytes();
        let mut publisher = AmqpPublisher {
            conn,
            settled: amqp.settled,
            window: amqp.window.max(1),
            credit: 0,
            delivery_count: 0,
            next_delivery_id: 0,
            in_flight: InFlight::default(),
            prefix,
            run_id: settings.run_id,
            scratch: BytesMut::with_capacity(1024),
            failed: None,
        };
        for flow in flows {
            publisher.absorb(Performative::Flow(flow))?;
        }
        Ok(publisher)
    }

    /// Takes in what the broker said: credit and window, or settlements.
    fn absorb(&mut self, p: Performative) -> Result<(), PerfError> {
        match p {
            Performative::Flow(flow) => {
                self.conn.remote_incoming_window = flow
                    .next_incoming_id
                    .unwrap_or(0)
                    .wrapping_add(flow.incoming_window)
                    .wrapping_sub(self.conn.next_outgoing_id);
                if flow.handle == Some(HANDLE) {
                    let theirs = flow.delivery_count.unwrap_or(self.delivery_count);
                    let credit = flow.link_credit.unwrap_or(0);
                    self.credit = sender_credit(theirs, credit, self.delivery_count);
                }
                Ok(())
            }
            Performative::Disposition(d) if d.role == Role::Receiver => {
                if let Some(DeliveryState::Rejected { error }) = &d.state {
                    return Err(broker_error("rejected", error.as_ref()));
                }
                if d.settled || is_outcome(d.state.as_ref()) {
                    self.in_flight.settle(d.first, d.last.unwrap_or(d.first));
                }
                Ok(())
            }
            // Our own link's attach echo and the like.
            _ => Ok(()),
        }
    }

    /// Takes in every frame already read.
    fn absorb_ready(&mut self) -> Result<(), PerfError> {
        while let Some((p, _)) = self.conn.ready()? {
            self.absorb(p)?;
        }
        Ok(())
    }

    fn encode(&mut self, stamp: &Stamp, body: &Bytes) -> Result<(), PerfError> {
        let id = self.next_delivery_id;
        self.scratch.clear();
        self.scratch.put_slice(&self.prefix);
        if let Some(g) = stamp.group {
            weir_wire::amqp::Properties {
                group_id: Some(Str::from(format!("{}{g}", headers::GROUP_PREFIX))),
                ..Default::default()
            }
            .encode(&mut self.scratch);
        }
        encode_stamp(self.run_id, stamp, &mut self.scratch);
        // The data section by hand: a `Body::Data` would need the body copied
        // into a `Bytes` first.
        encode::descriptor(&Descriptor::Code(messaging::DATA), &mut self.scratch);

        // Split what does not fit the broker's frame size (header + performative
        // + payload) into continuation transfers.
        let room = (self.conn.remote_max_frame as usize).saturating_sub(8 + 64);
        if room == 0 {
            return Err(PerfError::BadArg {
                flag: "--size",
                why: "the broker's max-frame-size is too small",
            });
        }
        if self.scratch.len() + 5 + body.len() <= room {
            // One frame, written straight into the write buffer; a large body
            // follows it uncopied.
            let buf = self.conn.framed.write_buffer_mut();
            let at = begin_frame(buf, FRAME_TYPE_AMQP, 0);
            encode_delivery_start(buf, HANDLE, id, self.settled);
            buf.put_slice(&self.scratch);
            let shared = body.len() >= SHARE_FROM;
            if shared {
                buf.put_u8(code::VBIN32);
                buf.put_u32(body.len() as u32);
            } else {
                encode::variable(code::VBIN8, code::VBIN32, body, buf);
            }
            finish_frame(buf, at, if shared { body.len() } else { 0 });
            if shared {
                self.conn.parts.share(buf, body.clone());
            }
            self.conn.next_outgoing_id = self.conn.next_outgoing_id.wrapping_add(1);
            self.conn.remote_incoming_window = self.conn.remote_incoming_window.saturating_sub(1);
            self.sent(id);
            return Ok(());
        }
        let mut transfer = Transfer {
            handle: HANDLE,
            delivery_id: Some(id),
            delivery_tag: Some(Bytes::copy_from_slice(&id.to_be_bytes())),
            message_format: Some(0),
            settled: Some(self.settled),
            ..Transfer::default()
        };
        encode::variable(code::VBIN8, code::VBIN32, body, &mut self.scratch);
        let payload = self.scratch.split().freeze();
        let mut rest = payload.clone();
        loop {
            let chunk = rest.split_to(rest.len().min(room));
            transfer.more = !rest.is_empty();
            let frame = Frame::Amqp(AmqpFrame {
                channel: 0,
                performative: Performative::Transfer(transfer.clone()),
                payload: chunk,
                payload_tail: Bytes::new(),
            });
            encode_frame(&frame, self.conn.framed.write_buffer_mut());
            self.conn.next_outgoing_id = self.conn.next_outgoing_id.wrapping_add(1);
            self.conn.remote_incoming_window = self.conn.remote_incoming_window.saturating_sub(1);
            if rest.is_empty() {
                break;
            }
            transfer = Transfer {
                handle: HANDLE,
                ..Transfer::default()
            };
        }
        drop(payload);
        self.sent(id);
        Ok(())
    }

    /// Counts delivery `id` as sent.
    fn sent(&mut self, id: u32) {
        self.next_delivery_id = id.wrapping_add(1);
        self.delivery_count = self.delivery_count.wrapping_add(1);
        self.credit = self.credit.saturating_sub(1);
        if !self.settled {
            self.in_flight.sent(id);
        }
    }
}

/// Appends the application-properties section that stamps a message: what
/// encoding the map `{perf-run: ulong, perf-p: uint, perf-seq: ulong, perf-ts:
/// ulong}` as values gives, without building one per message.
fn encode_stamp(run_id: u64, stamp: &Stamp, buf: &mut BytesMut) {
    encode::descriptor(&Descriptor::Code(messaging::APPLICATION_PROPERTIES), buf);
    encode::compound(buf, code::MAP8, code::MAP32, 8, |buf| {
        let key = |k: &str, buf: &mut BytesMut| {
            encode::variable(code::STR8, code::STR32, k.as_bytes(), buf)
        };
        key(headers::RUN, buf);
        encode::ulong(run_id, buf);
        key(headers::PRODUCER, buf);
        encode::uint(stamp.producer, buf);
        key(headers::SEQ, buf);
        encode::ulong(stamp.seq, buf);
        key(headers::SENT, buf);
        encode::ulong(stamp.sent_us, buf);
    });
}

fn is_outcome(state: Option<&DeliveryState>) -> bool {
    matches!(
        state,
        Some(
            DeliveryState::Accepted
                | DeliveryState::Released
                | DeliveryState::Modified { .. }
                | DeliveryState::Rejected { .. }
        )
    )
}

impl Publisher for AmqpPublisher {
    fn push(&mut self, stamp: &Stamp, body: &Bytes, _confirm: bool) {
        if self.failed.is_none() {
            if let Err(e) = self.encode(stamp, body) {
                self.failed = Some(e);
            }
        }
    }

    fn buffered(&self) -> usize {
        self.conn.buffered()
    }

    fn room(&self) -> u64 {
        let window = if self.settled {
            u64::MAX
        } else {
            self.window.saturating_sub(self.in_flight.count)
        };
        window
            .min(u64::from(self.credit))
            .min(u64::from(self.conn.remote_incoming_window))
    }

    async fn flush(&mut self) -> Result<(), PerfError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.conn.flush().await?;
        self.absorb_ready()
    }

    async fn wait_room(&mut self) -> Result<(), PerfError> {
        self.conn.flush().await?;
        while self.room() == 0 {
            let (p, _) = self.conn.next().await?;
            self.absorb(p)?;
        }
        self.absorb_ready()
    }

    /// Waits for every send to be settled, then closes the connection (so it
    /// is called for the last message only): pre-settled sends have no other
    /// proof of arrival, and a dropped socket may lose what it carried.
    async fn wait_confirmed(&mut self) -> Result<(), PerfError> {
        self.conn.flush().await?;
        while self.in_flight.count > 0 {
            let (p, _) = self.conn.next().await?;
            self.absorb(p)?;
        }
        tokio::time::timeout(ANSWER_TIMEOUT, self.conn.close())
            .await
            .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))?
    }
}

pub struct AmqpSubscriber {
    conn: Connection,
    /// Settle each delivery (deliveries arrive unsettled).
    settle: bool,
    run_id: u64,
    prefetch: u32,
    /// Credit the broker still has from us.
    credit: u32,
    delivery_count: u32,
    /// Deliveries received and not yet processed (`settle_last` not called).
    unprocessed: u32,
    /// The delivery id of the last message returned by `next`.
    last_id: Option<u32>,
    /// Processed deliveries not yet settled: one contiguous range.
    range: Option<(u32, u32)>,
    unflushed: u32,
    ack_batch: u32,
    /// Frames of a delivery split over several transfers.
    partial: BytesMut,
    partial_id: Option<u32>,
}

impl AmqpSubscriber {
    pub async fn connect(
        addr: &str,
        login: &Login,
        settings: &SubscribeSettings,
    ) -> Result<AmqpSubscriber, PerfError> {
        let mut conn = Connection::open(addr, login).await?;
        let (address, capabilities) = terminus(&settings.destination);
        let mut attach = Attach::new("weir-perf-receiver", HANDLE, Role::Receiver);
        attach.snd_settle_mode = match settings.ack {
            AckMode::Auto => SenderSettleMode::Settled,
            _ => SenderSettleMode::Unsettled,
        };
        attach.rcv_settle_mode = ReceiverSettleMode::First;
        attach.source = Some(Source {
            address: Some(address),
            capabilities,
            ..Source::default()
        });
        attach.target = Some(TargetKind::Target(Target::default()));
        conn.attach(attach).await?;
        let prefetch = settings.prefetch.max(1);
        conn.queue(conn.flow(Some((0, prefetch))).into());
        conn.flush().await?;
        Ok(AmqpSubscriber {
            conn,
            settle: settings.ack != AckMode::Auto,
            run_id: settings.run_id,
            prefetch,
            credit: prefetch,
            delivery_count: 0,
            unprocessed: 0,
            last_id: None,
            range: None,
            unflushed: 0,
            ack_batch: (prefetch / 2).max(1),
            partial: BytesMut::new(),
            partial_id: None,
        })
    }

    fn write_disposition(&mut self) {
        if let Some((first, last)) = self.range.take() {
            self.conn.queue(Disposition::accepted(first, last).into());
        }
    }

    /// Tops the credit up to --prefetch once half is used, and renews the
    /// session window; both go out with the next write.
    fn write_credit(&mut self) {
        let low_credit = self.credit <= self.prefetch / 2;
        let low_window = self.conn.incoming_window < SESSION_WINDOW / 2;
        if !low_credit && !low_window {
            return;
        }
        self.conn.incoming_window = SESSION_WINDOW;
        self.credit = self.prefetch.saturating_sub(self.unprocessed);
        let flow = self.conn.flow(Some((self.delivery_count, self.credit)));
        self.conn.queue(flow.into());
    }

    async fn flush_owed(&mut self) -> Result<(), PerfError> {
        self.write_disposition();
        self.unflushed = 0;
        self.conn.flush().await
    }

    /// A complete delivery from a transfer frame, or `None` while its frames
    /// are still coming (or when it was aborted).
    fn delivery(&mut self, transfer: &Transfer, payload: Bytes) -> Option<(Option<u32>, Bytes)> {
        if transfer.aborted {
            self.partial.clear();
            self.partial_id = None;
            return None;
        }
        if transfer.delivery_id.is_some() && self.partial.is_empty() {
            self.partial_id = transfer.delivery_id;
        }
        if transfer.more {
            self.partial.extend_from_slice(&payload);
            return None;
        }
        let id = self.partial_id.take().or(transfer.delivery_id);
        if self.partial.is_empty() {
            return Some((id, payload));
        }
        self.partial.extend_from_slice(&payload);
        Some((id, self.partial.split().freeze()))
    }
}

/// Any integer (or decimal text) as u64.
fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Ulong(n) => Some(*n),
        Value::String(s) => s.as_str().parse().ok(),
        other => other.as_i64().and_then(|n| u64::try_from(n).ok()),
    }
}

/// The perf stamp of a message payload, if it belongs to run `run_id`.
fn parse_stamp(payload: Bytes, run_id: u64) -> Option<Stamp> {
    if let Some(stamp) = super::amqp_stamp::scan(&payload, run_id) {
        return Some(stamp);
    }
    let view = MessageView::parse(payload).ok()?;
    let props = view.application_properties().ok()??;
    let get = |name: &str| map_get(&props, name).and_then(number);
    if get(headers::RUN)? != run_id {
        return None;
    }
    Some(Stamp {
        producer: u32::try_from(get(headers::PRODUCER)?).ok()?,
        seq: get(headers::SEQ)?,
        sent_us: get(headers::SENT)?,
        // Follows from the sequence number (see `ConsumerStats`).
        group: None,
    })
}

impl Subscriber for AmqpSubscriber {
    async fn next(&mut self) -> Result<Delivery, PerfError> {
        loop {
            if self.unflushed >= self.ack_batch {
                self.flush_owed().await?;
            }
            // A frame already read costs no wait; only before blocking on the
            // socket do we write what we owe, so it coalesces.
            let (p, payload) = match self.conn.ready()? {
                Some(frame) => frame,
                None => {
                    self.flush_owed().await?;
                    self.conn.next().await?
                }
            };
            let Performative::Transfer(transfer) = p else {
                continue;
            };
            let Some((id, payload)) = self.delivery(&transfer, payload) else {
                continue;
            };
            self.delivery_count = self.delivery_count.wrapping_add(1);
            self.credit = self.credit.saturating_sub(1);
            self.unprocessed += 1;
            let presettled = transfer.settled == Some(true);
            self.last_id = if self.settle && !presettled { id } else { None };
            return Ok(Delivery {
                stamp: parse_stamp(payload, self.run_id),
            });
        }
    }

    fn settle_last(&mut self) -> Result<(), PerfError> {
        self.unprocessed = self.unprocessed.saturating_sub(1);
        if let Some(id) = self.last_id.take() {
            self.range = match self.range {
                Some((first, last)) if last.wrapping_add(1) == id => Some((first, id)),
                Some(_) => {
                    self.write_disposition();
                    Some((id, id))
                }
                None => Some((id, id)),
            };
        }
        self.write_credit();
        self.unflushed += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::amqp::Body;

    #[test]
    fn the_stamp_section_is_the_map_it_stands_for() {
        for (seq, sent_us) in [(0, 0), (255, 256), (u64::MAX, 1 << 40)] {
            let stamp = Stamp {
                producer: 300,
                seq,
                sent_us,
                group: None,
            };
            let mut quick = BytesMut::new();
            encode_stamp(7, &stamp, &mut quick);
            let full = Message {
                application_properties: Some(vec![
                    (Value::string(headers::RUN), Value::Ulong(7)),
                    (Value::string(headers::PRODUCER), Value::Uint(300)),
                    (Value::string(headers::SEQ), Value::Ulong(seq)),
                    (Value::string(headers::SENT), Value::Ulong(sent_us)),
                ]),
                ..Message::default()
            };
            let mut expected = BytesMut::new();
            full.encode(&mut expected);
            assert_eq!(&quick[..], &expected[..], "seq {seq}");
        }
    }

    #[test]
    fn settlements_in_ranges_free_the_window_from_the_front() {
        let mut f = InFlight::default();
        for id in u32::MAX - 2..=u32::MAX {
            f.sent(id);
        }
        for id in 0..3 {
            f.sent(id);
        }
        assert_eq!(f.count, 6);
        f.settle(0, 1); // across the wrap, out of order
        assert_eq!(f.count, 4);
        assert_eq!(f.settled.len(), 6);
        f.settle(u32::MAX - 2, u32::MAX);
        assert_eq!(f.count, 1);
        assert_eq!(f.settled.len(), 1);
        f.settle(7, 9); // not in flight
        f.settle(2, 2);
        f.settle(2, 2); // twice
        assert_eq!(f.count, 0);
        assert!(f.settled.is_empty());
    }

    #[test]
    fn stamps_round_trip_through_a_message() {
        let props = vec![
            (Value::string("perf-run"), Value::Ulong(42)),
            (Value::string("perf-p"), Value::Uint(3)),
            (Value::string("perf-seq"), Value::Ulong(17)),
            (Value::string("perf-ts"), Value::string("1000")),
        ];
        let message = Message {
            application_properties: Some(props),
            body: Body::Data(vec![Bytes::from_static(b"x")]),
            ..Message::default()
        }
        .to_bytes();
        assert_eq!(
            parse_stamp(message.clone(), 42),
            Some(Stamp {
                producer: 3,
                seq: 17,
                sent_us: 1000,
                group: None
            })
        );
        assert_eq!(parse_stamp(message, 43), None);
        assert_eq!(parse_stamp(Bytes::from_static(b"junk"), 42), None);
    }

    #[test]
    fn plain_when_a_login_is_given_else_anonymous() -> Result<(), PerfError> {
        let both = [Symbol::from("PLAIN"), Symbol::from("ANONYMOUS")];
        let login = Login {
            login: Some("u".into()),
            passcode: Some("p".into()),
            vhost: "/".into(),
        };
        let init = sasl_init(&both, &login)?;
        assert_eq!(init.mechanism.as_str(), "PLAIN");
        assert_eq!(init.initial_response.as_deref(), Some(&b"\0u\0p"[..]));
        assert_eq!(
            sasl_init(&both, &Login::default())?.mechanism.as_str(),
            "ANONYMOUS"
        );
        assert!(sasl_init(&[Symbol::from("PLAIN")], &Login::default()).is_err());
        Ok(())
    }
}
