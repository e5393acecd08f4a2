//! Cost of one selector evaluation, the price a consumer with a selector pays
//! per message offered to it.

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use weir::core::message::{Message, Value};
use weir::core::selector::Selector;

const SELECTOR: &str = "color = 'red' AND weight > 2.5 OR JMSPriority > 6";

fn message() -> Message {
    let props: [(&str, Value); 5] = [
        ("region", Value::String("eu-west".into())),
        ("color", Value::String("red".into())),
        ("weight", Value::Double(3.1)),
        ("count", Value::Int(12)),
        ("express", Value::Bool(false)),
    ];
    Message {
        properties: props
            .into_iter()
            .map(|(k, v)| (Arc::<str>::from(k), v))
            .collect(),
        priority: Message::DEFAULT_PRIORITY,
        ..Message::default()
    }
}

fn evaluate(c: &mut Criterion) {
    let selector = Selector::parse(SELECTOR).expect("benchmark selector parses");
    let hit = message();
    assert!(selector.matches(&hit));
    c.bench_function("selector/eval match", |b| {
        b.iter(|| selector.matches(black_box(&hit)))
    });

    // Misses the AND early and must also check the OR's right side.
    let mut miss = message();
    miss.properties.to_mut()[1].1 = Value::String("blue".into());
    assert!(!selector.matches(&miss));
    c.bench_function("selector/eval miss", |b| {
        b.iter(|| selector.matches(black_box(&miss)))
    });

    // A STOMP-style message: every property is text, numbers parsed on compare.
    let mut stomp = message();
    for (_, value) in stomp.properties.to_mut() {
        *value = Value::String(value.to_text().into());
    }
    assert!(selector.matches(&stomp));
    c.bench_function("selector/eval stomp strings", |b| {
        b.iter(|| selector.matches(black_box(&stomp)))
    });

    let like = Selector::parse(
        "region LIKE 'eu-%' AND color IN ('red', 'green') AND count BETWEEN 10 AND 20",
    )
    .expect("LIKE selector parses");
    assert!(like.matches(&hit));
    c.bench_function("selector/eval like in between", |b| {
        b.iter(|| like.matches(black_box(&hit)))
    });
}

fn parse(c: &mut Criterion) {
    c.bench_function("selector/parse", |b| {
        b.iter(|| Selector::parse(black_box(SELECTOR)))
    });
}

criterion_group!(benches, evaluate, parse);
criterion_main!(benches);
