//! The reading half of one AMQP sink connection: what it answers (SASL, open,
//! begin, attach mirrored, flows, detach, end, close) and what it routes.
//!
//! For a producer link the sink is the receiver: it grants [`LINK_CREDIT`]
//! and tops it up once half is used, keeps its session window far from empty,
//! and accepts an unsettled delivery as soon as it is routed (consecutive
//! ones in one ranged disposition). For a consumer link the sink is the
//! sender: the link is registered with the [`Registry`](super::registry) and
//! its credit follows the consumer's flows; its dispositions are ignored.

use super::registry::{Consumer, LinkId, Peers, Routed, State};
use super::writer::Chunk;
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use weir_wire::amqp::codec::encode_frame;
use weir_wire::amqp::{
    AmqpError, AmqpFrame, Attach, Begin, Close, Detach, Disposition, End, Flow, Frame, Inbound,
    Open, Performative, ProtocolHeader, ReceiverSettleMode, Role, SaslCode, SaslFrame,
    SaslMechanisms, SaslOutcome, SenderSettleMode, Symbol, TargetKind, Transfer,
};

/// Our max-frame-size: a 16 KiB message is one frame, a 1 MiB one two.
pub const MAX_FRAME: u32 = 1 << 20;
/// Credit granted to each producer link, topped up when half is used.
const LINK_CREDIT: u32 = 1000;
/// Our incoming session window (frames), renewed when half is used.
const SESSION_WINDOW: u32 = 1 << 30;

/// A frame or message waiting behind a delivery no consumer could take yet.
pub enum Held {
    Frame(AmqpFrame),
    Delivery(Delivery),
}

/// A whole message from a producer link.
pub struct Delivery {
    channel: u16,
    delivery_id: u32,
    settled: bool,
    address: Arc<str>,
    topic: bool,
    payload: Bytes,
}

impl Held {
    /// Frames that must wait for the deliveries held before them: later
    /// transfers, and the detach, end or close that follow them. Flows,
    /// dispositions and attaches pass, so a consumer on the same connection
    /// can still give the credit the held deliveries wait for.
    pub fn waits(frame: &AmqpFrame) -> bool {
        matches!(
            frame.performative,
            Performative::Transfer(_)
                | Performative::Detach(_)
                | Performative::End(_)
                | Performative::Close(_)
        )
    }
}

/// What one batch produced.
#[derive(Default)]
pub struct Out {
    /// Frames for this connection's own writer.
    pub own: BytesMut,
    /// Deliveries routed, by destination connection.
    pub peers: Peers,
    /// Set by the peer's open, for the writer, before `own` goes.
    pub setup: Option<Chunk>,
    /// Consumer links attached in this batch: active once `own` went out.
    pub activate: Vec<(Arc<str>, LinkId)>,
    /// A consumer may take more, or went: held deliveries may move.
    pub wake: bool,
    /// Accepted producer deliveries not yet written: (channel, first, last).
    accepted: Option<(u16, u32, u32)>,
}

impl Out {
    fn frame(&mut self, channel: u16, p: impl Into<Performative>) {
        self.flush_accepted();
        encode_frame(&Frame::Amqp(AmqpFrame::bare(channel, p)), &mut self.own);
    }

    fn accept(&mut self, channel: u16, id: u32) {
        match &mut self.accepted {
            Some((c, _, last)) if *c == channel && last.wrapping_add(1) == id => *last = id,
            _ => {
                self.flush_accepted();
                self.accepted = Some((channel, id, id));
            }
        }
    }

    /// Writes the pending acceptance range.
    pub fn flush_accepted(&mut self) {
        if let Some((channel, first, last)) = self.accepted.take() {
            let d = Disposition::accepted(first, last);
            encode_frame(&Frame::Amqp(AmqpFrame::bare(channel, d)), &mut self.own);
        }
    }
}

struct Session {
    /// The peer's next transfer id.
    next_incoming_id: u32,
    incoming_window: u32,
    links: HashMap<u32, Link>,
}

enum Link {
    Producer(Producer),
    Consumer { address: Arc<str> },
}

