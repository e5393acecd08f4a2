//! `/api/queues/{name}/messages`: browse a queue's messages (paged, in queue
//! order, whatever their state), view or delete one, move or copy some to
//! another queue (by id or by selector: the dead-letter retry), and send a test
//! message.
//!
//! Reading needs `view` at the queue; changing needs `manage` at every queue the
//! change touches (and `send` for a test message).

use super::auth::Caller;
use super::error::ApiError;
use super::query::{number, pairs};
use crate::core::message::{now_ms, Message, Value};
use crate::core::message_ops::{MessageOpError, Selection, Transfer, Transferred};
use crate::core::queue::{MessageState, Queue, QueuedMessage};
use crate::core::schedule::PropertyEntry;
use crate::core::security::Permission;
use crate::core::CoreError;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::Json;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
const DEFAULT_PREVIEW: usize = 256;
const MAX_PREVIEW: usize = 64 * 1024;
/// Ids one move or copy may name.
const MAX_IDS: usize = 100_000;

impl From<MessageOpError> for ApiError {
    fn from(e: MessageOpError) -> Self {
        let message = e.to_string();
        match e {
            MessageOpError::Core(core) => ApiError::from(core),
            MessageOpError::NoMessage { .. } => ApiError::NotFound(message),
            MessageOpError::InFlight { .. } | MessageOpError::NotWrittenYet { .. } => {
                ApiError::Conflict(message)
            }
            MessageOpError::SameQueue(_) | MessageOpError::Selector(_) => {
                ApiError::BadRequest(message)
            }
        }
    }
}

/// A core error for this caller (401 for an anonymous refusal), and the errors
/// of a send (a delay out of range, a full queue) as the client's fault.
fn refusal(caller: &Caller, e: MessageOpError) -> ApiError {
    match e {
        MessageOpError::Core(core) => core_refusal(caller, core),
        other => other.into(),
    }
}

fn core_refusal(caller: &Caller, e: CoreError) -> ApiError {
    match e {
        CoreError::DelayTooLong { .. } | CoreError::InvalidDelay(_) => {
            ApiError::BadRequest(e.to_string())
        }
        CoreError::AddressFull { .. } => ApiError::Conflict(e.to_string()),
        e => caller.refusal(e),
    }
}

#[derive(Serialize)]
pub struct MessagePage {
    items: Vec<MessageView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    next: Option<String>,
}

/// One message of a queue.
#[derive(Serialize)]
pub struct MessageView {
    id: u64,
    /// `ready`, `paged` (waiting on disk), `in_flight` or `redelivering`.
    state: &'static str,
    /// The consumer holding it, when in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer: Option<u64>,
    /// When it is delivered again (epoch ms), when redelivering.
    #[serde(skip_serializing_if = "Option::is_none")]
    redeliver_at_ms: Option<u64>,
    priority: u8,
    delivery_count: u32,
    durable: bool,
    group_id: Option<String>,
    group_seq: Option<i32>,
    /// When the broker accepted it (epoch ms).
    enqueued_ms: u64,
    expires_ms: Option<u64>,
    message_id: Option<String>,
    correlation_id: Option<String>,
    reply_to: Option<String>,
    content_type: Option<String>,
    subject: Option<String>,
    user_id: Option<String>,
    /// User properties (STOMP headers, AMQP application properties).
    properties: Vec<PropertyEntry>,
    /// Body size in bytes.
    size: usize,
    #[serde(flatten)]
    body: Body,
}

/// A body or its first bytes: as text when they are UTF-8, else base64.
#[derive(Serialize)]
struct Body {
    /// `text` or `base64`: how `body` is written.
    body_encoding: &'static str,
    body: String,
    /// `body` is only the first bytes.
    body_truncated: bool,
}

impl Body {
    fn of(bytes: &[u8], max: usize) -> Body {
        let shown = &bytes[..bytes.len().min(max)];
        let text = match std::str::from_utf8(shown) {
            Ok(text) => Some(text),
            // Cut in the middle of a character: the text before it.
            Err(e) if e.error_len().is_none() && shown.len() < bytes.len() => {
                std::str::from_utf8(&shown[..e.valid_up_to()]).ok()
            }
            Err(_) => None,
        };
        match text {
            Some(text) => Body {
                body_encoding: "text",
                body_truncated: text.len() < bytes.len(),
                body: text.to_owned(),
            },
            None => Body {
                body_encoding: "base64",
                body: BASE64.encode(shown),
                body_truncated: shown.len() < bytes.len(),
            },
        }
    }
}

