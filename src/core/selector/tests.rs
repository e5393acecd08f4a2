//! Behaviour of whole selectors against messages.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::core::message::{Message, Value};

fn message(props: &[(&str, Value)]) -> Message {
    Message {
        properties: props
            .iter()
            .map(|(k, v)| (Arc::<str>::from(*k), v.clone()))
            .collect(),
        ..Message::default()
    }
}

fn s(text: &str) -> Value {
    Value::String(text.into())
}

/// A message with one property of each type.
fn sample() -> Message {
    message(&[
        ("color", s("red")),
        ("weight", Value::Double(3.5)),
        ("count", Value::Int(10)),
        ("flag", Value::Bool(true)),
        ("price", s("12.5")),
        ("qty", s("7")),
        ("word", s("it's")),
        ("blob", Value::Binary(bytes::Bytes::from_static(b"x"))),
        ("nothing", Value::Null),
    ])
}

fn check(selector: &str, m: &Message) -> bool {
    Selector::parse(selector)
        .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
        .matches(m)
}

#[track_caller]
fn yes(selector: &str) {
    assert!(check(selector, &sample()), "expected a match: {selector}");
}

#[track_caller]
fn no(selector: &str) {
    assert!(!check(selector, &sample()), "expected no match: {selector}");
}

fn err(selector: &str) -> SelectorError {
    match Selector::parse(selector) {
        Ok(_) => panic!("{selector:?} parsed"),
        Err(e) => e,
    }
}

#[test]
fn string_equality() {
    yes("color = 'red'");
    yes("'red' = color");
    no("color = 'Red'");
    yes("color <> 'blue'");
    no("color <> 'red'");
    yes("word = 'it''s'");
}

#[test]
fn numeric_comparisons() {
    yes("count = 10");
    yes("count <> 11");
    yes("count > 9 AND count >= 10 AND count < 11 AND count <= 10");
    no("count > 10");
    no("count < 10");
    yes("weight > 3");
    yes("weight = 3.5");
    yes("weight < 35E-1 + 1");
}

#[test]
fn int_and_float_promote() {
    yes("count = 10.0");
    yes("count < 10.5");
    yes("count / 4 = 2");
    yes("count / 4.0 = 2.5");
    yes("weight * 2 = 7");
}

#[test]
fn arithmetic() {
    yes("count + 5 = 15");
    yes("count - 15 = -5");
    yes("count * 3 = 30");
    yes("-count = -10");
    yes("+count = 10");
    yes("- -count = 10");
    yes("count * -1 < 0");
    // Integer division by zero has no value; float division follows IEEE.
    no("count / 0 = 0");
    no("NOT (count / 0 = 0)");
    yes("weight / 0 > 1000000");
    // Overflow continues in floating point instead of wrapping.
    yes("9223372036854775807 * 2 > 1.8E19");
    yes("-(-9223372036854775807 - 1) > 0");
}

#[test]
fn precedence_multiplication_before_addition() {
    yes("2 + 3 * 4 = 14");
    yes("(2 + 3) * 4 = 20");
    yes("10 - 4 - 3 = 3");
    yes("24 / 4 / 2 = 3");
    yes("2 * 3 + 4 * 5 = 26");
    yes("-2 * 3 = -6");
}

#[test]
fn precedence_not_and_or() {
    // AND binds tighter than OR.
    yes("color = 'blue' AND count = 1 OR count = 10");
    yes("count = 10 OR color = 'blue' AND count = 1");
    no("(count = 10 OR color = 'blue') AND count = 1");
    // NOT binds tighter than AND.
    yes("NOT color = 'blue' AND count = 10");
    no("NOT (color = 'red' AND count = 10)");
    yes("NOT NOT color = 'red'");
    // NOT applies to the whole comparison, not to its left operand.
    yes("NOT count = 11");
}

#[test]
fn three_valued_logic() {
    // A missing property makes a comparison unknown, and NOT keeps it unknown.
    no("missing = 1");
    no("NOT missing = 1");
    no("missing <> 1");
    no("nothing = 1");
    // unknown AND false = false, so NOT of it is true.
    yes("NOT (missing = 1 AND count = 0)");
    // unknown AND true = unknown.
    no("missing = 1 AND count = 10");
    no("NOT (missing = 1 AND count = 10)");
    // unknown OR true = true; unknown OR false = unknown.
    yes("missing = 1 OR count = 10");
    no("missing = 1 OR count = 0");
    no("NOT (missing = 1 OR count = 0)");
    // Arithmetic with unknown is unknown.
    no("missing + 1 > 0");
    no("NOT (missing + 1 > 0)");
    no("NULL = NULL");
}

