//! `GET /api/broker`: what the broker is and how it stands.

use super::auth::Caller;
use super::error::ApiError;
use super::state::Management;
use crate::core::manage::MANAGEMENT_ADDRESS;
use crate::core::security::Permission;
use crate::core::Broker;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize)]
pub struct BrokerInfo {
    version: &'static str,
    uptime_seconds: f64,
    listeners: Vec<super::ListenerInfo>,
    queues: usize,
    memory: MemoryInfo,
    disk: DiskInfo,
    flow: FlowInfo,
}

#[derive(Serialize)]
struct MemoryInfo {
    /// `broker.global_max_size`; null when unlimited.
    limit_bytes: Option<u64>,
    used_bytes: u64,
    /// The limit is reached: queues apply their address_full_policy.
    full: bool,
    /// Resident memory of the process, where the OS tells it.
    process_resident_bytes: Option<u64>,
}

#[derive(Serialize)]
struct DiskInfo {
    /// Durable messages are being refused.
    refusing: bool,
    /// Why, while refusing.
    reason: Option<String>,
}

#[derive(Serialize)]
struct FlowInfo {
    /// Queues whose BLOCK policy holds their producers back now.
    blocking_queues: usize,
    /// Sends whose receipt waits for their queue to drain.
    held_sends: usize,
}

pub async fn broker(
    State(m): State<Arc<Management>>,
    caller: Caller,
) -> Result<Json<BrokerInfo>, ApiError> {
    caller.may(MANAGEMENT_ADDRESS, Permission::View)?;
    Ok(Json(info(&m, &caller.broker)))
}

fn info(m: &Management, broker: &Broker) -> BrokerInfo {
    let mut blocking_queues = 0;
    let mut held_sends = 0;
    let names = broker.queue_names();
    for name in &names {
        if let Some(queue) = broker.queue(name) {
            blocking_queues += usize::from(queue.blocks_producers());
            held_sends += queue.stats().held_sends;
        }
    }
    let memory = broker.memory();
    let reason = broker.disk_refusal();
    BrokerInfo {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: m.uptime().as_secs_f64(),
        listeners: m.listeners().to_vec(),
        queues: names.len(),
        memory: MemoryInfo {
            limit_bytes: memory.limit(),
            used_bytes: memory.used(),
            full: memory.is_full(),
            process_resident_bytes: resident_memory_bytes(),
        },
        disk: DiskInfo {
            refusing: reason.is_some(),
            reason,
        },
        flow: FlowInfo {
            blocking_queues,
            held_sends,
        },
    }
}

/// The process's resident set size, from `/proc/self/statm` (Linux); `None` elsewhere.
pub fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page_size).ok()?)
}