struct Producer {
    address: Arc<str>,
    topic: bool,
    /// Sender settle mode `settled`: every transfer is pre-settled.
    settled: bool,
    credit: u32,
    delivery_count: u32,
    /// A delivery split over several transfers, so far.
    partial: Option<(u32, bool, BytesMut)>,
}

pub struct Peer {
    id: u64,
    tx: mpsc::Sender<Chunk>,
    remote_max_frame: u32,
    sessions: HashMap<u16, Session>,
    /// Close answered: nothing more is read.
    pub closed: bool,
}

fn has_topic(capabilities: &[Symbol]) -> bool {
    capabilities.iter().any(|c| c.as_str() == "topic")
}

impl Peer {
    pub fn new(id: u64, tx: mpsc::Sender<Chunk>) -> Peer {
        Peer {
            id,
            tx,
            remote_max_frame: u32::MAX,
            sessions: HashMap::new(),
            closed: false,
        }
    }

    fn link(&self, channel: u16, handle: u32) -> LinkId {
        LinkId {
            conn: self.id,
            channel,
            handle,
        }
    }

    /// Protocol headers and SASL: any header we speak is answered in kind,
    /// ANONYMOUS and PLAIN with any credentials succeed.
    pub fn preamble(&mut self, item: Inbound, out: &mut Out) {
        match item {
            Inbound::Header(h) if h == ProtocolHeader::SASL => {
                out.own.extend_from_slice(&h.to_bytes());
                let mechanisms = SaslMechanisms {
                    mechanisms: vec![
                        Symbol::from_static("ANONYMOUS"),
                        Symbol::from_static("PLAIN"),
                    ],
                };
                encode_frame(
                    &Frame::Sasl(SaslFrame::Mechanisms(mechanisms)),
                    &mut out.own,
                );
            }
            Inbound::Header(h) if h == ProtocolHeader::AMQP => {
                out.own.extend_from_slice(&h.to_bytes());
            }
            Inbound::Header(_) => {
                // TLS or another version: say what we speak, and go (spec 2.2).
                out.own.extend_from_slice(&ProtocolHeader::SASL.to_bytes());
                self.closed = true;
            }
            Inbound::Frame(Frame::Sasl(SaslFrame::Init(_))) => {
                let outcome = SaslOutcome {
                    code: SaslCode::Ok,
                    additional_data: None,
                };
                encode_frame(&Frame::Sasl(SaslFrame::Outcome(outcome)), &mut out.own);
            }
            Inbound::Frame(Frame::Amqp(_))
            | Inbound::Frame(Frame::Sasl(_))
            | Inbound::Heartbeat => {}
        }
    }

    /// Handles one frame or held delivery; gives a delivery back when no
    /// consumer can take it yet.
    pub fn handle(&mut self, item: Held, st: &mut State, out: &mut Out) -> Option<Held> {
        let frame = match item {
            Held::Delivery(d) => return self.deliver(d, st, out),
            Held::Frame(frame) => frame,
        };
        let channel = frame.channel;
        match frame.performative {
            Performative::Transfer(t) => return self.transfer(channel, t, frame.payload, st, out),
            Performative::Flow(f) => self.flow(channel, f, st, out),
            Performative::Disposition(_) => {}
            Performative::Open(open) => self.open(&open, out),
            Performative::Begin(b) => self.begin(channel, &b, st, out),
            Performative::Attach(a) => self.attach(channel, *a, st, out),
            Performative::Detach(d) => {
                if let Some(Link::Consumer { address }) = self
                    .sessions
                    .get_mut(&channel)
                    .and_then(|s| s.links.remove(&d.handle))
                {
                    st.detach(&address, self.link(channel, d.handle));
                    out.wake = true;
                }
                let reply = Detach {
                    handle: d.handle,
                    closed: d.closed,
                    error: None,
                };
                out.frame(channel, reply);
            }
            Performative::End(_) => {
                self.sessions.remove(&channel);
                st.end(self.id, Some(channel));
                out.wake = true;
                out.frame(channel, End::default());
            }
            Performative::Close(_) => {
                out.frame(0, Close::default());
                self.closed = true;
            }
        }
        None
    }