impl MessageView {
    fn of(found: &QueuedMessage, preview: usize) -> MessageView {
        let m = &found.message;
        let (state, consumer, redeliver_at_ms) = match found.state {
            MessageState::Ready => ("ready", None, None),
            MessageState::Paged => ("paged", None, None),
            MessageState::InFlight { consumer } => ("in_flight", Some(consumer), None),
            MessageState::Redelivering { due_ms } => ("redelivering", None, Some(due_ms)),
        };
        let text = |field: &Option<Arc<str>>| field.as_deref().map(str::to_owned);
        MessageView {
            id: found.seq,
            state,
            consumer,
            redeliver_at_ms,
            priority: m.priority,
            delivery_count: found.delivery_count,
            durable: m.durable,
            group_id: text(&m.group_id),
            group_seq: m.group_seq,
            enqueued_ms: m.timestamp,
            expires_ms: m.expires_at,
            message_id: text(&m.message_id),
            correlation_id: text(&m.correlation_id),
            reply_to: text(&m.reply_to),
            content_type: text(&m.content_type),
            subject: text(&m.subject),
            user_id: text(&m.user_id),
            properties: PropertyEntry::all_of(m),
            size: m.body.len(),
            body: Body::of(&m.body, preview),
        }
    }
}

fn viewable(caller: &Caller, name: &str) -> Result<Arc<Queue>, ApiError> {
    caller.may(name, Permission::View)?;
    caller
        .broker
        .queue(name)
        .ok_or_else(|| ApiError::NotFound(format!("no queue named '{name}'")))
}

fn message_id(id: &str) -> Result<u64, ApiError> {
    id.parse()
        .map_err(|_| ApiError::BadRequest(format!("id: '{id}' is not a message id (a number)")))
}

