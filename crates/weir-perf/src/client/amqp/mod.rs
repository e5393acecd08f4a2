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
use crate::args::{AckMode, Destination, SaslMechanism};
use crate::error::PerfError;
pub(super) use crate::transport::Peer;
use crate::transport::Stream;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::collections::VecDeque;
use std::time::Duration;
use tokio_util::codec::Framed;
use weir_wire::amqp::codec::{begin_frame, encode_frame, finish_frame, FRAME_TYPE_AMQP};
use weir_wire::amqp::described::Composite;
use weir_wire::amqp::messaging;
use weir_wire::amqp::performatives::{encode_delivery_start, sender_credit};
use weir_wire::amqp::types::{code, encode, Descriptor};
use weir_wire::amqp::{
    map_get, AmqpFrame, AmqpFrameCodec, Attach, Begin, Close, DeliveryState, Disposition, Flow,
    Frame, Header, Inbound, Message, MessageView, Open, Outbound, Performative, ProtocolHeader,
    ReceiverSettleMode, Role, SaslCode, SaslFrame, SaslInit, SaslResponse, SenderSettleMode,
    Source, Str, Symbol, Target, TargetKind, Transfer, Value,
};
use weir_wire::write_parts::{WriteParts, SHARE_FROM};

mod publisher;
mod scram;
mod subscriber;

pub use publisher::AmqpPublisher;
pub use scram::ScramError;
use scram::{ScramClient, ScramHash, ServerCheck};
pub use subscriber::AmqpSubscriber;

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
    framed: Framed<Stream, AmqpFrameCodec>,
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
    /// The SASL mechanism the login used (what a report names).
    mechanism: &'static str,
}

