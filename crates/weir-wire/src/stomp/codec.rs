//! tokio-util codec for STOMP: cuts heart-beats and frames out of the read buffer
//! and writes them.
//!
//! Decoding is check-then-build, as in mini-redis, but resumable: the decoder
//! remembers how far it has checked, so each read costs only its new bytes even
//! for a body arriving in many reads. Only once a whole frame is buffered is it
//! split off (`split_to().freeze()`) and are header and body slices handed out.
//! Every limit is checked against what is buffered so far, so a hostile peer is
//! refused as soon as it exceeds one, never after we have buffered it.

use super::error::{quote, Malformed, StompError};
use super::escape;
use super::frame::{Command, Frame, HeaderText, Headers, Version};
use crate::read_ahead;
use crate::write_parts::WriteParts;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use nom::bytes::{complete, streaming};
use nom::character::complete::digit1;
use nom::combinator::{all_consuming, rest};
use nom::multi::many0_count;
use nom::sequence::{separated_pair, terminated};
use nom::IResult;
use std::ops::Range;
use tokio_util::codec::{Decoder, Encoder};

const CONTENT_LENGTH: &str = "content-length";

/// Bounds on what one peer may make us buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The whole frame: command, headers, body and NUL.
    pub max_frame_size: usize,
    pub max_headers: usize,
    /// One header line, without its EOL.
    pub max_header_length: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: 10 * 1024 * 1024,
            max_headers: 1000,
            max_header_length: 64 * 1024,
        }
    }
}

/// What the decoder yields. A run of EOLs between frames is one heart-beat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    Heartbeat,
    Frame(Frame),
}

/// What the encoder takes; a heart-beat is written as one `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outbound {
    Heartbeat,
    Frame(Frame),
}

impl From<Frame> for Outbound {
    fn from(frame: Frame) -> Self {
        Outbound::Frame(frame)
    }
}

/// STOMP codec for one connection. It starts at version 1.0, which escapes no
/// headers (right for CONNECT in any case); the session calls
/// [`StompCodec::set_version`] once it has sent CONNECTED.
#[derive(Debug)]
pub struct StompCodec {
    limits: Limits,
    version: Version,
    state: State,
    /// Header positions of the frame being read, reused from frame to frame.
    spans: Vec<Span>,
    /// Length of the last whole frame: what read-ahead may be sized by.
    last_whole: usize,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Between frames: heart-beats or the next command line.
    Idle,
    /// Header lines before offset `next` are checked.
    Headers {
        command: Command,
        next: usize,
        content_length: Option<usize>,
    },
    /// The body starts at offset `start`.
    Body {
        command: Command,
        start: usize,
        end: BodyEnd,
    },
}

#[derive(Debug, Clone, Copy)]
enum BodyEnd {
    /// `content-length` octets, then a NUL.
    Length(usize),
    /// Up to the first NUL; the first `scanned` body octets hold none.
    Nul { scanned: usize },
}

/// Where one header's name and value lie in the frame, and whether they need
/// unescaping (only then are they copied).
#[derive(Debug)]
struct Span {
    name: Range<usize>,
    value: Range<usize>,
    name_escaped: bool,
    value_escaped: bool,
}

impl Default for StompCodec {
    fn default() -> Self {
        StompCodec::new(Limits::default())
    }
}

impl StompCodec {
    pub fn new(limits: Limits) -> StompCodec {
        StompCodec {
            limits,
            version: Version::V1_0,
            state: State::Idle,
            spans: Vec::new(),
            last_whole: 0,
        }
    }

