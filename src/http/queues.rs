//! `/api/queues`: list, detail, create, delete, purge, pause and resume.

use super::auth::Caller;
use super::error::ApiError;
use super::query::{number, pairs};
use super::queue_settings::settings_json;
use crate::core::manage::Created;
use crate::core::queue::{GateState, Queue, QueueStats, Totals};
use crate::core::security::Permission;
use crate::core::settings::QueueSettings;
use crate::core::Broker;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;

/// Most queues one page may hold.
const MAX_LIMIT: usize = 1000;
const DEFAULT_LIMIT: usize = 100;

#[derive(Serialize)]
pub struct QueuePage {
    /// Queues that match the filter (and the caller may view), over all pages.
    total: usize,
    offset: usize,
    limit: usize,
    queues: Vec<QueueInfo>,
}

#[derive(Serialize)]
pub struct QueueInfo {
    name: String,
    paused: bool,
    /// Whether dispatch waits for `consumers_before_dispatch` / `delay_before_dispatch`.
    dispatch_gate: GateInfo,
    messages: Counts,
    /// Bytes the queue's messages hold in memory.
    memory_bytes: u64,
    consumers: usize,
    /// AMQP links attached to the queue's address and STOMP connections that sent to it.
    producers: usize,
    groups: usize,
    totals: TotalsInfo,
    /// Every setting the queue has now, with the config file's keys and values.
    settings: serde_json::Map<String, serde_json::Value>,
    /// The settings changed on this queue at run time (the rest come from the config).
    changed_settings: Vec<&'static str>,
    /// Messages per second lately (averaged since the previous reading of this
    /// queue, at least a second before).
    rates: RatesInfo,
    /// Its Zaqar queue metadata, when it has any: the user's keys and the reserved
    /// `_` ones (`_default_message_delay` is the `default_message_delay` setting,
    /// shown there).
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Serialize, Debug, PartialEq)]
struct GateInfo {
    /// `open`, `waiting_for_consumers` or `waiting_for_delay`.
    state: &'static str,
    /// While waiting for the delay: how long until it opens the gate anyway.
    opens_in_ms: Option<u64>,
}

impl From<GateState> for GateInfo {
    fn from(gate: GateState) -> Self {
        GateInfo {
            state: gate.name(),
            opens_in_ms: match gate {
                GateState::WaitingForDelay { remaining_ms } => Some(remaining_ms),
                GateState::Open | GateState::WaitingForConsumers => None,
            },
        }
    }
}

#[derive(Serialize, Default)]
struct RatesInfo {
    enqueued_per_second: f64,
    acked_per_second: f64,
}

#[derive(Serialize)]
struct Counts {
    /// Waiting to be delivered, in memory or paged to disk.
    ready: usize,
    in_memory: usize,
    paged: usize,
    in_flight: usize,
    /// Came back from a failed delivery, waiting out their redelivery delay.
    awaiting_redelivery: usize,
    /// Waiting in the delay schedule until they are due.
    delayed: u64,
}

#[derive(Serialize)]
struct TotalsInfo {
    enqueued: u64,
    acked: u64,
    expired: u64,
    dead_lettered: u64,
    redelivered: u64,
    /// Discarded by the DROP policy.
    dropped: u64,
}

impl QueueInfo {
    pub(super) fn of(queue: &Queue, broker: &Broker) -> Self {
        let delayed = broker.schedule().map_or(0, |s| s.delayed(queue.id()));
        let rates = queue.rates();
        QueueInfo {
            rates: RatesInfo {
                enqueued_per_second: rates.enqueued,
                acked_per_second: rates.acked,
            },
            producers: broker.producers().count(queue.name()),
            metadata: metadata_of(queue),
            ..Self::from_parts(
                queue.name(),
                delayed,
                queue.stats(),
                queue.totals(),
                &queue.settings(),
                queue.changes().settings.names_set(),
            )
        }
    }

    fn from_parts(
        name: &str,
        delayed: u64,
        s: QueueStats,
        t: Totals,
        settings: &QueueSettings,
        changed_settings: Vec<&'static str>,
    ) -> Self {
        QueueInfo {
            name: name.to_owned(),
            paused: s.paused,
            dispatch_gate: s.gate.into(),
            messages: Counts {
                ready: s.ready + s.paged,
                in_memory: s.ready,
                paged: s.paged,
                in_flight: s.in_flight,
                awaiting_redelivery: s.waiting,
                delayed,
            },
            memory_bytes: s.memory_bytes,
            consumers: s.consumers,
            producers: 0,
            groups: s.groups,
            totals: TotalsInfo {
                enqueued: t.enqueued,
                acked: t.acked,
                expired: t.expired,
                dead_lettered: t.dead_lettered,
                redelivered: t.redelivered,
                dropped: s.dropped,
            },
            rates: RatesInfo::default(),
            settings: settings_json(settings),
            changed_settings,
            metadata: None,
        }
    }
}

fn metadata_of(queue: &Queue) -> Option<serde_json::Map<String, serde_json::Value>> {
    let text = queue.changes().metadata.clone()?;
    let mut metadata: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).ok()?;
    metadata.remove("_default_message_delay");
    Some(metadata)
}

/// `offset`, `limit` and `name` of a list request; anything else is refused, so a typo
/// does not pass for "no filter".
struct ListQuery {
    offset: usize,
    limit: usize,
    name: Option<String>,
}