#[test]
fn unlike_types_compare_false() {
    no("color = 1");
    yes("NOT color = 1");
    no("color <> 1");
    no("flag = 1");
    no("count = 'red'");
    no("count = TRUE");
    no("blob = 'x'");
    no("blob = 1");
    // A string literal is never read as a number, even when it spells one.
    no("'10' = 10");
}

#[test]
fn string_properties_read_as_numbers_like_activemq() {
    yes("price > 10");
    yes("price = 12.5");
    yes("qty = 7");
    yes("qty + 1 = 8");
    yes("qty * 2 > price");
    yes("qty BETWEEN 5 AND 8");
    yes("qty IN (6, 7)");
    no("color > 10");
    no("NOT color > 10 AND color > 10");
    // Still strings among strings.
    yes("qty = '7'");
    no("qty = '7.0'");
}

#[test]
fn string_properties_read_as_booleans() {
    let m = message(&[("on", s("TRUE")), ("off", s("false")), ("odd", s("yes"))]);
    assert!(check("on = TRUE", &m));
    assert!(check("on", &m));
    assert!(check("NOT off", &m));
    assert!(check("off = FALSE", &m));
    assert!(!check("odd = TRUE", &m));
    assert!(!check("odd", &m));
    assert!(!check("NOT odd", &m));
}

#[test]
fn booleans() {
    yes("flag");
    yes("flag = TRUE");
    yes("flag <> false");
    no("NOT flag");
    yes("TRUE");
    no("FALSE");
    yes("flag = (count = 10)");
    yes("(count = 10) = TRUE");
    // Booleans have no order.
    let m = message(&[("a", Value::Bool(true)), ("b", Value::Bool(false))]);
    assert!(!check("a > b", &m));
    assert!(check("a <> b", &m));
}

#[test]
fn between() {
    yes("count BETWEEN 5 AND 10");
    yes("count BETWEEN 10 AND 15");
    no("count BETWEEN 11 AND 15");
    yes("count NOT BETWEEN 11 AND 15");
    no("count NOT BETWEEN 1 AND 15");
    yes("weight BETWEEN 3 AND 4");
    yes("count BETWEEN 2 * 4 AND count + 1");
    // The AND inside BETWEEN does not end the expression.
    yes("count BETWEEN 5 AND 10 AND color = 'red'");
    no("missing BETWEEN 1 AND 2");
    no("missing NOT BETWEEN 1 AND 2");
    no("color BETWEEN 1 AND 2");
    // Unknown bounds: false if the known side already fails, else unknown.
    no("count BETWEEN missing AND 5");
    yes("count NOT BETWEEN missing AND 5");
    no("count NOT BETWEEN missing AND 50");
}

#[test]
fn in_lists() {
    yes("color IN ('red', 'green')");
    yes("color IN ('red')");
    no("color IN ('blue', 'green')");
    yes("color NOT IN ('blue', 'green')");
    no("color NOT IN ('red', 'green')");
    no("missing IN ('a')");
    no("missing NOT IN ('a')");
    yes("count IN (1, 10, 100)");
    yes("JMSPriority IN (0, 4)");
    yes("count IN (-1, 10)");
    yes("weight IN (3.5)");
    no("count IN ('10')");
    yes("word IN ('it''s')");
}

#[test]
fn like_patterns() {
    yes("color LIKE 'r%'");
    yes("color LIKE '%e%'");
    yes("color LIKE 'r_d'");
    yes("color LIKE '___'");
    no("color LIKE '__'");
    no("color LIKE 'R%'");
    yes("color NOT LIKE 'b%'");
    no("color NOT LIKE 'r%'");
    no("missing LIKE '%'");
    no("missing NOT LIKE '%'");
    no("count LIKE '1%'");
    let m = message(&[("path", s("50%_off")), ("under", s("a_b"))]);
    assert!(check(r"path LIKE '50\%\_%' ESCAPE '\'", &m));
    assert!(check("path LIKE '50!%!_off' ESCAPE '!'", &m));
    assert!(!check("path LIKE '50!%!_of' ESCAPE '!'", &m));
    assert!(check("under LIKE '%!_%' escape '!'", &m));
    assert!(!check("path LIKE 'a!_b' ESCAPE '!'", &m));
    assert!(check("path LIKE '50''%' OR path LIKE '50%'", &m));
}

