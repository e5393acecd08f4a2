//! Cuts a selector into tokens. nom does the character-level work; each token
//! keeps its byte span so the parser can point an error at a column.

use nom::branch::alt;
use nom::bytes::complete::{tag, tag_no_case};
use nom::character::complete::{char, digit0, digit1, hex_digit1, one_of};
use nom::combinator::{opt, recognize};
use nom::sequence::{pair, preceded, tuple};
use nom::IResult;

use super::{column, SelectorError};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(Box<str>),
    Str(Box<str>),
    Int(i64),
    Float(f64),
    Kw(Kw),
    LParen,
    RParen,
    Comma,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kw {
    And,
    Or,
    Not,
    Between,
    In,
    Like,
    Escape,
    Is,
    Null,
    True,
    False,
}

impl Kw {
    /// Keywords are case-insensitive; identifiers are not, so this runs only
    /// after an identifier-shaped word has been cut out.
    fn from_word(word: &str) -> Option<Kw> {
        const WORDS: [(&str, Kw); 11] = [
            ("AND", Kw::And),
            ("OR", Kw::Or),
            ("NOT", Kw::Not),
            ("BETWEEN", Kw::Between),
            ("IN", Kw::In),
            ("LIKE", Kw::Like),
            ("ESCAPE", Kw::Escape),
            ("IS", Kw::Is),
            ("NULL", Kw::Null),
            ("TRUE", Kw::True),
            ("FALSE", Kw::False),
        ];
        WORDS
            .iter()
            .find(|(text, _)| word.eq_ignore_ascii_case(text))
            .map(|(_, kw)| *kw)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    /// Byte offsets into the selector text.
    pub start: usize,
    pub end: usize,
}

/// JMS whitespace: space, horizontal tab, form feed and line terminators.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0c' | '\n' | '\r')
}

/// Java identifier start/part characters, approximated with Unicode classes.
fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '$'
}

fn is_ident_part(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

pub(super) fn tokenize(input: &str) -> Result<Vec<Token>, SelectorError> {
    let mut tokens = Vec::new();
    let mut rest = input.trim_start_matches(is_space);
    while let Some(first) = rest.chars().next() {
        let start = input.len() - rest.len();
        let (next, tok) = match first {
            '\'' => quoted(rest, '\'')
                .map(|(next, text)| (next, Tok::Str(text.into())))
                .ok_or(SelectorError::UnterminatedString {
                    column: column(input, start),
                })?,
            // Double-quoted identifiers are an ActiveMQ extension; they let STOMP
            // clients name headers such as "content-type" that JMS cannot spell.
            '"' => quoted(rest, '"')
                .map(|(next, text)| (next, Tok::Ident(text.into())))
                .ok_or(SelectorError::UnterminatedString {
                    column: column(input, start),
                })?,
            c if c.is_ascii_digit()
                || (c == '.' && rest.get(1..).is_some_and(starts_with_digit)) =>
            {
                number(input, start, rest)?
            }
            c if is_ident_start(c) => {
                let end = rest.find(|c| !is_ident_part(c)).unwrap_or(rest.len());
                let (word, next) = rest.split_at(end);
                let tok = Kw::from_word(word).map_or_else(|| Tok::Ident(word.into()), Tok::Kw);
                (next, tok)
            }
            _ => match punct(rest) {
                Ok((next, tok)) => (next, tok),
                Err(_) => {
                    return Err(SelectorError::InvalidCharacter {
                        ch: first,
                        column: column(input, start),
                    })
                }
            },
        };
        let end = input.len() - next.len();
        tokens.push(Token { tok, start, end });
        rest = next.trim_start_matches(is_space);
    }
    Ok(tokens)
}

fn starts_with_digit(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit())
}

/// A literal enclosed in `quote`, where a doubled quote stands for one.
/// Returns the rest of the input and the unescaped text, or `None` when the
/// closing quote is missing.
fn quoted(s: &str, quote: char) -> Option<(&str, String)> {
    let body = s.strip_prefix(quote)?;
    let mut text = String::new();
    let mut chars = body.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != quote {
            text.push(c);
        } else if chars.peek().is_some_and(|&(_, next)| next == quote) {
            text.push(quote);
            chars.next();
        } else {
            return body.get(i + c.len_utf8()..).map(|rest| (rest, text));
        }
    }
    None
}

fn punct(s: &str) -> IResult<&str, Tok> {
    alt((
        |s| tag("<>")(s).map(|(r, _)| (r, Tok::Ne)),
        |s| tag("<=")(s).map(|(r, _)| (r, Tok::Le)),
        |s| tag(">=")(s).map(|(r, _)| (r, Tok::Ge)),
        |s| one_of("<>=(),+-*/")(s).map(|(r, c)| (r, single(c))),
    ))(s)
}

