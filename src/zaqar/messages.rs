//! `/v2/queues/{queue}/messages`: post a batch, list, get and delete by ids,
//! pop, and get or delete one (with its claim).

use super::context::Ctx;
use super::error::{Result, ZaqarError};
use super::limits;
use super::posted;
use super::queues::{flag, number};
use super::render::{self, message_json, CLIENT_ID_PROPERTY};
use crate::core::claims::{ClaimError, ClaimTerms};
use crate::core::message::{now_ms, Message, Value as CoreValue};
use crate::core::queue::{Queue, Untaken};
use crate::core::schedule::{
    format_key, PropertyValue, ScheduleEditError, ScheduleQuery, ScheduledMessage,
};
use crate::core::security::Permission;
use crate::core::Receipt;
use axum::body::Bytes;
use axum::extract::{Path, Query, RawQuery};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn base(queue: &str) -> String {
    format!("/v2/queues/{queue}")
}

pub async fn post(ctx: Ctx, Path(queue): Path<String>, body: Bytes) -> Result<Response> {
    let weir = ctx.weir_name(&queue)?;
    let existing = ctx.broker.queue(&weir);
    let rules = existing
        .as_ref()
        .map(|q| super::metadata::rules(q))
        .unwrap_or_default();
    if body.len() > rules.max_messages_post_size {
        return Err(ZaqarError::BadRequest(format!(
            "Message collection size is too large. Max size {}",
            rules.max_messages_post_size
        )));
    }
    let posted = posted::read(&body)?;
    if posted.is_empty() || posted.len() > limits::MAX_MESSAGES_PER_PAGE as usize {
        return Err(ZaqarError::BadRequest(format!(
            "No more than {} messages may be posted at once, and at least one.",
            limits::MAX_MESSAGES_PER_PAGE
        )));
    }
    let now = now_ms();
    let mut messages = Vec::with_capacity(posted.len());
    let ids = render::new_message_ids(posted.len());
    // One of each for the whole batch: every message shares them.
    let address: Arc<str> = Arc::from(weir.as_str());
    let json_type: Arc<str> = Arc::from("application/json");
    let client_id_key: Arc<str> = Arc::from(CLIENT_ID_PROPERTY);
    let client_id = CoreValue::String(Arc::from(ctx.client_id.as_str()));
    for (item, id) in posted.into_iter().zip(&ids) {
        let Some(body) = item.body else {
            return Err(ZaqarError::BadRequest("Missing \"body\" field.".into()));
        };
        let ttl = match &item.ttl {
            None => rules.default_message_ttl,
            Some(v) => in_range(v, "ttl", limits::MIN_MESSAGE_TTL, limits::MAX_MESSAGE_TTL)?,
        };
        // As the delayed-queues seed says (and released Zaqar does): a
        // message's delay counts only on a queue with a default delay.
        let delay_ms = match (rules.default_message_delay_ms, &item.delay) {
            (0, _) => 0,
            (default, None) => default,
            (_, Some(v)) => in_range(v, "delay", 0, limits::MAX_MESSAGE_DELAY)? * 1000,
        };
        let mut message = Message::new(address.clone(), body, now);
        message.message_id = Some(Arc::from(id.as_str()));
        message.content_type = Some(json_type.clone());
        message.durable = true;
        message.expires_at = Some(now + ttl * 1000);
        // Due now when its delay is 0: the queue's own default delay (the same
        // `_default_message_delay`) must not apply to it a second time.
        message.due_at = Some(now + delay_ms);
        message
            .properties
            .push((client_id_key.clone(), client_id.clone()));
        messages.push(Arc::new(message));
    }
    let q = match existing {
        Some(q) => q,
        // Zaqar makes a queue when a message is first posted to it.
        None => ctx.broker.create_queue_as(&weir, &ctx.principal)?.0,
    };
    ctx.may(&weir, Permission::Send)?;
    let mut receipts = Vec::with_capacity(messages.len());
    for result in ctx.broker.publish_all_to(&q, messages) {
        receipts.push(result?);
    }
    // Answered only once every message is on disk.
    Receipt::all(receipts).durability().wait().await?;
    Ok((
        StatusCode::CREATED,
        [
            (header::LOCATION, created_location(&queue, &ids)),
            (header::CONTENT_TYPE, "application/json".into()),
        ],
        created_body(&queue, &ids),
    )
        .into_response())
}

