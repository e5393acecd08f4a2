//! A STOMP client's script, as the fuzzer's `Arbitrary` input: a CONNECT with login and
//! passcode variations, then frames whose commands and headers come mostly from what the
//! broker understands, written as text (unescaped, so broken frames come out too).

use crate::users::{Password, UserName};
use crate::Step;
use libfuzzer_sys::arbitrary::{self, Arbitrary};

#[derive(Arbitrary, Debug)]
pub struct Script {
    pub tls: bool,
    pub certificate: Option<UserName>,
    pub connect: Connect,
    pub frames: Vec<FrameText>,
    /// `\r\n` line ends instead of `\n`.
    pub crlf: bool,
}

#[derive(Arbitrary, Debug)]
pub struct Connect {
    pub stomp_command: bool,
    pub accept_version: Option<Versions>,
    pub host: Option<String>,
    pub login: Option<UserName>,
    pub passcode: Option<Password>,
    pub heart_beat: Option<(u16, u16)>,
    pub client_id: Option<String>,
    pub extra: Vec<(String, String)>,
}

#[derive(Arbitrary, Debug)]
pub enum Versions {
    V10,
    V11,
    V12,
    All,
    Any(String),
}

#[derive(Arbitrary, Debug)]
pub struct FrameText {
    pub command: Command,
    pub headers: Vec<HeaderChoice>,
    pub content_length: bool,
    pub body: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
pub enum Command {
    Send,
    Subscribe,
    Unsubscribe,
    Ack,
    Nack,
    Begin,
    Commit,
    Abort,
    Disconnect,
    Connect,
    Any(String),
}

#[derive(Arbitrary, Debug)]
pub enum Destination {
    Queue(u8),
    Topic(u8),
    Temp(u8),
    Any(String),
}

#[derive(Arbitrary, Debug)]
pub enum HeaderChoice {
    Destination(Destination),
    Id(u8),
    Ack(AckMode),
    Receipt(u8),
    Transaction(u8),
    MessageId(u32),
    Selector(String),
    Persistent(bool),
    Delay(u32),
    Group(u8),
    Browser,
    DurableName(u8),
    ReplyTo(Destination),
    Expires(u64),
    /// `id` (STOMP 1.2) or `message-id` with the value of the last MESSAGE the broker sent
    /// so far, for ACK and NACK of real deliveries.
    AckHeard {
        message_id: bool,
    },
    Any(String, String),
}

#[derive(Arbitrary, Debug)]
pub enum AckMode {
    Auto,
    Client,
    ClientIndividual,
    Any(String),
}

impl Destination {
    fn text(&self) -> String {
        match self {
            Destination::Queue(n) => format!("/queue/q.{}.x", n % 3),
            Destination::Topic(n) => format!("/topic/t.{}", n % 3),
            Destination::Temp(n) => format!("/temp-queue/tmp.{}", n % 3),
            Destination::Any(s) => s.clone(),
        }
    }
}

impl HeaderChoice {
    fn line(&self) -> String {
        match self {
            HeaderChoice::Destination(d) => format!("destination:{}", d.text()),
            HeaderChoice::Id(n) => format!("id:{}", n % 4),
            HeaderChoice::Ack(mode) => format!(
                "ack:{}",
                match mode {
                    AckMode::Auto => "auto",
                    AckMode::Client => "client",
                    AckMode::ClientIndividual => "client-individual",
                    AckMode::Any(s) => s,
                }
            ),
            HeaderChoice::Receipt(n) => format!("receipt:r{n}"),
            HeaderChoice::Transaction(n) => format!("transaction:tx{}", n % 3),
            HeaderChoice::MessageId(n) => format!("message-id:{n}"),
            HeaderChoice::Selector(s) => format!("selector:{s}"),
            HeaderChoice::Persistent(p) => format!("persistent:{p}"),
            HeaderChoice::Delay(ms) => format!("AMQ_SCHEDULED_DELAY:{}", ms % 5000),
            HeaderChoice::Group(n) => format!("JMSXGroupID:g{}", n % 4),
            HeaderChoice::Browser => "browser:true".to_owned(),
            HeaderChoice::DurableName(n) => format!("durable-subscription-name:d{}", n % 3),
            HeaderChoice::ReplyTo(d) => format!("reply-to:{}", d.text()),
            HeaderChoice::Expires(ms) => format!("expires:{ms}"),
            // Filled in when the frame is written (see `Script::steps`).
            HeaderChoice::AckHeard { .. } => String::new(),
            HeaderChoice::Any(name, value) => format!("{name}:{value}"),
        }
    }
}

impl Command {
    fn text(&self) -> &str {
        match self {
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Connect => "CONNECT",
            Command::Any(s) => s,
        }
    }
}

fn frame(eol: &str, command: &str, headers: &[String], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + body.len());
    out.extend_from_slice(command.as_bytes());
    out.extend_from_slice(eol.as_bytes());
    for header in headers {
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(eol.as_bytes());
    }
    out.extend_from_slice(eol.as_bytes());
    out.extend_from_slice(body);
    out.push(0);
    out
}