/// `GET /api/queues/{name}/messages?limit=&cursor=&preview=`
pub async fn browse(
    caller: Caller,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<MessagePage>, ApiError> {
    let (mut limit, mut after, mut preview) = (DEFAULT_LIMIT, 0, DEFAULT_PREVIEW);
    for (key, value) in pairs(raw.as_deref(), &["limit", "cursor", "preview"])? {
        match key.as_str() {
            "limit" => limit = number(&key, &value, 1, MAX_LIMIT)?,
            "cursor" => {
                after = value.parse().map_err(|_| {
                    ApiError::BadRequest(format!("cursor: '{value}' is not a page's next"))
                })?
            }
            _ => preview = number(&key, &value, 0, MAX_PREVIEW)?,
        }
    }
    let queue = viewable(&caller, &name)?;
    // Under the queue's lock, reading from disk: off the connection workers.
    let page = tokio::task::spawn_blocking(move || queue.messages_page(after, limit))
        .await
        .map_err(|e| ApiError::Internal(format!("browsing failed: {e}")))?;
    Ok(Json(MessagePage {
        items: page
            .items
            .iter()
            .map(|m| MessageView::of(m, preview))
            .collect(),
        next: page.next.map(|n| n.to_string()),
    }))
}

/// `GET /api/queues/{name}/messages/{id}`: the whole body.
pub async fn view(
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<MessageView>, ApiError> {
    let id = message_id(&id)?;
    let queue = viewable(&caller, &name)?;
    let found = tokio::task::spawn_blocking(move || queue.find_message(id))
        .await
        .map_err(|e| ApiError::Internal(format!("reading the message failed: {e}")))?
        .ok_or_else(|| ApiError::NotFound(format!("queue '{name}' has no message {id}")))?;
    Ok(Json(MessageView::of(&found, usize::MAX)))
}

/// `DELETE /api/queues/{name}/messages/{id}`: 204 once its record is deleted.
pub async fn delete(
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = message_id(&id)?;
    let receipt = caller
        .broker
        .delete_message_as(&name, id, &caller.principal)
        .map_err(|e| refusal(&caller, e))?;
    receipt
        .wait()
        .await
        .map_err(|e| ApiError::Internal(format!("deleted, but deleting the record failed: {e}")))?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of a move or copy: a target, and ids or a selector.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferRequest {
    to: String,
    ids: Option<Vec<u64>>,
    selector: Option<String>,
}

#[derive(Serialize)]
pub struct SkippedView {
    id: u64,
    /// `not_found`, `in_flight` or `not_written_yet`.
    reason: &'static str,
}

fn selection(request: &TransferRequest) -> Result<Selection, ApiError> {
    match (&request.ids, &request.selector) {
        (Some(ids), None) if ids.len() > MAX_IDS => Err(ApiError::BadRequest(format!(
            "ids: {} given, at most {MAX_IDS} at once",
            ids.len()
        ))),
        (Some(ids), None) => Ok(Selection::Ids(ids.clone())),
        (None, Some(selector)) => Ok(Selection::Selector(selector.clone())),
        _ => Err(ApiError::BadRequest(
            "give exactly one of ids (a list of message ids) and selector".into(),
        )),
    }
}

async fn transfer(
    caller: Caller,
    name: String,
    body: Result<Json<TransferRequest>, JsonRejection>,
    how: Transfer,
) -> Result<(Transferred, Vec<SkippedView>), ApiError> {
    // Who may not change the queue learns that first, not what the body lacks.
    caller.may(&name, Permission::Manage)?;
    let Json(request) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let selection = selection(&request)?;
    let done = caller
        .broker
        .transfer_messages_as(&name, &request.to, selection, how, &caller.principal)
        .await
        .map_err(|e| refusal(&caller, e))?;
    let skipped = done
        .skipped
        .iter()
        .map(|s| SkippedView {
            id: s.id,
            reason: s.reason.name(),
        })
        .collect();
    Ok((done, skipped))
}

#[derive(Serialize)]
pub struct Moved {
    moved: usize,
    /// Ids given that were not moved, and why.
    skipped: Vec<SkippedView>,
}

#[derive(Serialize)]
pub struct Copied {
    copied: usize,
    skipped: Vec<SkippedView>,
}

/// `POST /api/queues/{name}/messages/move` with `{"to", "ids"}` or `{"to", "selector"}`.
pub async fn move_to(
    caller: Caller,
    Path(name): Path<String>,
    body: Result<Json<TransferRequest>, JsonRejection>,
) -> Result<Json<Moved>, ApiError> {
    let (done, skipped) = transfer(caller, name, body, Transfer::Move).await?;
    Ok(Json(Moved {
        moved: done.count,
        skipped,
    }))
}

/// `POST /api/queues/{name}/messages/copy`, as move; the source keeps them.
pub async fn copy_to(
    caller: Caller,
    Path(name): Path<String>,
    body: Result<Json<TransferRequest>, JsonRejection>,
) -> Result<Json<Copied>, ApiError> {
    let (done, skipped) = transfer(caller, name, body, Transfer::Copy).await?;
    Ok(Json(Copied {
        copied: done.count,
        skipped,
    }))
}

/// A test message. Properties are JSON scalars: a string, a whole number, a
/// number with a fraction, a boolean or null.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestMessage {
    body: Option<String>,
    body_base64: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, serde_json::Value>,
    group: Option<String>,
    priority: Option<u8>,
    /// Delivered this many ms from now (through the delay schedule).
    delay_ms: Option<u64>,
    /// Expires this many ms from now.
    ttl_ms: Option<u64>,
    /// Survives a restart; true unless given.
    durable: Option<bool>,
    content_type: Option<String>,
}

#[derive(Serialize)]
pub struct Sent {
    queue: String,
    /// Due later than now: it waits in the delay schedule.
    delayed: bool,
}

fn property(name: &str, value: serde_json::Value) -> Result<Value, ApiError> {
    Ok(match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::String(s) => Value::String(s.into()),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(f)) => Value::Double(f),
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "properties.{name}: {n} does not fit a 64-bit number"
                )))
            }
        },
        _ => {
            return Err(ApiError::BadRequest(format!(
                "properties.{name}: a string, number, boolean or null, not a list or object"
            )))
        }
    })
}