    fn open(&mut self, open: &Open, out: &mut Out) {
        self.remote_max_frame = open.max_frame_size;
        out.setup = Some(Chunk::Peer {
            max_frame: open.max_frame_size,
            keepalive: open
                .idle_time_out
                .filter(|ms| *ms > 0)
                .map(|ms| Duration::from_millis(u64::from(ms / 2).max(1))),
        });
        let reply = Open {
            max_frame_size: MAX_FRAME,
            channel_max: open.channel_max,
            ..Open::new("weir-perf-sink")
        };
        out.frame(0, reply);
    }

    fn begin(&mut self, channel: u16, b: &Begin, st: &mut State, out: &mut Out) {
        self.sessions.insert(
            channel,
            Session {
                next_incoming_id: b.next_outgoing_id,
                incoming_window: SESSION_WINDOW,
                links: HashMap::new(),
            },
        );
        st.begin(self.id, channel, b.incoming_window, self.remote_max_frame);
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window: SESSION_WINDOW,
            outgoing_window: u32::MAX,
            handle_max: u32::MAX,
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: None,
        };
        out.frame(channel, reply);
    }

    /// Answers an attach with its mirror image (same name, handle, terminus
    /// and settle modes, the other role). A dynamic terminus gets an address.
    fn attach(&mut self, channel: u16, a: Attach, st: &mut State, out: &mut Out) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        let handle = a.handle;
        let mut reply = Attach {
            unsettled: None,
            incomplete_unsettled: false,
            max_message_size: None,
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: None,
            ..a
        };
        let dynamic = format!("weir-perf-sink-{}-{channel}-{handle}", self.id);
        match reply.role {
            Role::Sender => {
                // A producer: we receive.
                reply.role = Role::Receiver;
                reply.rcv_settle_mode = ReceiverSettleMode::First;
                let delivery_count = reply.initial_delivery_count.take().unwrap_or(0);
                let target = match &mut reply.target {
                    Some(TargetKind::Target(t)) => t,
                    // A transaction coordinator, or no target: refused.
                    _ => {
                        reply.target = None;
                        out.frame(channel, reply);
                        let error = AmqpError::new(
                            weir_wire::amqp::condition::NOT_IMPLEMENTED,
                            Some("the sink only relays messages"),
                        );
                        let detach = Detach {
                            handle,
                            closed: true,
                            error: Some(error),
                        };
                        out.frame(channel, detach);
                        return;
                    }
                };
                if target.dynamic && target.address.is_none() {
                    target.address = Some(dynamic.as_str().into());
                }
                let address: Arc<str> =
                    Arc::from(target.address.as_ref().map_or("", |s| s.as_str()));
                let producer = Producer {
                    address,
                    topic: has_topic(&target.capabilities),
                    settled: reply.snd_settle_mode == SenderSettleMode::Settled,
                    credit: LINK_CREDIT,
                    delivery_count,
                    partial: None,
                };
                session.links.insert(handle, Link::Producer(producer));
                out.frame(channel, reply);
                let flow = self.flow_for(channel, Some((handle, delivery_count, LINK_CREDIT)), st);
                out.frame(channel, flow);
            }
            Role::Receiver => {
                // A consumer: we send.
                reply.role = Role::Sender;
                reply.initial_delivery_count = Some(0);
                let source = reply.source.get_or_insert_with(Default::default);
                if source.dynamic && source.address.is_none() {
                    source.address = Some(dynamic.as_str().into());
                }
                let address: Arc<str> =
                    Arc::from(source.address.as_ref().map_or("", |s| s.as_str()));
                let id = LinkId {
                    conn: self.id,
                    channel,
                    handle,
                };
                let mut consumer = Consumer::new(id, self.tx.clone());
                consumer.settled = reply.snd_settle_mode == SenderSettleMode::Settled;
                consumer.topic = has_topic(&source.capabilities);
                st.attach(address.clone(), consumer);
                session.links.insert(
                    handle,
                    Link::Consumer {
                        address: address.clone(),
                    },
                );
                out.activate.push((address, id));
                out.frame(channel, reply);
            }
        }
    }

    /// A flow from us on `channel`, for the link `(handle, delivery-count,
    /// link-credit)` if given.
    fn flow_for(&self, channel: u16, link: Option<(u32, u32, u32)>, st: &State) -> Flow {
        let session = self.sessions.get(&channel);
        Flow {
            next_incoming_id: session.map(|s| s.next_incoming_id),
            incoming_window: session.map_or(0, |s| s.incoming_window),
            next_outgoing_id: st.next_outgoing_id(self.id, channel),
            outgoing_window: u32::MAX,
            handle: link.map(|l| l.0),
            delivery_count: link.map(|l| l.1),
            link_credit: link.map(|l| l.2),
            ..Flow::default()
        }
    }

    fn flow(&mut self, channel: u16, f: Flow, st: &mut State, out: &mut Out) {
        if st.session_flow(self.id, channel, f.next_incoming_id, f.incoming_window) {
            out.wake = true;
        }
        let link = f.handle.and_then(|h| {
            let session = self.sessions.get(&channel)?;
            match session.links.get(&h)? {
                Link::Consumer { address } => {
                    let (count, left) = st.consumer_flow(address, self.link(channel, h), &f)?;
                    out.wake |= left > 0;
                    (f.echo || f.drain).then_some((h, count, left))
                }
                Link::Producer(p) => f.echo.then_some((h, p.delivery_count, p.credit)),
            }
        });
        if link.is_some() || (f.echo && f.handle.is_none()) {
            let reply = self.flow_for(channel, link, st);
            out.frame(channel, reply);
        }
    }

    fn transfer(
        &mut self,
        channel: u16,
        t: Transfer,
        payload: Bytes,
        st: &mut State,
        out: &mut Out,
    ) -> Option<Held> {
        let session = self.sessions.get_mut(&channel)?;
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        session.incoming_window = session.incoming_window.saturating_sub(1);
        let Some(Link::Producer(p)) = session.links.get_mut(&t.handle) else {
            return None;
        };
        if t.aborted {
            p.partial = None;
            return None;
        }
        let (delivery_id, settled, payload) = if t.more || p.partial.is_some() {
            let (_, _, buf) = p.partial.get_or_insert_with(|| {
                let settled = t.settled.unwrap_or(false) || p.settled;
                (t.delivery_id.unwrap_or(0), settled, BytesMut::new())
            });
            buf.extend_from_slice(&payload);
            if t.more {
                return None;
            }
            let (id, settled, buf) = p.partial.take()?;
            (id, settled, buf.freeze())
        } else {
            let settled = t.settled.unwrap_or(false) || p.settled;
            (t.delivery_id.unwrap_or(0), settled, payload)
        };
        p.credit = p.credit.saturating_sub(1);
        p.delivery_count = p.delivery_count.wrapping_add(1);
        let d = Delivery {
            channel,
            delivery_id,
            settled,
            address: p.address.clone(),
            topic: p.topic,
            payload,
        };
        self.deliver(d, st, out)
    }

    fn deliver(&mut self, d: Delivery, st: &mut State, out: &mut Out) -> Option<Held> {
        match st.route(&d.address, d.topic, &d.payload, &mut out.peers) {
            Routed::Held => Some(Held::Delivery(d)),
            Routed::Sent | Routed::Dropped => {
                if !d.settled {
                    out.accept(d.channel, d.delivery_id);
                }
                None
            }
        }
    }

    /// Tops up producer credit and our session windows once half is used
    /// (only while nothing is held, so a producer cannot outrun its consumers
    /// by more than one grant).
    pub fn refill(&mut self, st: &State, out: &mut Out) {
        let mut flows = Vec::new();
        for (&channel, s) in self.sessions.iter_mut() {
            let low_window = s.incoming_window < SESSION_WINDOW / 2;
            if low_window {
                s.incoming_window = SESSION_WINDOW;
            }
            let before = flows.len();
            for (&handle, link) in s.links.iter_mut() {
                if let Link::Producer(p) = link {
                    if p.credit < LINK_CREDIT / 2 {
                        p.credit = LINK_CREDIT;
                        flows.push((channel, Some((handle, p.delivery_count, LINK_CREDIT))));
                    }
                }
            }
            if low_window && flows.len() == before {
                flows.push((channel, None));
            }
        }
        for (channel, link) in flows {
            let flow = self.flow_for(channel, link, st);
            out.frame(channel, flow);
        }
    }
}