/// `…/messages?ids=a,b`: where the posted messages are.
fn created_location(queue: &str, ids: &[String]) -> String {
    format!("{}/messages?ids={}", base(queue), ids.join(","))
}

/// `{"resources": ["/v2/queues/q/messages/a", …]}`, written directly:
/// queue names and message ids need no escaping in JSON.
fn created_body(queue: &str, ids: &[String]) -> String {
    let path = format!("{}/messages/", base(queue));
    let mut out = String::with_capacity(16 + ids.len() * (path.len() + 40));
    out.push_str(r#"{"resources":["#);
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(&path);
        out.push_str(id);
        out.push('"');
    }
    out.push_str("]}");
    out
}

fn in_range(value: &Value, name: &str, min: u64, max: u64) -> Result<u64> {
    match value.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ZaqarError::BadRequest(format!(
            "The {name} of a message must be an integer from {min} to {max} seconds."
        ))),
    }
}

#[derive(Deserialize)]
pub struct ListParams {
    marker: Option<String>,
    limit: Option<String>,
    echo: Option<String>,
    include_claimed: Option<String>,
    include_delayed: Option<String>,
}

/// Every `ids` of the query string, joined by commas: clients send either
/// `ids=a,b` or `ids=a&ids=b` (python-zaqarclient), and Zaqar takes both.
fn ids_of(raw: &Option<String>) -> Option<String> {
    let raw = raw.as_deref()?;
    let ids: Vec<String> = raw
        .split('&')
        .filter_map(|pair| pair.strip_prefix("ids="))
        .map(|v| v.replace("%2C", ",").replace("%2c", ","))
        .collect();
    (!ids.is_empty()).then(|| ids.join(","))
}

/// The claim id and claim count of a message in flight, when a claim holds it.
fn claim_of(ctx: &Ctx, q: &Arc<Queue>, p: &crate::core::queue::Peeked) -> Option<(Arc<str>, u32)> {
    let consumer = p.held_by?;
    ctx.broker
        .claim_holding(q, consumer)
        .map(|id| (id, p.delivery_count))
}

fn render_peeked(ctx: &Ctx, queue: &str, q: &Arc<Queue>, p: &crate::core::queue::Peeked) -> Value {
    let claim = claim_of(ctx, q, p);
    message_json(
        &base(queue),
        &p.message,
        p.seq,
        claim.as_ref().map(|(id, n)| (&**id, *n)),
    )
}

pub async fn list(
    ctx: Ctx,
    Path(queue): Path<String>,
    Query(params): Query<ListParams>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Browse)?;
    if let Some(ids) = ids_of(&raw) {
        return by_ids(&ctx, &queue, &weir, &ids).await.map(Json);
    }
    let limit = number(
        &params.limit,
        "limit",
        1,
        u64::from(limits::MAX_MESSAGES_PER_PAGE),
    )?
    .map_or(limits::DEFAULT_MESSAGES_PER_PAGE, |n| n as u32) as usize;
    let echo = flag(&params.echo, "echo")?;
    let include_claimed = flag(&params.include_claimed, "include_claimed")?;
    let include_delayed = flag(&params.include_delayed, "include_delayed")?;
    let marker = Marker::parse(params.marker.as_deref())?;
    let Some(q) = ctx.broker.queue(&weir) else {
        return Ok(Json(json!({"messages": [], "links": []})));
    };
    let mut out = Vec::new();
    // The marker of the last message this page passed, shown or not.
    let mut next_marker = None;
    if let Marker::Queue(marker) = marker {
        let mut after = marker;
        'pages: loop {
            let page = q.peek(after, limit, include_claimed);
            let Some(last) = page.last() else { break };
            after = last.seq;
            for p in page {
                next_marker = Some(Marker::Queue(p.seq));
                if !echo && render::posted_by(&p.message) == Some(ctx.client_id.as_str()) {
                    continue;
                }
                out.push(render_peeked(&ctx, &queue, &q, &p));
                if out.len() == limit {
                    break 'pages;
                }
            }
        }
    }
    if include_delayed && out.len() < limit {
        let cursor = match marker {
            Marker::Delayed(cursor) => Some(cursor),
            Marker::Queue(_) => None,
        };
        let (shown, passed) = delayed(&ctx, &queue, &weir, cursor, limit - out.len(), echo).await?;
        out.extend(shown);
        next_marker = passed.map(Marker::Delayed).or(next_marker);
    }
    let links = match (out.is_empty(), next_marker) {
        (false, Some(m)) => json!([{
            "rel": "next",
            "href": format!(
                "{}/messages?marker={}&limit={limit}&echo={echo}&include_claimed={include_claimed}&include_delayed={include_delayed}",
                base(&queue),
                m.text(),
            ),
        }]),
        _ => json!([]),
    };
    Ok(Json(json!({"messages": out, "links": links})))
}