    /// Sets the negotiated version, which decides header escaping both ways.
    pub fn set_version(&mut self, version: Version) {
        self.version = version;
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Forgets a half-read frame: after an error the connection is done for.
    fn reset(&mut self) {
        self.state = State::Idle;
        self.spans.clear();
    }

    pub fn escapes(&self, command: Command) -> bool {
        self.version.escapes_headers() && command.escapes_headers()
    }

    #[inline]
    fn decode_next(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, StompError> {
        loop {
            match self.state {
                State::Idle => {
                    let beats = eol_run(src);
                    if beats > 0 {
                        src.advance(beats);
                        return Ok(Some(Inbound::Heartbeat));
                    }
                    let Some((after, name)) = split_line(src) else {
                        // A line longer than any command (plus its CR) cannot become one.
                        if src.len() > Command::MAX_LEN + 1 {
                            return Err(StompError::UnknownCommand(quote(src)));
                        }
                        return Ok(None);
                    };
                    let command = Command::from_bytes(name)
                        .ok_or_else(|| StompError::UnknownCommand(quote(name)))?;
                    self.spans.clear();
                    self.state = State::Headers {
                        command,
                        next: src.len() - after.len(),
                        content_length: None,
                    };
                }
                State::Headers {
                    command,
                    next,
                    content_length,
                } => {
                    if !self.check_headers(src, command, next, content_length)? {
                        return Ok(None);
                    }
                }
                State::Body {
                    command,
                    start,
                    end,
                } => return self.read_body(src, command, start, end),
            }
        }
    }

    /// Checks header lines from offset `next`; true once the blank line is reached
    /// and the state has moved on to the body.
    fn check_headers(
        &mut self,
        src: &[u8],
        command: Command,
        mut next: usize,
        mut content_length: Option<usize>,
    ) -> Result<bool, StompError> {
        let limits = self.limits;
        let unescape = self.escapes(command);
        loop {
            let unread = src.get(next..).unwrap_or_default();
            let Some((after, line)) = split_line(unread) else {
                self.state = State::Headers {
                    command,
                    next,
                    content_length,
                };
                // The partial line may still end in the CR of a CRLF.
                if unread.len() > limits.max_header_length.saturating_add(1) {
                    return Err(StompError::HeaderTooLong {
                        limit: limits.max_header_length,
                    });
                }
                // Without a line end all buffered bytes are this frame's, and it
                // needs at least one more.
                if src.len() >= limits.max_frame_size {
                    return Err(StompError::FrameTooLarge {
                        limit: limits.max_frame_size,
                    });
                }
                return Ok(false);
            };
            let line_start = next;
            next = src.len() - after.len();
            if line.is_empty() {
                let end = match content_length {
                    Some(len) => {
                        // Refuse before the body arrives, not after.
                        if next.saturating_add(len).saturating_add(1) > limits.max_frame_size {
                            return Err(StompError::FrameTooLarge {
                                limit: limits.max_frame_size,
                            });
                        }
                        BodyEnd::Length(len)
                    }
                    None => BodyEnd::Nul { scanned: 0 },
                };
                self.state = State::Body {
                    command,
                    start: next,
                    end,
                };
                return Ok(true);
            }
            if line.len() > limits.max_header_length {
                return Err(StompError::HeaderTooLong {
                    limit: limits.max_header_length,
                });
            }
            if self.spans.len() >= limits.max_headers {
                return Err(StompError::TooManyHeaders {
                    limit: limits.max_headers,
                });
            }
            // ':' is ASCII, so a valid line means a valid name and value.
            if std::str::from_utf8(line).is_err() {
                return Err(StompError::InvalidUtf8);
            }
            let (name, value) = header_line(line)?;
            let (name_escaped, value_escaped) = if unescape {
                (escape::check(name)?, escape::check(value)?)
            } else {
                (false, false)
            };
            if content_length.is_none() && name == CONTENT_LENGTH.as_bytes() {
                content_length = Some(
                    parse_content_length(value)
                        .ok_or_else(|| StompError::InvalidContentLength(quote(value)))?,
                );
            }
            let value_start = line_start + name.len() + 1;
            self.spans.push(Span {
                name: line_start..line_start + name.len(),
                value: value_start..value_start + value.len(),
                name_escaped,
                value_escaped,
            });
        }
    }

    fn read_body(
        &mut self,
        src: &mut BytesMut,
        command: Command,
        start: usize,
        end: BodyEnd,
    ) -> Result<Option<Inbound>, StompError> {
        let max = self.limits.max_frame_size;
        let too_large = StompError::FrameTooLarge { limit: max };
        let len = match end {
            BodyEnd::Length(len) => {
                let total = start + len + 1;
                if src.len() < total {
                    // Within the limit (checked already): let the next reads fill it.
                    read_ahead::reserve_frame(src, total, self.last_whole);
                    return Ok(None);
                }
                if src.get(total - 1) != Some(&0) {
                    return Err(Malformed::MissingNul.into());
                }
                len
            }
            BodyEnd::Nul { scanned } => {
                let unscanned = src.get(start + scanned..).unwrap_or_default();
                match find_nul(unscanned) {
                    Some(at) => scanned + at,
                    None => {
                        if src.len() >= max {
                            return Err(too_large);
                        }
                        self.state = State::Body {
                            command,
                            start,
                            end: BodyEnd::Nul {
                                scanned: src.len().saturating_sub(start),
                            },
                        };
                        return Ok(None);
                    }
                }
            }
        };
        let total = start + len + 1;
        if total > max {
            return Err(too_large);
        }
        let bytes = src.split_to(total).freeze();
        self.last_whole = total;
        self.state = State::Idle;
        Ok(Some(Inbound::Frame(self.build(
            command,
            &bytes,
            start..start + len,
        )?)))
    }

    fn build(
        &mut self,
        command: Command,
        bytes: &Bytes,
        body: Range<usize>,
    ) -> Result<Frame, StompError> {
        let mut headers = Headers::with_capacity(self.spans.len());
        for span in self.spans.drain(..) {
            headers.push(
                header_text(bytes, span.name, span.name_escaped)?,
                header_text(bytes, span.value, span.value_escaped)?,
            );
        }
        Ok(Frame {
            command,
            headers,
            body: bytes.slice(body),
        })
    }

    fn encode_frame(&self, frame: &Frame, dst: &mut BytesMut) -> Result<(), StompError> {
        let mut w = FrameWriter::new(frame.command, self.escapes(frame.command), dst);
        for (name, value) in frame.headers.entries() {
            // The peer reads the first content-length: it must be right.
            if !w.has_length && name.as_bytes() == CONTENT_LENGTH.as_bytes() {
                if parse_content_length(value.as_bytes()) != Some(frame.body.len()) {
                    return Err(
                        w.abandon(StompError::InvalidContentLength(quote(value.as_bytes())))
                    );
                }
                w.has_length = true;
            }
            w.header(name.as_bytes(), value.as_bytes())?;
        }
        w.finish(&frame.body);
        Ok(())
    }
}

/// Writes one frame straight into the write buffer, header by header, so a frame built
/// from a message needs no `Frame` in between. On an error the partial frame is removed.
pub struct FrameWriter<'a> {
    dst: &'a mut BytesMut,
    start: usize,
    escape: bool,
    has_length: bool,
}

impl<'a> FrameWriter<'a> {
    /// Starts a frame: `escape` as [`StompCodec::escapes`] says for `command`.
    pub fn new(command: Command, escape: bool, dst: &'a mut BytesMut) -> Self {
        let start = dst.len();
        dst.put_slice(command.as_str().as_bytes());
        dst.put_u8(b'\n');
        FrameWriter {
            dst,
            start,
            escape,
            has_length: false,
        }
    }