fn list_query(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        offset: 0,
        limit: DEFAULT_LIMIT,
        name: None,
    };
    for (key, value) in pairs(raw, &["offset", "limit", "name"])? {
        match key.as_str() {
            "offset" => q.offset = number(&key, &value, 0, usize::MAX)?,
            "limit" => q.limit = number(&key, &value, 1, MAX_LIMIT)?,
            _ => q.name = Some(value),
        }
    }
    Ok(q)
}

pub async fn list(caller: Caller, RawQuery(raw): RawQuery) -> Result<Json<QueuePage>, ApiError> {
    let query = list_query(raw.as_deref())?;
    let mut names: Vec<Arc<str>> = caller
        .broker
        .queue_names()
        .into_iter()
        .filter(|n| query.name.as_deref().is_none_or(|f| n.contains(f)))
        // Only what the caller may see; a refusal here is no error (nor an audit line).
        .filter(|n| caller.principal.may(n, Permission::View))
        .collect();
    names.sort_unstable();
    let total = names.len();
    let queues = names
        .iter()
        .skip(query.offset)
        .take(query.limit)
        .filter_map(|n| caller.broker.queue(n))
        .map(|q| QueueInfo::of(&q, &caller.broker))
        .collect();
    Ok(Json(QueuePage {
        total,
        offset: query.offset,
        limit: query.limit,
        queues,
    }))
}

pub async fn detail(caller: Caller, Path(name): Path<String>) -> Result<Json<QueueInfo>, ApiError> {
    caller.may(&name, Permission::View)?;
    let queue = caller
        .broker
        .queue(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no queue named '{name}'")))?;
    Ok(Json(QueueInfo::of(&queue, &caller.broker)))
}

/// 201 with the new queue, 200 with the one that was there.
pub async fn create(
    caller: Caller,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<QueueInfo>), ApiError> {
    let (queue, created) = caller
        .broker
        .create_queue_as(&name, &caller.principal)
        .map_err(|e| caller.refusal(e))?;
    let status = match created {
        Created::New => StatusCode::CREATED,
        Created::Existing => StatusCode::OK,
    };
    Ok((status, Json(QueueInfo::of(&queue, &caller.broker))))
}

pub async fn delete(caller: Caller, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    caller
        .broker
        .delete_queue_as(&name, &caller.principal)
        .map_err(|e| caller.refusal(e))?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize)]
pub struct Purged {
    removed: usize,
}

/// Removes the waiting messages once their records are deleted; deliveries in flight stay.
pub async fn purge(caller: Caller, Path(name): Path<String>) -> Result<Json<Purged>, ApiError> {
    let queue = manageable(&caller, &name)?;
    let (removed, written) = queue.clear();
    written
        .wait()
        .await
        .map_err(|e| ApiError::Internal(format!("purged, but deleting the records failed: {e}")))?;
    Ok(Json(Purged { removed }))
}

pub async fn pause(caller: Caller, Path(name): Path<String>) -> Result<Json<QueueInfo>, ApiError> {
    set_paused(caller, &name, true).await
}

pub async fn resume(caller: Caller, Path(name): Path<String>) -> Result<Json<QueueInfo>, ApiError> {
    set_paused(caller, &name, false).await
}

/// Answered once stored: a paused queue stays paused across a restart.
async fn set_paused(caller: Caller, name: &str, paused: bool) -> Result<Json<QueueInfo>, ApiError> {
    let (queue, written) = caller
        .broker
        .pause_queue_as(name, &caller.principal, paused)
        .map_err(|e| caller.refusal(e))?;
    written.wait().await.map_err(|e| {
        ApiError::Unavailable(format!("the change applies but was not stored: {e}"))
    })?;
    Ok(Json(QueueInfo::of(&queue, &caller.broker)))
}

fn manageable(caller: &Caller, name: &str) -> Result<Arc<Queue>, ApiError> {
    caller
        .broker
        .manage_queue_as(name, &caller.principal)
        .map_err(|e| caller.refusal(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_are_checked_and_decoded() {
        let q = list_query(Some("offset=5&limit=10&name=orders%2Eeu+x")).unwrap();
        assert_eq!((q.offset, q.limit), (5, 10));
        assert_eq!(q.name.as_deref(), Some("orders.eu x"));
        for bad in [
            "limit=abc",
            "limit=0",
            "limit=1001",
            "offset=-1",
            "colour=red",
            "name=%zz",
            "limit=5&limit=6",
        ] {
            assert!(
                matches!(list_query(Some(bad)), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
        let q = list_query(None).unwrap();
        assert_eq!((q.offset, q.limit, q.name), (0, DEFAULT_LIMIT, None));
    }

    #[test]
    fn the_dispatch_gate_shows_its_state_and_when_its_delay_opens_it() {
        let info = |gate| {
            let stats = QueueStats {
                gate,
                ..QueueStats::default()
            };
            let q = QueueInfo::from_parts(
                "q",
                0,
                stats,
                Totals::default(),
                &QueueSettings::default(),
                vec![],
            );
            serde_json::to_value(&q).unwrap()["dispatch_gate"].clone()
        };
        assert_eq!(
            info(GateState::Open),
            serde_json::json!({"state": "open", "opens_in_ms": null})
        );
        assert_eq!(
            info(GateState::WaitingForConsumers),
            serde_json::json!({"state": "waiting_for_consumers", "opens_in_ms": null})
        );
        assert_eq!(
            info(GateState::WaitingForDelay { remaining_ms: 250 }),
            serde_json::json!({"state": "waiting_for_delay", "opens_in_ms": 250})
        );
    }
}