/// Where a listing goes on from. A queue's messages are listed in queue
/// order, then, with `include_delayed`, those not due yet in due order: the
/// marker is a queue sequence while the listing is in the first part, and
/// `d` and a delayed message's id (its `:`s as `-`) in the second. A
/// message is listed once, unless it falls due while a client pages through
/// the delayed ones (it moves into the queue, behind the marker).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    Queue(u64),
    Delayed(String),
}

impl Marker {
    fn parse(marker: Option<&str>) -> Result<Marker> {
        let bad = || ZaqarError::BadRequest("The marker is not one this server gave out.".into());
        match marker {
            None => Ok(Marker::Queue(0)),
            Some(m) => match m.strip_prefix('d') {
                Some(id) => {
                    let parts: Vec<&str> = id.split('-').collect();
                    match parts.len() == 3 && parts.iter().all(|p| p.parse::<u64>().is_ok()) {
                        true => Ok(Marker::Delayed(parts.join(":"))),
                        false => Err(bad()),
                    }
                }
                None => m.parse().map(Marker::Queue).map_err(|_| bad()),
            },
        }
    }

    fn text(&self) -> String {
        match self {
            Marker::Queue(seq) => seq.to_string(),
            Marker::Delayed(id) => format!("d{}", id.replace(':', "-")),
        }
    }
}