fn single(c: char) -> Tok {
    match c {
        '<' => Tok::Lt,
        '>' => Tok::Gt,
        '=' => Tok::Eq,
        '(' => Tok::LParen,
        ')' => Tok::RParen,
        ',' => Tok::Comma,
        '+' => Tok::Plus,
        '-' => Tok::Minus,
        '*' => Tok::Star,
        _ => Tok::Slash,
    }
}

/// Java literal syntax: `0x1F`, `017` (octal), `42`, `42L`, `1.5`, `.5`,
/// `1e3`, `2.5E-2`, `1.0f`. Signs are unary operators, not part of the literal.
fn number<'a>(input: &str, start: usize, s: &'a str) -> Result<(&'a str, Tok), SelectorError> {
    let invalid = |end: usize, reason: &'static str| SelectorError::InvalidNumber {
        text: input.get(start..start + end).unwrap_or_default().into(),
        column: column(input, start),
        reason,
    };
    let (rest, tok) = if let Ok((rest, digits)) = hex(s) {
        let value = u64::from_str_radix(digits, 16)
            .map_err(|_| invalid(s.len() - rest.len(), "out of range"))?;
        // Like Java, a 64-bit hex literal may spell a negative long (0xFFFFFFFFFFFFFFFF is -1).
        (rest, Tok::Int(value as i64))
    } else if let Ok((rest, text)) = approximate(s) {
        let value: f64 = text
            .parse()
            .map_err(|_| invalid(s.len() - rest.len(), "not a number"))?;
        let rest = rest.strip_prefix(['f', 'F', 'd', 'D']).unwrap_or(rest);
        (rest, Tok::Float(value))
    } else {
        let (rest, digits) = digit1::<_, ()>(s).map_err(|_| invalid(1, "not a number"))?;
        let used = s.len() - rest.len();
        if let Some(rest) = rest.strip_prefix(['f', 'F', 'd', 'D']) {
            // Java's `2D`/`2f`: digits with a floating suffix, always decimal.
            let value: f64 = digits.parse().map_err(|_| invalid(used, "not a number"))?;
            (rest, Tok::Float(value))
        } else {
            let value = if digits.len() > 1 && digits.starts_with('0') {
                octal(digits).map_err(|reason| invalid(used, reason))?
            } else {
                digits.parse().map_err(|_| invalid(used, "out of range"))?
            };
            (
                rest.strip_prefix(['l', 'L']).unwrap_or(rest),
                Tok::Int(value),
            )
        }
    };
    // `12abc` or `0x1G` is one bad literal, not a number followed by a name.
    if rest.starts_with(|c: char| is_ident_part(c) || c == '.') {
        let bad = rest
            .find(|c: char| !is_ident_part(c) && c != '.')
            .unwrap_or(rest.len());
        return Err(invalid(s.len() - rest.len() + bad, "malformed literal"));
    }
    Ok((rest, tok))
}

fn octal(digits: &str) -> Result<i64, &'static str> {
    if digits.bytes().any(|b| b > b'7') {
        return Err("octal literal with a digit above 7");
    }
    i64::from_str_radix(digits, 8).map_err(|_| "out of range")
}

fn hex(s: &str) -> IResult<&str, &str> {
    let (rest, digits) = preceded(tag_no_case("0x"), hex_digit1)(s)?;
    let (rest, _) = opt(one_of("lL"))(rest)?;
    Ok((rest, digits))
}

