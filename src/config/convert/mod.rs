//! Turns the file as read (`raw`) into the typed [`Config`], checking ranges and cross-references.
//! Every default lives here, so an empty file means "all defaults".

mod limits;
mod listeners;
mod security;

use limits::{limits, timeout};
use listeners::{acceptors, http, websocket};
use security::{security, tls};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::memory::default_global_max_size;
use crate::core::settings::{AddressPattern, QueueSettings, SettingsTable};

use super::error::{ConfigError, KeyPath, Problem};
use super::queue_settings::{check_resolved, settings_override};
use super::raw::{
    RawBroker, RawByteLimit, RawConfig, RawConnectionFactory, RawDuration, RawFsync, RawSize,
    RawStore,
};
use super::units::{parse_duration, parse_size};
use super::{BrokerConfig, Config, ConnectionFactory, FsyncPolicy, StoreConfig};

pub(super) const DEFAULT_STOMP: &str = "127.0.0.1:61613";
pub(super) const DEFAULT_AMQP: &str = "127.0.0.1:5672";
/// Artemis's console port.
pub(super) const DEFAULT_HTTP: &str = "127.0.0.1:8161";
const DEFAULT_NAME: &str = "weir";
const DEFAULT_DATA_DIR: &str = "./weir-data";
/// Long enough to make guessing passwords slow, short enough not to bother a person.
const DEFAULT_LOGIN_FAILURE_DELAY: Duration = Duration::from_secs(1);
const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(2);
const DEFAULT_MAX_BATCH: u64 = 1_000;
const DEFAULT_HOLD_FOR_ACK: Duration = Duration::from_millis(5);
/// Artemis's default for the same setting.
const DEFAULT_MAX_DISK_USAGE: u64 = 90;
/// Room for RocksDB's own housekeeping (a memtable flush, a compaction) on
/// a disk too large for 10% to matter.
const DEFAULT_MIN_FREE_DISK: u64 = 64 << 20;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

pub(super) fn convert(raw: RawConfig) -> Result<Config, ConfigError> {
    let broker = broker(raw.broker)?;
    let limits = limits(&raw.limits)?;
    let store = store(&raw.store)?;
    let connection_factories = connection_factories(raw.connection_factories)?;
    let tls = raw.tls.map(tls).transpose()?;
    let acceptors = acceptors(raw.acceptors, &connection_factories, tls.is_some())?;
    let http = http(&raw.http, &acceptors, tls.is_some())?;
    let websocket = websocket(&raw.websocket, &acceptors, http.as_ref(), tls.is_some())?;
    let security = security(raw.users, &raw.security)?;
    if raw.grouping_handler.is_some() {
        return Err(refuse_grouping_handler());
    }

    // The broker-wide switches are the base that [queue_defaults] refines.
    let mut defaults = QueueSettings {
        auto_create: broker.auto_create_queues,
        default_prefetch: limits.default_prefetch,
        ..QueueSettings::default()
    };
    let defaults_key = KeyPath::root("queue_defaults");
    settings_override(&raw.queue_defaults, &defaults_key)?.apply_to(&mut defaults);
    check_resolved(&defaults, &defaults_key)?;

    let mut settings = SettingsTable::new(defaults);
    let mut checks = Vec::new();
    for (pattern, raw_over) in &raw.address_settings {
        let key = KeyPath::root("address_settings").field(pattern);
        if pattern.split('.').any(str::is_empty) {
            return Err(ConfigError::key(key, Problem::BadPattern(pattern.clone())));
        }
        settings.add(
            AddressPattern::new(pattern),
            settings_override(raw_over, &key)?,
        );
        checks.push((pattern.clone(), key));
    }

    // A declared queue's inline keys become an exact-name pattern added last: it is at
    // least as specific as any address_settings pattern matching that name, and the
    // table's stable sort lets the later entry win a tie.
    let mut queues = Vec::new();
    for (i, raw_queue) in raw.queues.into_iter().enumerate() {
        let (name, raw_over) = raw_queue.split();
        let key = KeyPath::root("queues").index(i);
        if name.is_empty() {
            return Err(ConfigError::key(key.field("name"), Problem::Empty));
        }
        if name.split('.').any(|w| w == "*" || w == "#") {
            return Err(ConfigError::key(
                key.field("name"),
                Problem::WildcardQueueName(name),
            ));
        }
        if queues.contains(&name) {
            return Err(ConfigError::key(
                key.field("name"),
                Problem::Duplicate(name),
            ));
        }
        settings.add(
            AddressPattern::new(&name),
            settings_override(&raw_over, &key)?,
        );
        checks.push((name.clone(), key));
        queues.push(name);
    }
    // Patterns combine, so check what each pattern and queue actually resolves to.
    for (name, key) in &checks {
        check_resolved(&settings.resolve(name), key)?;
    }

    Ok(Config {
        broker,
        acceptors,
        http,
        websocket,
        websocket_origins: super::websocket_origins::convert(&raw.websocket)?,
        store,
        limits,
        security,
        tls,
        connection_factories,
        settings,
        queues,
    })
}

