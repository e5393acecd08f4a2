//! `/api/schedule`: the delayed messages of the running broker, live. List them by
//! queue and due-time range, count them per due-time bucket for a chart, view one,
//! and cancel, reschedule or edit it before it is due. Every change is durable.
//!
//! Reading needs `view` (on the queue, or on `weir.management` for every queue);
//! changing needs `manage` on the message's queue.

use super::auth::Caller;
use super::error::ApiError;
use super::query::{number, pairs};
use crate::core::manage::MANAGEMENT_ADDRESS;
use crate::core::schedule::{
    refuse_field, HeaderEdit, HeaderEditError, MessageEdit, PropertyEntry, Schedule,
    ScheduleEditError, SchedulePage, ScheduleQuery, ScheduledDetail, ScheduledSummary, Timeline,
    EDITABLE_HEADERS, MAX_TIMELINE_BUCKETS,
};
use crate::core::security::Permission;
use axum::extract::{Path, RawQuery};
use axum::Json;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most messages one page may hold.
const MAX_LIMIT: usize = 1000;
/// Most body bytes a listing shows per message.
const MAX_PREVIEW: usize = 64 * 1024;
const DEFAULT_BUCKETS: usize = 60;

impl From<ScheduleEditError> for ApiError {
    fn from(e: ScheduleEditError) -> Self {
        let message = e.to_string();
        match e {
            ScheduleEditError::NotFound(_) | ScheduleEditError::UnknownQueue(_) => {
                ApiError::NotFound(message)
            }
            ScheduleEditError::AlreadyDue(_) => ApiError::Conflict(message),
            ScheduleEditError::OutOfRange { .. } | ScheduleEditError::BadId(_) => {
                ApiError::BadRequest(message)
            }
            ScheduleEditError::Store(_) => ApiError::Internal(message),
        }
    }
}

fn schedule(caller: &Caller) -> Result<Arc<Schedule>, ApiError> {
    caller
        .broker
        .schedule()
        .cloned()
        .ok_or_else(|| ApiError::Unavailable("this broker runs without a delay schedule".into()))
}

/// Reading one queue's schedule needs `view` on it; every queue's, on `weir.management`.
fn may_view(caller: &Caller, queue: Option<&str>) -> Result<(), ApiError> {
    caller.may(queue.unwrap_or(MANAGEMENT_ADDRESS), Permission::View)
}

fn epoch_ms(key: &str, value: &str) -> Result<u64, ApiError> {
    value.parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "{key}: '{value}' is not a time in milliseconds since the epoch"
        ))
    })
}

fn list_query(raw: Option<&str>) -> Result<ScheduleQuery, ApiError> {
    let mut q = ScheduleQuery {
        limit: ScheduleQuery::DEFAULT_LIMIT,
        preview_bytes: ScheduleQuery::DEFAULT_PREVIEW,
        ..ScheduleQuery::default()
    };
    for (key, value) in pairs(raw, &["queue", "from", "to", "cursor", "limit", "preview"])? {
        match key.as_str() {
            "queue" => q.queue = Some(value),
            "from" => q.from_ms = Some(epoch_ms(&key, &value)?),
            "to" => q.to_ms = Some(epoch_ms(&key, &value)?),
            "cursor" => q.cursor = Some(value),
            "limit" => q.limit = number(&key, &value, 1, MAX_LIMIT)?,
            _ => q.preview_bytes = number(&key, &value, 0, MAX_PREVIEW)?,
        }
    }
    Ok(q)
}

/// `GET /api/schedule?queue=&from=&to=&cursor=&limit=&preview=`
pub async fn list(caller: Caller, RawQuery(raw): RawQuery) -> Result<Json<SchedulePage>, ApiError> {
    let query = list_query(raw.as_deref())?;
    may_view(&caller, query.queue.as_deref())?;
    Ok(Json(schedule(&caller)?.list_page(&query).await?))
}

/// `GET /api/schedule/timeline?queue=&from=&to=&buckets=`: how many fall due when.
pub async fn timeline(caller: Caller, RawQuery(raw): RawQuery) -> Result<Json<Timeline>, ApiError> {
    let (mut queue, mut from, mut to, mut buckets) = (None, None, None, DEFAULT_BUCKETS);
    for (key, value) in pairs(raw.as_deref(), &["queue", "from", "to", "buckets"])? {
        match key.as_str() {
            "queue" => queue = Some(value),
            "from" => from = Some(epoch_ms(&key, &value)?),
            "to" => to = Some(epoch_ms(&key, &value)?),
            _ => buckets = number(&key, &value, 1, MAX_TIMELINE_BUCKETS)?,
        }
    }
    let (Some(from), Some(to)) = (from, to) else {
        return Err(ApiError::BadRequest(
            "from and to (epoch ms) are required: the range the chart spans".into(),
        ));
    };
    if to <= from {
        return Err(ApiError::BadRequest(format!(
            "to ({to}) must be after from ({from})"
        )));
    }
    may_view(&caller, queue.as_deref())?;
    let timeline = schedule(&caller)?
        .timeline(queue.as_deref(), from..to, buckets)
        .await?;
    Ok(Json(timeline))
}

/// One delayed message in full; the body as text when it is UTF-8, else base64.
#[derive(Serialize)]
pub struct Detail {
    #[serde(flatten)]
    detail: ScheduledDetail,
    body_base64: Option<String>,
}

/// `GET /api/schedule/{id}`
pub async fn view(caller: Caller, Path(id): Path<String>) -> Result<Json<Detail>, ApiError> {
    let detail = schedule(&caller)?.view(&id).await?;
    caller.may(&detail.summary.queue, Permission::View)?;
    Ok(Json(Detail {
        body_base64: detail.body_base64(),
        detail,
    }))
}

