//! `weir schedule`: the auditor's view of delayed messages (Zaqar's delayed
//! queues spec). It asks the running broker through its management API (as
//! `weir admin` does), or with `--data-dir` opens the data dir of a stopped broker.
//! RocksDB allows one process per data dir, so a running broker makes the offline
//! mode fail cleanly.

use super::api::{segment, AdminError, Api, ApiArgs};
use super::broker::{cell, table};
use base64::Engine as _;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use weir::config::parse_duration;
use weir::core::message::now_ms;
use weir::core::schedule::{
    self, HeaderEdit, HeaderEditError, MessageEdit, PropertyEntry, PropertyValue, ScheduleError,
    ScheduledDetail, ScheduledMessage,
};
use weir::store::{ScheduleKey, Store, StoreError, StoreOptions};

#[derive(Args)]
pub struct ScheduleArgs {
    /// Data dir of a stopped broker: work on it offline instead of asking the running
    /// broker at --url.
    #[arg(long, value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    api: ApiArgs,
    /// Print the API's JSON instead of a table (running broker).
    #[arg(long, global = true, conflicts_with = "data_dir")]
    json: bool,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// List waiting messages by due time.
    List {
        /// Only this queue's messages.
        #[arg(long)]
        queue: Option<String>,
        /// Start at this key (as printed) or due time (epoch ms); a running broker takes a
        /// due time only.
        #[arg(long)]
        from: Option<String>,
        /// Only messages due before this time (epoch ms).
        #[arg(long, value_name = "MS")]
        to: Option<u64>,
        /// Start after this key (as printed): pages through a long list.
        #[arg(long, value_name = "KEY")]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show one waiting message: its queue, due time, headers, properties and body.
    View {
        /// The key printed by `list` (due:queue:seq).
        key: String,
    },
    /// Remove a waiting message for good.
    Cancel {
        /// The key printed by `list` (due:queue:seq).
        key: String,
    },
    /// Move a waiting message to another due time.
    Reschedule {
        key: String,
        /// New due time, epoch milliseconds.
        #[arg(long, conflicts_with = "delay", required_unless_present = "delay")]
        at: Option<u64>,
        /// New due time relative to now, e.g. 30s, 15m, 0s (deliver at next start).
        #[arg(long = "in", value_name = "DURATION")]
        delay: Option<String>,
    },
    /// Change a waiting message's properties (STOMP headers, AMQP application
    /// properties), standard headers or body before it is due; it keeps its key and
    /// due time.
    Edit {
        key: String,
        #[command(flatten)]
        change: EditArgs,
    },
}

#[derive(Args)]
#[group(required = true, multiple = true)]
struct EditArgs {
    /// Set a property to a text value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Set a property to a whole number (repeatable).
    #[arg(long = "set-int", value_name = "NAME=N")]
    set_int: Vec<String>,
    /// Set a property to true or false (repeatable).
    #[arg(long = "set-bool", value_name = "NAME=BOOL")]
    set_bool: Vec<String>,
    /// Remove a property (repeatable).
    #[arg(long, value_name = "NAME")]
    unset: Vec<String>,
    /// Drop every property first (the --set ones are then the only ones).
    #[arg(long)]
    clear_properties: bool,
    /// Set a standard header (repeatable): priority, expires_ms, ttl_ms, correlation_id,
    /// reply_to, content_type, subject, group_id, group_seq. The message id, queue,
    /// sender and due time cannot change.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    header: Vec<String>,
    /// Clear a standard header (repeatable), e.g. expires_ms for no expiry.
    #[arg(long = "clear-header", value_name = "NAME")]
    clear_header: Vec<String>,
    /// The new body, as text.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// The new body, the bytes of this file.
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
}

impl EditArgs {
    fn changes_properties(&self) -> bool {
        self.clear_properties
            || !(self.set.is_empty()
                && self.set_int.is_empty()
                && self.set_bool.is_empty()
                && self.unset.is_empty())
    }