/// Messages not due yet (they wait in the delay schedule, not in the
/// queue), for `include_delayed`: up to `limit` after `cursor`, in due
/// order, and the id of the last one passed (shown or not).
async fn delayed(
    ctx: &Ctx,
    queue: &str,
    weir: &str,
    mut cursor: Option<String>,
    limit: usize,
    echo: bool,
) -> Result<(Vec<Value>, Option<String>)> {
    let Some(schedule) = ctx.broker.schedule() else {
        return Ok((Vec::new(), None));
    };
    let mut out = Vec::new();
    let mut passed = None;
    let now = now_ms();
    while out.len() < limit {
        let query = ScheduleQuery {
            queue: Some(weir.to_owned()),
            from_ms: None,
            to_ms: None,
            cursor: cursor.clone(),
            limit: limit - out.len(),
            preview_bytes: limits::MAX_MESSAGES_POST_SIZE,
        };
        let page = schedule.list_page(&query).await.map_err(|e| match e {
            ScheduleEditError::BadId(_) => {
                ZaqarError::BadRequest("The marker is not one this server gave out.".into())
            }
            e => ZaqarError::Unavailable(format!("Delayed messages cannot be listed: {e}")),
        })?;
        for s in page.items {
            passed = Some(s.id.clone());
            let mine = s.properties.iter().any(|p| {
                p.name == CLIENT_ID_PROPERTY
                    && p.value == PropertyValue::String(ctx.client_id.clone())
            });
            if !echo && mine {
                continue;
            }
            let id = s.message_id.clone().unwrap_or_else(|| s.id.clone());
            let body: Value = serde_json::from_str(&s.body_preview)
                .unwrap_or(Value::String(s.body_preview.clone()));
            out.push(json!({
                "id": id,
                "href": format!("{}/messages/{id}", base(queue)),
                "ttl": s.headers.expires_ms.map_or(limits::MAX_MESSAGE_TTL, |e| e.saturating_sub(s.enqueued_ms) / 1000),
                "age": now.saturating_sub(s.enqueued_ms) / 1000,
                "body": body,
            }));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok((out, passed))
}

fn split_ids(ids: &str) -> Result<Vec<&str>> {
    let list: Vec<&str> = ids.split(',').filter(|s| !s.is_empty()).collect();
    if list.is_empty() || list.len() > limits::MAX_MESSAGES_PER_PAGE as usize {
        return Err(ZaqarError::BadRequest(format!(
            "The ids parameter must name from 1 to {} messages.",
            limits::MAX_MESSAGES_PER_PAGE
        )));
    }
    Ok(list)
}

async fn by_ids(ctx: &Ctx, queue: &str, weir: &str, ids: &str) -> Result<Value> {
    let ids = split_ids(ids)?;
    let mut found: Vec<Option<Value>> = vec![None; ids.len()];
    if let Some(q) = ctx.broker.queue(weir) {
        for (id, slot) in ids.iter().zip(found.iter_mut()) {
            *slot = render::find(&q, id)
                .await
                .map(|p| render_peeked(ctx, queue, &q, &p));
        }
        let missing: Vec<&str> = ids
            .iter()
            .zip(&found)
            .filter(|(_, slot)| slot.is_none())
            .map(|(id, _)| *id)
            .collect();
        if !missing.is_empty() {
            let waiting = scheduled(ctx, weir, &missing).await?;
            for (id, slot) in ids.iter().zip(found.iter_mut()) {
                if slot.is_some() {
                    continue;
                }
                *slot = match waiting.iter().find(|e| named(e, id)) {
                    Some(entry) => Some(scheduled_json(queue, entry)),
                    // Fallen due while it was looked for: in the queue now.
                    None => render::find(&q, id)
                        .await
                        .map(|p| render_peeked(ctx, queue, &q, &p)),
                };
            }
        }
    }
    let found: Vec<Value> = found.into_iter().flatten().collect();
    if found.is_empty() {
        return Err(ZaqarError::NotFound(format!(
            "No messages with IDs: {} found in the queue {queue}.",
            ids.join(",")
        )));
    }
    Ok(json!({"messages": found}))
}

/// The messages of `weir` named by `ids` that wait in the delay schedule:
/// as in Zaqar, a message not due yet is got and deleted by id like any
/// other, though it is neither listed (without `include_delayed`) nor
/// claimed. Only ids this API names messages by are looked for (a
/// sequence id names a place in the queue). See
/// [`Schedule::find_by_message_ids`](crate::core::schedule::Schedule::find_by_message_ids)
/// for the cost.
async fn scheduled(ctx: &Ctx, weir: &str, ids: &[&str]) -> Result<Vec<ScheduledMessage>> {
    let Some(schedule) = ctx.broker.schedule() else {
        return Ok(Vec::new());
    };
    let ids: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| render::url_safe(id))
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    match schedule.find_by_message_ids(weir, &ids).await {
        Ok(found) => Ok(found),
        // Deleted meanwhile: nothing of it waits.
        Err(ScheduleEditError::UnknownQueue(_)) => Ok(Vec::new()),
        Err(e) => Err(ZaqarError::Unavailable(format!(
            "Delayed messages cannot be read: {e}"
        ))),
    }
}

/// A waiting message as a queue's own would show: it has no place in the
/// queue yet, so no sequence; it is found, and so named, by its message id
/// only, which is one this API names messages by as it is.
fn scheduled_json(queue: &str, entry: &ScheduledMessage) -> Value {
    message_json(&base(queue), &entry.message, 0, None)
}

fn named(entry: &ScheduledMessage, id: &str) -> bool {
    entry.message.message_id.as_deref() == Some(id)
}

/// Cancels delayed messages for good (on disk before this returns); the
/// ids of those that fell due first, which are in the queue now.
async fn cancel_scheduled(ctx: &Ctx, entries: &[ScheduledMessage]) -> Result<Vec<String>> {
    let Some(schedule) = ctx.broker.schedule() else {
        return Ok(Vec::new());
    };
    let mut due = Vec::new();
    for entry in entries {
        match schedule.cancel(&format_key(&entry.key)).await {
            Ok(_) => {}
            // Moved into the queue by the timer, or cancelled by another
            // delete: the caller looks for it in the queue.
            Err(ScheduleEditError::AlreadyDue(_) | ScheduleEditError::NotFound(_)) => {
                due.extend(entry.message.message_id.as_deref().map(str::to_owned))
            }
            Err(e) => {
                return Err(ZaqarError::Unavailable(format!(
                    "The delayed message cannot be deleted: {e}"
                )))
            }
        }
    }
    Ok(due)
}

#[derive(Deserialize)]
pub struct DeleteParams {
    pop: Option<String>,
}

pub async fn delete_many(
    ctx: Ctx,
    Path(queue): Path<String>,
    Query(params): Query<DeleteParams>,
    RawQuery(raw): RawQuery,
) -> Result<Response> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Consume)?;
    let pop = number(
        &params.pop,
        "pop",
        1,
        u64::from(limits::MAX_MESSAGES_PER_PAGE),
    )?;
    match (ids_of(&raw), pop) {
        (Some(_), Some(_)) => Err(ZaqarError::BadRequest(
            "ids and pop may not be specified at the same time.".into(),
        )),
        (None, None) => Err(ZaqarError::BadRequest(
            "Either ids or pop must be specified.".into(),
        )),
        (Some(ids), None) => {
            let ids = split_ids(&ids)?;
            if let Some(q) = ctx.broker.queue(&weir) {
                let mut receipts = Vec::new();
                let mut missing = Vec::new();
                for id in ids {
                    match render::find(&q, id).await {
                        Some(p) => receipts.extend(remove(&ctx, &weir, &q, &p).await),
                        None => missing.push(id),
                    }
                }
                if !missing.is_empty() {
                    let waiting = scheduled(&ctx, &weir, &missing).await?;
                    for id in cancel_scheduled(&ctx, &waiting).await? {
                        if let Some(p) = render::find(&q, &id).await {
                            receipts.extend(remove(&ctx, &weir, &q, &p).await);
                        }
                    }
                }
                Receipt::all(receipts).wait().await?;
            }
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (None, Some(n)) => {
            let Some(q) = ctx.broker.queue(&weir) else {
                return Ok(Json(json!({"messages": []})).into_response());
            };
            let terms = ClaimTerms {
                ttl: Duration::from_secs(limits::MIN_CLAIM_TTL),
                grace: Duration::ZERO,
                limit: n as u32,
            };
            let mut popped = Vec::new();
            // The claim's record is written before the acknowledgements and
            // deleted after them; the last delete waited for covers all.
            if let Some((claim, _written)) = ctx.broker.claim(&q, terms, None)? {
                let mut receipts = Vec::new();
                for m in &claim.messages {
                    if let Ok(r) = ctx.broker.ack_claimed(&weir, &claim.id, m.seq) {
                        receipts.push(r);
                        let mut shown = message_json(&base(&queue), &m.message, m.seq, None);
                        if let Some(o) = shown.as_object_mut() {
                            o.remove("href");
                        }
                        popped.push(shown);
                    }
                }
                receipts.extend(ctx.broker.release_claim(&weir, &claim.id));
                Receipt::all(receipts).wait().await?;
            }
            Ok(Json(json!({"messages": popped})).into_response())
        }
    }
}

