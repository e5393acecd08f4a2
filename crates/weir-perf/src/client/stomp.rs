//! STOMP producer and consumer connections for `weir perf`.
//!
//! SEND frames are written straight into one buffer (no `Frame` per message)
//! and go out in one write per batch; MESSAGE frames are cut by our own
//! [`StompCodec`], whose header values are slices of the read buffer.

use super::{headers, Delivery, Publisher, Stamp, Subscriber};
use crate::args::{AckMode, Destination, SaslMechanism};
use crate::error::PerfError;
use crate::transport::{Peer, ReadHalf, WriteHalf};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, StreamExt};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{Encoder, FramedRead};
use weir_wire::stomp::{Command, Frame, HeaderText, Inbound, StompCodec, Version};
use weir_wire::write_parts::{WriteParts, SHARE_FROM};

/// How long to wait for CONNECTED, a subscription's or a send's receipt.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// Credentials and virtual host for CONNECT (and AMQP's SASL mechanism).
#[derive(Debug, Clone, Default)]
pub struct Login {
    pub login: Option<String>,
    pub passcode: Option<String>,
    pub vhost: String,
    /// AMQP only: the SASL mechanism for `login` (PLAIN when not given).
    pub mechanism: Option<SaslMechanism>,
}

/// Connects, logs in and disconnects: one login of `weir perf --logins`.
pub async fn login_once(peer: &Peer, login: &Login) -> Result<(), PerfError> {
    let mut conn = Connection::open(peer, login).await?;
    conn.encode(Frame::new(Command::Disconnect).with_header("receipt", "bye"))?;
    conn.flush().await?;
    // The receipt says the broker is done with us; then the socket closes.
    let answer = conn.answer().await?;
    if answer.command != Command::Receipt {
        return Err(PerfError::Unexpected(answer.command.as_str()));
    }
    Ok(())
}

/// One STOMP connection: the frame reader, the socket's write half and a write
/// buffer that collects frames until the next flush.
struct Connection {
    reader: FramedRead<ReadHalf, StompCodec>,
    writer: WriteHalf,
    out: BytesMut,
    /// Large bodies queued uncopied after what `out` held before them.
    parts: WriteParts,
    /// Encodes the frames not written by hand, with the negotiated escaping.
    encoder: StompCodec,
    /// The broker's `server` header, e.g. `ActiveMQ-Artemis/2.40.0`.
    server: String,
}

impl Connection {
    async fn open(peer: &Peer, login: &Login) -> Result<Connection, PerfError> {
        let (read, writer) = peer.connect().await?.into_split();
        let mut conn = Connection {
            reader: FramedRead::with_capacity(read, StompCodec::default(), 256 * 1024),
            writer,
            out: BytesMut::with_capacity(256 * 1024),
            parts: WriteParts::default(),
            encoder: StompCodec::default(),
            server: String::new(),
        };
        let mut connect = Frame::new(Command::Connect)
            .with_header("accept-version", "1.2,1.1")
            .with_header("host", HeaderText::copy_from(&login.vhost))
            .with_header("heart-beat", "0,0");
        if let Some(l) = &login.login {
            connect.add_header("login", HeaderText::copy_from(l));
        }
        if let Some(p) = &login.passcode {
            connect.add_header("passcode", HeaderText::copy_from(p));
        }
        conn.encode(connect)?;
        conn.flush().await?;
        let answer = conn.answer().await?;
        if answer.command != Command::Connected {
            return Err(PerfError::Unexpected(answer.command.as_str()));
        }
        let version = answer
            .header("version")
            .and_then(Version::parse)
            .unwrap_or(Version::V1_0);
        conn.reader.decoder_mut().set_version(version);
        conn.encoder.set_version(version);
        conn.server = answer.header("server").unwrap_or_default().to_owned();
        Ok(conn)
    }