fn test_message(name: &str, request: TestMessage) -> Result<Message, ApiError> {
    let body = match (request.body, request.body_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "give body or body_base64, not both".into(),
            ))
        }
        (Some(text), None) => bytes::Bytes::from(text),
        (None, Some(encoded)) => BASE64
            .decode(encoded.as_bytes())
            .map(bytes::Bytes::from)
            .map_err(|e| ApiError::BadRequest(format!("body_base64: {e}")))?,
        (None, None) => bytes::Bytes::new(),
    };
    let now = now_ms();
    let mut message = Message::new(Arc::from(name), body, now);
    for (key, value) in request.properties {
        let value = property(&key, value)?;
        message.properties.push((Arc::from(key.as_str()), value));
    }
    if let Some(priority) = request.priority {
        if priority > 9 {
            return Err(ApiError::BadRequest(format!(
                "priority: {priority} is not from 0 to 9"
            )));
        }
        message.priority = priority;
    }
    message.group_id = request.group.map(Arc::from);
    message.content_type = request.content_type.map(Arc::from);
    message.durable = request.durable.unwrap_or(true);
    // A delay of 0 given is "now", overriding the queue's default delay as a
    // producer's own delay does; none given leaves the default to apply.
    message.due_at = request.delay_ms.map(|d| now.saturating_add(d));
    message.expires_at = request.ttl_ms.map(|t| now.saturating_add(t));
    Ok(message)
}

/// `POST /api/queues/{name}/messages`: 201 once it is accepted (and durable).
pub async fn send(
    caller: Caller,
    Path(name): Path<String>,
    body: Result<Json<TestMessage>, JsonRejection>,
) -> Result<(StatusCode, Json<Sent>), ApiError> {
    caller.may(&name, Permission::Manage)?;
    let Json(request) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let message = test_message(&name, request)?;
    let (receipt, delayed) = caller
        .broker
        .send_test_message_as(&name, message, &caller.principal)
        .map_err(|e| core_refusal(&caller, e))?;
    receipt.wait().await.map_err(|e| core_refusal(&caller, e))?;
    Ok((
        StatusCode::CREATED,
        Json(Sent {
            queue: name,
            delayed,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_text_when_it_can_be_and_base64_otherwise() {
        let b = Body::of(b"hello world", 5);
        assert_eq!(
            (b.body_encoding, b.body.as_str(), b.body_truncated),
            ("text", "hello", true)
        );
        let b = Body::of(b"hello", 100);
        assert_eq!((b.body.as_str(), b.body_truncated), ("hello", false));
        // Cut inside the two bytes of "é": the text before it.
        let b = Body::of("aé".as_bytes(), 2);
        assert_eq!(
            (b.body_encoding, b.body.as_str(), b.body_truncated),
            ("text", "a", true)
        );
        let b = Body::of(&[0xff, 0x00, 0x01], 2);
        assert_eq!(
            (b.body_encoding, b.body.as_str(), b.body_truncated),
            ("base64", "/wA=", true)
        );
    }

    #[test]
    fn a_test_message_is_checked() {
        let parse = |json: &str| -> Result<Message, ApiError> {
            test_message(
                "q",
                serde_json::from_str(json).map_err(|e| ApiError::BadRequest(e.to_string()))?,
            )
        };
        let m = parse(r#"{"body":"hi","properties":{"n":3,"f":1.5,"s":"x","b":true},"group":"g","priority":7,"delay_ms":1000}"#).unwrap();
        assert_eq!(&m.body[..], b"hi");
        assert_eq!(m.property("n"), Some(&Value::Int(3)));
        assert_eq!(m.property("f"), Some(&Value::Double(1.5)));
        assert_eq!(m.group_id.as_deref(), Some("g"));
        assert_eq!(m.priority, 7);
        assert!(m.due_at.is_some() && m.durable);
        for bad in [
            r#"{"body":"a","body_base64":"YQ=="}"#,
            r#"{"body_base64":"!!"}"#,
            r#"{"priority":10}"#,
            r#"{"properties":{"x":[1]}}"#,
            r#"{"colour":"red"}"#,
        ] {
            assert!(matches!(parse(bad), Err(ApiError::BadRequest(_))), "{bad}");
        }
    }
}