/// Deletes a message found by id, through its claim if one holds it (a
/// bulk delete by ids deletes claimed messages too, as Zaqar's does).
async fn remove(
    ctx: &Ctx,
    weir: &str,
    q: &Arc<Queue>,
    p: &crate::core::queue::Peeked,
) -> Option<Receipt> {
    let consumer = match p.held_by {
        Some(consumer) => consumer,
        None => match remove_waiting(q, p.seq).await {
            Err(Untaken::InFlight(_, consumer)) => consumer,
            waiting => return waiting.ok(),
        },
    };
    let claim = ctx.broker.claim_holding(q, consumer)?;
    ctx.broker.ack_claimed(weir, &claim, p.seq).ok()
}

/// Polls while a paged message is not written yet: it will be
/// shortly, as the store writes in order.
const UNWRITTEN_POLL: Duration = Duration::from_millis(2);
/// How long a delete waits for that at most.
const UNWRITTEN_WAIT: Duration = Duration::from_secs(5);

/// [`Queue::remove_waiting`], waiting for a paged message the store has not
/// written yet.
async fn remove_waiting(q: &Arc<Queue>, seq: u64) -> std::result::Result<Receipt, Untaken> {
    let deadline = tokio::time::Instant::now() + UNWRITTEN_WAIT;
    loop {
        match q.remove_waiting(seq) {
            Err(Untaken::NotWrittenYet(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(UNWRITTEN_POLL).await
            }
            done => return done,
        }
    }
}

fn not_claimed() -> ZaqarError {
    ZaqarError::BadRequest(
        "A claim was specified, but the message is not currently claimed.".into(),
    )
}

fn claimed() -> ZaqarError {
    ZaqarError::Forbidden(
        "This message is claimed; it cannot be deleted without a valid claim ID.".into(),
    )
}

pub async fn get_one(ctx: Ctx, Path((queue, id)): Path<(String, String)>) -> Result<Json<Value>> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Browse)?;
    let not_found = || ZaqarError::NotFound(format!("Message {id} does not exist."));
    let q = ctx.broker.queue(&weir).ok_or_else(not_found)?;
    if let Some(p) = render::find(&q, &id).await {
        return Ok(Json(render_peeked(&ctx, &queue, &q, &p)));
    }
    if let Some(entry) = scheduled(&ctx, &weir, &[&id]).await?.first() {
        return Ok(Json(scheduled_json(&queue, entry)));
    }
    // Fallen due while it was looked for: in the queue now.
    let p = render::find(&q, &id).await.ok_or_else(not_found)?;
    Ok(Json(render_peeked(&ctx, &queue, &q, &p)))
}