    /// The message's properties with the changes applied, in their order,
    /// a changed one where it was and a new one at the end.
    fn properties(&self, current: Vec<PropertyEntry>) -> Result<Vec<PropertyEntry>, CliError> {
        let mut out = match self.clear_properties {
            true => Vec::new(),
            false => current,
        };
        out.retain(|p| !self.unset.contains(&p.name));
        let mut set =
            |name: &str, value: PropertyValue| match out.iter_mut().find(|p| p.name == name) {
                Some(p) => p.value = value,
                None => out.push(PropertyEntry {
                    name: name.to_owned(),
                    value,
                }),
            };
        for pair in &self.set {
            let (name, value) = split_pair(pair)?;
            set(name, PropertyValue::String(value.to_owned()));
        }
        for pair in &self.set_int {
            let (name, value) = split_pair(pair)?;
            let n = value
                .trim()
                .parse()
                .map_err(|_| CliError::BadValue(pair.clone(), "a whole number"))?;
            set(name, PropertyValue::Int(n));
        }
        for pair in &self.set_bool {
            let (name, value) = split_pair(pair)?;
            let b = value
                .trim()
                .parse()
                .map_err(|_| CliError::BadValue(pair.clone(), "true or false"))?;
            set(name, PropertyValue::Bool(b));
        }
        Ok(out)
    }

    /// The header changes as the API takes them: a JSON object of names to
    /// values, numbers for the numeric headers, null to clear.
    fn headers(&self) -> Result<serde_json::Map<String, Value>, CliError> {
        const NUMERIC: [&str; 4] = ["priority", "expires_ms", "ttl_ms", "group_seq"];
        let mut out = serde_json::Map::new();
        for pair in &self.header {
            let (name, value) = split_pair(pair)?;
            let value = match NUMERIC.contains(&name) {
                true => json!(value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| CliError::BadValue(pair.clone(), "a whole number"))?),
                false => Value::String(value.to_owned()),
            };
            out.insert(name.to_owned(), value);
        }
        for name in &self.clear_header {
            out.insert(name.clone(), Value::Null);
        }
        Ok(out)
    }

    /// The new body, if one is given.
    fn body(&self) -> Result<Option<Vec<u8>>, CliError> {
        match (&self.body, &self.body_file) {
            (Some(text), _) => Ok(Some(text.clone().into_bytes())),
            (None, Some(path)) => std::fs::read(path)
                .map(Some)
                .map_err(|e| CliError::BodyFile(path.display().to_string(), e)),
            (None, None) => Ok(None),
        }
    }
}