impl Script {
    pub fn steps(self) -> Vec<Step> {
        let eol = if self.crlf { "\r\n" } else { "\n" };
        let c = &self.connect;
        let mut headers = Vec::new();
        if let Some(versions) = &c.accept_version {
            headers.push(format!(
                "accept-version:{}",
                match versions {
                    Versions::V10 => "1.0",
                    Versions::V11 => "1.1",
                    Versions::V12 => "1.2",
                    Versions::All => "1.0,1.1,1.2",
                    Versions::Any(s) => s,
                }
            ));
        }
        if let Some(host) = &c.host {
            headers.push(format!("host:{host}"));
        }
        if let Some(login) = &c.login {
            headers.push(format!("login:{}", login.name()));
            if let Some(passcode) = &c.passcode {
                headers.push(format!("passcode:{}", passcode.for_user(login)));
            }
        } else if let Some(Password::Other(passcode)) = &c.passcode {
            headers.push(format!("passcode:{passcode}"));
        }
        if let Some((cx, cy)) = c.heart_beat {
            headers.push(format!("heart-beat:{cx},{cy}"));
        }
        if let Some(id) = &c.client_id {
            headers.push(format!("client-id:{id}"));
        }
        for (name, value) in &c.extra {
            headers.push(format!("{name}:{value}"));
        }
        let command = if c.stomp_command { "STOMP" } else { "CONNECT" };
        let mut steps = vec![Step::Write(frame(eol, command, &headers, b""))];
        for f in self.frames {
            let mut headers: Vec<String> = f
                .headers
                .iter()
                .map(HeaderChoice::line)
                .filter(|line| !line.is_empty())
                .collect();
            if f.content_length {
                headers.push(format!("content-length:{}", f.body.len()));
            }
            let heard = f.headers.iter().find_map(|h| match h {
                HeaderChoice::AckHeard { message_id } => Some(*message_id),
                _ => None,
            });
            let command = f.command.text().to_owned();
            let eol = eol.to_owned();
            steps.push(match heard {
                None => Step::Write(frame(&eol, &command, &headers, &f.body)),
                // Whatever was delivered by now, without waiting: a script is not held up
                // by a MESSAGE that never comes.
                Some(message_id) => Step::Reply(Box::new(move |said| {
                    let (name, value) = last_delivery(said, message_id);
                    let mut headers = headers.clone();
                    headers.push(format!("{name}:{value}"));
                    Some(frame(&eol, &command, &headers, &f.body))
                })),
            });
        }
        steps
    }
}

/// The header an ACK names the last MESSAGE by: `ack` (1.2) or `message-id`, with that
/// MESSAGE's value, or a made-up one when nothing was delivered yet.
fn last_delivery(said: &[u8], message_id: bool) -> (&'static str, String) {
    let (name, key): (&'static str, &[u8]) = if message_id {
        ("message-id", b"\nmessage-id:")
    } else {
        ("id", b"\nack:")
    };
    let value = said
        .windows(key.len())
        .rposition(|w| w == key)
        .map(|at| {
            let rest = &said[at + key.len()..];
            let end = rest
                .iter()
                .position(|b| *b == b'\n' || *b == b'\r')
                .unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).into_owned()
        })
        .unwrap_or_else(|| "none".to_owned());
    (name, value)
}
