//! `/api/queues/{name}/groups` and `/api/queues/{name}/consumers`: which
//! consumer owns which message group, resetting groups (Artemis
//! `resetAllGroups`), and the queue's consumers with their connections.
//!
//! Reading needs `view` at the queue; a reset needs `manage`.

use super::auth::Caller;
use super::error::ApiError;
use crate::core::connections::ConnectionInfo;
use crate::core::manage::MANAGEMENT_ADDRESS;
use crate::core::queue::{ConsumerInfo, GroupInfo, Queue};
use crate::core::security::Permission;
use axum::extract::Path;
use axum::Json;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// A consumer's connection, as `/api/connections` lists it.
#[derive(Serialize, Clone)]
pub struct ConnectionRef {
    id: u64,
    protocol: String,
    version: String,
    peer: String,
    tls: bool,
}

/// The open connections by peer address: a consumer's principal knows its peer.
/// Empty for a caller who may not see connections (`view` at `weir.management`).
fn connections_by_peer(caller: &Caller) -> HashMap<SocketAddr, ConnectionRef> {
    if !caller.principal.may(MANAGEMENT_ADDRESS, Permission::View) {
        return HashMap::new();
    }
    caller
        .broker
        .connections()
        .list()
        .into_iter()
        .map(|c: ConnectionInfo| {
            let d = c.descriptor;
            let reference = ConnectionRef {
                id: c.id,
                protocol: d.protocol,
                version: d.version,
                peer: d.peer.to_string(),
                tls: d.tls,
            };
            (d.peer, reference)
        })
        .collect()
}

#[derive(Serialize)]
pub struct Groups {
    /// Groups hash into `group_buckets` buckets: each entry is a bucket.
    buckets: bool,
    groups: Vec<Group>,
}

#[derive(Serialize)]
pub struct Group {
    /// The group id, or `bucket-N`.
    group: String,
    /// The owning consumer; null while a reset or rebalance waits for the old
    /// owner to settle what it holds of the group.
    consumer: Option<u64>,
    connection: Option<ConnectionRef>,
    /// Delivered and not yet acknowledged.
    unacked: usize,
    /// Waiting in memory for the owner.
    ready: usize,
    /// When the owner took the group (epoch ms).
    owned_since_ms: u64,
    /// When a message of the group was last delivered or acknowledged, or the group
    /// bound if later (epoch ms).
    last_activity_ms: u64,
}

fn viewable(caller: &Caller, name: &str) -> Result<Arc<Queue>, ApiError> {
    caller.may(name, Permission::View)?;
    caller
        .broker
        .queue(name)
        .ok_or_else(|| ApiError::NotFound(format!("no queue named '{name}'")))
}

/// `GET /api/queues/{name}/groups`
pub async fn list(caller: Caller, Path(name): Path<String>) -> Result<Json<Groups>, ApiError> {
    let queue = viewable(&caller, &name)?;
    let groups: Vec<GroupInfo> = queue.groups();
    let consumers: HashMap<u64, Option<SocketAddr>> = queue
        .consumers()
        .into_iter()
        .map(|c| (c.id, c.owner.and_then(|o| o.peer)))
        .collect();
    let connections = connections_by_peer(&caller);
    let connection_of = |consumer: u64| {
        let peer = consumers.get(&consumer).copied().flatten()?;
        connections.get(&peer).cloned()
    };
    Ok(Json(Groups {
        buckets: queue.settings().group_buckets > 0,
        groups: groups
            .into_iter()
            .map(|g| Group {
                connection: g.consumer.and_then(connection_of),
                group: g.group,
                consumer: g.consumer,
                unacked: g.in_flight,
                ready: g.ready,
                owned_since_ms: g.since_ms,
                last_activity_ms: g.last_activity_ms,
            })
            .collect(),
    }))
}

#[derive(Serialize)]
pub struct Reset {
    /// Groups released from their owners.
    reset: usize,
}

fn manageable(caller: &Caller, name: &str) -> Result<Arc<Queue>, ApiError> {
    caller
        .broker
        .manage_queue_as(name, &caller.principal)
        .map_err(|e| caller.refusal(e))
}

/// `DELETE /api/queues/{name}/groups/{group}`: 404 when the group is not bound.
pub async fn reset(
    caller: Caller,
    Path((name, group)): Path<(String, String)>,
) -> Result<Json<Reset>, ApiError> {
    let queue = manageable(&caller, &name)?;
    match queue.reset_group(&group) {
        true => Ok(Json(Reset { reset: 1 })),
        false => Err(ApiError::NotFound(format!(
            "no consumer owns group '{group}' of queue '{name}'"
        ))),
    }
}

/// `DELETE /api/queues/{name}/groups`
pub async fn reset_all(caller: Caller, Path(name): Path<String>) -> Result<Json<Reset>, ApiError> {
    let queue = manageable(&caller, &name)?;
    Ok(Json(Reset {
        reset: queue.reset_all_groups(),
    }))
}

#[derive(Serialize)]
pub struct Consumer {
    id: u64,
    /// The connection it came on (matched by its peer address), when open.
    connection: Option<ConnectionRef>,
    user: Option<String>,
    /// STOMP client-id, AMQP container-id.
    client_id: Option<String>,
    browser: bool,
    priority: i32,
    /// Deliveries it may receive now.
    credit: u32,
    /// Its prefetch window (STOMP, JMS); null where the protocol grants credit (AMQP).
    window: Option<u32>,
    in_flight: usize,
    in_flight_bytes: u64,
    selector: Option<String>,
    /// Message groups it owns.
    groups: usize,
    /// Messages handed to it since it attached (a browser: shown to it).
    delivered: u64,
    /// Of those, acknowledged.
    acked: u64,
    rates: ConsumerRates,
}

/// Messages per second, averaged since the previous reading at least a second earlier.
#[derive(Serialize)]
pub struct ConsumerRates {
    delivered_per_second: f64,
    acked_per_second: f64,
}

/// `GET /api/queues/{name}/consumers`
pub async fn consumers(
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<Consumer>>, ApiError> {
    let queue = viewable(&caller, &name)?;
    let connections = connections_by_peer(&caller);
    let list = queue
        .consumers()
        .into_iter()
        .map(|c: ConsumerInfo| {
            let owner = c.owner.unwrap_or_default();
            Consumer {
                id: c.id,
                connection: owner.peer.and_then(|p| connections.get(&p).cloned()),
                user: owner.user,
                client_id: owner.client_id,
                browser: c.browser,
                priority: c.priority,
                credit: c.credit,
                window: c.window,
                in_flight: c.in_flight,
                in_flight_bytes: c.in_flight_bytes,
                selector: c.selector,
                groups: c.groups,
                delivered: c.delivered,
                acked: c.acked,
                rates: ConsumerRates {
                    delivered_per_second: c.delivered_per_second,
                    acked_per_second: c.acked_per_second,
                },
            }
        })
        .collect();
    Ok(Json(list))
}