#[test]
fn is_null() {
    yes("missing IS NULL");
    yes("nothing IS NULL");
    no("color IS NULL");
    yes("color IS NOT NULL");
    no("missing IS NOT NULL");
    yes("blob IS NOT NULL");
    yes("missing + 1 IS NULL");
    yes("JMSCorrelationID IS NULL");
}

#[test]
fn keywords_case_insensitive_identifiers_case_sensitive() {
    yes("color = 'red' and count = 10 oR false");
    yes("color iN ('red') AnD color lIkE 'r%' and count between 1 AND 10");
    yes("Color IS null");
    yes("COLOR is NULL");
}

#[test]
fn quoted_identifiers() {
    let m = message(&[("content-type", s("text/plain")), ("a\"b", s("x"))]);
    assert!(check("\"content-type\" = 'text/plain'", &m));
    assert!(check("\"a\"\"b\" = 'x'", &m));
}

#[test]
fn literals() {
    yes("0x0A = count");
    yes("012 = count");
    yes("10L = count");
    yes("1.0E1 = count");
    yes("100e-1 = count");
    yes(".5 * 20 = count");
    yes("5. * 2 = count");
}

#[test]
fn jms_headers_map_to_message_fields() {
    let m = Message {
        message_id: Some("ID:1".into()),
        correlation_id: Some("corr".into()),
        priority: 7,
        timestamp: 1_700_000_000_000,
        subject: Some("order".into()),
        durable: true,
        group_id: Some("g1".into()),
        group_seq: Some(3),
        expires_at: Some(1_800_000_000_000),
        properties: vec![("JMSPriority".into(), Value::Int(1))].into(),
        ..Message::default()
    };
    for selector in [
        "JMSMessageID = 'ID:1'",
        "JMSCorrelationID = 'corr'",
        "JMSPriority = 7",
        "JMSPriority > 6",
        "JMSTimestamp = 1700000000000",
        "JMSType = 'order'",
        "JMSDeliveryMode = 'PERSISTENT'",
        "JMSXGroupID = 'g1'",
        "JMSXGroupSeq = 3",
        "JMSExpiration = 1800000000000",
        "JMSExpiration > JMSTimestamp",
    ] {
        assert!(check(selector, &m), "{selector}");
    }
    // Header names are case-sensitive: anything else is a property.
    assert!(check("jmspriority IS NULL", &m));

    let plain = Message::default();
    for selector in [
        "JMSMessageID IS NULL",
        "JMSType IS NULL",
        "JMSDeliveryMode = 'NON_PERSISTENT'",
        "JMSExpiration = 0",
        "JMSPriority = 0",
        "JMSXGroupID IS NULL",
        "JMSXGroupSeq IS NULL",
    ] {
        assert!(check(selector, &plain), "{selector}");
    }
}

#[test]
fn headers_missing_from_fields_fall_back_to_properties() {
    let m = message(&[
        ("JMSType", s("invoice")),
        ("JMSXGroupID", s("g2")),
        ("JMSXGroupSeq", s("4")),
    ]);
    assert!(check("JMSType = 'invoice'", &m));
    assert!(check("JMSXGroupID = 'g2'", &m));
    assert!(check("JMSXGroupSeq = 4", &m));
    // The JMSType property wins over the subject.
    let m = Message {
        subject: Some("subject".into()),
        ..m
    };
    assert!(check("JMSType = 'invoice'", &m));
}

#[test]
fn empty_selector_is_no_selector() {
    assert_eq!(Selector::parse("").unwrap_err(), SelectorError::Empty);
    assert_eq!(Selector::parse("  \t\n").unwrap_err(), SelectorError::Empty);
    assert!(Selector::parse_optional(" ").unwrap().is_none());
    assert!(Selector::parse_optional("a = 1").unwrap().is_some());
    assert!(Selector::parse_optional("a =").is_err());
}

#[test]
fn is_shareable_between_consumers_and_tasks() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Selector>();
    shareable::<SelectorError>();
}

