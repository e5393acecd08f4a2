//! `/v2/queues/{queue}/claims`: create, get, renew (PATCH), release (DELETE).
//!
//! A claim here is a core claim ([`crate::core::claims`]). The queue's
//! `_max_claim_count` is applied as Zaqar applies it: a message claimed that
//! many times already is not handed out again but moved to the queue's
//! `_dead_letter_queue`, when it has one.

use super::context::Ctx;
use super::error::{Result, ZaqarError};
use super::limits;
use super::metadata::QueueRules;
use super::queues::{number, parse_json};
use super::render::{message_json, write_message_json};
use crate::core::claims::{ClaimTerms, ClaimView, ClaimedMessage};
use crate::core::message::{now_ms, Message};
use crate::core::security::Permission;
use crate::core::Receipt;
use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[derive(Deserialize)]
pub struct LimitParam {
    limit: Option<String>,
}

/// `ttl` and `grace` from a claim's body, Zaqar's defaults where absent.
fn terms_of(body: &[u8]) -> Result<(u64, u64)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((limits::DEFAULT_CLAIM_TTL, limits::DEFAULT_CLAIM_GRACE));
    }
    let doc = parse_json(body)?;
    let Value::Object(doc) = doc else {
        return Err(ZaqarError::BadRequest(
            "A claim's body must be a JSON object.".into(),
        ));
    };
    // python-zaqarclient sends `null` for what it was not given.
    let field = |name: &str, default: u64, min: u64, max: u64| {
        match doc.get(name).filter(|v| !v.is_null()) {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(ZaqarError::BadRequest(format!(
                "The {name} for a claim may not exceed {max} seconds, and must be at least {min} seconds long."
            ))),
        },
    }
    };
    let ttl = field(
        "ttl",
        limits::DEFAULT_CLAIM_TTL,
        limits::MIN_CLAIM_TTL,
        limits::MAX_CLAIM_TTL,
    )?;
    let grace = field(
        "grace",
        limits::DEFAULT_CLAIM_GRACE,
        limits::MIN_CLAIM_GRACE,
        limits::MAX_CLAIM_GRACE,
    )?;
    Ok((ttl, grace))
}

/// `{"messages": [...]}` of a claim, as JSON text.
fn messages_document(queue: &str, claim: &ClaimView) -> Vec<u8> {
    let base = format!("/v2/queues/{queue}");
    // Most of it is the bodies.
    let bodies: usize = claim.messages.iter().map(|m| m.message.body.len()).sum();
    let mut out = Vec::with_capacity(bodies + 256 * claim.messages.len() + 16);
    out.extend_from_slice(b"{\"messages\":[");
    for (i, m) in claim.messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_message_json(
            &mut out,
            &base,
            &m.message,
            m.seq,
            Some((&claim.id, m.delivery_count)),
        );
    }
    out.extend_from_slice(b"]}");
    out
}

fn messages_json(queue: &str, claim: &ClaimView) -> Vec<Value> {
    let base = format!("/v2/queues/{queue}");
    claim
        .messages
        .iter()
        .map(|m| {
            message_json(
                &base,
                &m.message,
                m.seq,
                Some((&claim.id, m.delivery_count)),
            )
        })
        .collect()
}

pub async fn create(
    ctx: Ctx,
    Path(queue): Path<String>,
    Query(params): Query<LimitParam>,
    body: Bytes,
) -> Result<Response> {
    let weir = ctx.weir_name(&queue)?;
    let limit = number(
        &params.limit,
        "limit",
        1,
        u64::from(limits::MAX_MESSAGES_PER_PAGE),
    )?
    .map_or(limits::DEFAULT_MESSAGES_PER_CLAIM, |n| n as u32);
    let (ttl, grace) = terms_of(&body)?;
    ctx.may(&weir, Permission::Consume)?;
    let Some(q) = ctx.broker.queue(&weir) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let terms = ClaimTerms {
        ttl: Duration::from_secs(ttl),
        grace: Duration::from_secs(grace),
        limit,
    };
    let rules = super::metadata::rules(&q);
    let Some((mut claim, written)) = ctx.broker.claim(&q, terms, None)? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    // Answered once the claim is on disk: a restart keeps what it holds.
    written.wait().await?;
    // Without a dead-letter queue the count changes nothing (as in Zaqar):
    // a message is never dropped for being claimed often.
    if let (Some(max), Some(_)) = (rules.max_claim_count, &rules.dead_letter_queue) {
        let (over, kept): (Vec<ClaimedMessage>, Vec<ClaimedMessage>) = claim
            .messages
            .into_iter()
            .partition(|m| m.delivery_count > max);
        claim.messages = kept;
        dead_letter(&ctx, &weir, &claim.id, &rules, over).await?;
        if claim.messages.is_empty() {
            if let Some(deleted) = ctx.broker.release_claim(&weir, &claim.id) {
                deleted.wait().await?;
            }
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
    }
    let location = format!("/v2/queues/{queue}/claims/{}", claim.id);
    Ok((
        StatusCode::CREATED,
        [
            (header::LOCATION, location),
            (header::CONTENT_TYPE, "application/json".to_owned()),
        ],
        messages_document(&queue, &claim),
    )
        .into_response())
}

/// Moves messages claimed too often to the dead-letter queue: the copy is
/// on disk before the original is acknowledged, so neither is lost.
async fn dead_letter(
    ctx: &Ctx,
    weir: &str,
    claim: &str,
    rules: &QueueRules,
    messages: Vec<ClaimedMessage>,
) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    if let Some(dlq) = &rules.dead_letter_queue {
        let target = super::names::weir_name(ctx.project.as_deref(), dlq);
        let queue = match ctx.broker.queue(&target) {
            Some(q) => q,
            None => ctx.broker.create_queue_as(&target, &ctx.principal)?.0,
        };
        let now = now_ms();
        let copies = messages.iter().map(|m| {
            Arc::new(dead_letter_copy(
                &m.message,
                &target,
                rules.dead_letter_queue_messages_ttl,
                now,
            ))
        });
        let mut receipts = Vec::new();
        for r in ctx.broker.publish_all_to(&queue, copies) {
            receipts.push(r?);
        }
        Receipt::all(receipts).durability().wait().await?;
    }
    let acks: Vec<Receipt> = messages
        .iter()
        .filter_map(|m| ctx.broker.ack_claimed(weir, claim, m.seq).ok())
        .collect();
    Receipt::all(acks).wait().await?;
    Ok(())
}

