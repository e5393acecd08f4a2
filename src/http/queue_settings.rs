//! A queue's settings over the API: shown with the config file's keys and values, and
//! changed at run time with `PATCH /api/queues/{name}` in the same form.

use super::auth::Caller;
use super::error::ApiError;
use super::queues::QueueInfo;
use crate::config::{check_queue_settings, settings_change};
use crate::core::settings::QueueSettings;
use axum::extract::Path;
use axum::Json;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Every setting, as the config file would write it: durations in milliseconds,
/// `-1` for no limit, `""` for no address — so what a GET shows can be sent back.
pub(super) fn settings_json(s: &QueueSettings) -> Map<String, Value> {
    let ms = |d: Duration| json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let text = |t: &Option<String>| json!(t.as_deref().unwrap_or(""));
    let fields = [
        ("durable", json!(s.durable)),
        ("max_delivery_attempts", json!(s.max_delivery_attempts)),
        ("dead_letter_address", text(&s.dead_letter_address)),
        ("expiry_address", text(&s.expiry_address)),
        ("max_memory_messages", json!(s.max_memory_messages)),
        (
            "max_size_bytes",
            s.max_size_bytes.map_or(json!(-1), |b| json!(b)),
        ),
        ("address_full_policy", json!(s.address_full_policy.name())),
        ("default_prefetch", json!(s.default_prefetch)),
        ("default_message_delay", ms(s.default_message_delay)),
        ("max_message_delay", ms(s.max_message_delay)),
        (
            "delay_over_max",
            json!(match s.delay_over_max {
                crate::core::settings::DelayOverMax::Reject => "reject",
                crate::core::settings::DelayOverMax::Clamp => "clamp",
            }),
        ),
        (
            "delay_headers",
            json!(s.delay_headers.iter().map(|h| h.text()).collect::<Vec<_>>()),
        ),
        ("redelivery_delay", ms(s.redelivery_delay)),
        ("redelivery_multiplier", json!(s.redelivery_multiplier)),
        ("max_redelivery_delay", ms(s.max_redelivery_delay)),
        ("group_rebalance", json!(s.group_rebalance)),
        (
            "group_rebalance_pause_dispatch",
            json!(s.group_rebalance_pause_dispatch),
        ),
        ("group_buckets", json!(s.group_buckets)),
        ("group_first_key", text(&s.group_first_key)),
        (
            "consumers_before_dispatch",
            json!(s.consumers_before_dispatch),
        ),
        (
            "delay_before_dispatch",
            s.delay_before_dispatch.map_or(json!(-1), ms),
        ),
        ("exclusive", json!(s.exclusive)),
        ("auto_create", json!(s.auto_create)),
    ];
    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// `PATCH /api/queues/{name}`: a JSON object of settings (config keys and values;
/// `null` puts one back to what the config gives the queue), and `metadata`, the
/// queue's Zaqar metadata replaced whole (`null` or `{}` removes it). Answered once
/// the change is stored; the queue applies it at once.
pub async fn change(
    caller: Caller,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<QueueInfo>, ApiError> {
    let mut body: Map<String, Value> = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!("the body must be a JSON object of settings: {e}"))
    })?;
    let metadata = match body.remove("metadata") {
        None => None,
        Some(Value::Null) => Some(Map::new()),
        Some(Value::Object(m)) => Some(m),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "metadata: a JSON object of Zaqar queue metadata, or null".into(),
            ))
        }
    };
    let change = settings_change(&body).map_err(|e| ApiError::BadRequest(e.reason()))?;
    if let Some(metadata) = metadata {
        // The default delay is one setting: it may be given one way, not both.
        if metadata.contains_key("_default_message_delay")
            && body.contains_key("default_message_delay")
        {
            return Err(ApiError::BadRequest(
                "metadata._default_message_delay: give default_message_delay or it, not both"
                    .into(),
            ));
        }
        set_metadata(&caller, &name, metadata).await?;
    }
    let (queue, written) = caller
        .broker
        .change_queue_settings_as(
            &name,
            &caller.principal,
            |layer| {
                for name in &change.cleared {
                    layer.clear(name);
                }
                layer.merge(&change.set);
            },
            |settings| check_queue_settings(settings).map_err(|e| e.reason()),
        )
        .map_err(|e| caller.refusal(e))?;
    written.wait().await.map_err(|e| {
        ApiError::Unavailable(format!("the change applies but was not stored: {e}"))
    })?;
    Ok(Json(QueueInfo::of(&queue, &caller.broker)))
}

/// Replaces the queue's Zaqar metadata as the Zaqar API does (its reserved keys
/// checked; `_default_message_delay` also sets the setting). The queue's default
/// delay is kept unless the new metadata names one, as a PATCH changes only
/// what it gives.
async fn set_metadata(
    caller: &Caller,
    name: &str,
    metadata: Map<String, Value>,
) -> Result<(), ApiError> {
    if caller.broker.queue(name).is_none() {
        return Err(ApiError::NotFound(format!("no queue named '{name}'")));
    }
    crate::zaqar::metadata::replace_keeping_delay(&caller.broker, &caller.principal, name, metadata)
        .await
        .map_err(|e| match e {
            crate::zaqar::ZaqarError::BadRequest(m) => {
                ApiError::BadRequest(format!("metadata: {m}"))
            }
            crate::zaqar::ZaqarError::Forbidden(m) => ApiError::Forbidden(m),
            crate::zaqar::ZaqarError::NotFound(m) => ApiError::NotFound(m),
            other => ApiError::Unavailable(other.to_string()),
        })
}