fn broker(raw: RawBroker) -> Result<BrokerConfig, ConfigError> {
    let worker_threads = ranged(
        raw.worker_threads,
        default_worker_threads(),
        1,
        1024,
        &KeyPath::root("broker").field("worker_threads"),
    )?;
    let global_key = KeyPath::root("broker").field("global_max_size");
    let global_max_size = byte_limit(raw.global_max_size.as_ref(), &global_key)?
        .unwrap_or_else(default_global_max_size);
    Ok(BrokerConfig {
        global_max_size,
        name: raw.name.unwrap_or_else(|| DEFAULT_NAME.to_owned()),
        data_dir: raw
            .data_dir
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
        auto_create_queues: raw.auto_create_queues.unwrap_or(true),
        worker_threads: to_usize(worker_threads),
        shutdown_timeout: timeout(
            raw.shutdown_timeout.as_ref(),
            Duration::from_secs(10),
            false,
            &KeyPath::root("broker").field("shutdown_timeout"),
        )?,
    })
}

/// Half the CPU cores, at least one. The connections that share a queue do
/// better on one thread than spread over two (no lock handed between cores,
/// no wake-up across threads: on 2 cores 20-35% less CPU per message); the
/// other half is left to the store's writer, RocksDB's background jobs and
/// the kernel's network stack. Nothing blocking runs on these threads (paging
/// delayed messages in decodes on the blocking pool), so one worker keeps
/// delayed messages on time: lateness p99 2 ms for 500k due over 30 s.
pub fn default_worker_threads() -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores as u64 / 2).max(1)
}

fn store(raw: &RawStore) -> Result<StoreConfig, ConfigError> {
    let key = KeyPath::root("store");
    let window_key = key.field("batch_window");
    let fsync = match raw.fsync.unwrap_or(RawFsync::Always) {
        RawFsync::Batched => {
            let window = duration_or(raw.batch_window.as_ref(), DEFAULT_BATCH_WINDOW, &window_key)?;
            let (min, max) = (Duration::from_micros(1), Duration::from_secs(1));
            if !(min..=max).contains(&window) {
                return Err(ConfigError::key(
                    window_key,
                    Problem::DurationOutOfRange {
                        min,
                        max,
                        zero_allowed: false,
                    },
                ));
            }
            FsyncPolicy::Batched { window }
        }
        _ if raw.batch_window.is_some() => {
            return Err(ConfigError::key(
                window_key,
                Problem::BatchWindowWithoutBatching,
            ))
        }
        RawFsync::Always => FsyncPolicy::Always,
        RawFsync::Never => FsyncPolicy::Never,
    };
    let max_batch = ranged(
        raw.max_batch,
        DEFAULT_MAX_BATCH,
        1,
        100_000,
        &key.field("max_batch"),
    )?;
    let hold_key = key.field("hold_for_ack");
    let hold_for_ack = duration_or(raw.hold_for_ack.as_ref(), DEFAULT_HOLD_FOR_ACK, &hold_key)?;
    let hold_max = Duration::from_secs(1);
    if hold_for_ack > hold_max {
        return Err(ConfigError::key(
            hold_key,
            Problem::DurationOutOfRange {
                min: Duration::from_micros(1),
                max: hold_max,
                zero_allowed: true,
            },
        ));
    }
    let max_disk_usage = ranged(
        raw.max_disk_usage,
        DEFAULT_MAX_DISK_USAGE,
        1,
        100,
        &key.field("max_disk_usage"),
    )?;
    let min_free_disk = ranged_size(
        raw.min_free_disk.as_ref(),
        DEFAULT_MIN_FREE_DISK,
        0,
        u64::MAX,
        &key.field("min_free_disk"),
    )?;
    Ok(StoreConfig {
        fsync,
        max_batch: to_usize(max_batch),
        hold_for_ack,
        max_disk_usage: max_disk_usage as u8,
        min_free_disk,
    })
}

