//! An AMQP client's script, as the fuzzer's `Arbitrary` input: a protocol header, a SASL
//! exchange with real credentials where the input asks for them, then AMQP frames encoded by
//! the wire crate with fuzzed fields (and raw bytes where the input says so).

use crate::scram::{self, Hash};
use crate::users::{Password, UserName};
use crate::Step;
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use weir::protocol::amqp::codec::encode_frame;
use weir::protocol::amqp::{
    AmqpFrame, Attach, Begin, Body, Close, Coordinator, DeliveryState, Detach, Disposition, End,
    Flow, Frame, Header, Message, Open, ProtocolHeader, ReceiverSettleMode, Role, SaslFrame,
    SaslInit, SaslResponse, SenderSettleMode, Source, Str, Symbol, Target, TargetKind, Transfer,
};

#[derive(Arbitrary, Debug)]
pub struct Script {
    pub handshake: Handshake,
    /// An `open` and a `begin` on channel 0 before the frames, so that they meet a session.
    pub session: bool,
    pub frames: Vec<FrameStep>,
    /// The transport: TLS or not, and the user a client certificate names.
    pub tls: bool,
    pub certificate: Option<UserName>,
}

/// A handshake the broker accepts (most inputs should get to the frames), or any.
/// `arbitrary` picks the first variant when the input runs out: the cheapest login.
#[derive(Arbitrary, Debug)]
pub enum Handshake {
    Anonymous,
    Scram {
        sha512: bool,
        user: UserName,
        password: Password,
    },
    Plain {
        user: UserName,
        password: Password,
    },
    External,
    /// The AMQP header without SASL (accepted while anonymous clients are).
    NoSasl,
    Custom {
        header: HeaderChoice,
        sasl: Vec<SaslStep>,
        /// The AMQP header after a SASL outcome.
        amqp_header: bool,
    },
}

#[derive(Arbitrary, Debug)]
pub enum HeaderChoice {
    Sasl,
    Amqp,
    Tls,
    Raw([u8; 8]),
}

#[derive(Arbitrary, Debug)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    External,
    Anonymous,
    Other(String),
}