#[derive(Deserialize)]
pub struct ClaimParam {
    claim_id: Option<String>,
}

pub async fn delete_one(
    ctx: Ctx,
    Path((queue, id)): Path<(String, String)>,
    Query(params): Query<ClaimParam>,
) -> Result<StatusCode> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Consume)?;
    let Some(q) = ctx.broker.queue(&weir) else {
        return Ok(StatusCode::NO_CONTENT);
    };
    let p = match render::find(&q, &id).await {
        Some(p) => p,
        None => {
            let waiting = scheduled(&ctx, &weir, &[&id]).await?;
            if waiting.is_empty() {
                return Ok(StatusCode::NO_CONTENT);
            }
            if params.claim_id.is_some() {
                return Err(not_claimed());
            }
            let fell_due = cancel_scheduled(&ctx, &waiting).await?;
            match fell_due.is_empty() {
                true => return Ok(StatusCode::NO_CONTENT),
                // In the queue now: deleted from there.
                false => match render::find(&q, &id).await {
                    Some(p) => p,
                    None => return Ok(StatusCode::NO_CONTENT),
                },
            }
        }
    };
    let receipt = match (&params.claim_id, p.held_by) {
        (Some(claim), _) => ctx
            .broker
            .ack_claimed(&weir, claim, p.seq)
            .map_err(|e| match e {
                ClaimError::NotFound(_) => ZaqarError::BadRequest(
                    "The specified claim does not exist or has expired.".into(),
                ),
                ClaimError::NotClaimed { .. } => not_claimed(),
            })?,
        (None, Some(_)) => return Err(claimed()),
        (None, None) => match remove_waiting(&q, p.seq).await {
            Ok(receipt) => receipt,
            Err(Untaken::InFlight(..)) => return Err(claimed()),
            Err(Untaken::NotFound(_)) => return Ok(StatusCode::NO_CONTENT),
            Err(Untaken::NotWrittenYet(_)) => {
                return Err(ZaqarError::Unavailable(
                    "The message is being written to disk; try again.".into(),
                ))
            }
        },
    };
    receipt.wait().await?;
    Ok(StatusCode::NO_CONTENT)
}
