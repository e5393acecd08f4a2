//! `weir schedule`: the auditor's view of delayed messages (Zaqar's delayed
//! queues spec) on the data dir of a stopped broker. RocksDB allows one
//! process per data dir, so a running broker makes this fail cleanly.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use weir::config::parse_duration;
use weir::core::message::now_ms;
use weir::core::schedule::{self, ScheduleError, ScheduledMessage};
use weir::store::{ScheduleKey, Store, StoreError, StoreOptions};

#[derive(Args)]
pub struct ScheduleArgs {
    /// Data dir of a stopped broker.
    #[arg(long, value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
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
        /// Start at this key (as printed) or due time (epoch ms): pages through a long list.
        #[arg(long)]
        from: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
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
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("--data-dir is required")]
    NoDataDir,
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
    let dir = args.data_dir.ok_or(CliError::NoDataDir)?;
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
    match args.action {
        Action::List { queue, from, limit } => {
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
            let from = match from {
                Some(text) => parse_from(&text)?,
                None => schedule::FIRST_KEY,
            };
            let entries = schedule::list_stored(&store, queue, from, limit)?;
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
                    let next = schedule::next_key(last.key);
                    println!("(more: --from {})", schedule::format_key(&next));
                }
            }
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

fn print_entry(entry: &ScheduledMessage, names: &std::collections::HashMap<u32, String>, now: u64) {
    let queue = names
        .get(&entry.key.queue)
        .cloned()
        .unwrap_or_else(|| format!("#{} (gone)", entry.key.queue));
    let due_in = if entry.key.due_ms <= now {
        "due".to_owned()
    } else {
        format!("{:.1}s", (entry.key.due_ms - now) as f64 / 1000.0)
    };
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