#[test]
fn keeps_its_text() {
    let selector: Selector = "a = 1".parse().unwrap();
    assert_eq!(selector.as_str(), "a = 1");
    assert_eq!(selector.to_string(), "a = 1");
}

#[test]
fn errors_say_what_and_where() {
    assert_eq!(
        err("color = AND 1").to_string(),
        "selector: unexpected token 'AND' at column 9, expected an expression"
    );
    assert_eq!(
        err("a = 1 b"),
        SelectorError::UnexpectedToken {
            token: "b".into(),
            column: 7,
            expected: "AND, OR or end of selector"
        }
    );
    assert_eq!(
        err("a = "),
        SelectorError::UnexpectedEnd {
            expected: "an expression"
        }
    );
    assert_eq!(
        err("(a = 1"),
        SelectorError::UnexpectedEnd { expected: "')'" }
    );
    assert_eq!(
        err("a = 1)"),
        SelectorError::UnexpectedToken {
            token: ")".into(),
            column: 6,
            expected: "AND, OR or end of selector"
        }
    );
    assert_eq!(
        err("a = b = c"),
        SelectorError::UnexpectedToken {
            token: "=".into(),
            column: 7,
            expected: "AND, OR or end of selector"
        }
    );
    assert_eq!(err("a BETWEEN 1 OR 2").column(), Some(13));
    assert!(matches!(
        err("a NOT = 1"),
        SelectorError::UnexpectedToken {
            expected: "BETWEEN, IN or LIKE",
            ..
        }
    ));
    assert!(matches!(
        err("a IS 1"),
        SelectorError::UnexpectedToken {
            expected: "NULL",
            ..
        }
    ));
    assert!(matches!(
        err("a IN ()"),
        SelectorError::UnexpectedToken { column: 7, .. }
    ));
    assert!(matches!(
        err("a IN ('x' 'y')"),
        SelectorError::UnexpectedToken { column: 11, .. }
    ));
    assert!(matches!(
        err("a IN (b)"),
        SelectorError::UnexpectedToken { column: 7, .. }
    ));
    assert!(matches!(
        err("a IN 'x'"),
        SelectorError::UnexpectedToken { column: 6, .. }
    ));
    assert!(matches!(
        err("a LIKE b"),
        SelectorError::UnexpectedToken { column: 8, .. }
    ));
    assert_eq!(
        err("a LIKE 'x' ESCAPE 'ab'"),
        SelectorError::InvalidEscape { column: 19 }
    );
    assert_eq!(
        err("a LIKE 'x' ESCAPE ''"),
        SelectorError::InvalidEscape { column: 19 }
    );
    assert!(matches!(
        err("a LIKE 'x!' ESCAPE '!'"),
        SelectorError::InvalidPattern { column: 8, .. }
    ));
    assert_eq!(
        err("a = 'x"),
        SelectorError::UnterminatedString { column: 5 }
    );
    assert_eq!(
        err("a == 1"),
        SelectorError::UnexpectedToken {
            token: "=".into(),
            column: 4,
            expected: "an expression"
        }
    );
    assert_eq!(
        err("a != 1"),
        SelectorError::InvalidCharacter { ch: '!', column: 3 }
    );
}

#[test]
fn errors_for_types_visible_at_parse_time() {
    let mismatch = |selector: &str| match err(selector) {
        SelectorError::TypeMismatch { expected, column } => (expected, column),
        other => panic!("{selector:?}: {other}"),
    };
    assert_eq!(mismatch("1 + 2"), ("a boolean expression", 1));
    assert_eq!(mismatch("'abc'"), ("a boolean expression", 1));
    assert_eq!(mismatch("a = 1 AND 'x'"), ("a boolean expression", 11));
    assert_eq!(mismatch("NOT 5"), ("a boolean expression", 5));
    assert_eq!(mismatch("'a' + 1 = 2"), ("a numeric expression", 1));
    assert_eq!(mismatch("1 + TRUE = 2"), ("a numeric expression", 5));
    assert_eq!(mismatch("-'a' = 1"), ("a numeric expression", 2));
    assert_eq!(mismatch("'a' < 'b'"), ("a numeric expression", 1));
    assert_eq!(mismatch("x < TRUE"), ("a numeric expression", 5));
    assert_eq!(mismatch("5 LIKE 'x'"), ("a string expression", 1));
    assert_eq!(mismatch("'a' BETWEEN 1 AND 2"), ("a numeric expression", 1));
    assert_eq!(mismatch("JMSPriority LIKE '1'"), ("a string expression", 1));
    assert_eq!(mismatch("JMSType > 1"), ("a numeric expression", 1));
}

