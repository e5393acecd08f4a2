//! `/v2/queues`: create with metadata, list, get, delete, stats, metadata
//! update (JSON patch) and purge.

use super::context::Ctx;
use super::error::{Result, ZaqarError};
use super::limits;
use super::metadata::is_reserved;
use super::names;
use super::render;
use crate::core::message::now_ms;
use crate::core::security::Permission;
use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The media type Zaqar requires for a metadata update.
const JSON_PATCH: &str = "application/openstack-messaging-v2.0-json-patch";

pub fn parse_json(body: &[u8]) -> Result<Value> {
    serde_json::from_slice(body).map_err(|e| ZaqarError::Malformed {
        title: "Malformed JSON",
        description: format!("Request body could not be parsed: {e}"),
    })
}

#[derive(Deserialize)]
pub struct ListParams {
    marker: Option<String>,
    limit: Option<String>,
    detailed: Option<String>,
}

pub fn flag(value: &Option<String>, name: &str) -> Result<bool> {
    match value.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => Ok(false),
        Some("true" | "1" | "yes" | "on") => Ok(true),
        Some("false" | "0" | "no" | "off") => Ok(false),
        Some(other) => Err(ZaqarError::BadRequest(format!(
            "The value of the \"{name}\" query parameter must be a boolean, not '{other}'."
        ))),
    }
}

pub fn number(value: &Option<String>, name: &str, min: u64, max: u64) -> Result<Option<u64>> {
    let Some(text) = value else { return Ok(None) };
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(ZaqarError::BadRequest(format!(
            "The value of the \"{name}\" query parameter must be an integer from {min} to {max}."
        ))),
    }
}

pub async fn list(ctx: Ctx, Query(params): Query<ListParams>) -> Result<Json<Value>> {
    let limit = number(
        &params.limit,
        "limit",
        1,
        limits::MAX_QUEUES_PER_PAGE as u64,
    )?
    .map_or(limits::DEFAULT_QUEUES_PER_PAGE, |n| n as usize);
    let detailed = flag(&params.detailed, "detailed")?;
    let project = ctx.project.as_deref();
    let mut names: Vec<String> = ctx
        .broker
        .queue_names()
        .iter()
        .filter_map(|weir| names::zaqar_name(project, weir).map(str::to_owned))
        .filter(|name| params.marker.as_deref().is_none_or(|m| name.as_str() > m))
        .filter(|name| {
            ctx.may(&names::weir_name(project, name), Permission::View)
                .is_ok()
        })
        .collect();
    names.sort_unstable();
    names.truncate(limit);
    let queues: Vec<Value> = names
        .iter()
        .map(|name| {
            let mut q = json!({"name": name, "href": format!("/v2/queues/{name}")});
            if detailed {
                let metadata = ctx
                    .broker
                    .queue(&names::weir_name(project, name))
                    .map(|q| super::metadata::get(&q))
                    .unwrap_or_default();
                q["metadata"] = Value::Object(super::metadata::shown(metadata));
            }
            q
        })
        .collect();
    let links = match names.last() {
        Some(last) => json!([{
            "rel": "next",
            "href": format!("/v2/queues?marker={last}&limit={limit}&detailed={detailed}"),
        }]),
        None => json!([]),
    };
    Ok(Json(json!({"queues": queues, "links": links})))
}

pub async fn create(ctx: Ctx, Path(queue): Path<String>, body: Bytes) -> Result<Response> {
    let weir = ctx.weir_name(&queue)?;
    let metadata = match body.iter().all(u8::is_ascii_whitespace) {
        true => Map::new(),
        false => match parse_json(&body)? {
            Value::Object(m) => m,
            _ => {
                return Err(ZaqarError::BadRequest(
                    "Queue metadata must be a JSON object.".into(),
                ))
            }
        },
    };
    super::metadata::rules_of(&metadata)?;
    let (_, created) = ctx.broker.create_queue_as(&weir, &ctx.principal)?;
    // As in Zaqar, a PUT of an existing queue leaves its metadata alone.
    let status = match created {
        crate::core::manage::Created::New => {
            if !metadata.is_empty() {
                super::metadata::set(&ctx.broker, &ctx.principal, &weir, metadata).await?;
            }
            StatusCode::CREATED
        }
        crate::core::manage::Created::Existing => StatusCode::NO_CONTENT,
    };
    Ok((status, [(header::LOCATION, format!("/v2/queues/{queue}"))]).into_response())
}

pub async fn get(ctx: Ctx, Path(queue): Path<String>) -> Result<Json<Value>> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::View)?;
    let Some(q) = ctx.broker.queue(&weir) else {
        return Err(ZaqarError::NotFound(format!(
            "Queue {queue} does not exist."
        )));
    };
    Ok(Json(Value::Object(super::metadata::shown(
        super::metadata::get(&q),
    ))))
}