    fn encode(&mut self, frame: Frame) -> Result<(), PerfError> {
        self.encoder.encode(frame, &mut self.out)?;
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), PerfError> {
        if !self.parts.is_empty() {
            self.parts.seal(&mut self.out);
            self.parts.write_all(&mut self.writer).await?;
        } else if !self.out.is_empty() {
            self.writer.write_all(&self.out).await?;
            self.out.clear();
        }
        // TLS holds the last record until flushed; on TCP this does nothing.
        self.writer.flush().await?;
        Ok(())
    }

    /// The next frame, skipping heart-beats; an ERROR frame becomes an error.
    async fn frame(&mut self) -> Result<Frame, PerfError> {
        loop {
            match self.reader.next().await {
                Some(Ok(Inbound::Frame(frame))) => return check_error(frame),
                Some(Ok(Inbound::Heartbeat)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Err(PerfError::Closed),
            }
        }
    }

    /// Like [`Connection::frame`], bounded by [`ANSWER_TIMEOUT`].
    async fn answer(&mut self) -> Result<Frame, PerfError> {
        tokio::time::timeout(ANSWER_TIMEOUT, self.frame())
            .await
            .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))?
    }
}

fn check_error(frame: Frame) -> Result<Frame, PerfError> {
    if frame.command == Command::Error {
        let message = frame.header("message").unwrap_or("(no message header)");
        return Err(PerfError::Broker(message.to_owned()));
    }
    Ok(frame)
}

/// Writes `n` in decimal without allocating.
fn put_decimal(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[at..]);
}

/// Each broker reads the prefetch from its own header, and Artemis counts it in
/// bytes (and reads `activemq.prefetchSize` as bytes too), so the header is
/// chosen by the `server` named in CONNECTED.
fn prefetch_header(server: &str, settings: &SubscribeSettings) -> (&'static str, HeaderText) {
    let count = u64::from(settings.prefetch);
    if server.starts_with("ActiveMQ-Artemis") {
        // Artemis returns window credit only on ACK, so with auto-ack a finite
        // window stalls for good: -1 (unbounded) is what it uses by default.
        let bytes = match settings.ack {
            AckMode::Auto => -1,
            // Room for `prefetch` frames of this size plus their headers.
            _ => (count * (settings.message_size as u64 + 512)).min(i64::MAX as u64) as i64,
        };
        ("consumer-window-size", HeaderText::from(bytes.to_string()))
    } else if server.starts_with("ActiveMQ") {
        ("activemq.prefetchSize", HeaderText::from(count.to_string()))
    } else if server.starts_with("RabbitMQ") {
        ("prefetch-count", HeaderText::from(count.to_string()))
    } else {
        ("prefetch", HeaderText::from(count.to_string()))
    }
}

/// Everything a producer needs to write its SEND frames.
#[derive(Debug, Clone)]
pub struct SendSettings {
    pub destination: Destination,
    pub persistent: bool,
    pub delay_ms: Option<u64>,
    pub run_id: u64,
}

pub struct StompPublisher {
    conn: Connection,
    /// The constant head of every SEND frame, through the perf-run header.
    prefix: Vec<u8>,
    requested: u64,
    confirmed: u64,
}

impl StompPublisher {
    pub async fn connect(
        peer: &Peer,
        login: &Login,
        settings: &SendSettings,
    ) -> Result<StompPublisher, PerfError> {
        let conn = Connection::open(peer, login).await?;
        let mut prefix = format!("SEND\ndestination:{}\n", settings.destination.stomp());
        if settings.persistent {
            prefix.push_str("persistent:true\n");
        }
        if let Some(delay) = settings.delay_ms {
            prefix.push_str(&format!("{}:{delay}\n", headers::DELAY));
        }
        prefix.push_str(&format!("{}:{}\n", headers::RUN, settings.run_id));
        Ok(StompPublisher {
            conn,
            prefix: prefix.into_bytes(),
            requested: 0,
            confirmed: 0,
        })
    }
}

