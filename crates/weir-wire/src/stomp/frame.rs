//! The STOMP frame model: commands, protocol versions, headers and frames.
//!
//! Decoded header names and values are `Bytes` slices of the read buffer (only a
//! value that contained an escape is allocated), and so is the body.

use bytes::Bytes;
use std::borrow::Cow;
use std::fmt;

/// A STOMP command, client frames first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Connect,
    Stomp,
    Send,
    Subscribe,
    Unsubscribe,
    Ack,
    Nack,
    Begin,
    Commit,
    Abort,
    Disconnect,
    Connected,
    Message,
    Receipt,
    Error,
}

impl Command {
    pub const ALL: [Command; 15] = [
        Command::Connect,
        Command::Stomp,
        Command::Send,
        Command::Subscribe,
        Command::Unsubscribe,
        Command::Ack,
        Command::Nack,
        Command::Begin,
        Command::Commit,
        Command::Abort,
        Command::Disconnect,
        Command::Connected,
        Command::Message,
        Command::Receipt,
        Command::Error,
    ];

    /// The longest command, `UNSUBSCRIBE`.
    pub(crate) const MAX_LEN: usize = 11;

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Connected => "CONNECTED",
            Command::Message => "MESSAGE",
            Command::Receipt => "RECEIPT",
            Command::Error => "ERROR",
        }
    }

    /// The command spelled exactly (commands are case-sensitive).
    pub fn from_bytes(name: &[u8]) -> Option<Command> {
        Some(match name {
            b"CONNECT" => Command::Connect,
            b"STOMP" => Command::Stomp,
            b"SEND" => Command::Send,
            b"SUBSCRIBE" => Command::Subscribe,
            b"UNSUBSCRIBE" => Command::Unsubscribe,
            b"ACK" => Command::Ack,
            b"NACK" => Command::Nack,
            b"BEGIN" => Command::Begin,
            b"COMMIT" => Command::Commit,
            b"ABORT" => Command::Abort,
            b"DISCONNECT" => Command::Disconnect,
            b"CONNECTED" => Command::Connected,
            b"MESSAGE" => Command::Message,
            b"RECEIPT" => Command::Receipt,
            b"ERROR" => Command::Error,
            _ => return None,
        })
    }

    /// Whether a client sends this command (else a server does).
    pub fn is_client(self) -> bool {
        !matches!(
            self,
            Command::Connected | Command::Message | Command::Receipt | Command::Error
        )
    }

    /// CONNECT, STOMP and CONNECTED travel before the version is agreed, so the
    /// spec exempts them from header escaping in every version.
    pub fn escapes_headers(self) -> bool {
        !matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A STOMP protocol version; ordered, so the highest common one is a `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Version {
    /// Also what a connection speaks until CONNECTED is sent: no header escaping.
    #[default]
    V1_0,
    V1_1,
    V1_2,
}

impl Version {
    pub const ALL: [Version; 3] = [Version::V1_0, Version::V1_1, Version::V1_2];

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_1 => "1.1",
            Version::V1_2 => "1.2",
        }
    }

    pub fn parse(text: &str) -> Option<Version> {
        Version::ALL.into_iter().find(|v| v.as_str() == text)
    }

    /// The highest version named in an `accept-version` value (`1.0,1.2`) that we
    /// support, or `None` if there is none in common. Unknown versions are skipped.
    pub fn parse_accept_version(accept: &str) -> Option<Version> {
        accept
            .split(',')
            .filter_map(|v| Version::parse(v.trim()))
            .max()
    }

    /// Negotiates from a CONNECT frame's `accept-version` header: a client that
    /// sends none speaks 1.0.
    pub fn negotiate(accept: Option<&str>) -> Option<Version> {
        accept.map_or(Some(Version::V1_0), Version::parse_accept_version)
    }

    /// Whether frames of this version escape their headers (1.1 and later).
    pub fn escapes_headers(self) -> bool {
        self != Version::V1_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A header name or value: UTF-8 text held in `Bytes`, so that a decoded header
/// is a slice of the read buffer and a `&'static str` costs no allocation.
///
/// Build one with `From<&'static str>` (free), `From<String>` / `From<Box<str>>` /
/// `From<Cow<'static, str>>` (takes the allocation over), [`HeaderText::copy_from`]
/// for a borrowed `&str`, or `TryFrom<Bytes>` (checks UTF-8). Rust cannot offer
/// both `From<&'static str>` and a copying `From<&'a str>`, so borrowed text is
/// copied explicitly.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct HeaderText(Bytes);

impl HeaderText {
    pub const fn from_static(text: &'static str) -> HeaderText {
        HeaderText(Bytes::from_static(text.as_bytes()))
    }

    /// Wraps bytes the caller has already checked to be UTF-8 (the decoder checks
    /// each header line once).
    ///
    /// # Safety
    /// `bytes` must be UTF-8: [`HeaderText::as_str`] does not check again.
    pub(crate) unsafe fn from_checked_utf8(bytes: Bytes) -> HeaderText {
        debug_assert!(std::str::from_utf8(&bytes).is_ok());
        HeaderText(bytes)
    }

    pub fn copy_from(text: &str) -> HeaderText {
        HeaderText(Bytes::copy_from_slice(text.as_bytes()))
    }

    /// Shares text the core already holds: no copy, the `Arc` keeps it alive.
    pub fn from_shared(text: std::sync::Arc<str>) -> HeaderText {
        HeaderText(Bytes::from_owner(ArcText(text)))
    }

    pub fn as_str(&self) -> &str {
        // Checking again on every read was 4% of the broker's CPU under STOMP
        // load (headers are read once to check them and again to convert them).
        // SAFETY: every constructor checks the bytes (`TryFrom<Bytes>`), starts
        // from a `str`, or is `from_checked_utf8`, whose caller promises UTF-8;
        // the field is private and `Bytes` is immutable.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&'static str> for HeaderText {
    fn from(text: &'static str) -> Self {
        HeaderText::from_static(text)
    }
}

impl From<String> for HeaderText {
    fn from(text: String) -> Self {
        HeaderText(Bytes::from(text))
    }
}

impl From<Box<str>> for HeaderText {
    fn from(text: Box<str>) -> Self {
        HeaderText(Bytes::from(text.into_boxed_bytes()))
    }
}

impl From<Cow<'static, str>> for HeaderText {
    fn from(text: Cow<'static, str>) -> Self {
        match text {
            Cow::Borrowed(text) => HeaderText::from_static(text),
            Cow::Owned(text) => HeaderText::from(text),
        }
    }
}

impl TryFrom<Bytes> for HeaderText {
    type Error = std::str::Utf8Error;

    fn try_from(bytes: Bytes) -> Result<Self, Self::Error> {
        std::str::from_utf8(&bytes)?;
        Ok(HeaderText(bytes))
    }
}

impl std::ops::Deref for HeaderText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for HeaderText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for HeaderText {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for HeaderText {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl fmt::Debug for HeaderText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for HeaderText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Headers in wire order. Repeats are kept; lookups return the first, as the
/// spec says. A vector, because frames carry a handful of headers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Headers {
    entries: Vec<(HeaderText, HeaderText)>,
}

impl Headers {
    pub fn new() -> Headers {
        Headers::default()
    }

    pub fn with_capacity(capacity: usize) -> Headers {
        Headers {
            entries: Vec::with_capacity(capacity),
        }
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n.as_bytes() == name.as_bytes())
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.entries
            .iter()
            .filter(move |(n, _)| n.as_bytes() == name.as_bytes())
            .map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries
            .iter()
            .any(|(n, _)| n.as_bytes() == name.as_bytes())
    }

    /// Appends a header; an earlier header of the same name keeps precedence.
    pub fn push(&mut self, name: impl Into<HeaderText>, value: impl Into<HeaderText>) {
        self.entries.push((name.into(), value.into()));
    }

    /// Replaces every header of this name by one, in the place of the first.
    pub fn set(&mut self, name: impl Into<HeaderText>, value: impl Into<HeaderText>) {
        let name = name.into();
        let value = value.into();
        match self.entries.iter().position(|(n, _)| *n == name) {
            Some(first) => {
                let mut index = 0;
                self.entries.retain(|(n, _)| {
                    let keep = index <= first || *n != name;
                    index += 1;
                    keep
                });
                if let Some(entry) = self.entries.get_mut(first) {
                    entry.1 = value;
                }
            }
            None => self.entries.push((name, value)),
        }
    }

    /// Removes every header of this name; returns how many there were.
    pub fn remove(&mut self, name: &str) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|(n, _)| n.as_bytes() != name.as_bytes());
        before - self.entries.len()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The entries themselves, to move or share them without copying the text.
    pub fn entries(&self) -> &[(HeaderText, HeaderText)] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl From<Vec<(HeaderText, HeaderText)>> for Headers {
    fn from(entries: Vec<(HeaderText, HeaderText)>) -> Self {
        Headers { entries }
    }
}

impl IntoIterator for Headers {
    type Item = (HeaderText, HeaderText);
    type IntoIter = std::vec::IntoIter<(HeaderText, HeaderText)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

/// Lets `Bytes` borrow the bytes of an `Arc<str>`.
struct ArcText(std::sync::Arc<str>);

impl AsRef<[u8]> for ArcText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// One STOMP frame.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    pub command: Command,
    pub headers: Headers,
    pub body: Bytes,
}

impl Frame {
    pub fn new(command: Command) -> Frame {
        Frame {
            command,
            headers: Headers::new(),
            body: Bytes::new(),
        }
    }

    /// Builder form of [`Frame::add_header`].
    pub fn with_header(
        mut self,
        name: impl Into<HeaderText>,
        value: impl Into<HeaderText>,
    ) -> Frame {
        self.headers.push(name, value);
        self
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Frame {
        self.body = body.into();
        self
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    pub fn add_header(&mut self, name: impl Into<HeaderText>, value: impl Into<HeaderText>) {
        self.headers.push(name, value);
    }
}

impl fmt::Debug for Frame {
    // The body can be megabytes: show its size, not its bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("command", &self.command)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_through_their_names() {
        for command in Command::ALL {
            assert_eq!(
                Command::from_bytes(command.as_str().as_bytes()),
                Some(command)
            );
            assert!(command.as_str().len() <= Command::MAX_LEN);
        }
        assert_eq!(Command::from_bytes(b"send"), None);
        assert_eq!(Command::from_bytes(b"SEND "), None);
    }

    #[test]
    fn negotiates_the_highest_common_version() {
        assert_eq!(
            Version::parse_accept_version("1.0,1.1,1.2"),
            Some(Version::V1_2)
        );
        assert_eq!(
            Version::parse_accept_version("1.1,1.0"),
            Some(Version::V1_1)
        );
        assert_eq!(
            Version::parse_accept_version("1.0, 2.0"),
            Some(Version::V1_0)
        );
        assert_eq!(Version::parse_accept_version("2.0"), None);
        assert_eq!(Version::parse_accept_version(""), None);
        assert_eq!(Version::negotiate(None), Some(Version::V1_0));
        assert_eq!(Version::negotiate(Some("1.2")), Some(Version::V1_2));
        assert_eq!(Version::V1_1.as_str(), "1.1");
    }

    #[test]
    fn header_lookup_returns_the_first_of_repeats() {
        let frame = Frame::new(Command::Send)
            .with_header("foo", "first")
            .with_header("foo", String::from("second"));
        assert_eq!(frame.header("foo"), Some("first"));
        assert_eq!(
            frame.headers.get_all("foo").collect::<Vec<_>>(),
            ["first", "second"]
        );
        assert_eq!(frame.header("bar"), None);
    }

    #[test]
    fn set_and_remove_keep_order() {
        let mut headers = Headers::new();
        headers.push("a", "1");
        headers.push("b", "2");
        headers.push("a", "3");
        headers.set("a", "4");
        assert_eq!(headers.iter().collect::<Vec<_>>(), [("a", "4"), ("b", "2")]);
        headers.set("c", HeaderText::copy_from("5"));
        assert_eq!(headers.remove("b"), 1);
        assert_eq!(headers.iter().collect::<Vec<_>>(), [("a", "4"), ("c", "5")]);
    }

    #[test]
    fn header_text_checks_utf8_of_bytes() {
        assert!(HeaderText::try_from(Bytes::from_static(b"ok")).is_ok());
        assert!(HeaderText::try_from(Bytes::from_static(b"\xff")).is_err());
        assert_eq!(HeaderText::from(Cow::Borrowed("x")), "x");
    }
}
