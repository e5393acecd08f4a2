//! `GET /metrics`: Prometheus's text exposition format, written by hand. The metrics
//! are read fresh at each scrape from counters the core keeps anyway, so there is no
//! registry to keep in step with queues that come and go; a client library would add a
//! dependency to format what fits in this file.
//!
//! Conventions: the `weir_` prefix, base units (bytes, seconds), `_total` on counters,
//! labels `queue` and `protocol`.

use super::auth::Caller;
use super::broker_info::resident_memory_bytes;
use super::error::ApiError;
use super::state::Management;
use crate::core::manage::MANAGEMENT_ADDRESS;
use crate::core::security::Permission;
use crate::core::store_stats::StoreStats;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write as _;
use std::sync::Arc;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn metrics(
    State(m): State<Arc<Management>>,
    caller: Caller,
) -> Result<impl IntoResponse, ApiError> {
    caller.may(MANAGEMENT_ADDRESS, Permission::View)?;
    // Milliseconds of formatting with many queues: on a blocking thread, so the
    // runtime workers keep serving the protocol connections meanwhile.
    let text = tokio::task::spawn_blocking(move || render(&m, &caller))
        .await
        .map_err(|e| ApiError::Internal(format!("rendering the metrics failed: {e}")))?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text))
}

/// One metric family: its HELP and TYPE lines once, then its samples.
struct Family<'a> {
    out: &'a mut String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Self {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"");
                escape_label(self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// Label values escape backslash, double quote and newline (the exposition format).
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    Family::new(out, name, "gauge", help).sample(name, &[], value);
}

fn render(m: &Management, caller: &Caller) -> String {
    let broker = &caller.broker;
    let mut out = String::with_capacity(4096);
    Family::new(
        &mut out,
        "weir_build_info",
        "gauge",
        "The broker's version.",
    )
    .sample(
        "weir_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    gauge(
        &mut out,
        "weir_uptime_seconds",
        "Seconds since the broker started.",
        m.uptime().as_secs_f64(),
    );
    let memory = broker.memory();
    if let Some(limit) = memory.limit() {
        gauge(
            &mut out,
            "weir_memory_limit_bytes",
            "broker.global_max_size: bytes all queues' messages may hold in memory.",
            limit,
        );
    }
    gauge(
        &mut out,
        "weir_memory_used_bytes",
        "Bytes all queues' messages hold in memory.",
        memory.used(),
    );
    gauge(
        &mut out,
        "weir_memory_limit_reached",
        "1 while global_max_size is reached (queues apply their address_full_policy).",
        u8::from(memory.is_full()),
    );
    gauge(
        &mut out,
        "weir_disk_refusing",
        "1 while durable messages are refused (disk past its limits, or failing).",
        u8::from(broker.disk_refusal().is_some()),
    );
    if let Some(rss) = resident_memory_bytes() {
        gauge(
            &mut out,
            "weir_process_resident_memory_bytes",
            "Resident memory of the broker process.",
            rss,
        );
    }
    connections(&mut out, broker);
    if let Some(schedule) = broker.schedule() {
        lateness(&mut out, &schedule.lateness());
    }
    store(&mut out, &broker.store_stats());
    queues(&mut out, caller);
    out
}

/// How late delayed messages reached their queues (moved in minus due).
fn lateness(out: &mut String, l: &crate::core::schedule::LatenessSnapshot) {
    histogram(
        out,
        "weir_delayed_delivery_lateness_seconds",
        "How late delayed messages reached their queues after their due time.",
        (&l.cumulative, l.sum_ms, l.count),
        1e3,
    );
}

/// The store's group commits and RocksDB's backlog.
fn store(out: &mut String, s: &StoreStats) {
    gauge(
        out,
        "weir_store_bytes",
        "Bytes the store holds in SST files and memtables.",
        s.bytes,
    );
    gauge(
        out,
        "weir_store_pending_compaction_bytes",
        "RocksDB's estimate of the bytes compaction has yet to rewrite.",
        s.pending_compaction_bytes,
    );
    gauge(
        out,
        "weir_store_running_compactions",
        "RocksDB compactions running now.",
        s.running_compactions,
    );
    let l = &s.sync_latency_us;
    histogram(
        out,
        "weir_store_sync_seconds",
        "Time to write one group commit and sync RocksDB's write-ahead log.",
        (&l.cumulative, l.sum, l.count),
        1e6,
    );
    let b = &s.batch_size;
    histogram(
        out,
        "weir_store_commit_batch_size",
        "Writes (sends, acknowledgements, ...) settled by one group commit.",
        (&b.cumulative, b.sum, b.count),
        1.0,
    );
}

/// A histogram family from cumulative `(bound, count)` pairs (the last bound
/// `u64::MAX`, +Inf) whose bounds and sum are divided by `per_unit` into base units
/// (dividing by a power of ten prints the shortest decimal; multiplying may not).
fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    (cumulative, sum, count): (&[(u64, u64)], u64, u64),
    per_unit: f64,
) {
    let mut family = Family::new(out, name, "histogram", help);
    let bucket = format!("{name}_bucket");
    for &(bound, n) in cumulative {
        let le = match bound {
            u64::MAX => "+Inf".to_owned(),
            bound => (bound as f64 / per_unit).to_string(),
        };
        family.sample(&bucket, &[("le", &le)], n);
    }
    family.sample(&format!("{name}_sum"), &[], sum as f64 / per_unit);
    family.sample(&format!("{name}_count"), &[], count);
}