/// A literal with a decimal point or an exponent (or both).
fn approximate(s: &str) -> IResult<&str, &str> {
    let exponent = |s| recognize(tuple((one_of("eE"), opt(one_of("+-")), digit1)))(s);
    alt((
        recognize(tuple((digit1, char('.'), digit0, opt(exponent)))),
        recognize(pair(preceded(char('.'), digit1), opt(exponent))),
        recognize(pair(digit1, exponent)),
    ))(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s)
            .map(|t| t.into_iter().map(|t| t.tok).collect())
            .unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn keywords_are_case_insensitive_identifiers_are_not() {
        assert_eq!(
            toks("and Or NOT between in Like escape iS null True FALSE Color color"),
            vec![
                Tok::Kw(Kw::And),
                Tok::Kw(Kw::Or),
                Tok::Kw(Kw::Not),
                Tok::Kw(Kw::Between),
                Tok::Kw(Kw::In),
                Tok::Kw(Kw::Like),
                Tok::Kw(Kw::Escape),
                Tok::Kw(Kw::Is),
                Tok::Kw(Kw::Null),
                Tok::Kw(Kw::True),
                Tok::Kw(Kw::False),
                Tok::Ident("Color".into()),
                Tok::Ident("color".into()),
            ]
        );
    }

    #[test]
    fn identifiers_may_hold_dollar_underscore_digits_and_unicode() {
        assert_eq!(
            toks("$a _b c1 élan ANDROID"),
            vec![
                Tok::Ident("$a".into()),
                Tok::Ident("_b".into()),
                Tok::Ident("c1".into()),
                Tok::Ident("élan".into()),
                Tok::Ident("ANDROID".into()),
            ]
        );
    }

    #[test]
    fn strings_unescape_doubled_quotes() {
        assert_eq!(toks("'it''s'"), vec![Tok::Str("it's".into())]);
        assert_eq!(toks("''''"), vec![Tok::Str("'".into())]);
        assert_eq!(toks("''"), vec![Tok::Str("".into())]);
        assert_eq!(toks("'a\"b'"), vec![Tok::Str("a\"b".into())]);
        assert_eq!(toks("\"my-header\""), vec![Tok::Ident("my-header".into())]);
    }

    #[test]
    fn exact_numerics() {
        assert_eq!(toks("57"), vec![Tok::Int(57)]);
        assert_eq!(toks("57L 57l"), vec![Tok::Int(57), Tok::Int(57)]);
        assert_eq!(toks("0"), vec![Tok::Int(0)]);
        assert_eq!(toks("0x1F 0XffL"), vec![Tok::Int(31), Tok::Int(255)]);
        assert_eq!(toks("017"), vec![Tok::Int(15)]);
        assert_eq!(toks("0xFFFFFFFFFFFFFFFF"), vec![Tok::Int(-1)]);
        assert_eq!(toks("9223372036854775807"), vec![Tok::Int(i64::MAX)]);
    }

    #[test]
    fn approximate_numerics() {
        assert_eq!(toks("7E3"), vec![Tok::Float(7000.0)]);
        assert_eq!(toks("57.9E2"), vec![Tok::Float(5790.0)]);
        assert_eq!(toks("7."), vec![Tok::Float(7.0)]);
        assert_eq!(toks(".5"), vec![Tok::Float(0.5)]);
        assert_eq!(toks("2.5e-1"), vec![Tok::Float(0.25)]);
        assert_eq!(toks("1.5f 2D"), vec![Tok::Float(1.5), Tok::Float(2.0)]);
    }

    #[test]
    fn operators() {
        assert_eq!(
            toks("<> <= >= < > = ( ) , + - * /"),
            vec![
                Tok::Ne,
                Tok::Le,
                Tok::Ge,
                Tok::Lt,
                Tok::Gt,
                Tok::Eq,
                Tok::LParen,
                Tok::RParen,
                Tok::Comma,
                Tok::Plus,
                Tok::Minus,
                Tok::Star,
                Tok::Slash,
            ]
        );
        assert_eq!(
            toks("a<>-1"),
            vec![Tok::Ident("a".into()), Tok::Ne, Tok::Minus, Tok::Int(1)]
        );
    }

    #[test]
    fn spans_are_byte_offsets() {
        let tokens = tokenize("  a = 'x'").unwrap();
        let spans: Vec<_> = tokens.iter().map(|t| (t.start, t.end)).collect();
        assert_eq!(spans, vec![(2, 3), (4, 5), (6, 9)]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert_eq!(
            tokenize("a = 'open"),
            Err(SelectorError::UnterminatedString { column: 5 })
        );
        assert_eq!(
            tokenize("a ! b"),
            Err(SelectorError::InvalidCharacter { ch: '!', column: 3 })
        );
        assert!(matches!(
            tokenize("x = 09"),
            Err(SelectorError::InvalidNumber { column: 5, .. })
        ));
        assert!(matches!(
            tokenize("x = 12abc"),
            Err(SelectorError::InvalidNumber { column: 5, .. })
        ));
        assert!(matches!(
            tokenize("x = 99999999999999999999"),
            Err(SelectorError::InvalidNumber {
                reason: "out of range",
                ..
            })
        ));
        assert!(matches!(
            tokenize("x = 1.2.3"),
            Err(SelectorError::InvalidNumber { .. })
        ));
        assert!(matches!(
            tokenize("x = 1e"),
            Err(SelectorError::InvalidNumber { .. })
        ));
        assert!(matches!(
            tokenize("x = 0x"),
            Err(SelectorError::InvalidNumber { .. })
        ));
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(
            tokenize("'é' # 1"),
            Err(SelectorError::InvalidCharacter { ch: '#', column: 5 })
        );
    }
}