impl Mechanism {
    fn name(&self) -> &str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::External => "EXTERNAL",
            Mechanism::Anonymous => "ANONYMOUS",
            Mechanism::Other(name) => name,
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum InitialResponse {
    None,
    Plain {
        authzid: String,
        user: UserName,
        password: Password,
    },
    ScramFirst {
        /// GS2 header: `n,,` when `None`.
        gs2: Option<String>,
        user: UserName,
        nonce: String,
        extensions: Option<String>,
    },
    Bytes(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
pub enum SaslStep {
    Init {
        mechanism: Mechanism,
        response: InitialResponse,
        hostname: Option<String>,
    },
    /// The client-final message, answering the server-first: with the right proof for
    /// `password`, or a fuzzed one.
    ScramFinal {
        sha512: bool,
        password: Password,
        proof: Option<Vec<u8>>,
    },
    Response(Vec<u8>),
    /// Any bytes as a frame body of the SASL type.
    RawFrame(Vec<u8>),
    Bytes(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
pub enum FrameStep {
    Open {
        container: Name,
        hostname: Option<String>,
        max_frame_size: u32,
        channel_max: u16,
        idle_time_out: Option<u32>,
    },
    Begin {
        channel: u8,
        remote_channel: Option<u16>,
        next_outgoing_id: u32,
        incoming_window: u32,
        outgoing_window: u32,
        handle_max: u32,
    },
    Attach {
        channel: u8,
        name: Name,
        handle: u8,
        receiver: bool,
        source: Option<Terminus>,
        target: Option<TargetChoice>,
        snd_settle_mode: u8,
        rcv_settle_mode: u8,
        initial_delivery_count: Option<u32>,
        max_message_size: Option<u64>,
    },
    Flow {
        channel: u8,
        handle: Option<u8>,
        next_incoming_id: Option<u32>,
        incoming_window: u32,
        next_outgoing_id: u32,
        outgoing_window: u32,
        delivery_count: Option<u32>,
        link_credit: Option<u32>,
        drain: bool,
        echo: bool,
    },
    Transfer {
        channel: u8,
        handle: u8,
        delivery_id: Option<u32>,
        tag: Option<Vec<u8>>,
        settled: Option<bool>,
        more: bool,
        aborted: bool,
        state: Option<State>,
        payload: Payload,
    },
    Disposition {
        channel: u8,
        receiver: bool,
        first: u32,
        last: Option<u32>,
        settled: bool,
        state: Option<State>,
    },
    Detach {
        channel: u8,
        handle: u8,
        closed: bool,
    },
    End {
        channel: u8,
    },
    Close,
    Heartbeat,
    /// Any bytes as an AMQP frame body.
    RawFrame {
        channel: u8,
        body: Vec<u8>,
    },
    Bytes(Vec<u8>),
}

/// Names drawn mostly from a small set, so that links and queues meet again.
#[derive(Arbitrary, Debug)]
pub enum Name {
    Few(u8),
    Any(String),
}

impl Name {
    fn text(&self, prefix: &str) -> String {
        match self {
            Name::Few(n) => format!("{prefix}.{}", n % 4),
            Name::Any(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Address {
    Queue(u8),
    Topic(u8),
    Any(String),
}

impl Address {
    fn text(&self) -> String {
        match self {
            Address::Queue(n) => format!("q.{}.x", n % 3),
            Address::Topic(n) => format!("topic://t.{}", n % 3),
            Address::Any(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Capability {
    Queue,
    Topic,
    TemporaryQueue,
    Shared,
    Global,
    Any(String),
}

impl Capability {
    fn symbol(&self) -> Symbol {
        Symbol::from(match self {
            Capability::Queue => "queue",
            Capability::Topic => "topic",
            Capability::TemporaryQueue => "temporary-queue",
            Capability::Shared => "shared",
            Capability::Global => "global",
            Capability::Any(s) => s.as_str(),
        })
    }
}

#[derive(Arbitrary, Debug)]
pub struct Terminus {
    address: Option<Address>,
    dynamic: bool,
    durable: u8,
    copy: bool,
    capabilities: Vec<Capability>,
}

#[derive(Arbitrary, Debug)]
pub enum TargetChoice {
    Target(Terminus),
    Coordinator,
}

#[derive(Arbitrary, Debug)]
pub enum State {
    Accepted,
    Released,
    Rejected,
    Modified { failed: bool, undeliverable: bool },
    Received { section: u32, offset: u64 },
}

impl State {
    fn delivery_state(&self) -> DeliveryState {
        match *self {
            State::Accepted => DeliveryState::Accepted,
            State::Released => DeliveryState::Released,
            State::Rejected => DeliveryState::Rejected { error: None },
            State::Modified {
                failed,
                undeliverable,
            } => DeliveryState::Modified {
                delivery_failed: failed,
                undeliverable_here: undeliverable,
                message_annotations: None,
            },
            State::Received { section, offset } => DeliveryState::Received {
                section_number: section,
                section_offset: offset,
            },
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Payload {
    Message {
        durable: bool,
        ttl: Option<u32>,
        body: Vec<u8>,
    },
    Raw(Vec<u8>),
}

impl Payload {
    fn bytes(&self) -> Bytes {
        match self {
            Payload::Message { durable, ttl, body } => Message {
                header: Some(Header {
                    durable: *durable,
                    priority: 4,
                    ttl: *ttl,
                    first_acquirer: false,
                    delivery_count: 0,
                }),
                body: Body::Data(vec![Bytes::copy_from_slice(body)]),
                ..Message::default()
            }
            .to_bytes(),
            Payload::Raw(bytes) => Bytes::copy_from_slice(bytes),
        }
    }
}

impl Terminus {
    fn source(&self) -> Source {
        Source {
            address: self.address.as_ref().map(|a| Str::from(a.text())),
            durable: durability(self.durable),
            dynamic: self.dynamic,
            distribution_mode: self.copy.then(|| Symbol::from("copy")),
            capabilities: self.capabilities.iter().map(Capability::symbol).collect(),
            ..Source::default()
        }
    }

    fn target(&self) -> Target {
        Target {
            address: self.address.as_ref().map(|a| Str::from(a.text())),
            durable: durability(self.durable),
            dynamic: self.dynamic,
            capabilities: self.capabilities.iter().map(Capability::symbol).collect(),
            ..Target::default()
        }
    }
}

fn durability(n: u8) -> weir::protocol::amqp::TerminusDurability {
    use weir::protocol::amqp::TerminusDurability as D;
    match n % 3 {
        0 => D::None,
        1 => D::Configuration,
        _ => D::UnsettledState,
    }
}

fn frame_bytes(frame: Frame) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode_frame(&frame, &mut buf);
    buf.to_vec()
}

fn sasl(frame: SaslFrame) -> Vec<u8> {
    frame_bytes(Frame::Sasl(frame))
}

fn raw_frame(frame_type: u8, channel: u16, body: &[u8]) -> Vec<u8> {
    let size = u32::try_from(body.len() + 8).unwrap_or(u32::MAX);
    let mut out = size.to_be_bytes().to_vec();
    out.extend_from_slice(&[2, frame_type]);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn amqp(channel: u8, performative: impl Into<weir::protocol::amqp::Performative>) -> Vec<u8> {
    frame_bytes(Frame::Amqp(AmqpFrame::bare(few(channel), performative)))
}

/// Channels and handles: mostly the first three, so that frames meet the sessions and links
/// that earlier frames made; now and then a far one.
fn few(n: u8) -> u16 {
    if n < 240 {
        u16::from(n % 3)
    } else {
        u16::from(n) << 4
    }
}

impl Script {
    pub fn steps(self) -> Vec<Step> {
        let mut steps = self.handshake.steps();
        if self.session {
            steps.push(Step::Write(amqp(0, Open::new("fuzz"))));
            steps.push(Step::Write(amqp(
                0,
                Begin {
                    remote_channel: None,
                    next_outgoing_id: 0,
                    incoming_window: 2048,
                    outgoing_window: 2048,
                    handle_max: u32::MAX,
                    offered_capabilities: Vec::new(),
                    desired_capabilities: Vec::new(),
                    properties: None,
                },
            )));
        }
        for frame in self.frames {
            steps.push(Step::Write(frame.bytes()));
        }
        steps
    }
}

fn sasl_header() -> Step {
    Step::Write(ProtocolHeader::SASL.to_bytes().to_vec())
}

fn amqp_header() -> Step {
    Step::Write(ProtocolHeader::AMQP.to_bytes().to_vec())
}

fn init(mechanism: &str, response: Option<Vec<u8>>) -> Step {
    Step::Write(sasl(SaslFrame::Init(SaslInit {
        mechanism: Symbol::from(mechanism),
        initial_response: response.map(Bytes::from),
        hostname: None,
    })))
}

/// The client-final message answering the server-first one, with the proof `password` gives
/// (or `proof` in its place).
fn scram_final(
    hash: Hash,
    password: String,
    client_first_bare: String,
    proof: Option<Vec<u8>>,
) -> Step {
    Step::Reply(Box::new(move |heard| {
        let server = scram::find_server_first(heard)?;
        let text = match &proof {
            None => scram::client_final(hash, &password, &client_first_bare, &server),
            Some(proof) => format!(
                "c=biws,r={},p={}",
                server.nonce,
                String::from_utf8_lossy(proof)
            ),
        };
        Some(sasl(SaslFrame::Response(SaslResponse {
            response: Bytes::from(text),
        })))
    }))
}

impl Handshake {
    fn steps(self) -> Vec<Step> {
        match self {
            Handshake::Anonymous => vec![sasl_header(), init("ANONYMOUS", None), amqp_header()],
            Handshake::Scram {
                sha512,
                user,
                password,
            } => {
                let (hash, mechanism) = if sha512 {
                    (Hash::Sha512, "SCRAM-SHA-512")
                } else {
                    (Hash::Sha256, "SCRAM-SHA-256")
                };
                let bare = format!("n={},r=fuzznonce", user.name());
                vec![
                    sasl_header(),
                    init(mechanism, Some(format!("n,,{bare}").into_bytes())),
                    scram_final(hash, password.for_user(&user).to_owned(), bare, None),
                    amqp_header(),
                ]
            }
            Handshake::Plain { user, password } => {
                let response = format!("\0{}\0{}", user.name(), password.for_user(&user));
                vec![
                    sasl_header(),
                    init("PLAIN", Some(response.into_bytes())),
                    amqp_header(),
                ]
            }
            Handshake::External => vec![sasl_header(), init("EXTERNAL", None), amqp_header()],
            Handshake::NoSasl => vec![amqp_header()],
            Handshake::Custom {
                header,
                sasl,
                amqp_header: then_amqp,
            } => {
                let mut steps = vec![Step::Write(
                    match header {
                        HeaderChoice::Sasl => ProtocolHeader::SASL.to_bytes(),
                        HeaderChoice::Amqp => ProtocolHeader::AMQP.to_bytes(),
                        HeaderChoice::Tls => *b"AMQP\x02\x01\x00\x00",
                        HeaderChoice::Raw(bytes) => bytes,
                    }
                    .to_vec(),
                )];
                // What the client-first message said after its GS2 header, for the client-final.
                let mut scram_bare = String::new();
                let mut scram_user = UserName::Unknown;
                for step in sasl {
                    steps.push(custom_sasl_step(step, &mut scram_bare, &mut scram_user));
                }
                if then_amqp {
                    steps.push(amqp_header());
                }
                steps
            }
        }
    }
}

fn custom_sasl_step(step: SaslStep, scram_bare: &mut String, scram_user: &mut UserName) -> Step {
    match step {
        SaslStep::Init {
            mechanism,
            response,
            hostname,
        } => {
            let initial = match response {
                InitialResponse::None => None,
                InitialResponse::Plain {
                    authzid,
                    user,
                    password,
                } => Some(
                    format!("{authzid}\0{}\0{}", user.name(), password.for_user(&user))
                        .into_bytes(),
                ),
                InitialResponse::ScramFirst {
                    gs2,
                    user,
                    nonce,
                    extensions,
                } => {
                    let nonce = if nonce.is_empty() { "n0nce" } else { &nonce };
                    *scram_bare = format!("n={},r={nonce}", user.name());
                    if let Some(ext) = extensions {
                        scram_bare.push(',');
                        scram_bare.push_str(&ext);
                    }
                    *scram_user = user;
                    let gs2 = gs2.unwrap_or_else(|| "n,,".to_owned());
                    Some(format!("{gs2}{scram_bare}").into_bytes())
                }
                InitialResponse::Bytes(b) => Some(b),
            };
            Step::Write(sasl(SaslFrame::Init(SaslInit {
                mechanism: Symbol::from(mechanism.name()),
                initial_response: initial.map(Bytes::from),
                hostname: hostname.map(Str::from),
            })))
        }
        SaslStep::ScramFinal {
            sha512,
            password,
            proof,
        } => {
            let hash = if sha512 { Hash::Sha512 } else { Hash::Sha256 };
            let password = password.for_user(scram_user).to_owned();
            scram_final(hash, password, scram_bare.clone(), proof)
        }
        SaslStep::Response(bytes) => Step::Write(sasl(SaslFrame::Response(SaslResponse {
            response: Bytes::from(bytes),
        }))),
        SaslStep::RawFrame(body) => Step::Write(raw_frame(1, 0, &body)),
        SaslStep::Bytes(bytes) => Step::Write(bytes),
    }
}

impl FrameStep {
    fn bytes(self) -> Vec<u8> {
        match self {
            FrameStep::Open {
                container,
                hostname,
                max_frame_size,
                channel_max,
                idle_time_out,
            } => {
                let mut open = Open::new(&container.text("c"));
                open.hostname = hostname.map(Str::from);
                open.max_frame_size = max_frame_size;
                open.channel_max = channel_max;
                open.idle_time_out = idle_time_out;
                amqp(0, open)
            }
            FrameStep::Begin {
                channel,
                remote_channel,
                next_outgoing_id,
                incoming_window,
                outgoing_window,
                handle_max,
            } => amqp(
                channel,
                Begin {
                    remote_channel,
                    next_outgoing_id,
                    incoming_window,
                    outgoing_window,
                    handle_max,
                    offered_capabilities: Vec::new(),
                    desired_capabilities: Vec::new(),
                    properties: None,
                },
            ),
            FrameStep::Attach {
                channel,
                name,
                handle,
                receiver,
                source,
                target,
                snd_settle_mode,
                rcv_settle_mode,
                initial_delivery_count,
                max_message_size,
            } => {
                let mut attach = Attach::new(
                    &name.text("link"),
                    u32::from(few(handle)),
                    Role::from_bool(receiver),
                );
                attach.snd_settle_mode = SenderSettleMode::from_u8(snd_settle_mode % 3)
                    .unwrap_or(SenderSettleMode::Mixed);
                attach.rcv_settle_mode = if rcv_settle_mode % 2 == 0 {
                    ReceiverSettleMode::First
                } else {
                    ReceiverSettleMode::Second
                };
                attach.source = source.as_ref().map(Terminus::source);
                attach.target = target.map(|t| match t {
                    TargetChoice::Target(t) => TargetKind::Target(t.target()),
                    TargetChoice::Coordinator => TargetKind::Coordinator(Coordinator::default()),
                });
                attach.initial_delivery_count = initial_delivery_count;
                attach.max_message_size = max_message_size;
                amqp(channel, attach)
            }
            FrameStep::Flow {
                channel,
                handle,
                next_incoming_id,
                incoming_window,
                next_outgoing_id,
                outgoing_window,
                delivery_count,
                link_credit,
                drain,
                echo,
            } => amqp(
                channel,
                Flow {
                    next_incoming_id,
                    incoming_window,
                    next_outgoing_id,
                    outgoing_window,
                    handle: handle.map(|h| u32::from(few(h))),
                    delivery_count,
                    link_credit,
                    available: None,
                    drain,
                    echo,
                    properties: None,
                },
            ),
            FrameStep::Transfer {
                channel,
                handle,
                delivery_id,
                tag,
                settled,
                more,
                aborted,
                state,
                payload,
            } => frame_bytes(Frame::Amqp(AmqpFrame {
                channel: few(channel),
                performative: Transfer {
                    handle: u32::from(few(handle)),
                    delivery_id,
                    delivery_tag: tag.map(Bytes::from),
                    message_format: None,
                    settled,
                    more,
                    rcv_settle_mode: None,
                    state: state.as_ref().map(State::delivery_state),
                    resume: false,
                    aborted,
                    batchable: false,
                }
                .into(),
                payload: payload.bytes(),
                payload_tail: Bytes::new(),
            })),
            FrameStep::Disposition {
                channel,
                receiver,
                first,
                last,
                settled,
                state,
            } => amqp(
                channel,
                Disposition {
                    role: Role::from_bool(receiver),
                    first,
                    last,
                    settled,
                    state: state.as_ref().map(State::delivery_state),
                    batchable: false,
                },
            ),
            FrameStep::Detach {
                channel,
                handle,
                closed,
            } => amqp(
                channel,
                Detach {
                    handle: u32::from(few(handle)),
                    closed,
                    error: None,
                },
            ),
            FrameStep::End { channel } => amqp(channel, End::default()),
            FrameStep::Close => amqp(0, Close::default()),
            FrameStep::Heartbeat => raw_frame(0, 0, &[]),
            FrameStep::RawFrame { channel, body } => raw_frame(0, few(channel), &body),
            FrameStep::Bytes(bytes) => bytes,
        }
    }
}