impl Connection {
    async fn open(peer: &Peer, login: &Login) -> Result<Connection, PerfError> {
        let stream = peer.connect().await?;
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
            mechanism: "",
        };
        tokio::time::timeout(ANSWER_TIMEOUT, conn.handshake(peer, login))
            .await
            .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))??;
        Ok(conn)
    }

    async fn handshake(&mut self, peer: &Peer, login: &Login) -> Result<(), PerfError> {
        self.framed
            .send(Outbound::Header(ProtocolHeader::SASL))
            .await?;
        self.expect_header(ProtocolHeader::SASL).await?;
        let offered = match self.sasl().await? {
            SaslFrame::Mechanisms(m) => m.mechanisms,
            _ => return Err(PerfError::Unexpected("SASL frame (wanted sasl-mechanisms)")),
        };
        let start = sasl_init(&offered, login, peer.certified())?;
        self.mechanism = start.mechanism;
        self.sasl_exchange(start).await?;
        self.framed.codec_mut().expect_header();
        self.framed
            .feed(Outbound::Header(ProtocolHeader::AMQP))
            .await?;
        let open = Open {
            hostname: Some(Str::from(peer.host())),
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

    /// Sends sasl-init and answers challenges until the outcome. SCRAM: the
    /// server-first challenge gets the proof; the server's signature comes in the
    /// outcome's additional data (or, from some brokers, in one more challenge answered
    /// with an empty response) and must be right.
    async fn sasl_exchange(&mut self, start: SaslStart) -> Result<(), PerfError> {
        let SaslStart {
            init,
            mechanism,
            user,
            scram,
        } = start;
        let scram_error = |source| PerfError::Scram { mechanism, source };
        self.framed
            .send(Outbound::Frame(Frame::Sasl(SaslFrame::Init(init))))
            .await?;
        let mut stage = match scram {
            Some(client) => Scram::First(client),
            None => Scram::Done,
        };
        let outcome = loop {
            let challenge = match self.sasl().await? {
                SaslFrame::Outcome(o) => break o,
                SaslFrame::Challenge(c) => c.challenge,
                _ => return Err(PerfError::Unexpected("SASL frame (wanted sasl-outcome)")),
            };
            let response = match std::mem::replace(&mut stage, Scram::Done) {
                Scram::First(client) => {
                    let (last, check) = client.client_final(&challenge).map_err(scram_error)?;
                    stage = Scram::Final(check);
                    Bytes::from(last)
                }
                Scram::Final(check) => {
                    check.verify(&challenge).map_err(scram_error)?;
                    Bytes::new()
                }
                Scram::Done => return Err(PerfError::Unexpected("sasl-challenge")),
            };
            self.framed
                .send(Outbound::Frame(Frame::Sasl(SaslFrame::Response(
                    SaslResponse { response },
                ))))
                .await?;
        };
        if outcome.code != SaslCode::Ok {
            return Err(PerfError::AuthFailed {
                mechanism,
                user,
                outcome: outcome_name(outcome.code),
            });
        }
        match stage {
            Scram::Final(check) => check
                .verify(outcome.additional_data.as_deref().unwrap_or_default())
                .map_err(scram_error),
            Scram::First(_) => Err(PerfError::Unexpected(
                "sasl-outcome ok before the SCRAM exchange",
            )),
            Scram::Done => Ok(()),
        }
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

/// The first SASL frame and what the rest of the exchange needs.
struct SaslStart {
    init: SaslInit,
    mechanism: &'static str,
    /// Who we log in as, for the error of a refusal.
    user: String,
    scram: Option<ScramClient>,
}

/// Where a SCRAM exchange stands between challenges.
enum Scram {
    /// Waiting for the server-first message.
    First(ScramClient),
    /// The proof is sent: the server's signature is due.
    Final(ServerCheck),
    /// Nothing more to check (not SCRAM, or the signature was good).
    Done,
}

fn outcome_name(code: SaslCode) -> &'static str {
    match code {
        SaslCode::Ok => "ok",
        SaslCode::Auth => "auth (wrong user or password)",
        SaslCode::Sys => "sys",
        SaslCode::SysPerm => "sys-perm",
        SaslCode::SysTemp => "sys-temp",
    }
}

/// --sasl-mechanism if given (it must be offered: a run meant to prove one login must
/// not pass by another); else with --login PLAIN; else EXTERNAL when a client
/// certificate is shown and the broker offers it, else ANONYMOUS.
fn sasl_init(offered: &[Symbol], login: &Login, certified: bool) -> Result<SaslStart, PerfError> {
    let has = |m: &str| offered.iter().any(|s| s.as_str() == m);
    let offered_list = || {
        let names: Vec<&str> = offered.iter().map(|s| s.as_str()).collect();
        if names.is_empty() {
            "nothing".to_owned()
        } else {
            names.join(", ")
        }
    };
    let chosen = match (login.mechanism, &login.login) {
        (Some(asked), _) if !has(asked.name()) => {
            return Err(PerfError::MechanismNotOffered {
                wanted: asked.name(),
                offered: offered_list(),
            })
        }
        (Some(asked), _) => Some(asked),
        (None, Some(_)) => has("PLAIN").then_some(SaslMechanism::Plain),
        (None, None) => None,
    };
    let user = login.login.as_deref().unwrap_or_default();
    let pass = login.passcode.as_deref().unwrap_or_default();
    match chosen {
        Some(SaslMechanism::External) => return Ok(external(login.login.as_deref())),
        Some(SaslMechanism::Plain) => return Ok(plain(user, pass)),
        Some(SaslMechanism::ScramSha256) => return scram(ScramHash::Sha256, user, pass),
        Some(SaslMechanism::ScramSha512) => return scram(ScramHash::Sha512, user, pass),
        None => {}
    }
    if login.login.is_none() && certified && has("EXTERNAL") {
        return Ok(external(None));
    }
    if has("ANONYMOUS") {
        return Ok(SaslStart {
            init: SaslInit {
                mechanism: Symbol::from_static("ANONYMOUS"),
                initial_response: None,
                hostname: None,
            },
            mechanism: "ANONYMOUS",
            user: "no user".to_owned(),
            scram: None,
        });
    }
    Err(PerfError::NoMechanism {
        offered: offered_list(),
    })
}

/// PLAIN: `authzid NUL authcid NUL password` (RFC 4616), the authzid left empty.
fn plain(user: &str, pass: &str) -> SaslStart {
    let mut response = Vec::with_capacity(user.len() + pass.len() + 2);
    response.push(0);
    response.extend_from_slice(user.as_bytes());
    response.push(0);
    response.extend_from_slice(pass.as_bytes());
    SaslStart {
        init: SaslInit {
            mechanism: Symbol::from_static("PLAIN"),
            initial_response: Some(Bytes::from(response)),
            hostname: None,
        },
        mechanism: "PLAIN",
        user: format!("{user:?}"),
        scram: None,
    }
}

/// SCRAM's client-first message; the exchange goes on in the SASL loop.
fn scram(hash: ScramHash, user: &str, pass: &str) -> Result<SaslStart, PerfError> {
    let mechanism = match hash {
        ScramHash::Sha256 => SaslMechanism::ScramSha256.name(),
        ScramHash::Sha512 => SaslMechanism::ScramSha512.name(),
    };
    let client = ScramClient::new(hash, user, pass)
        .map_err(|source| PerfError::Scram { mechanism, source })?;
    Ok(SaslStart {
        init: SaslInit {
            mechanism: Symbol::from_static(mechanism),
            initial_response: Some(Bytes::from(client.client_first())),
            hostname: None,
        },
        mechanism,
        user: format!("{user:?}"),
        scram: Some(client),
    })
}

/// EXTERNAL: the user is the one the client certificate maps to. `authzid`, if given, is
/// sent as the authorization identity (RFC 4422 appendix A), which a broker may accept
/// only when it is that same user; none means "the certificate's user".
fn external(authzid: Option<&str>) -> SaslStart {
    SaslStart {
        init: SaslInit {
            mechanism: Symbol::from_static("EXTERNAL"),
            initial_response: Some(Bytes::copy_from_slice(
                authzid.unwrap_or_default().as_bytes(),
            )),
            hostname: None,
        },
        mechanism: "EXTERNAL",
        user: match authzid {
            Some(user) => format!("{user:?} (by the client certificate)"),
            None => "the client certificate's user".to_owned(),
        },
        scram: None,
    }
}

/// Connects, logs in and closes: one login of `weir perf --logins`. Returns the
/// SASL mechanism it used.
pub async fn login_once(peer: &Peer, login: &Login) -> Result<&'static str, PerfError> {
    let mut conn = Connection::open(peer, login).await?;
    tokio::time::timeout(ANSWER_TIMEOUT, conn.close())
        .await
        .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))??;
    Ok(conn.mechanism)
}

