//! `LIKE` patterns, compiled once when the selector is parsed.
//!
//! A hand-written matcher instead of the `regex` crate: the language has two
//! wildcards, so a greedy matcher with single-point backtracking (the classic
//! wildcard algorithm, O(text * pattern) worst case, no recursion) is enough,
//! and the common shapes (`abc`, `abc%`, `%abc`, `%abc%`) skip it entirely.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum LikePattern {
    /// `%`: any string at all.
    Anything,
    Exact(Box<str>),
    Prefix(Box<str>),
    Suffix(Box<str>),
    Contains(Box<str>),
    General(Box<[Elem]>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Elem {
    Char(char),
    /// `_`: exactly one character.
    One,
    /// `%`: any run of characters, possibly empty.
    Many,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LikeError {
    /// The pattern's last character is the escape character, which escapes nothing.
    DanglingEscape,
}

impl LikePattern {
    pub fn compile(pattern: &str, escape: Option<char>) -> Result<LikePattern, LikeError> {
        let mut elems: Vec<Elem> = Vec::with_capacity(pattern.len());
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let elem = if Some(c) == escape {
                Elem::Char(chars.next().ok_or(LikeError::DanglingEscape)?)
            } else {
                match c {
                    '%' => Elem::Many,
                    '_' => Elem::One,
                    c => Elem::Char(c),
                }
            };
            // `%%` means the same as `%`; folding it keeps the shapes below simple.
            if !(elem == Elem::Many && elems.last() == Some(&Elem::Many)) {
                elems.push(elem);
            }
        }
        Ok(Self::shape(elems))
    }

    fn shape(elems: Vec<Elem>) -> LikePattern {
        let literal = |run: &[Elem]| -> Option<Box<str>> {
            run.iter()
                .map(|e| match e {
                    Elem::Char(c) => Some(*c),
                    _ => None,
                })
                .collect::<Option<String>>()
                .map(String::into_boxed_str)
        };
        let (lead, body) = match elems.split_first() {
            Some((Elem::Many, body)) => (true, body),
            _ => (false, &elems[..]),
        };
        let (trail, body) = match body.split_last() {
            Some((Elem::Many, body)) => (true, body),
            _ => (false, body),
        };
        match (lead, trail, literal(body)) {
            (true, _, Some(text)) if text.is_empty() => LikePattern::Anything,
            (false, false, Some(text)) => LikePattern::Exact(text),
            (false, true, Some(text)) => LikePattern::Prefix(text),
            (true, false, Some(text)) => LikePattern::Suffix(text),
            (true, true, Some(text)) => LikePattern::Contains(text),
            (_, _, None) => LikePattern::General(elems.into_boxed_slice()),
        }
    }

    pub fn matches(&self, text: &str) -> bool {
        match self {
            LikePattern::Anything => true,
            LikePattern::Exact(s) => text == &**s,
            LikePattern::Prefix(s) => text.starts_with(&**s),
            LikePattern::Suffix(s) => text.ends_with(&**s),
            LikePattern::Contains(s) => text.contains(&**s),
            LikePattern::General(elems) => general(elems, text),
        }
    }
}

fn general(pattern: &[Elem], text: &str) -> bool {
    let mut p = 0;
    let mut rest = text;
    // After a `%`: the pattern position just past it and the text it may still absorb.
    let mut retry: Option<(usize, &str)> = None;
    loop {
        let mut chars = rest.chars();
        let Some(c) = chars.next() else { break };
        let step = match pattern.get(p) {
            Some(Elem::Many) => {
                p += 1;
                retry = Some((p, rest));
                continue;
            }
            Some(Elem::One) => true,
            Some(Elem::Char(want)) => *want == c,
            None => false,
        };
        if step {
            p += 1;
            rest = chars.as_str();
            continue;
        }
        // Mismatch: let the last `%` swallow one more character and try again.
        let Some((after_many, absorbed)) = retry else {
            return false;
        };
        let mut absorbed_chars = absorbed.chars();
        if absorbed_chars.next().is_none() {
            return false;
        }
        let next = absorbed_chars.as_str();
        retry = Some((after_many, next));
        p = after_many;
        rest = next;
    }
    pattern
        .get(p..)
        .is_some_and(|tail| tail.iter().all(|e| *e == Elem::Many))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(pattern: &str, text: &str) -> bool {
        LikePattern::compile(pattern, None).unwrap().matches(text)
    }

    #[test]
    fn shapes_are_recognised() {
        let shape = |p: &str| LikePattern::compile(p, Some('\\')).unwrap();
        assert_eq!(shape("%"), LikePattern::Anything);
        assert_eq!(shape("%%"), LikePattern::Anything);
        assert_eq!(shape("abc"), LikePattern::Exact("abc".into()));
        assert_eq!(shape(""), LikePattern::Exact("".into()));
        assert_eq!(shape("ab%"), LikePattern::Prefix("ab".into()));
        assert_eq!(shape("%ab"), LikePattern::Suffix("ab".into()));
        assert_eq!(shape("%ab%"), LikePattern::Contains("ab".into()));
        assert_eq!(shape("\\%ab"), LikePattern::Exact("%ab".into()));
        assert!(matches!(shape("a_c"), LikePattern::General(_)));
        assert!(matches!(shape("a%b"), LikePattern::General(_)));
    }

    #[test]
    fn spec_examples() {
        // JMS 2.0 3.8.1.2: phone LIKE '12%3' is true for '123' and '12993', false for '1234'.
        assert!(like("12%3", "123"));
        assert!(like("12%3", "12993"));
        assert!(!like("12%3", "1234"));
        // word LIKE 'l_se' is true for 'lose', false for 'loose'.
        assert!(like("l_se", "lose"));
        assert!(!like("l_se", "loose"));
    }

    #[test]
    fn wildcards() {
        assert!(like("%", ""));
        assert!(like("_", "é"));
        assert!(!like("_", ""));
        assert!(!like("_", "ab"));
        assert!(like("a%b%c", "aXXbYYc"));
        assert!(like("a%b%c", "abc"));
        assert!(!like("a%b%c", "acb"));
        assert!(like("%a_", "bbab"));
        assert!(like("%aab", "aaaab"));
        assert!(!like("%aab", "aaaba"));
        assert!(like("_%_", "ab"));
        assert!(!like("_%_", "a"));
        assert!(like("%x%y%", "..x..y.."));
        assert!(!like("%x%y%", "..y..x.."));
        assert!(!like("abc", "ABC"));
    }

    #[test]
    fn escapes_make_wildcards_literal() {
        let p = LikePattern::compile("\\_%", Some('\\')).unwrap();
        assert!(p.matches("_foo"));
        assert!(!p.matches("xfoo"));
        let p = LikePattern::compile("100!%", Some('!')).unwrap();
        assert!(p.matches("100%"));
        assert!(!p.matches("1000"));
        let p = LikePattern::compile("a!!b", Some('!')).unwrap();
        assert!(p.matches("a!b"));
        let p = LikePattern::compile("a!_%!%", Some('!')).unwrap();
        assert!(p.matches("a_xyz%"));
        assert!(!p.matches("abxyz%"));
        assert_eq!(
            LikePattern::compile("abc!", Some('!')),
            Err(LikeError::DanglingEscape)
        );
    }

    #[test]
    fn backtracking_is_not_exponential() {
        let text = "a".repeat(2000);
        let pattern = format!("{}b", "%a".repeat(50));
        assert!(!like(&pattern, &text));
    }
}
