//! `weir admin`: operates a running broker through its management HTTP API, as
//! `rabbitmqctl` or `artemis queue stat` do: a table for people, `--json` for
//! scripts (the API's own JSON). Everything it does, the API checks: the user
//! needs `view` to read and `manage` to change.

use clap::{Args, Subcommand};
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct AdminArgs {
    /// The broker's management API.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8161",
        env = "WEIR_URL",
        global = true
    )]
    url: String,
    /// Log in as this user (HTTP Basic).
    #[arg(long, env = "WEIR_USER", global = true)]
    user: Option<String>,
    /// The user's password.
    #[arg(long, env = "WEIR_PASSWORD", hide_env_values = true, global = true)]
    password: Option<String>,
    /// Trust this CA certificate (PEM) for an https URL.
    #[arg(long, value_name = "FILE", global = true)]
    ca: Option<PathBuf>,
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

#[derive(Debug, thiserror::Error)]
enum AdminError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("{status}: {message}")]
    Api { status: u16, message: String },
    #[error("--ca {0}: {1}")]
    Ca(String, String),
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

struct Api {
    base: String,
    client: Client,
    user: Option<String>,
    password: Option<String>,
}

impl Api {
    fn new(args: &AdminArgs) -> Result<Api, AdminError> {
        let mut client = Client::builder().timeout(Duration::from_secs(30));
        if let Some(path) = &args.ca {
            let shown = path.display().to_string();
            let pem =
                std::fs::read(path).map_err(|e| AdminError::Ca(shown.clone(), e.to_string()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| AdminError::Ca(shown, e.to_string()))?;
            client = client.add_root_certificate(cert);
        }
        Ok(Api {
            base: args.url.trim_end_matches('/').to_owned(),
            client: client.build()?,
            user: args.user.clone(),
            password: args.password.clone(),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.user {
            Some(user) => r.basic_auth(user, self.password.as_deref()),
            None => r,
        }
    }

    /// The JSON answer, or the API's error message.
    fn send(&self, request: RequestBuilder) -> Result<Value, AdminError> {
        let response = request.send()?;
        let status = response.status();
        let text = response.text()?;
        let body: Value = match text.is_empty() {
            true => Value::Null,
            false => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        };
        if status.is_success() {
            return Ok(body);
        }
        let message = body["message"]
            .as_str()
            .map_or_else(|| body.to_string(), str::to_owned);
        Err(AdminError::Api {
            status: status.as_u16(),
            message,
        })
    }

    fn get(&self, path: &str) -> Result<Value, AdminError> {
        self.send(self.request(reqwest::Method::GET, path))
    }

    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, AdminError> {
        let request = self.request(method, path);
        self.send(match body {
            Some(body) => request.json(&body),
            None => request,
        })
    }
}

/// A path segment: queue and group names may hold anything.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn execute(args: AdminArgs) -> Result<(), AdminError> {
    let api = Api::new(&args)?;
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
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => format!("{:.1}", n.as_f64().unwrap_or(0.0)),
        other => other.to_string(),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
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
                cell(&q["consumers"]),
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
            "CONSUMERS",
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
                cell(&c["user"]),
                cell(&c["client_id"]),
            ]
        })
        .collect();
    table(
        &["ID", "PROTOCOL", "PEER", "TLS", "USER", "CLIENT_ID"],
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