fn connections(out: &mut String, broker: &crate::core::Broker) {
    let mut family = Family::new(
        out,
        "weir_connections",
        "gauge",
        "Open client connections by protocol, transport (tcp, websocket) and TLS.",
    );
    for (kind, count) in broker.connections().count_by_protocol() {
        let tls = if kind.tls { "true" } else { "false" };
        family.sample(
            "weir_connections",
            &[
                ("protocol", &kind.protocol),
                ("transport", kind.transport),
                ("tls", tls),
            ],
            count,
        );
    }
}

/// What one scrape reads of one queue.
struct QueueSample {
    stats: crate::core::queue::QueueStats,
    totals: crate::core::queue::Totals,
    delayed: u64,
    producers: usize,
    blocks_producers: bool,
}

/// The per-queue families, over the queues the caller may view.
fn queues(out: &mut String, caller: &Caller) {
    let broker = &caller.broker;
    let mut names = broker.queue_names();
    names.retain(|n| caller.principal.may(n, Permission::View));
    names.sort_unstable();
    let queues: Vec<_> = names.iter().filter_map(|n| broker.queue(n)).collect();
    let schedule = broker.schedule();
    let producers = broker.producers();
    let stats: Vec<_> = queues
        .iter()
        .map(|q| QueueSample {
            stats: q.stats(),
            totals: q.totals(),
            delayed: schedule.map_or(0, |s| s.delayed(q.id())),
            producers: producers.count(q.name()),
            blocks_producers: q.blocks_producers(),
        })
        .collect();
    gauge(
        out,
        "weir_queues",
        "Queues the caller may view.",
        queues.len(),
    );
    type Pick = fn(&QueueSample) -> u64;
    let families: [(&str, &str, &str, Pick); 19] = [
        (
            "weir_queue_ready_messages",
            "gauge",
            "Messages waiting to be delivered, in memory or paged.",
            |q| (q.stats.ready + q.stats.paged) as u64,
        ),
        (
            "weir_queue_in_memory_messages",
            "gauge",
            "Waiting messages held in memory.",
            |q| q.stats.ready as u64,
        ),
        (
            "weir_queue_paged_messages",
            "gauge",
            "Waiting messages paged to disk.",
            |q| q.stats.paged as u64,
        ),
        (
            "weir_queue_in_flight_messages",
            "gauge",
            "Messages delivered and not yet settled.",
            |q| q.stats.in_flight as u64,
        ),
        (
            "weir_queue_redelivery_waiting_messages",
            "gauge",
            "Messages waiting out their redelivery delay.",
            |q| q.stats.waiting as u64,
        ),
        (
            "weir_queue_delayed_messages",
            "gauge",
            "Messages waiting in the delay schedule until they are due.",
            |q| q.delayed,
        ),
        (
            "weir_queue_memory_bytes",
            "gauge",
            "Bytes the queue's messages hold in memory.",
            |q| q.stats.memory_bytes,
        ),
        (
            "weir_queue_consumers",
            "gauge",
            "Consumers attached to the queue.",
            |q| q.stats.consumers as u64,
        ),
        (
            "weir_queue_producers",
            "gauge",
            "AMQP links attached to the queue's address and STOMP connections that sent to it.",
            |q| q.producers as u64,
        ),
        (
            "weir_queue_producers_blocked",
            "gauge",
            "1 while the queue holds its producers back (BLOCK policy full, or paging behind).",
            |q| u64::from(q.blocks_producers),
        ),
        (
            "weir_queue_held_sends",
            "gauge",
            "Sends whose receipt waits for the queue to drain.",
            |q| q.stats.held_sends as u64,
        ),
        (
            "weir_queue_paused",
            "gauge",
            "1 while dispatch is paused by management.",
            |q| u64::from(q.stats.paused),
        ),
        (
            "weir_queue_dispatch_gate_open",
            "gauge",
            "0 while dispatch waits for consumers_before_dispatch or delay_before_dispatch, else 1.",
            |q| u64::from(q.stats.gate == crate::core::queue::GateState::Open),
        ),
        (
            "weir_queue_enqueued_messages_total",
            "counter",
            "Messages that entered the queue (a delayed one when due).",
            |q| q.totals.enqueued,
        ),
        (
            "weir_queue_acked_messages_total",
            "counter",
            "Deliveries acknowledged.",
            |q| q.totals.acked,
        ),
        (
            "weir_queue_expired_messages_total",
            "counter",
            "Messages expired.",
            |q| q.totals.expired,
        ),
        (
            "weir_queue_dead_lettered_messages_total",
            "counter",
            "Messages rejected or past max_delivery_attempts.",
            |q| q.totals.dead_lettered,
        ),
        (
            "weir_queue_redelivered_messages_total",
            "counter",
            "Failed deliveries returned to be delivered again.",
            |q| q.totals.redelivered,
        ),
        (
            "weir_queue_dropped_messages_total",
            "counter",
            "Messages discarded by the DROP policy.",
            |q| q.stats.dropped,
        ),
    ];
    // Each queue's label set, escaped once for all its families.
    let labels: Vec<String> = queues
        .iter()
        .map(|q| {
            let mut label = String::with_capacity(q.name().len() + 10);
            label.push_str("{queue=\"");
            escape_label(&mut label, q.name());
            label.push_str("\"}");
            label
        })
        .collect();
    let label_bytes: usize = labels.iter().map(String::len).sum();
    out.reserve(families.len() * (labels.len() * 48 + label_bytes + 160));
    let mut number = itoa::Buffer::new();
    for (name, kind, help, pick) in families {
        Family::new(out, name, kind, help);
        for (label, sample) in labels.iter().zip(&stats) {
            out.push_str(name);
            out.push_str(label);
            out.push(' ');
            out.push_str(number.format(pick(sample)));
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        escape_label(&mut out, "a\"b\\c\nd");
        assert_eq!(out, "a\\\"b\\\\c\\nd");
    }
}