/// The node's address and the capability that says queue or topic.
fn terminus(destination: &Destination) -> (Str, Vec<Symbol>) {
    match destination {
        Destination::Queue(n) => (Str::from(n.as_str()), vec![Symbol::from_static("queue")]),
        Destination::Topic(n) => (Str::from(n.as_str()), vec![Symbol::from_static("topic")]),
    }
}

#[cfg(test)]
mod tests {
    use super::publisher::{encode_stamp, InFlight};
    use super::subscriber::parse_stamp;
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
            mechanism: None,
        };
        let init = sasl_init(&both, &login, false)?.init;
        assert_eq!(init.mechanism.as_str(), "PLAIN");
        assert_eq!(init.initial_response.as_deref(), Some(&b"\0u\0p"[..]));
        assert_eq!(
            sasl_init(&both, &Login::default(), false)?
                .init
                .mechanism
                .as_str(),
            "ANONYMOUS"
        );
        assert!(sasl_init(&[Symbol::from("PLAIN")], &Login::default(), false).is_err());
        Ok(())
    }

    #[test]
    fn external_with_a_client_certificate_and_no_login() -> Result<(), PerfError> {
        let all = [
            Symbol::from("PLAIN"),
            Symbol::from("EXTERNAL"),
            Symbol::from("ANONYMOUS"),
        ];
        let init = sasl_init(&all, &Login::default(), true)?.init;
        assert_eq!(init.mechanism.as_str(), "EXTERNAL");
        assert_eq!(init.initial_response.as_deref(), Some(&b""[..]));
        // A login given wins over the certificate; no EXTERNAL offered, ANONYMOUS.
        let login = Login {
            login: Some("u".into()),
            ..Login::default()
        };
        assert_eq!(sasl_init(&all, &login, true)?.mechanism, "PLAIN");
        let no_external = [Symbol::from("ANONYMOUS")];
        assert_eq!(
            sasl_init(&no_external, &Login::default(), true)?.mechanism,
            "ANONYMOUS"
        );
        Ok(())
    }

    #[test]
    fn external_when_asked_and_an_error_when_not_offered() -> Result<(), PerfError> {
        let mut login = Login {
            mechanism: Some(SaslMechanism::External),
            ..Login::default()
        };
        let with_external = [Symbol::from("EXTERNAL"), Symbol::from("ANONYMOUS")];
        let init = sasl_init(&with_external, &login, true)?.init;
        assert_eq!(init.mechanism.as_str(), "EXTERNAL");
        assert_eq!(init.initial_response.as_deref(), Some(&b""[..]));
        // A login is the authorization identity, not a password login.
        login.login = Some("alice".into());
        let init = sasl_init(&with_external, &login, true)?.init;
        assert_eq!(init.initial_response.as_deref(), Some(&b"alice"[..]));
        // Asked for by name, there is no falling back to ANONYMOUS.
        let without = [Symbol::from("PLAIN"), Symbol::from("ANONYMOUS")];
        match sasl_init(&without, &login, true) {
            Err(PerfError::MechanismNotOffered { wanted, offered }) => {
                assert_eq!(wanted, "EXTERNAL");
                assert_eq!(offered, "PLAIN, ANONYMOUS");
            }
            other => panic!("{:?}", other.map(|s| s.mechanism)),
        }
        Ok(())
    }

    #[test]
    fn scram_when_asked_and_an_error_when_not_offered() -> Result<(), PerfError> {
        let all = [
            Symbol::from("SCRAM-SHA-512"),
            Symbol::from("SCRAM-SHA-256"),
            Symbol::from("PLAIN"),
        ];
        let mut login = Login {
            login: Some("u,1".into()),
            passcode: Some("p".into()),
            mechanism: Some(SaslMechanism::ScramSha512),
            ..Login::default()
        };
        let start = sasl_init(&all, &login, false)?;
        assert_eq!(start.init.mechanism.as_str(), "SCRAM-SHA-512");
        let first = start.init.initial_response.unwrap_or_default();
        assert!(first.starts_with(b"n,,n=u=2C1,r="), "{first:?}");
        assert!(start.scram.is_some());
        login.mechanism = Some(SaslMechanism::ScramSha256);
        assert_eq!(sasl_init(&all, &login, false)?.mechanism, "SCRAM-SHA-256");
        login.mechanism = Some(SaslMechanism::Plain);
        let start = sasl_init(&all, &login, false)?;
        assert!(start.scram.is_none());
        assert_eq!(
            start.init.initial_response.as_deref(),
            Some(&b"\0u,1\0p"[..])
        );
        // Asked for and not offered: an error naming what is, not another mechanism.
        login.mechanism = Some(SaslMechanism::ScramSha512);
        let only = [Symbol::from("PLAIN"), Symbol::from("ANONYMOUS")];
        match sasl_init(&only, &login, false) {
            Err(e @ PerfError::MechanismNotOffered { .. }) => assert_eq!(
                e.to_string(),
                "SASL: the broker does not offer SCRAM-SHA-512 (it offers PLAIN, ANONYMOUS)"
            ),
            other => panic!("{:?}", other.map(|s| s.mechanism)),
        }
        Ok(())
    }

    /// A server that answers SCRAM-SHA-256 with a good-looking exchange but a server
    /// signature made without the credential: the login must fail on it.
    async fn fake_scram_server(
        listener: tokio::net::TcpListener,
        signature: &'static str,
    ) -> Result<(), PerfError> {
        use weir_wire::amqp::{SaslChallenge, SaslMechanisms, SaslOutcome};
        let (socket, _) = listener.accept().await?;
        let mut framed = Framed::new(socket, AmqpFrameCodec::new(MAX_FRAME_SIZE));
        async fn next(
            framed: &mut Framed<tokio::net::TcpStream, AmqpFrameCodec>,
        ) -> Result<Inbound, PerfError> {
            Ok(framed.next().await.ok_or(PerfError::Closed)??)
        }
        next(&mut framed).await?;
        framed.send(Outbound::Header(ProtocolHeader::SASL)).await?;
        let mechanisms = SaslMechanisms {
            mechanisms: vec![Symbol::from("SCRAM-SHA-256")],
        };
        framed
            .send(Outbound::Frame(Frame::Sasl(SaslFrame::Mechanisms(
                mechanisms,
            ))))
            .await?;
        let Inbound::Frame(Frame::Sasl(SaslFrame::Init(init))) = next(&mut framed).await? else {
            return Err(PerfError::Unexpected("not sasl-init"));
        };
        let first = init.initial_response.unwrap_or_default();
        let first = std::str::from_utf8(&first).map_err(|_| PerfError::Unexpected("UTF-8"))?;
        let nonce = first.rsplit_once("r=").map_or("", |(_, n)| n);
        let challenge = format!("r={nonce}server,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        framed
            .send(Outbound::Frame(Frame::Sasl(SaslFrame::Challenge(
                SaslChallenge {
                    challenge: Bytes::from(challenge),
                },
            ))))
            .await?;
        let Inbound::Frame(Frame::Sasl(SaslFrame::Response(_))) = next(&mut framed).await? else {
            return Err(PerfError::Unexpected("not sasl-response"));
        };
        let outcome = SaslOutcome {
            code: SaslCode::Ok,
            additional_data: Some(Bytes::from_static(signature.as_bytes())),
        };
        framed
            .send(Outbound::Frame(Frame::Sasl(SaslFrame::Outcome(outcome))))
            .await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_wrong_server_signature_fails_the_login() -> Result<(), PerfError> {
        for (signature, want) in [
            (
                "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
                ScramError::ServerSignature,
            ),
            ("", ScramError::ServerFinal),
        ] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?.to_string();
            let server = tokio::spawn(fake_scram_server(listener, signature));
            let peer = Peer::new(&addr, false, &crate::transport::TlsFiles::default())?;
            let login = Login {
                login: Some("user".into()),
                passcode: Some("pencil".into()),
                mechanism: Some(SaslMechanism::ScramSha256),
                ..Login::default()
            };
            match Connection::open(&peer, &login).await {
                Err(PerfError::Scram { mechanism, source }) => {
                    assert_eq!(mechanism, "SCRAM-SHA-256");
                    assert_eq!(source, want);
                }
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("logged in despite server-final {signature:?}"),
            }
            server.await.map_err(|e| PerfError::Io(e.into()))??;
        }
        Ok(())
    }
}
