//! Header escaping of STOMP 1.1 and 1.2 ("Value Encoding").
//!
//! 1.1 defines `\n`, `\c` and `\\`; 1.2 adds `\r`. We apply the 1.2 table to 1.1
//! as well: a 1.1 peer never sends `\r`, and escaping a carriage return we send
//! beats letting a line-ending-stripping peer lose it silently.

use super::error::StompError;
use bytes::BytesMut;

/// The letter that follows the backslash when escaping `byte`, if it needs one.
fn escape_letter(byte: u8) -> Option<u8> {
    match byte {
        b'\\' => Some(b'\\'),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b':' => Some(b'c'),
        _ => None,
    }
}

fn unescape_letter(letter: Option<&u8>) -> Result<u8, StompError> {
    match letter {
        Some(b'\\') => Ok(b'\\'),
        Some(b'n') => Ok(b'\n'),
        Some(b'r') => Ok(b'\r'),
        Some(b'c') => Ok(b':'),
        Some(&other) => Err(StompError::InvalidEscape(if other.is_ascii_graphic() {
            format!("\\{}", char::from(other))
        } else {
            format!("\\ followed by octet 0x{other:02x}")
        })),
        None => Err(StompError::InvalidEscape(
            "\\ at the end of the text".into(),
        )),
    }
}

/// How many bytes of `text` need escaping. Branch-free so the compiler can compare
/// many bytes at once: every header of every MESSAGE frame goes through here.
fn specials(text: &[u8]) -> usize {
    text.iter()
        .map(|&b| usize::from((b == b'\\') | (b == b'\n') | (b == b'\r') | (b == b':')))
        .sum()
}

/// Length of `text` once escaped.
#[cfg(test)]
pub(crate) fn escaped_len(text: &[u8]) -> usize {
    text.len() + specials(text)
}

/// Appends `text` escaped to `dst`, copying unescaped runs whole.
pub(crate) fn escape_into(text: &[u8], dst: &mut BytesMut) {
    if specials(text) == 0 {
        dst.extend_from_slice(text);
        return;
    }
    let mut rest = text;
    while let Some(at) = rest.iter().position(|&b| escape_letter(b).is_some()) {
        let (run, special) = rest.split_at(at);
        dst.extend_from_slice(run);
        if let Some((&byte, tail)) = special.split_first() {
            dst.extend_from_slice(&[b'\\', escape_letter(byte).unwrap_or(byte)]);
            rest = tail;
        }
    }
    dst.extend_from_slice(rest);
}

/// Checks the escapes in raw header text without allocating. Returns whether
/// there are any, i.e. whether [`unescape`] is needed.
pub(crate) fn check(raw: &[u8]) -> Result<bool, StompError> {
    let mut found = false;
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        if b == b'\\' {
            unescape_letter(bytes.next())?;
            found = true;
        }
    }
    Ok(found)
}

/// Decodes escaped header text.
pub(crate) fn unescape(raw: &[u8]) -> Result<String, StompError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        out.push(if b == b'\\' {
            unescape_letter(bytes.next())?
        } else {
            b
        });
    }
    String::from_utf8(out).map_err(|_| StompError::InvalidUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut dst = BytesMut::new();
        escape_into(text.as_bytes(), &mut dst);
        assert_eq!(dst.len(), escaped_len(text.as_bytes()));
        String::from_utf8(dst.to_vec()).unwrap()
    }

    #[test]
    fn escapes_each_special_octet() {
        assert_eq!(escaped("a\rb"), "a\\rb");
        assert_eq!(escaped("a\nb"), "a\\nb");
        assert_eq!(escaped("a:b"), "a\\cb");
        assert_eq!(escaped("a\\b"), "a\\\\b");
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(escaped(":\\\r\n"), "\\c\\\\\\r\\n");
    }

    #[test]
    fn unescapes_each_sequence() {
        assert_eq!(unescape(b"a\\rb").unwrap(), "a\rb");
        assert_eq!(unescape(b"a\\nb").unwrap(), "a\nb");
        assert_eq!(unescape(b"a\\cb").unwrap(), "a:b");
        assert_eq!(unescape(b"a\\\\b").unwrap(), "a\\b");
        assert_eq!(unescape(b"\\\\n").unwrap(), "\\n");
        assert!(check(b"a\\cb").unwrap());
        assert!(!check(b"plain").unwrap());
    }

    #[test]
    fn rejects_undefined_escapes() {
        for raw in [&b"a\\tb"[..], b"trailing\\", b"\\\x01"] {
            assert!(matches!(check(raw), Err(StompError::InvalidEscape(_))));
            assert!(matches!(unescape(raw), Err(StompError::InvalidEscape(_))));
        }
        let err = check(b"a\\tb").unwrap_err().to_string();
        assert_eq!(err, "undefined escape sequence \\t in header");
    }
}