fn split_pair(pair: &str) -> Result<(&str, &str), CliError> {
    match pair.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name, value)),
        _ => Err(CliError::BadPair(pair.to_owned())),
    }
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Api(#[from] AdminError),
    #[error("--from: '{0}' is not a due time in ms (a running broker pages with --after KEY)")]
    FromNotATime(String),
    #[error("{0} does not exist")]
    Missing(String),
    #[error("the data dir {0} is in use: stop the broker before editing its schedule")]
    InUse(String),
    #[error("cannot open the store in {0}: {1}")]
    Open(String, StoreError),
    #[error("'{0}' is not a key like 1700000000000:3:42 or a due time in ms")]
    BadKey(String),
    #[error("no queue named '{0}' in this data dir")]
    UnknownQueue(String),
    #[error("--in: {0}")]
    BadDelay(String),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    #[error("'{0}' is not NAME=VALUE")]
    BadPair(String),
    #[error("'{0}': the value must be {1}")]
    BadValue(String, &'static str),
    #[error("--body-file {0}: {1}")]
    BodyFile(String, std::io::Error),
    #[error("--header {0}")]
    Header(#[from] HeaderEditError),
    #[error("the broker's answer has no properties list: {0}")]
    Answer(String),
}

pub fn run(args: ScheduleArgs) -> ExitCode {
    match execute(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir schedule: {e}");
            ExitCode::FAILURE
        }
    }
}

fn execute(args: ScheduleArgs) -> Result<(), CliError> {
    match args.data_dir {
        Some(dir) => offline(dir, args.action),
        None => live(&Api::new(&args.api)?, args.action, args.json),
    }
}

/// Through the running broker's management API; the API checks the user's permissions
/// (`view` to list, `manage` on the message's queue to change it).
fn live(api: &Api, action: Action, as_json: bool) -> Result<(), CliError> {
    let answer = match action {
        Action::List {
            queue,
            from,
            to,
            after,
            limit,
        } => {
            let mut query = format!("?limit={limit}&preview=0");
            if let Some(to) = to {
                query.push_str(&format!("&to={to}"));
            }
            if let Some(queue) = queue {
                query.push_str(&format!("&queue={}", segment(&queue)));
            }
            if let Some(from) = from {
                let ms: u64 = from
                    .trim()
                    .parse()
                    .map_err(|_| CliError::FromNotATime(from))?;
                query.push_str(&format!("&from={ms}"));
            }
            if let Some(after) = after {
                query.push_str(&format!("&cursor={}", segment(&after)));
            }
            let page = api.get(&format!("/api/schedule{query}"))?;
            if !as_json {
                print_page(&page);
            }
            page
        }
        Action::View { key } => {
            let detail = api.get(&format!("/api/schedule/{}", segment(&key)))?;
            if !as_json {
                print!("{}", detail_text(&detail, now_ms()));
            }
            detail
        }
        Action::Cancel { key } => {
            let path = format!("/api/schedule/{}", segment(&key));
            let done = api.call(reqwest::Method::DELETE, &path, None)?;
            if !as_json {
                println!("cancelled {}", text(&done["id"]));
            }
            done
        }
        Action::Reschedule { key, at, delay } => {
            let body = match (at, delay) {
                (Some(at), _) => json!({ "due_ms": at }),
                (None, Some(text)) => {
                    let d = parse_duration(&text).map_err(|e| CliError::BadDelay(e.to_string()))?;
                    json!({ "delay_ms": d.as_millis() as u64 })
                }
                (None, None) => json!({ "delay_ms": 0 }),
            };
            let path = format!("/api/schedule/{}/reschedule", segment(&key));
            let done = api.call(reqwest::Method::POST, &path, Some(body))?;
            if !as_json {
                println!("rescheduled {key} -> {}", text(&done["id"]));
            }
            done
        }
        Action::Edit { key, change } => {
            let path = format!("/api/schedule/{}", segment(&key));
            let mut body = serde_json::Map::new();
            if change.changes_properties() {
                // The API replaces every property: read them, change them, send them
                // all back. An edit by someone else in between is overwritten.
                let current = api.get(&path)?;
                let current: Vec<PropertyEntry> =
                    serde_json::from_value(current["properties"].clone())
                        .map_err(|e| CliError::Answer(e.to_string()))?;
                let properties = change.properties(current)?;
                body.insert("properties".into(), json!(properties));
            }
            if let Some(bytes) = change.body()? {
                let field = match String::from_utf8(bytes) {
                    Ok(text) => ("body", text),
                    Err(e) => (
                        "body_base64",
                        base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                    ),
                };
                body.insert(field.0.into(), Value::String(field.1));
            }
            let headers = change.headers()?;
            if !headers.is_empty() {
                body.insert("headers".into(), Value::Object(headers));
            }
            let done = api.call(reqwest::Method::PATCH, &path, Some(Value::Object(body)))?;
            if !as_json {
                println!("edited {}", text(&done["id"]));
            }
            done
        }
    };
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
    }
    Ok(())
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// A page of `/api/schedule` as the offline listing prints its entries.
fn print_page(page: &Value) {
    println!(
        "{:<32} {:<20} {:>12} {:>8} {:>6}  message-id",
        "key", "queue", "due in", "bytes", "kept"
    );
    let now = now_ms();
    for item in page["items"].as_array().into_iter().flatten() {
        let due = item["due_ms"].as_u64().unwrap_or(0);
        println!(
            "{:<32} {:<20} {:>12} {:>8} {:>6}  {}",
            text(&item["id"]),
            text(&item["queue"]),
            due_in(due, now),
            item["size"].as_u64().unwrap_or(0),
            if item["durable"] == true {
                "yes"
            } else {
                "maybe"
            },
            item["message_id"].as_str().unwrap_or("-")
        );
    }
    if let Some(next) = page["next"].as_str() {
        println!("(more: --after {next})");
    }
}

fn due_in(due_ms: u64, now: u64) -> String {
    if due_ms <= now {
        "due".to_owned()
    } else {
        format!("{:.1}s", (due_ms - now) as f64 / 1000.0)
    }
}

/// On the data dir of a stopped broker.
fn offline(dir: PathBuf, action: Action) -> Result<(), CliError> {
    let shown = dir.display().to_string();
    if !dir.join("CURRENT").exists() {
        return Err(CliError::Missing(format!("a weir store in {shown}")));
    }
    let store = Store::open(&dir, StoreOptions::default()).map_err(|e| match &e {
        // RocksDB's LOCK file is held by the running broker.
        StoreError::Rocks(r) if r.to_string().to_ascii_lowercase().contains("lock") => {
            CliError::InUse(shown.clone())
        }
        _ => CliError::Open(shown.clone(), e),
    })?;
    let names = schedule::queue_names(&store)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(CliError::Runtime)?;
    match action {
        Action::List {
            queue,
            from,
            to,
            after,
            limit,
        } => {
            let queue = match queue {
                Some(name) => Some(
                    names
                        .iter()
                        .find(|(_, n)| **n == name)
                        .map(|(id, _)| *id)
                        .ok_or(CliError::UnknownQueue(name))?,
                ),
                None => None,
            };
            let from = match (after, from) {
                (Some(after), _) => {
                    schedule::next_key(schedule::parse_key(&after).ok_or(CliError::BadKey(after))?)
                }
                (None, Some(text)) => parse_from(&text)?,
                (None, None) => schedule::FIRST_KEY,
            };
            let mut entries = schedule::list_stored(&store, queue, from, limit)?;
            // In due order: what is due at `to` or later ends the list.
            if let Some(to) = to {
                entries.retain(|e| e.key.due_ms < to);
            }
            println!(
                "{:<32} {:<20} {:>12} {:>8} {:>6}  message-id",
                "key", "queue", "due in", "bytes", "kept"
            );
            let now = now_ms();
            for entry in &entries {
                print_entry(entry, &names, now);
            }
            if entries.len() == limit {
                if let Some(last) = entries.last() {
                    println!("(more: --after {})", schedule::format_key(&last.key));
                }
            }
        }
        Action::View { key } => {
            let key = schedule::parse_key(&key).ok_or(CliError::BadKey(key))?;
            let entry = schedule::read_stored(&store, key)?
                .ok_or_else(|| ScheduleError::NotFound(schedule::format_key(&key)))?;
            print!("{}", detail_text(&offline_detail(&entry, &names), now_ms()));
        }
        Action::Cancel { key } => {
            let key = schedule::parse_key(&key).ok_or(CliError::BadKey(key))?;
            let entry = runtime.block_on(schedule::cancel_stored(&store, key))?;
            println!("cancelled {}", schedule::format_key(&entry.key));
        }
        Action::Reschedule { key, at, delay } => {
            let key = schedule::parse_key(&key).ok_or(CliError::BadKey(key))?;
            let due = match (at, delay) {
                (Some(at), _) => at,
                (None, Some(text)) => {
                    let d = parse_duration(&text).map_err(|e| CliError::BadDelay(e.to_string()))?;
                    now_ms().saturating_add(d.as_millis() as u64)
                }
                (None, None) => now_ms(),
            };
            let entry = runtime.block_on(schedule::reschedule_stored(&store, key, due))?;
            println!(
                "rescheduled {} -> {}",
                schedule::format_key(&key),
                schedule::format_key(&entry.key)
            );
        }
        Action::Edit { key, change } => {
            let key = schedule::parse_key(&key).ok_or(CliError::BadKey(key))?;
            let properties = match change.changes_properties() {
                true => {
                    let entry = schedule::read_stored(&store, key)?
                        .ok_or_else(|| ScheduleError::NotFound(schedule::format_key(&key)))?;
                    Some(change.properties(PropertyEntry::all_of(&entry.message))?)
                }
                false => None,
            };
            let edit = MessageEdit {
                properties,
                body: change.body()?.map(bytes::Bytes::from),
                headers: HeaderEdit::from_json(&change.headers()?, now_ms())?,
            };
            let entry = runtime.block_on(schedule::edit_stored(&store, key, edit))?;
            println!("edited {}", schedule::format_key(&entry.key));
        }
    }
    Ok(())
}

fn parse_from(text: &str) -> Result<ScheduleKey, CliError> {
    if let Some(key) = schedule::parse_key(text) {
        return Ok(key);
    }
    text.trim()
        .parse::<u64>()
        .map(|due_ms| ScheduleKey {
            due_ms,
            queue: 0,
            seq: 0,
        })
        .map_err(|_| CliError::BadKey(text.to_owned()))
}

fn queue_name(names: &HashMap<u32, String>, id: u32) -> String {
    names
        .get(&id)
        .cloned()
        .unwrap_or_else(|| format!("#{id} (gone)"))
}

fn print_entry(entry: &ScheduledMessage, names: &HashMap<u32, String>, now: u64) {
    let queue = queue_name(names, entry.key.queue);
    let due_in = due_in(entry.key.due_ms, now);
    // Non-persistent messages are dropped at the next start unless their queue is durable.
    let kept = if entry.durable { "yes" } else { "maybe" };
    println!(
        "{:<32} {:<20} {:>12} {:>8} {:>6}  {}",
        schedule::format_key(&entry.key),
        queue,
        due_in,
        entry.message.body.len(),
        kept,
        entry.message.message_id.as_deref().unwrap_or("-")
    );
}

/// A stopped broker's message in the shape `GET /api/schedule/{id}` answers, so both
/// modes print it alike.
fn offline_detail(entry: &ScheduledMessage, names: &HashMap<u32, String>) -> Value {
    let detail = ScheduledDetail::new(entry, queue_name(names, entry.key.queue));
    let mut value = serde_json::to_value(&detail).unwrap_or_default();
    value["body_base64"] = json!(detail.body_base64());
    value
}

/// Bytes of a binary body shown in hex: enough to recognise a format by its start.
const HEX_PREVIEW: usize = 32;

/// One message as `weir schedule view` prints it: its fields as a FIELD VALUE table,
/// then the body.
fn detail_text(detail: &Value, now: u64) -> String {
    let due = detail["due_ms"].as_u64().unwrap_or(0);
    let mut rows = vec![
        vec!["key".to_owned(), cell(&detail["id"])],
        vec!["queue".to_owned(), cell(&detail["queue"])],
        vec![
            "due_ms".to_owned(),
            match due > now {
                true => format!("{due} (in {})", due_in(due, now)),
                false => format!("{due} (due)"),
            },
        ],
        vec!["enqueued_ms".to_owned(), cell(&detail["enqueued_ms"])],
        vec!["message_id".to_owned(), cell(&detail["message_id"])],
        vec!["group_id".to_owned(), cell(&detail["group_id"])],
        vec!["delivery_count".to_owned(), cell(&detail["delivery_count"])],
        vec![
            "kept".to_owned(),
            // Non-persistent messages are dropped at the next start unless their queue is durable.
            match detail["durable"] == true {
                true => "yes".to_owned(),
                false => "maybe".to_owned(),
            },
        ],
    ];
    for (name, value) in detail["headers"].as_object().into_iter().flatten() {
        rows.push(vec![format!("header.{name}"), cell(value)]);
    }
    for property in detail["properties"].as_array().into_iter().flatten() {
        rows.push(vec![
            format!("property.{}", cell(&property["name"])),
            property_text(&property["value"]),
        ]);
    }
    let mut out = table(&["FIELD", "VALUE"], rows);
    let size = detail["size"].as_u64().unwrap_or(0);
    match detail["body_text"].as_str() {
        Some(text) => {
            out.push_str(&format!("\nbody ({size} bytes):\n{text}"));
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        None => {
            let bytes = detail["body_base64"]
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .unwrap_or_default();
            let shown = bytes.len().min(HEX_PREVIEW);
            out.push_str(&format!(
                "\nbody ({size} bytes, not UTF-8; the first {shown} in hex):\n{}\n",
                hex(&bytes[..shown])
            ));
        }
    }
    out
}

/// A property's value, its type beside it where the text alone would not say.
fn property_text(value: &Value) -> String {
    let kind = value["type"].as_str().unwrap_or("?");
    match kind {
        "string" => cell(&value["value"]),
        "null" => "null".to_owned(),
        "binary" => {
            let bytes: Vec<u8> = value["value"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            format!("{} (binary)", hex(&bytes))
        }
        _ => format!("{} ({kind})", value["value"]),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_properties_show_their_type_and_binary_shows_hex() {
        let shown = |v: Value| property_text(&v);
        assert_eq!(shown(json!({"type": "string", "value": "red"})), "red");
        assert_eq!(shown(json!({"type": "int", "value": 2})), "2 (int)");
        assert_eq!(shown(json!({"type": "bool", "value": true})), "true (bool)");
        assert_eq!(shown(json!({"type": "null"})), "null");
        assert_eq!(
            shown(json!({"type": "binary", "value": [0, 171, 255]})),
            "00 ab ff (binary)"
        );
    }

    #[test]
    fn a_binary_body_is_counted_and_previewed_in_hex() {
        let detail = json!({
            "id": "5:1:2", "due_ms": 5, "size": 40, "body_text": null,
            "body_base64": base64::engine::general_purpose::STANDARD.encode([7u8; 40]),
        });
        let text = detail_text(&detail, 10);
        assert!(text.contains("5 (due)"), "{text}");
        let expected = format!(
            "\nbody (40 bytes, not UTF-8; the first 32 in hex):\n{}\n",
            ["07"; 32].join(" ")
        );
        assert!(text.ends_with(&expected), "{text}");
    }
}
