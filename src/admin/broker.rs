//! `weir admin`: operates a running broker through its management HTTP API, as
//! `rabbitmqctl` or `artemis queue stat` do: a table for people, `--json` for
//! scripts (the API's own JSON). Everything it does, the API checks: the user
//! needs `view` to read and `manage` to change.

use super::api::{segment, AdminError, Api, ApiArgs};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Args)]
pub struct AdminArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Every queue with its depth, consumers and rates.
    Queues {
        /// Only queues whose name contains this.
        #[arg(long)]
        name: Option<String>,
    },
    /// One queue in detail.
    Stat { queue: String },
    /// Remove every waiting message of a queue.
    Purge { queue: String },
    /// Move messages to another queue (the dead-letter retry), by id or selector.
    Move(Transfer),
    /// Copy messages to another queue, by id or selector.
    Copy(Transfer),
    /// A queue's message groups and their owners.
    Groups {
        queue: String,
        /// Reset GROUP (or every group without it): its next message picks a consumer anew.
        #[arg(long)]
        reset: bool,
        group: Option<String>,
    },
    /// A queue's consumers.
    Consumers { queue: String },
    /// The open client connections.
    Connections {
        /// Close this connection (by id).
        #[arg(long, value_name = "ID")]
        close: Option<u64>,
    },
}

#[derive(Args)]
struct Transfer {
    from: String,
    to: String,
    /// Message ids, comma-separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "selector")]
    ids: Vec<u64>,
    /// A JMS selector: every waiting message it matches.
    #[arg(long, conflicts_with = "ids")]
    selector: Option<String>,
}

pub fn run(args: AdminArgs) -> ExitCode {
    match execute(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir admin: {e}");
            ExitCode::FAILURE
        }
    }
}

fn execute(args: AdminArgs) -> Result<(), AdminError> {
    let api = Api::new(&args.api)?;
    let out = match &args.action {
        Action::Queues { name } => {
            let queues = all_queues(&api, name.as_deref())?;
            Output::new(Value::Array(queues), queue_table)
        }
        Action::Stat { queue } => {
            let q = api.get(&format!("/api/queues/{}", segment(queue)))?;
            Output::new(q, stat_table)
        }
        Action::Purge { queue } => {
            let path = format!("/api/queues/{}/purge", segment(queue));
            let done = api.call(reqwest::Method::POST, &path, None)?;
            Output::new(done, |v| format!("removed {}\n", v["removed"]))
        }
        Action::Move(t) => Output::new(transfer(&api, t, "move")?, transfer_lines),
        Action::Copy(t) => Output::new(transfer(&api, t, "copy")?, transfer_lines),
        Action::Groups {
            queue,
            reset,
            group,
        } => {
            let base = format!("/api/queues/{}/groups", segment(queue));
            match (reset, group) {
                (true, Some(group)) => {
                    let path = format!("{base}/{}", segment(group));
                    let done = api.call(reqwest::Method::DELETE, &path, None)?;
                    Output::new(done, reset_line)
                }
                (true, None) => {
                    let done = api.call(reqwest::Method::DELETE, &base, None)?;
                    Output::new(done, reset_line)
                }
                (false, _) => {
                    let groups = api.get(&base)?;
                    Output::new(groups, groups_table)
                }
            }
        }
        Action::Consumers { queue } => {
            let list = api.get(&format!("/api/queues/{}/consumers", segment(queue)))?;
            Output::new(list, consumers_table)
        }
        Action::Connections { close: Some(id) } => {
            let path = format!("/api/connections/{id}");
            api.call(reqwest::Method::DELETE, &path, None)?;
            let done = json!({ "closing": id });
            Output::new(done, |v| format!("closing connection {}\n", v["closing"]))
        }
        Action::Connections { close: None } => {
            let list = api.get("/api/connections")?;
            Output::new(list, connections_table)
        }
    };
    match args.json {
        true => println!(
            "{}",
            serde_json::to_string_pretty(&out.json).unwrap_or_default()
        ),
        false => print!("{}", (out.table)(&out.json)),
    }
    Ok(())
}

/// What a command prints: the API's JSON, or a table made from it.
struct Output {
    json: Value,
    table: fn(&Value) -> String,
}

impl Output {
    fn new(json: Value, table: fn(&Value) -> String) -> Self {
        Output { json, table }
    }
}

fn reset_line(done: &Value) -> String {
    format!("reset {}\n", done["reset"])
}

fn all_queues(api: &Api, name: Option<&str>) -> Result<Vec<Value>, AdminError> {
    let filter = name.map_or_else(String::new, |n| format!("&name={}", segment(n)));
    let mut queues = Vec::new();
    loop {
        let page = api.get(&format!(
            "/api/queues?limit=1000&offset={}{filter}",
            queues.len()
        ))?;
        let items = page["queues"].as_array().cloned().unwrap_or_default();
        let total = page["total"].as_u64().unwrap_or(0) as usize;
        let empty = items.is_empty();
        queues.extend(items);
        if empty || queues.len() >= total {
            return Ok(queues);
        }
    }
}

fn transfer(api: &Api, t: &Transfer, verb: &str) -> Result<Value, AdminError> {
    let body = match &t.selector {
        Some(selector) => json!({ "to": t.to, "selector": selector }),
        None => json!({ "to": t.to, "ids": t.ids }),
    };
    let path = format!("/api/queues/{}/messages/{verb}", segment(&t.from));
    api.call(reqwest::Method::POST, &path, Some(body))
}