/// The message as the dead-letter queue `target` gets it at `now`. Zaqar
/// moves it as it is, so it keeps its ttl and age, unless the source's
/// `_dead_letter_queue_messages_ttl` (`dlq_ttl`) gives it a new ttl from the
/// move. Due at once: it was due already, and the dead-letter queue's own
/// default delay is for messages posted to it, not moved there.
fn dead_letter_copy(message: &Message, target: &str, dlq_ttl: Option<u64>, now: u64) -> Message {
    let mut copy = message.clone();
    copy.address = Arc::from(target);
    copy.due_at = Some(now);
    if let Some(ttl) = dlq_ttl {
        copy.timestamp = now;
        copy.expires_at = Some(now.saturating_add(ttl.saturating_mul(1000)));
        // The original encoding carries the old expiry.
        copy.wire = None;
    }
    copy
}

pub async fn get(ctx: Ctx, Path((queue, claim)): Path<(String, String)>) -> Result<Json<Value>> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Consume)?;
    let view = ctx
        .broker
        .claim_view(&weir, &claim)
        .ok_or_else(|| ZaqarError::NotFound(format!("Claim {claim} does not exist.")))?;
    Ok(Json(json!({
        "age": now_ms().saturating_sub(view.created_at) / 1000,
        "ttl": view.ttl.as_secs(),
        "grace": view.grace.as_secs(),
        "messages": messages_json(&queue, &view),
        "href": format!("/v2/queues/{queue}/claims/{claim}"),
    })))
}

pub async fn renew(
    ctx: Ctx,
    Path((queue, claim)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Consume)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ZaqarError::BadRequest(
            "Missing claim metadata: give a ttl, a grace or both.".into(),
        ));
    }
    let (ttl, grace) = terms_of(&body)?;
    let written = ctx
        .broker
        .renew_claim(
            &weir,
            &claim,
            Duration::from_secs(ttl),
            Duration::from_secs(grace),
        )
        .map_err(|e| ZaqarError::NotFound(e.to_string()))?;
    written.wait().await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn release(ctx: Ctx, Path((queue, claim)): Path<(String, String)>) -> Result<StatusCode> {
    let weir = ctx.weir_name(&queue)?;
    ctx.may(&weir, Permission::Consume)?;
    if let Some(deleted) = ctx.broker.release_claim(&weir, &claim) {
        deleted.wait().await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(at: u64, ttl: u64) -> Message {
        let mut m = Message::new(Arc::from("p/src"), Bytes::from_static(b"1"), at);
        m.expires_at = Some(at + ttl * 1000);
        m.due_at = Some(at);
        m
    }

    #[test]
    fn a_dead_letter_keeps_its_ttl_and_age_unless_the_queue_sets_one() {
        let original = posted(1_000_000, 300);
        let now = 1_005_000;
        let kept = dead_letter_copy(&original, "p/dlq", None, now);
        assert_eq!(&*kept.address, "p/dlq");
        assert_eq!(kept.timestamp, 1_000_000, "age counts from the post");
        assert_eq!(kept.expires_at, Some(1_300_000), "ttl 300 s, as posted");
        assert_eq!(kept.due_at, Some(now));
        let renewed = dead_letter_copy(&original, "p/dlq", Some(120), now);
        assert_eq!(renewed.timestamp, now);
        assert_eq!(renewed.expires_at, Some(now + 120_000));
        assert_eq!(renewed.due_at, Some(now));
    }
}