fn connection_factories(
    raw: BTreeMap<String, RawConnectionFactory>,
) -> Result<Vec<ConnectionFactory>, ConfigError> {
    raw.into_iter()
        .map(|(name, f)| {
            let key = KeyPath::root("connection_factories").field(&name);
            if name.is_empty() {
                return Err(ConfigError::key(key, Problem::Empty));
            }
            let autogroup = f.autogroup.unwrap_or(false);
            if let Some(id) = &f.group_id {
                if id.is_empty() {
                    return Err(ConfigError::key(key.field("group_id"), Problem::Empty));
                }
                if autogroup {
                    return Err(ConfigError::key(key, Problem::AutogroupAndGroupId));
                }
            }
            Ok(ConnectionFactory {
                name,
                autogroup,
                group_id: f.group_id,
            })
        })
        .collect()
}

/// Artemis's `grouping-handler` decides group ownership across a cluster. Weir has no
/// cluster yet, so the section could only be ignored: a setting with no effect is refused,
/// not accepted silently.
fn refuse_grouping_handler() -> ConfigError {
    ConfigError::key(
        KeyPath::root("grouping_handler"),
        Problem::NotSupportedYet(
            "clustered message grouping comes with clustering; a single broker groups on its own",
        ),
    )
}

pub(super) fn duration(raw: &RawDuration, key: &KeyPath) -> Result<Duration, ConfigError> {
    match raw {
        RawDuration::Millis(ms) => Ok(Duration::from_millis(*ms)),
        RawDuration::Text(t) => parse_duration(t).map_err(|e| ConfigError::key(key.clone(), e)),
    }
}

fn duration_or(
    raw: Option<&RawDuration>,
    default: Duration,
    key: &KeyPath,
) -> Result<Duration, ConfigError> {
    raw.map_or(Ok(default), |d| duration(d, key))
}

pub(super) fn ranged(
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
    key: &KeyPath,
) -> Result<u64, ConfigError> {
    let v = value.unwrap_or(default);
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ConfigError::key(
            key.clone(),
            Problem::OutOfRange { min, max },
        ))
    }
}

pub(super) fn ranged_size(
    raw: Option<&RawSize>,
    default: u64,
    min: u64,
    max: u64,
    key: &KeyPath,
) -> Result<u64, ConfigError> {
    let value = match raw {
        None => None,
        Some(RawSize::Bytes(b)) => Some(*b),
        Some(RawSize::Text(t)) => {
            Some(parse_size(t).map_err(|e| ConfigError::key(key.clone(), e))?)
        }
    };
    ranged(value, default, min, max, key)
}

/// A byte limit: `None` for `-1`, else a size of at least one byte.
pub(super) fn byte_limit(
    raw: Option<&RawByteLimit>,
    key: &KeyPath,
) -> Result<Option<u64>, ConfigError> {
    match raw {
        None | Some(RawByteLimit::Default) => Ok(None),
        Some(RawByteLimit::Size(size)) => ranged_size(Some(size), 0, 1, u64::MAX, key).map(Some),
    }
}

/// Every range checked above ends far below `usize::MAX` on the 64-bit targets we build for.
fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn socket_addr(text: &str, key: &KeyPath) -> Result<SocketAddr, ConfigError> {
    text.trim()
        .parse()
        .map_err(|_| ConfigError::key(key.clone(), Problem::NotASocketAddr(text.to_owned())))
}
