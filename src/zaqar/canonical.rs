//! Whether a message body is JSON exactly as serde_json writes what it
//! reads from it, so a rendered message may carry the stored bytes as they
//! are rather than parse them into a tree and write that out again (most
//! of what a claim's answer cost). A body posted through this API is stored
//! that way, so the check nearly always says yes; it may say no to some
//! that are (floats, escapes, deep nesting), which then take the long way.
//!
//! serde_json writes no whitespace, object keys sorted and once each (its
//! map is ordered by key), strings with only `"`, `\` and control
//! characters escaped, and integers as plain digits.

/// Deeper than serde_json reads (128), and more than a body needs.
const MAX_DEPTH: usize = 64;

/// Most digits of an integer taken here: 18 fit both `u64` and `i64`.
const MAX_DIGITS: usize = 18;

/// True only if `to_vec(from_slice::<Value>(bytes))` gives `bytes` back.
pub fn is_canonical(bytes: &[u8]) -> bool {
    if std::str::from_utf8(bytes).is_err() {
        return false;
    }
    let mut reader = Reader { bytes, at: 0 };
    reader.value(0) && reader.at == bytes.len()
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    fn value(&mut self, depth: usize) -> bool {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().is_some(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.integer(),
            _ => false,
        }
    }

    fn object(&mut self, depth: usize) -> bool {
        self.at += 1;
        if depth > MAX_DEPTH {
            return false;
        }
        if self.eat(b'}') {
            return true;
        }
        let mut last: Option<&[u8]> = None;
        loop {
            let Some(key) = self.string() else {
                return false;
            };
            // Sorted and unique, as serde_json's map writes them (a str
            // orders by its bytes).
            if last.is_some_and(|last| last >= key) {
                return false;
            }
            last = Some(key);
            if !self.eat(b':') || !self.value(depth) {
                return false;
            }
            if self.eat(b'}') {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    fn array(&mut self, depth: usize) -> bool {
        self.at += 1;
        if depth > MAX_DEPTH {
            return false;
        }
        if self.eat(b']') {
            return true;
        }
        loop {
            if !self.value(depth) {
                return false;
            }
            if self.eat(b']') {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    /// A string without escapes (one with any may be written otherwise);
    /// its contents.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let rest = &self.bytes[self.at..];
        let end = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[end] != b'"' {
            return None;
        }
        self.at += end + 1;
        Some(&rest[..end])
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        let found = self.bytes[self.at..].starts_with(word);
        self.at += if found { word.len() } else { 0 };
        found
    }

    /// An integer as serde_json writes one: no leading zero, no `-0`, no
    /// fraction or exponent (a float may be written otherwise).
    fn integer(&mut self) -> bool {
        let negative = self.eat(b'-');
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let plain = match &self.bytes[start..self.at] {
            [] => false,
            [b'0'] => !negative,
            [b'0', ..] => false,
            digits => digits.len() <= MAX_DIGITS,
        };
        plain && !matches!(self.peek(), Some(b'.' | b'e' | b'E'))
    }
}

#[cfg(test)]
mod tests {
    use super::is_canonical;
    use serde_json::Value;

    fn round_trips(text: &str) -> bool {
        serde_json::from_str::<Value>(text)
            .is_ok_and(|v| serde_json::to_string(&v).is_ok_and(|out| out == text))
    }

    #[test]
    fn what_serde_json_writes_is_taken_as_it_is() {
        for text in [
            r#"{"pad":"xxxx","seq":12}"#,
            "{\"a\":[1,-2,true,false,null,{}],\"b\":{\"c\":\"é ☃ \u{7f}\"},\"d\":[]}",
            r#""just a string""#,
            "0",
            "-17",
            "123456789012345678",
            "[]",
            "null",
            r#"{"":1,"a":2,"ab":3,"b":4}"#,
        ] {
            assert!(round_trips(text), "{text} is canonical");
            assert!(is_canonical(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn what_it_would_write_otherwise_is_not() {
        for text in [
            r#"{"seq":1,"pad":"x"}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a": 1}"#,
            " 1",
            "1 ",
            "[1, 2]",
            r#""a\nb""#,
            r#""\u0041""#,
            r#""a\/b""#,
            "1.0",
            "1.5",
            "1e3",
            "-0",
            "007",
            "12345678901234567890",
            "{",
            r#"{"a":1,}"#,
            "[1,]",
            "tru",
            "nul",
            "",
            "\"unterminated",
            "+1",
        ] {
            assert!(!is_canonical(text.as_bytes()), "{text}");
        }
        assert!(!is_canonical(b"\"\xff\""), "not UTF-8");
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(!is_canonical(deep.as_bytes()), "too deep");
    }

    /// Whatever it takes as it is comes back the same from serde_json.
    #[test]
    fn it_never_takes_what_serde_json_would_change() {
        let pieces = [
            "{", "}", "[", "]", ",", ":", "\"a\"", "\"b\"", "\"\\n\"", "1", "-1", "0", "1.5",
            "true", "null", " ", "\"é\"", "10",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut taken = 0;
        for _ in 0..200_000 {
            let mut text = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = 1 + (state % 9) as usize;
            let mut s = state;
            for _ in 0..len {
                text.push_str(pieces[(s % pieces.len() as u64) as usize]);
                s /= pieces.len() as u64;
            }
            if is_canonical(text.as_bytes()) {
                taken += 1;
                assert!(round_trips(&text), "{text}");
            }
        }
        assert!(taken > 100, "the search found canonical texts ({taken})");
    }
}
