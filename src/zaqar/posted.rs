//! The body of a post, read into its messages: `{"messages": [{"body": …,
//! "ttl": …, "delay": …}, …]}`.
//!
//! Each message's body is stored as serde_json writes it (see
//! [`canonical`](super::canonical)): a body that already is in that form —
//! any client that writes JSON as serde_json does, and every small scalar —
//! is kept as a slice of the request, without a tree per message or a copy.
//! Anything the direct reading does not take (not an object at the top, a
//! repeated key) is read the long way, through a `Value`, whose answers and
//! errors are the reference.

use super::canonical;
use super::error::{Result, ZaqarError};
use super::queues::parse_json;
use axum::body::Bytes;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;

/// One message as posted, before its ttl and delay are checked.
pub struct Posted {
    /// Its body as stored, or `None` when it had no `body` key.
    pub body: Option<Bytes>,
    /// `ttl` and `delay` as sent (`null` as if absent).
    pub ttl: Option<Value>,
    pub delay: Option<Value>,
}

/// The messages of a post body, or Zaqar's 400 saying what is wrong with it.
pub fn read(body: &Bytes) -> Result<Vec<Posted>> {
    let starts_as_object = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if starts_as_object {
        if let Ok(direct) = serde_json::from_slice::<Direct>(body) {
            return direct
                .messages
                .into_iter()
                .map(|m| {
                    Ok(Posted {
                        body: m.body.map(|raw| stored(body, raw)).transpose()?,
                        ttl: m.ttl.filter(|v| !v.is_null()),
                        delay: m.delay.filter(|v| !v.is_null()),
                    })
                })
                .collect();
        }
    }
    read_through_value(body)
}

/// The reference reading.
fn read_through_value(body: &[u8]) -> Result<Vec<Posted>> {
    let doc = parse_json(body)?;
    let Some(Value::Array(posted)) = doc.get("messages") else {
        return Err(ZaqarError::BadRequest(
            "No messages were found in the request body.".into(),
        ));
    };
    posted
        .iter()
        .map(|item| {
            let Value::Object(item) = item else {
                return Err(ZaqarError::BadRequest(
                    "Each message must be a JSON object.".into(),
                ));
            };
            Ok(Posted {
                body: item.get("body").map(encode).transpose()?,
                ttl: item.get("ttl").filter(|v| !v.is_null()).cloned(),
                delay: item.get("delay").filter(|v| !v.is_null()).cloned(),
            })
        })
        .collect()
}

/// The bytes stored for a body the direct reading found in `request`.
fn stored(request: &Bytes, raw: &RawValue) -> Result<Bytes> {
    let text = raw.get().as_bytes();
    if canonical::is_canonical(text) {
        return Ok(request.slice_ref(text));
    }
    let value: Value = serde_json::from_slice(text).map_err(not_json)?;
    encode(&value)
}

fn encode(value: &Value) -> Result<Bytes> {
    serde_json::to_vec(value).map(Bytes::from).map_err(not_json)
}

fn not_json(e: serde_json::Error) -> ZaqarError {
    ZaqarError::BadRequest(format!("Message body is not JSON: {e}"))
}

#[derive(Deserialize)]
struct Direct<'a> {
    #[serde(borrow)]
    messages: Vec<DirectMessage<'a>>,
}

/// A message read straight from the request. Only an object is one (a
/// derived struct would also take an array); a key given twice counts
/// once, the last, as in a `Value`.
struct DirectMessage<'a> {
    body: Option<&'a RawValue>,
    ttl: Option<Value>,
    delay: Option<Value>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Body,
    Ttl,
    Delay,
    #[serde(other)]
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for DirectMessage<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Fields<'a> {
            type Value = DirectMessage<'a>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message object")
            }

            fn visit_map<M: MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Self::Value, M::Error> {
                let mut message = DirectMessage {
                    body: None,
                    ttl: None,
                    delay: None,
                };
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Body => message.body = Some(map.next_value()?),
                        Field::Ttl => message.ttl = Some(map.next_value()?),
                        Field::Delay => message.delay = Some(map.next_value()?),
                        Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(message)
            }
        }
        d.deserialize_map(Fields(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What both readings make of `body`: stored bodies, ttl, delay, or the error.
    fn both(body: &str) -> (String, String) {
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let show = |r: Result<Vec<Posted>>| match r {
            Ok(list) => list
                .iter()
                .map(|p| {
                    format!(
                        "{:?} {:?} {:?}",
                        p.body.as_deref().map(String::from_utf8_lossy),
                        p.ttl,
                        p.delay
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("error: {e:?}"),
        };
        (show(read(&bytes)), show(read_through_value(&bytes)))
    }

    #[test]
    fn the_direct_reading_agrees_with_the_reference_on_every_shape() {
        for body in [
            r#"{"messages":[{"body":{"pad":"xx","seq":1},"ttl":3600}]}"#,
            r#"{"messages": [{"body": {"seq": 1, "pad": "xx"}, "ttl": 60, "delay": 5}]}"#,
            r#" {"messages":[{"body":"a"},{"body":[1,2.5,"\u00e9"]},{"body":null}]}"#,
            r#"{"messages":[{"ttl":60}]}"#,
            r#"{"messages":[{"body":1,"ttl":null,"delay":null,"other":{"x":[1]}}]}"#,
            r#"{"messages":[{"body":1,"body":2}]}"#,
            r#"{"messages":[{"body":1}],"messages":[{"body":2}]}"#,
            r#"{"messages":[[1]]}"#,
            r#"{"messages":[1]}"#,
            r#"{"messages":{"body":1}}"#,
            r#"{"messages":[]}"#,
            r#"{"other":1}"#,
            r#"[{"messages":[{"body":1}]}]"#,
            r#"[[{"body":1}]]"#,
            r#"{"messages":[{"body":1,"ttl":"60"}]}"#,
            r#"{"messages":[{"body":1}"#,
            "",
        ] {
            let (direct, reference) = both(body);
            assert_eq!(direct, reference, "for {body}");
        }
    }

    #[test]
    fn a_canonical_body_is_a_slice_of_the_request_and_others_are_rewritten() {
        let request =
            Bytes::from_static(br#"{"messages":[{"body":{"a":1}},{"body":{"b": 2, "a": 1}}]}"#);
        let posted = read(&request).unwrap();
        let first = posted[0].body.as_ref().unwrap();
        assert_eq!(&first[..], br#"{"a":1}"#);
        let inside = request.as_ptr() as usize..request.as_ptr() as usize + request.len();
        assert!(inside.contains(&(first.as_ptr() as usize)), "no copy");
        assert_eq!(&posted[1].body.as_ref().unwrap()[..], br#"{"a":1,"b":2}"#);
    }
}