/// `moved N` (or `copied N`), then each id skipped and why.
fn transfer_lines(answer: &Value) -> String {
    let done = match answer.get("moved") {
        Some(_) => "moved",
        None => "copied",
    };
    let mut text = format!("{done} {}\n", answer[done]);
    for s in answer["skipped"].as_array().into_iter().flatten() {
        text.push_str(&format!("skipped {} ({})\n", s["id"], cell(&s["reason"])));
    }
    text
}

/// A JSON value as a table cell: strings without quotes, null as "-", rates
/// to one decimal.
pub(super) fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => format!("{:.1}", n.as_f64().unwrap_or(0.0)),
        other => other.to_string(),
    }
}

/// Left-aligned columns, two spaces apart.
pub(super) fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let mut text = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            match i + 1 == cells.len() {
                true => text.push_str(c),
                false => text.push_str(&format!("{c:<w$}  ")),
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
    out
}

fn queue_table(queues: &Value) -> String {
    let rows = queues
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            vec![
                cell(&q["name"]),
                cell(&q["messages"]["ready"]),
                cell(&q["messages"]["paged"]),
                cell(&q["messages"]["in_flight"]),
                cell(&q["messages"]["delayed"]),
                cell(&q["consumers"]),
                cell(&q["producers"]),
                cell(&q["rates"]["enqueued_per_second"]),
                cell(&q["rates"]["acked_per_second"]),
                cell(&q["totals"]["enqueued"]),
                cell(&q["totals"]["acked"]),
                cell(&q["totals"]["dead_lettered"]),
                if q["paused"] == true { "paused" } else { "" }.to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "READY",
            "PAGED",
            "IN_FLIGHT",
            "DELAYED",
            "CONSUMERS",
            "PRODUCERS",
            "ENQ/S",
            "ACK/S",
            "ENQUEUED",
            "ACKED",
            "DEAD",
            "",
        ],
        rows,
    )
}

/// One queue as FIELD VALUE lines, nested objects flattened (`messages.ready`).
fn stat_table(q: &Value) -> String {
    fn flatten(prefix: &str, v: &Value, rows: &mut Vec<Vec<String>>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = match prefix.is_empty() {
                        true => k.clone(),
                        false => format!("{prefix}.{k}"),
                    };
                    flatten(&key, v, rows);
                }
            }
            other => rows.push(vec![prefix.to_owned(), cell(other)]),
        }
    }
    let mut rows = Vec::new();
    flatten("", q, &mut rows);
    table(&["FIELD", "VALUE"], rows)
}

fn groups_table(groups: &Value) -> String {
    let rows = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            vec![
                cell(&g["group"]),
                cell(&g["consumer"]),
                cell(&g["connection"]["id"]),
                cell(&g["unacked"]),
                cell(&g["ready"]),
                cell(&g["owned_since_ms"]),
                cell(&g["last_activity_ms"]),
            ]
        })
        .collect();
    table(
        &[
            "GROUP",
            "CONSUMER",
            "CONNECTION",
            "UNACKED",
            "READY",
            "OWNED_SINCE_MS",
            "LAST_ACTIVITY_MS",
        ],
        rows,
    )
}

fn consumers_table(list: &Value) -> String {
    let rows = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            vec![
                cell(&c["id"]),
                cell(&c["connection"]["id"]),
                cell(&c["connection"]["protocol"]),
                cell(&c["user"]),
                cell(&c["client_id"]),
                cell(&c["credit"]),
                cell(&c["in_flight"]),
                cell(&c["delivered"]),
                cell(&c["acked"]),
                cell(&c["rates"]["delivered_per_second"]),
                cell(&c["rates"]["acked_per_second"]),
                cell(&c["groups"]),
                cell(&c["selector"]),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "CONNECTION",
            "PROTOCOL",
            "USER",
            "CLIENT_ID",
            "CREDIT",
            "IN_FLIGHT",
            "DELIVERED",
            "ACKED",
            "DLV/S",
            "ACK/S",
            "GROUPS",
            "SELECTOR",
        ],
        rows,
    )
}

fn connections_table(list: &Value) -> String {
    let rows = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            vec![
                cell(&c["id"]),
                format!("{} {}", cell(&c["protocol"]), cell(&c["version"])),
                cell(&c["peer"]),
                cell(&c["tls"]),
                cell(&c["messages"]["received"]),
                cell(&c["messages"]["sent"]),
                cell(&c["rates"]["received_per_second"]),
                cell(&c["rates"]["sent_per_second"]),
                cell(&c["user"]),
                cell(&c["client_id"]),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "PROTOCOL",
            "PEER",
            "TLS",
            "RECEIVED",
            "SENT",
            "RECV/S",
            "SENT/S",
            "USER",
            "CLIENT_ID",
        ],
        rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_cells_read_well() {
        let t = table(&["A", "LONGER"], vec![vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "A    LONGER\nxyz  1\n");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!("q")), "q");
        assert_eq!(cell(&json!(2.26)), "2.3");
        assert_eq!(segment("orders/eu q"), "orders%2Feu%20q");
    }
}