/// Checks `manage` on the queue of message `id` before it is changed.
async fn manageable(caller: &Caller, id: &str) -> Result<Arc<Schedule>, ApiError> {
    let schedule = schedule(caller)?;
    let queue = schedule.view(id).await?.summary.queue;
    caller.may(&queue, Permission::Manage)?;
    Ok(schedule)
}

/// `DELETE /api/schedule/{id}`: it never arrives. 409 when it is already due.
pub async fn cancel(
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduledSummary>, ApiError> {
    let schedule = manageable(&caller, &id).await?;
    Ok(Json(schedule.cancel(&id).await?))
}

/// A new due time: at an instant, or after a delay from now.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDue {
    due_ms: Option<u64>,
    delay_ms: Option<u64>,
}

/// `POST /api/schedule/{id}/reschedule` with `{"due_ms": N}` or `{"delay_ms": N}`.
/// The message gets a new id (the due time is part of it), returned here.
pub async fn reschedule(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Json<NewDue>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<ScheduledSummary>, ApiError> {
    let schedule = manageable(&caller, &id).await?;
    let Json(due) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let due_ms = match (due.due_ms, due.delay_ms) {
        (Some(at), None) => at,
        (None, Some(delay)) => crate::core::message::now_ms().saturating_add(delay),
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of due_ms (epoch ms) and delay_ms (from now)".into(),
            ))
        }
    };
    Ok(Json(schedule.reschedule(&id, due_ms).await?))
}

impl From<HeaderEditError> for ApiError {
    fn from(e: HeaderEditError) -> Self {
        ApiError::BadField {
            field: e.field,
            message: e.reason,
        }
    }
}

/// An edit as the API takes it: `properties` (every user property), the body
/// as `body` (text) or `body_base64`, and standard headers under `headers` or
/// at the top level (`{"priority": 7}`). `null` clears a header. Fields no
/// edit changes (`message_id`, `queue`, ...) are refused with 400 naming them.
fn parse_edit(body: serde_json::Value, now_ms: u64) -> Result<(MessageEdit, bool), ApiError> {
    use serde_json::Value;
    let Value::Object(fields) = body else {
        return Err(ApiError::BadRequest(
            "an edit is a JSON object: properties, body or body_base64, headers".into(),
        ));
    };
    let mut headers = serde_json::Map::new();
    let (mut properties, mut text, mut base64_body) = (None, None, None);
    let mut header = |name: String, value: Value| -> Result<(), ApiError> {
        if headers.insert(name.clone(), value).is_some() {
            return Err(ApiError::BadField {
                field: name,
                message: "given twice (at the top level and under headers)".into(),
            });
        }
        Ok(())
    };
    for (field, value) in fields {
        match field.as_str() {
            "properties" => {
                properties = Some(serde_json::from_value::<Vec<PropertyEntry>>(value).map_err(
                    |e| ApiError::BadField {
                        field: field.clone(),
                        message: e.to_string(),
                    },
                )?)
            }
            "body" | "body_base64" => {
                let Value::String(s) = value else {
                    return Err(ApiError::BadField {
                        field,
                        message: "must be a string".into(),
                    });
                };
                match field.as_str() {
                    "body" => text = Some(s),
                    _ => base64_body = Some(s),
                }
            }
            "headers" => {
                let Value::Object(map) = value else {
                    return Err(ApiError::BadField {
                        field,
                        message: "must be an object of header names to values".into(),
                    });
                };
                for (name, value) in map {
                    header(name, value)?;
                }
            }
            name if EDITABLE_HEADERS.contains(&name) => header(field, value)?,
            other => return Err(refuse_field(other).into()),
        }
    }
    let body = match (text, base64_body) {
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "give body or body_base64, not both".into(),
            ))
        }
        (Some(text), None) => Some(bytes::Bytes::from(text)),
        (None, Some(encoded)) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(encoded.as_bytes())
                .map(bytes::Bytes::from)
                .map_err(|e| ApiError::BadField {
                    field: "body_base64".into(),
                    message: e.to_string(),
                })?,
        ),
        (None, None) => None,
    };
    let headers = HeaderEdit::from_json(&headers, now_ms)?;
    let changes = body.is_some() || properties.is_some() || !headers.is_empty();
    Ok((
        MessageEdit {
            properties,
            body,
            headers,
        },
        changes,
    ))
}

/// `PATCH /api/schedule/{id}`: edits it before it is due; it keeps its id and time.
pub async fn edit(
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Json<serde_json::Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<ScheduledSummary>, ApiError> {
    // Who may not change the message learns that first, not what the body lacks.
    let schedule = manageable(&caller, &id).await?;
    let Json(body) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let (change, changes) = parse_edit(body, crate::core::message::now_ms())?;
    if !changes {
        return Err(ApiError::BadRequest(
            "nothing to change: give properties, body or body_base64, or headers".into(),
        ));
    }
    Ok(Json(schedule.edit(&id, change).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_are_checked_and_decoded() {
        let q = list_query(Some(
            "queue=orders%2Eeu&from=10&to=20&limit=5&cursor=1%3A2%3A3",
        ))
        .unwrap();
        assert_eq!(q.queue.as_deref(), Some("orders.eu"));
        assert_eq!((q.from_ms, q.to_ms, q.limit), (Some(10), Some(20), 5));
        assert_eq!(q.cursor.as_deref(), Some("1:2:3"));
        for bad in [
            "limit=0",
            "limit=abc",
            "from=yesterday",
            "colour=red",
            "queue=a&queue=b",
        ] {
            assert!(
                matches!(list_query(Some(bad)), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
        let q = list_query(None).unwrap();
        assert_eq!(q.limit, ScheduleQuery::DEFAULT_LIMIT);
    }
}