    fn abandon(&mut self, e: StompError) -> StompError {
        self.dst.truncate(self.start);
        e
    }

    pub fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), StompError> {
        if name.is_empty() {
            return Err(self.abandon(Malformed::EmptyHeaderName.into()));
        }
        if !self.escape && (name.contains(&b':') || has_line_break(name) || has_line_break(value)) {
            return Err(self.abandon(Malformed::Unescapable.into()));
        }
        put_text(name, self.escape, self.dst);
        self.value(value);
        Ok(())
    }

    /// The rest of a header line after its name: `:`, the value, EOL.
    fn value(&mut self, value: &[u8]) {
        self.dst.put_u8(b':');
        put_text(value, self.escape, self.dst);
        self.dst.put_u8(b'\n');
    }

    /// A header with one of our own names, which never need escaping or checking.
    pub fn known(&mut self, name: &'static str, value: &[u8]) -> Result<(), StompError> {
        debug_assert!(!name.is_empty() && !name.contains([':', '\\', '\n', '\r']));
        if !self.escape && has_line_break(value) {
            return Err(self.abandon(Malformed::Unescapable.into()));
        }
        self.dst.put_slice(name.as_bytes());
        self.value(value);
        Ok(())
    }

    /// A header with one of our own names whose value is a number: nothing to check.
    pub fn known_number(&mut self, name: &'static str, value: i64) {
        debug_assert!(!name.is_empty() && !name.contains([':', '\\', '\n', '\r']));
        self.dst.put_slice(name.as_bytes());
        self.dst.put_u8(b':');
        let mut digits = [0u8; 21];
        self.dst.put_slice(signed_decimal(value, &mut digits));
        self.dst.put_u8(b'\n');
    }

    /// A header whose value is a number (the name is checked and escaped as usual).
    pub fn header_int(&mut self, name: &[u8], value: i64) -> Result<(), StompError> {
        let mut digits = [0u8; 21];
        self.header(name, signed_decimal(value, &mut digits))
    }

    /// Ends the headers (adding content-length for a body) and writes the body.
    pub fn finish(self, body: &[u8]) {
        let dst = self.end_headers(body.len());
        dst.reserve(body.len() + 1);
        dst.put_slice(body);
        dst.put_u8(0);
    }

    /// Like `finish`, but a large body goes out as the slice it is (see
    /// [`WriteParts`]) instead of being copied after the headers.
    pub fn finish_sharing(self, body: &Bytes, parts: &mut WriteParts) {
        let dst = self.end_headers(body.len());
        parts.put_body(dst, body);
        dst.put_u8(0);
    }