pub async fn delete(ctx: Ctx, Path(queue): Path<String>) -> Result<StatusCode> {
    let weir = ctx.weir_name(&queue)?;
    if ctx.broker.queue(&weir).is_none() {
        return Ok(StatusCode::NO_CONTENT);
    }
    ctx.broker.release_claims_on(&weir);
    ctx.broker.delete_queue_as(&weir, &ctx.principal)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn update(
    ctx: Ctx,
    Path(queue): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>> {
    let weir = ctx.weir_name(&queue)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with(JSON_PATCH) {
        return Err(ZaqarError::BadRequest(format!(
            "Accepted media type for PATCH: {JSON_PATCH}."
        )));
    }
    ctx.may(&weir, Permission::Manage)?;
    let Some(q) = ctx.broker.queue(&weir) else {
        return Err(ZaqarError::NotFound(format!(
            "Queue {queue} does not exist."
        )));
    };
    let Value::Array(changes) = parse_json(&body)? else {
        return Err(ZaqarError::BadRequest(
            "The request body must be a JSON array of patch operations.".into(),
        ));
    };
    let mut metadata = super::metadata::get(&q);
    for change in &changes {
        apply(&mut metadata, change)?;
    }
    super::metadata::set(&ctx.broker, &ctx.principal, &weir, metadata.clone()).await?;
    Ok(Json(Value::Object(super::metadata::shown(metadata))))
}

/// One JSON-patch operation on `/metadata/KEY`: add, replace or remove. As
/// in Zaqar, a reserved key may be replaced or removed while unset: a GET
/// shows it with its default, and python-zaqarclient's `metadata(new)`
/// replaces or removes what the GET showed.
fn apply(metadata: &mut Map<String, Value>, change: &Value) -> Result<()> {
    let bad = |what: &str| ZaqarError::BadRequest(what.to_owned());
    let op = change
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("Each patch operation needs an \"op\"."))?;
    let path = change
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("Each patch operation needs a \"path\"."))?;
    let key = path
        .strip_prefix("/metadata/")
        .filter(|k| !k.is_empty() && !k.contains('/'))
        .ok_or_else(|| bad("The path of a patch operation must be /metadata/KEY."))?;
    match op {
        "add" | "replace" => {
            let value = change
                .get("value")
                .ok_or_else(|| bad("Operations add and replace need a \"value\"."))?;
            if op == "replace" && !metadata.contains_key(key) && !is_reserved(key) {
                return Err(ZaqarError::Conflict(format!(
                    "The metadata key '{key}' to replace does not exist."
                )));
            }
            metadata.insert(key.to_owned(), value.clone());
        }
        "remove" => {
            if metadata.remove(key).is_none() && !is_reserved(key) {
                return Err(ZaqarError::Conflict(format!(
                    "The metadata key '{key}' to remove does not exist."
                )));
            }
        }
        other => {
            return Err(bad(&format!(
                "The patch operation '{other}' is not supported: use add, replace or remove."
            )))
        }
    }
    Ok(())
}

pub async fn stats(ctx: Ctx, Path(queue): Path<String>) -> Result<Json<Value>> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::View)?;
    let Some(q) = ctx.broker.queue(&weir) else {
        return Err(ZaqarError::NotFound(format!(
            "Queue {queue} does not exist."
        )));
    };
    let counts = q.stats();
    let free = counts.ready + counts.paged + counts.waiting;
    let total = free + counts.in_flight;
    let mut messages = json!({"free": free, "claimed": counts.in_flight, "total": total});
    let base = format!("/v2/queues/{queue}");
    let now = now_ms();
    let first = q.peek(0, 1, true);
    let about = |p: &crate::core::queue::Peeked| {
        json!({
            "id": render::id_of(&p.message, p.seq),
            "href": format!("{base}/messages/{}", render::id_of(&p.message, p.seq)),
            "age": now.saturating_sub(p.message.timestamp) / 1000,
            "created": iso8601(p.message.timestamp),
        })
    };
    if let Some(oldest) = first.first() {
        messages["oldest"] = about(oldest);
        let mut newest = oldest.clone();
        let mut after = oldest.seq;
        loop {
            let page = q.peek(after, 256, true);
            match page.last() {
                Some(last) => {
                    after = last.seq;
                    newest = last.clone();
                }
                None => break,
            }
        }
        messages["newest"] = about(&newest);
    }
    Ok(Json(json!({"messages": messages})))
}

/// `2026-12-03T16:53:33Z` from epoch milliseconds.
fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub async fn purge(ctx: Ctx, Path(queue): Path<String>, body: Bytes) -> Result<StatusCode> {
    let weir = ctx.weir_name(&queue)?;
    if !body.iter().all(u8::is_ascii_whitespace) {
        let doc = parse_json(&body)?;
        if let Some(types) = doc.get("resource_types") {
            let ok = types.as_array().is_some_and(|a| {
                a.iter()
                    .all(|t| matches!(t.as_str(), Some("messages" | "subscriptions")))
            });
            if !ok {
                return Err(ZaqarError::BadRequest(
                    "resource_types may list only \"messages\" and \"subscriptions\".".into(),
                ));
            }
            if !types
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t == "messages"))
            {
                return Ok(StatusCode::NO_CONTENT);
            }
        }
    }
    let q = ctx.broker.manage_queue_as(&weir, &ctx.principal)?;
    ctx.broker.release_claims_on(&weir);
    let (_, done) = q.clear();
    crate::core::Receipt::from(done).wait().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_iso_8601() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::iso8601(1_796_316_813_000), "2026-12-03T16:53:33Z");
    }
}
