//! `config/weir.toml` is the configuration reference: it must document every
//! key the parser accepts, and nothing it does not. The accepted keys come
//! from the serde types themselves (the field lists serde hands to
//! `deserialize_struct`), so a key added to `raw.rs` without a line in the
//! reference fails here, and so does a documented key that was renamed or
//! removed.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use serde::de::{self, Deserialize, Visitor};

use super::raw::{
    RawAcceptors, RawBroker, RawConfig, RawConnectionFactory, RawExtraAcceptor, RawHttp, RawLimits,
    RawPermissions, RawQueue, RawSecurity, RawSettings, RawStore, RawTls, RawUser, RawWebSocket,
};

const REFERENCE: &str = include_str!("../../config/weir.toml");

/// A deserializer that answers nothing but notes the field names of the
/// struct asked for.
struct FieldProbe<'a>(&'a Cell<&'static [&'static str]>);

impl<'de> de::Deserializer<'de> for FieldProbe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.set(fields);
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The keys serde accepts for `T`.
fn accepted<T: for<'de> Deserialize<'de>>() -> BTreeSet<&'static str> {
    let fields = Cell::new(&[][..]);
    let _ = T::deserialize(FieldProbe(&fields));
    let fields = fields.get();
    assert!(
        !fields.is_empty(),
        "{} is not a struct",
        std::any::type_name::<T>()
    );
    fields.iter().copied().collect()
}

/// Each section of the file (as the reference names it, with `*` for a
/// name the user picks) and the keys it accepts.
fn sections() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let mut queue = accepted::<RawQueue>();
    queue.insert("name");
    BTreeMap::from([
        ("broker", accepted::<RawBroker>()),
        ("acceptors", accepted::<RawAcceptors>()),
        ("acceptors.extra", accepted::<RawExtraAcceptor>()),
        ("http", accepted::<RawHttp>()),
        ("websocket", accepted::<RawWebSocket>()),
        ("store", accepted::<RawStore>()),
        ("limits", accepted::<RawLimits>()),
        ("users", accepted::<RawUser>()),
        ("security", accepted::<RawSecurity>()),
        ("security.permissions.*", accepted::<RawPermissions>()),
        ("tls", accepted::<RawTls>()),
        ("queue_defaults", accepted::<RawSettings>()),
        ("address_settings.*", accepted::<RawSettings>()),
        ("queues", queue),
        ("connection_factories.*", accepted::<RawConnectionFactory>()),
        ("grouping_handler", BTreeSet::new()),
    ])
}

/// The name of a section header line, commented out or not:
/// `[address_settings."orders.#"]` is `address_settings.*`.
fn section_of(line: &str) -> Option<String> {
    let line = line.trim_start_matches('#').trim_start();
    let inner = line.strip_prefix("[[").or_else(|| line.strip_prefix('['))?;
    let name = &inner[..inner.find(']')?];
    let mut words = name.splitn(2, '.');
    let head = words.next()?;
    Some(match (head, words.next()) {
        ("address_settings" | "connection_factories", Some(_)) => format!("{head}.*"),
        ("security", Some(rest)) if rest.starts_with("permissions.") => {
            "security.permissions.*".to_owned()
        }
        (_, Some(rest)) => format!("{head}.{rest}"),
        (_, None) => head.to_owned(),
    })
}

/// The key a line sets, commented out or not: `# batch_window = "2ms"`.
fn key_of(line: &str) -> Option<&str> {
    let line = line.trim_start_matches('#').trim_start();
    let (key, _) = line.split_once('=')?;
    let key = key.trim_end();
    let is_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    is_key.then_some(key)
}

/// Every key the reference shows, by section (top-level sections as keys of "").
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in REFERENCE.lines() {
        if let Some(name) = section_of(line) {
            let top = name.split('.').next().unwrap_or_default().to_owned();
            found.entry(String::new()).or_default().insert(top);
            // A table inside a section is one of its keys: [[acceptors.extra]],
            // [security.permissions."orders.#"].
            if let Some((outer, inner)) = name.split_once('.').filter(|(_, inner)| *inner != "*") {
                let inner = inner.strip_suffix(".*").unwrap_or(inner);
                found
                    .entry(outer.to_owned())
                    .or_default()
                    .insert(inner.to_owned());
            }
            found.entry(name.clone()).or_default();
            section = name;
        } else if let Some(key) = key_of(line) {
            found
                .entry(section.clone())
                .or_default()
                .insert(key.to_owned());
        }
    }
    found
}

#[test]
fn every_section_of_the_file_is_documented() {
    let top = accepted::<RawConfig>();
    let documented = documented();
    let shown: BTreeSet<&str> = documented[""].iter().map(String::as_str).collect();
    assert_eq!(
        shown, top,
        "sections in config/weir.toml vs sections the parser accepts"
    );
    let known: BTreeSet<&str> = sections().keys().copied().collect();
    let listed: BTreeSet<&str> = documented
        .keys()
        .filter(|k| !k.is_empty())
        .map(String::as_str)
        .collect();
    assert_eq!(
        listed, known,
        "sections of config/weir.toml vs this test's list"
    );
}

#[test]
fn every_accepted_key_is_documented_and_every_documented_key_accepted() {
    let documented = documented();
    for (section, accepted) in sections() {
        let shown: BTreeSet<&str> = documented
            .get(section)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let unknown: Vec<_> = shown.difference(&accepted).collect();
        assert!(
            unknown.is_empty(),
            "[{section}] in config/weir.toml shows keys the parser refuses: {unknown:?}"
        );
        // Patterns and declared queues show a few keys as examples; the
        // full list is under [queue_defaults].
        if matches!(section, "address_settings.*" | "queues") {
            continue;
        }
        let missing: Vec<_> = accepted.difference(&shown).collect();
        assert!(
            missing.is_empty(),
            "[{section}] keys missing from config/weir.toml: {missing:?}"
        );
    }
}

#[test]
fn the_probe_sees_a_new_key() {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Two {
        one: u8,
        two: u8,
    }
    assert_eq!(accepted::<Two>(), BTreeSet::from(["one", "two"]));
    assert_eq!(
        section_of(r#"[address_settings."orders.#"]"#).as_deref(),
        Some("address_settings.*")
    );
    assert_eq!(section_of("# [[users]]").as_deref(), Some("users"));
    assert_eq!(
        section_of(r#"# [security.permissions."orders.#"]"#).as_deref(),
        Some("security.permissions.*")
    );
    assert_eq!(key_of(r#"# batch_window = "2ms""#), Some("batch_window"));
    assert_eq!(key_of("# Example (default 2ms): x"), None);
}