    fn end_headers(self, body_len: usize) -> &'a mut BytesMut {
        if !self.has_length && body_len > 0 {
            self.dst.put_slice(CONTENT_LENGTH.as_bytes());
            self.dst.put_u8(b':');
            put_decimal(body_len, self.dst);
            self.dst.put_u8(b'\n');
        }
        self.dst.put_u8(b'\n');
        self.dst
    }
}

impl Decoder for StompCodec {
    type Item = Inbound;
    type Error = StompError;

    #[inline]
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, StompError> {
        let decoded = self.decode_next(src);
        if decoded.is_err() {
            self.reset();
        }
        decoded
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, StompError> {
        match self.decode(src)? {
            Some(item) => Ok(Some(item)),
            None if src.is_empty() => Ok(None),
            None => {
                self.reset();
                Err(Malformed::Truncated.into())
            }
        }
    }
}

impl Encoder<Outbound> for StompCodec {
    type Error = StompError;

    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> Result<(), StompError> {
        match item {
            Outbound::Heartbeat => {
                dst.put_u8(b'\n');
                Ok(())
            }
            Outbound::Frame(frame) => self.encode_frame(&frame, dst),
        }
    }
}

impl Encoder<Frame> for StompCodec {
    type Error = StompError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), StompError> {
        self.encode_frame(&frame, dst)
    }
}

impl Encoder<&Frame> for StompCodec {
    type Error = StompError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), StompError> {
        self.encode_frame(frame, dst)
    }
}

/// One line without its EOL (`\n` or `\r\n`) and what follows it; `None` until
/// the `\n` is buffered.
fn split_line(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let parsed: IResult<&[u8], &[u8]> =
        terminated(streaming::take_until("\n"), streaming::tag("\n"))(input);
    let (after, line) = parsed.ok()?;
    Some((after, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// Length of the run of complete EOLs at the start of `input`.
fn eol_run(input: &[u8]) -> usize {
    let parsed: IResult<&[u8], usize> = many0_count(nom::branch::alt((
        complete::tag("\n"),
        complete::tag("\r\n"),
    )))(input);
    parsed.map_or(0, |(after, _)| input.len() - after.len())
}

/// Splits a header line at its first colon: the name is before it, the value is
/// everything after it, verbatim (no trimming, as 1.2 requires).
fn header_line(line: &[u8]) -> Result<(&[u8], &[u8]), Malformed> {
    let parsed: IResult<&[u8], (&[u8], &[u8])> =
        separated_pair(complete::take_till(|b| b == b':'), complete::tag(":"), rest)(line);
    match parsed {
        Ok((_, ([], _))) => Err(Malformed::EmptyHeaderName),
        Ok((_, pair)) => Ok(pair),
        Err(_) => Err(Malformed::MissingColon),
    }
}

/// Offset of the first NUL (memchr, through nom).
fn find_nul(input: &[u8]) -> Option<usize> {
    let parsed: IResult<&[u8], &[u8]> = complete::take_until("\0")(input);
    parsed.ok().map(|(_, before)| before.len())
}

/// A content-length is decimal digits only: no sign, no spaces.
fn parse_content_length(value: &[u8]) -> Option<usize> {
    let parsed: IResult<&[u8], &[u8]> = all_consuming(digit1)(value);
    let (_, digits) = parsed.ok()?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Only for spans `check_headers` recorded (see the SAFETY note inside).
fn header_text(
    bytes: &Bytes,
    range: Range<usize>,
    escaped: bool,
) -> Result<HeaderText, StompError> {
    if escaped {
        let raw = bytes.get(range).unwrap_or_default();
        Ok(HeaderText::from(escape::unescape(raw)?))
    } else {
        // SAFETY: `range` is a header name or value that `check_headers` found in
        // a line it checked to be UTF-8, cut at ASCII ':', CR or LF, which never
        // split a character.
        Ok(unsafe { HeaderText::from_checked_utf8(bytes.slice(range)) })
    }
}

fn has_line_break(text: &[u8]) -> bool {
    text.iter().any(|&b| b == b'\n' || b == b'\r')
}

fn put_text(text: &[u8], escape: bool, dst: &mut BytesMut) {
    if escape {
        escape::escape_into(text, dst);
    } else {
        dst.put_slice(text);
    }
}

fn put_decimal(n: usize, dst: &mut BytesMut) {
    let mut digits = [0u8; 21];
    dst.put_slice(signed_decimal(
        i64::try_from(n).unwrap_or(i64::MAX),
        &mut digits,
    ));
}

/// `n` in decimal, sign included, written at the end of `digits` (21 hold i64::MIN).
fn signed_decimal(n: i64, digits: &mut [u8; 21]) -> &[u8] {
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        digits[at] = b'-';
    }
    &digits[at..]
}

#[cfg(test)]
mod tests;
