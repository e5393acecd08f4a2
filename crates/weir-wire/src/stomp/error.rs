//! Errors of the STOMP codec. Every message is a single line without raw control
//! characters, so the session can put `to_string()` into an ERROR frame's
//! `message` header as is.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum StompError {
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    #[error("malformed frame: {0}")]
    Malformed(Malformed),
    #[error("undefined escape sequence {0} in header")]
    InvalidEscape(String),
    #[error("header is not valid UTF-8")]
    InvalidUtf8,
    #[error("invalid content-length {0:?}")]
    InvalidContentLength(String),
    #[error("frame larger than the limit of {limit} bytes")]
    FrameTooLarge { limit: usize },
    #[error("more than {limit} headers in a frame")]
    TooManyHeaders { limit: usize },
    #[error("header line longer than the limit of {limit} bytes")]
    HeaderTooLong { limit: usize },
}

/// Why a frame is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("header line without a colon")]
    MissingColon,
    #[error("empty header name")]
    EmptyHeaderName,
    #[error("body not followed by a NUL octet")]
    MissingNul,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// Encoding only: a header holds a character that this frame cannot carry,
    /// because it is not escaped (STOMP 1.0, CONNECT, STOMP and CONNECTED frames).
    #[error("header contains a line break or a colon in its name, which cannot be escaped in this frame")]
    Unescapable,
}

impl From<Malformed> for StompError {
    fn from(reason: Malformed) -> Self {
        StompError::Malformed(reason)
    }
}

/// Texts quoted from the peer in an error are cut to this many characters so a
/// hostile peer cannot make our ERROR frame large.
const QUOTE_LIMIT: usize = 32;

/// Quotes bytes from the wire for an error message, looking at no more of them
/// than the quote can show.
pub(crate) fn quote(raw: &[u8]) -> String {
    // A UTF-8 character is at most 4 bytes.
    let shown = raw.get(..QUOTE_LIMIT * 4).unwrap_or(raw);
    let text = String::from_utf8_lossy(shown);
    let mut quoted: String = text.chars().take(QUOTE_LIMIT).collect();
    if shown.len() < raw.len() || text.chars().nth(QUOTE_LIMIT).is_some() {
        quoted.push_str("...");
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_short() {
        assert_eq!(quote(b"PUBLISH"), "PUBLISH");
        let long = quote(&[b'x'; 10_000]);
        assert_eq!(long, format!("{}...", "x".repeat(QUOTE_LIMIT)));
        assert_eq!(quote(b"\xffA"), "\u{fffd}A");
    }
}