#[test]
fn error_columns_count_characters() {
    assert_eq!(err("ünï = AND").column(), Some(7));
}

#[test]
fn long_tokens_are_shortened_in_errors() {
    let name = "x".repeat(100);
    let e = err(&format!("a = 1 {name}"));
    let SelectorError::UnexpectedToken { token, .. } = e else {
        panic!("{e}");
    };
    assert_eq!(token, format!("{}...", "x".repeat(40)));
}

#[test]
fn hostile_input_is_bounded() {
    let long = format!("a = '{}'", "x".repeat(MAX_LEN));
    assert!(matches!(err(&long), SelectorError::TooLong { .. }));
    let limit = format!("a = '{}'", "x".repeat(MAX_LEN - 6));
    assert!(Selector::parse(&limit).is_ok());

    let parens = format!("{}a = 1{}", "(".repeat(3000), ")".repeat(3000));
    assert!(matches!(err(&parens), SelectorError::TooDeep { .. }));
    let nots = format!("{}a = 1", "NOT ".repeat(2000));
    assert!(matches!(err(&nots), SelectorError::TooDeep { .. }));
    let minus = format!("{}1 = 1", "-".repeat(4000));
    assert!(matches!(err(&minus), SelectorError::TooDeep { .. }));
    let sums = format!("{}1 = 1", "1 + ".repeat(1000));
    assert!(matches!(err(&sums), SelectorError::TooDeep { .. }));

    // Wide is fine: AND/OR chains do not deepen the tree.
    let wide = vec!["count = 10"; 500].join(" OR ");
    assert!(check(&wide, &sample()));
    let nested = format!("{}count = 10{}", "(".repeat(30), ")".repeat(30));
    assert!(check(&nested, &sample()));
}

/// Fragments that make syntactically interesting selectors far more often
/// than arbitrary text does.
fn fragment() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a",
        "color",
        "count",
        "price",
        "JMSPriority",
        "JMSType",
        "\"q-x\"",
        "'red'",
        "'%_'",
        "''",
        "'",
        "\"",
        "1",
        "0",
        "-",
        "+",
        "*",
        "/",
        "2.5",
        ".5e3",
        "0x1F",
        "017",
        "9L",
        "1e",
        "(",
        ")",
        ",",
        "=",
        "<>",
        "<",
        "<=",
        ">",
        ">=",
        "AND",
        "OR",
        "NOT",
        "BETWEEN",
        "IN",
        "LIKE",
        "ESCAPE",
        "'!'",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        " ",
        "é",
        "!",
        "#",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn parse_never_panics_on_arbitrary_text(text in ".{0,200}") {
        if let Ok(selector) = Selector::parse(&text) {
            selector.matches(&sample());
        }
    }

    #[test]
    fn parse_and_match_never_panic_on_token_soup(parts in prop::collection::vec(fragment(), 0..40)) {
        let text = parts.join(" ");
        let result = Selector::parse(&text);
        if let Ok(selector) = &result {
            selector.matches(&sample());
            selector.matches(&Message::default());
        }
        if let Err(e) = result {
            // Every error that names a place names one inside the selector.
            if let Some(column) = e.column() {
                prop_assert!(column >= 1 && column <= text.chars().count() + 1);
            }
        }
    }

    #[test]
    fn like_agrees_with_a_reference_matcher(
        pattern in "[ab%_]{0,10}",
        text in "[abé]{0,10}",
    ) {
        let selector = Selector::parse(&format!("p LIKE '{pattern}'")).unwrap();
        let m = message(&[("p", s(&text))]);
        prop_assert_eq!(selector.matches(&m), reference_like(&chars(&pattern), &chars(&text)));
    }
}

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

/// Obviously-correct exponential matcher to check the fast one against.
fn reference_like(pattern: &[char], text: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some(('%', rest)) => (0..=text.len()).any(|i| reference_like(rest, &text[i..])),
        Some(('_', rest)) => !text.is_empty() && reference_like(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && reference_like(rest, &text[1..]),
    }
}