impl Publisher for StompPublisher {
    fn push(&mut self, stamp: &Stamp, body: &Bytes, confirm: bool) {
        let out = &mut self.conn.out;
        out.reserve(self.prefix.len() + body.len().min(SHARE_FROM) + 160);
        out.put_slice(&self.prefix);
        if let Some(group) = stamp.group {
            out.put_slice(headers::GROUP.as_bytes());
            out.put_u8(b':');
            out.put_slice(headers::GROUP_PREFIX.as_bytes());
            put_decimal(out, u64::from(group));
            out.put_u8(b'\n');
        }
        for (name, value) in [
            (headers::PRODUCER, u64::from(stamp.producer)),
            (headers::SEQ, stamp.seq),
            (headers::SENT, stamp.sent_us),
        ] {
            out.put_slice(name.as_bytes());
            out.put_u8(b':');
            put_decimal(out, value);
            out.put_u8(b'\n');
        }
        if confirm {
            self.requested += 1;
            out.put_slice(b"receipt:");
            put_decimal(out, self.requested);
            out.put_u8(b'\n');
        }
        out.put_slice(b"content-length:");
        put_decimal(out, body.len() as u64);
        out.put_slice(b"\n\n");
        self.conn.parts.put_body(out, body);
        out.put_u8(0);
    }

    fn buffered(&self) -> usize {
        self.conn.out.len() + self.conn.parts.len()
    }

    async fn flush(&mut self) -> Result<(), PerfError> {
        self.conn.flush().await
    }

    async fn wait_confirmed(&mut self) -> Result<(), PerfError> {
        self.conn.flush().await?;
        while self.confirmed < self.requested {
            let frame = self.conn.answer().await?;
            if frame.command != Command::Receipt {
                return Err(PerfError::Unexpected(frame.command.as_str()));
            }
            // Receipts come in order; an id we did not ask for is ignored.
            if let Some(id) = frame.header("receipt-id").and_then(|v| v.parse().ok()) {
                self.confirmed = self.confirmed.max(id);
            }
        }
        Ok(())
    }
}

/// What a consumer subscribes to and how it acknowledges.
#[derive(Debug, Clone)]
pub struct SubscribeSettings {
    pub destination: Destination,
    pub ack: AckMode,
    pub prefetch: u32,
    /// Body size, for brokers whose prefetch is in bytes.
    pub message_size: usize,
    pub run_id: u64,
}

pub struct StompSubscriber {
    conn: Connection,
    ack: AckMode,
    run_id: String,
    /// The ack id of the last message returned by `next`.
    last_ack_id: Option<HeaderText>,
    /// Client mode: the latest settled message, acknowledged cumulatively.
    cumulative: Option<HeaderText>,
    unflushed_acks: u32,
    /// Acks owed before we stop reading to write them, so a broker that
    /// honours the prefetch never waits on us.
    ack_batch: u32,
}

impl StompSubscriber {
    pub async fn connect(
        peer: &Peer,
        login: &Login,
        settings: &SubscribeSettings,
    ) -> Result<StompSubscriber, PerfError> {
        let mut conn = Connection::open(peer, login).await?;
        let mut subscribe = Frame::new(Command::Subscribe)
            .with_header("id", "0")
            .with_header("destination", settings.destination.stomp())
            .with_header("ack", settings.ack.stomp_header())
            .with_header("receipt", "subscribed");
        let (name, value) = prefetch_header(&conn.server, settings);
        subscribe.add_header(name, value);
        conn.encode(subscribe)?;
        conn.flush().await?;
        let answer = conn.answer().await?;
        if answer.command != Command::Receipt {
            return Err(PerfError::Unexpected(answer.command.as_str()));
        }
        Ok(StompSubscriber {
            conn,
            ack: settings.ack,
            run_id: settings.run_id.to_string(),
            last_ack_id: None,
            cumulative: None,
            unflushed_acks: 0,
            ack_batch: (settings.prefetch / 2).max(1),
        })
    }

