//! `LIKE` patterns, compiled once when the selector is parsed.
//!
//! A hand-written matcher instead of the `regex` crate: with only `%` and `_`
//! a pattern is a list of runs between `%`s, matched left to right without
//! backtracking (see [`Segments`]), and the common shapes (`abc`, `abc%`,
//! `%abc`, `%abc%`) reduce to one `str` call.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum LikePattern {
    /// `%`: any string at all.
    Anything,
    Exact(Box<str>),
    Prefix(Box<str>),
    Suffix(Box<str>),
    Contains(Box<str>),
    General(Segments),
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
            (_, _, None) => LikePattern::General(Segments::new(&elems)),
        }
    }

    pub fn matches(&self, text: &str) -> bool {
        match self {
            LikePattern::Anything => true,
            LikePattern::Exact(s) => text == &**s,
            LikePattern::Prefix(s) => text.starts_with(&**s),
            LikePattern::Suffix(s) => text.ends_with(&**s),
            LikePattern::Contains(s) => text.contains(&**s),
            LikePattern::General(segments) => segments.matches(text),
        }
    }
}

/// A pattern with `_`, or with `%` between literal runs, as the runs between
/// its `%`s. The first run is anchored at the start, the last at the end, and
/// each middle one is found leftmost in what remains: a `%` can absorb
/// anything, so the leftmost place is never worse than a later one.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Segments {
    /// At least one, the first and last anchored; with no `%` there is exactly one.
    runs: Box<[Run]>,
}

/// Characters and `_`s between two `%`s.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    elems: Box<[Elem]>,
    /// The run as text when it holds no `_`, to search with `str::find`.
    literal: Option<Box<str>>,
    /// A linear-time searcher for a run with `_` that fits in 64 positions.
    shift_and: Option<ShiftAnd>,
}

/// Bit-parallel (Shift-And) search: bit i of the state is set when the last
/// i+1 characters match the run's first i+1 elements. One pass, no backtracking.
#[derive(Debug, Clone, PartialEq)]
struct ShiftAnd {
    /// Positions holding `_`, which accept any character.
    any: u64,
    /// Positions accepting each character, sorted by character.
    chars: Box<[(char, u64)]>,
    /// The bit of the run's last position.
    done: u64,
}

impl ShiftAnd {
    fn new(elems: &[Elem]) -> Option<ShiftAnd> {
        if elems.is_empty() || elems.len() > 64 {
            return None;
        }
        let mut any = 0;
        let mut chars: Vec<(char, u64)> = Vec::new();
        for (i, elem) in elems.iter().enumerate() {
            let bit = 1u64 << i;
            match elem {
                Elem::One => any |= bit,
                Elem::Char(c) => match chars.iter_mut().find(|(have, _)| have == c) {
                    Some((_, mask)) => *mask |= bit,
                    None => chars.push((*c, bit)),
                },
                Elem::Many => return None,
            }
        }
        chars.sort_unstable_by_key(|(c, _)| *c);
        Some(ShiftAnd {
            any,
            chars: chars.into(),
            done: 1u64 << (elems.len() - 1),
        })
    }

    /// The text after the leftmost-ending occurrence, which for a fixed-length
    /// run is also the leftmost-starting one.
    fn find<'t>(&self, text: &'t str) -> Option<&'t str> {
        let mut state = 0u64;
        for (at, c) in text.char_indices() {
            let accepts = self
                .chars
                .binary_search_by_key(&c, |(have, _)| *have)
                .map_or(0, |i| self.chars.get(i).map_or(0, |(_, mask)| *mask));
            state = ((state << 1) | 1) & (accepts | self.any);
            if state & self.done != 0 {
                return text.get(at + c.len_utf8()..);
            }
        }
        None
    }
}

impl Segments {
    fn new(elems: &[Elem]) -> Segments {
        let runs = elems
            .split(|e| *e == Elem::Many)
            .map(|run| Run {
                elems: run.into(),
                shift_and: ShiftAnd::new(run),
                literal: run
                    .iter()
                    .map(|e| match e {
                        Elem::Char(c) => Some(*c),
                        _ => None,
                    })
                    .collect::<Option<String>>()
                    .map(String::into_boxed_str),
            })
            .collect();
        Segments { runs }
    }

    fn matches(&self, text: &str) -> bool {
        let Some((first, rest)) = self.runs.split_first() else {
            return text.is_empty();
        };
        let Some(after_first) = first.match_prefix(text) else {
            return false;
        };
        let Some((last, middle_runs)) = rest.split_last() else {
            // No `%`: the single run must cover the whole text.
            return after_first.is_empty();
        };
        let Some(mut middle) = last.strip_suffix(after_first) else {
            return false;
        };
        for run in middle_runs {
            match run.find(middle) {
                Some(after) => middle = after,
                None => return false,
            }
        }
        true
    }
}

impl Run {
    /// The text after this run, if the text starts with it.
    fn match_prefix<'t>(&self, text: &'t str) -> Option<&'t str> {
        let mut chars = text.chars();
        for elem in self.elems.iter() {
            let c = chars.next()?;
            if let Elem::Char(want) = elem {
                if *want != c {
                    return None;
                }
            }
        }
        Some(chars.as_str())
    }

    /// The text before this run, if the text ends with it.
    fn strip_suffix<'t>(&self, text: &'t str) -> Option<&'t str> {
        let mut chars = text.chars();
        for elem in self.elems.iter().rev() {
            let c = chars.next_back()?;
            if let Elem::Char(want) = elem {
                if *want != c {
                    return None;
                }
            }
        }
        Some(chars.as_str())
    }

    /// The text after the leftmost occurrence of this run.
    fn find<'t>(&self, text: &'t str) -> Option<&'t str> {
        if let Some(literal) = &self.literal {
            // Linear-time substring search: no backtracking to exploit.
            let at = text.find(&**literal)?;
            return text.get(at + literal.len()..);
        }
        if let Some(searcher) = &self.shift_and {
            return searcher.find(text);
        }
        // A run with `_` longer than 64 is tried at each position: O(text * run)
        // at worst. No real pattern looks like that; the run is still bounded
        // by the selector length limit.
        let mut rest = text;
        loop {
            if let Some(after) = self.match_prefix(rest) {
                return Some(after);
            }
            let mut chars = rest.chars();
            chars.next()?;
            rest = chars.as_str();
        }
    }
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
    fn middle_runs_with_underscores() {
        assert!(like("%a_c%", "xxabcxx"));
        assert!(!like("%a_c%", "xxacxx"));
        assert!(like("x%a_c%y", "xaacacy"));
        assert!(!like("x%a_c%y", "xabbcy"));
        assert!(like("%é_ü%", "..éxü.."));
        assert!(like("_%a_a%_", "baaab"));
        let long_run = format!("%{}%", "a_".repeat(40));
        assert!(like(&long_run, &"ab".repeat(50)));
        assert!(!like(&long_run, &"ab".repeat(39)));
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
    fn hostile_patterns_stay_fast() {
        let text = "a".repeat(200_000);
        for pattern in [
            format!("{}b", "%a".repeat(50)),
            format!("%{}b%", "a".repeat(4000)),
            format!("_%{}b%", "a".repeat(4000)),
            format!("_%a_{}b%_", "a".repeat(60)),
            format!("%{}_b%", "a_".repeat(31)),
        ] {
            let started = std::time::Instant::now();
            assert!(!like(&pattern, &text));
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{}",
                &pattern[..20]
            );
        }
    }
}