    async fn flush_acks(&mut self) -> Result<(), PerfError> {
        if let Some(id) = self.cumulative.take() {
            self.write_ack(id)?;
        }
        self.unflushed_acks = 0;
        self.conn.flush().await
    }

    fn write_ack(&mut self, id: HeaderText) -> Result<(), PerfError> {
        let ack = if self.conn.encoder.version() == Version::V1_2 {
            Frame::new(Command::Ack).with_header("id", id)
        } else {
            Frame::new(Command::Ack)
                .with_header("message-id", id)
                .with_header("subscription", "0")
        };
        self.conn.encode(ack)
    }

    fn delivery(&mut self, frame: &Frame) -> Delivery {
        if self.ack != AckMode::Auto {
            let id = if self.conn.encoder.version() == Version::V1_2 {
                frame.headers.entries().iter().find(|(n, _)| n == "ack")
            } else {
                frame
                    .headers
                    .entries()
                    .iter()
                    .find(|(n, _)| n == "message-id")
            };
            self.last_ack_id = id.map(|(_, v)| v.clone());
        }
        Delivery {
            stamp: parse_stamp(frame, &self.run_id),
        }
    }
}

/// The perf headers of a MESSAGE, if it belongs to run `run_id`.
fn parse_stamp(frame: &Frame, run_id: &str) -> Option<Stamp> {
    if frame.header(headers::RUN)? != run_id {
        return None;
    }
    let number = |name: &str| frame.header(name).and_then(|v| v.parse::<u64>().ok());
    Some(Stamp {
        producer: u32::try_from(number(headers::PRODUCER)?).ok()?,
        seq: number(headers::SEQ)?,
        sent_us: number(headers::SENT)?,
        // Follows from the sequence number (see `ConsumerStats`).
        group: None,
    })
}

impl Subscriber for StompSubscriber {
    async fn next(&mut self) -> Result<Delivery, PerfError> {
        loop {
            if self.unflushed_acks >= self.ack_batch {
                self.flush_acks().await?;
            }
            // A frame already buffered costs no wait; only before blocking on
            // the socket do we write the acks owed, so they coalesce.
            let item = match self.conn.reader.next().now_or_never() {
                Some(item) => item,
                None => {
                    self.flush_acks().await?;
                    self.conn.reader.next().await
                }
            };
            let frame = match item {
                Some(Ok(Inbound::Frame(frame))) => check_error(frame)?,
                Some(Ok(Inbound::Heartbeat)) => continue,
                Some(Err(e)) => return Err(e.into()),
                None => return Err(PerfError::Closed),
            };
            match frame.command {
                Command::Message => return Ok(self.delivery(&frame)),
                Command::Receipt => continue,
                other => return Err(PerfError::Unexpected(other.as_str())),
            }
        }
    }

    fn settle_last(&mut self) -> Result<(), PerfError> {
        let Some(id) = self.last_ack_id.take() else {
            return Ok(());
        };
        match self.ack {
            AckMode::Auto => {}
            AckMode::Client => self.cumulative = Some(id),
            AckMode::Individual => self.write_ack(id)?,
        }
        self.unflushed_acks += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_written_without_allocation() {
        let mut out = BytesMut::new();
        for n in [0, 7, 10, 1234567890123, u64::MAX] {
            out.clear();
            put_decimal(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn stamps_are_read_only_from_our_run() {
        let frame = Frame::new(Command::Message)
            .with_header("perf-run", "42")
            .with_header("perf-p", "3")
            .with_header("perf-seq", "17")
            .with_header("perf-ts", "1000");
        assert_eq!(
            parse_stamp(&frame, "42"),
            Some(Stamp {
                producer: 3,
                seq: 17,
                sent_us: 1000,
                group: None
            })
        );
        assert_eq!(parse_stamp(&frame, "43"), None);
        let incomplete = Frame::new(Command::Message).with_header("perf-run", "42");
        assert_eq!(parse_stamp(&incomplete, "42"), None);
    }
}
