//! Turns the file as read (`raw`) into the typed [`Config`], checking ranges and cross-references.
//! Every default lives here, so an empty file means "all defaults".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::memory::default_global_max_size;
use crate::core::security::{
    CredentialError, Grants, Permissions, RoleNames, RoleSet, Secret, UserPolicy,
};
use crate::core::settings::{AddressPattern, QueueSettings, SettingsTable};

use super::error::{ConfigError, KeyPath, Problem};
use super::queue_settings::{check_resolved, settings_override};
use super::raw::{
    RawAcceptors, RawBroker, RawByteLimit, RawConfig, RawConnectionFactory, RawDuration, RawFsync,
    RawHttp, RawLimits, RawSecurity, RawSize, RawStore, RawTls, RawUser, RawWebSocket,
};
use super::units::{parse_duration, parse_size};
use super::{
    Acceptors, Access, BrokerConfig, ClientAuth, Config, ConnectionFactory, ExternalUser,
    FsyncPolicy, Http, Limits, Listener, Security, StoreConfig, Tls, User, WebSocket,
};

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

fn limits(raw: &RawLimits) -> Result<Limits, ConfigError> {
    let key = KeyPath::root("limits");
    let max_frame_size = ranged_size(
        raw.max_frame_size.as_ref(),
        10 * MIB,
        1024,
        GIB,
        &key.field("max_frame_size"),
    )?;
    let header_key = key.field("max_header_length");
    // The default follows a small max_frame_size down rather than clash with it.
    let max_header_length = ranged_size(
        raw.max_header_length.as_ref(),
        (10 * 1024).min(max_frame_size),
        64,
        MIB,
        &header_key,
    )?;
    if max_header_length > max_frame_size {
        return Err(ConfigError::key(
            header_key,
            Problem::Exceeds {
                value: max_header_length.to_string(),
                other: "max_frame_size",
                other_value: max_frame_size.to_string(),
            },
        ));
    }
    let heartbeat_key = key.field("heartbeat");
    let heartbeat = duration_or(
        raw.heartbeat.as_ref(),
        Duration::from_secs(10),
        &heartbeat_key,
    )?;
    let (hb_min, hb_max) = (Duration::from_millis(100), Duration::from_secs(3_600));
    if !heartbeat.is_zero() && !(hb_min..=hb_max).contains(&heartbeat) {
        return Err(ConfigError::key(
            heartbeat_key,
            Problem::DurationOutOfRange {
                min: hb_min,
                max: hb_max,
                zero_allowed: true,
            },
        ));
    }
    Ok(Limits {
        max_frame_size: to_usize(max_frame_size),
        max_headers: to_usize(ranged(
            raw.max_headers,
            1_000,
            1,
            100_000,
            &key.field("max_headers"),
        )?),
        max_header_length: to_usize(max_header_length),
        max_message_size: to_usize(ranged_size(
            raw.max_message_size.as_ref(),
            10 * MIB,
            1024,
            GIB,
            &key.field("max_message_size"),
        )?),
        max_connections: to_usize(ranged(
            raw.max_connections,
            10_000,
            1,
            1_000_000,
            &key.field("max_connections"),
        )?),
        heartbeat,
        default_prefetch: u32::try_from(ranged(
            raw.default_prefetch,
            1_000,
            1,
            1_000_000,
            &key.field("default_prefetch"),
        )?)
        .unwrap_or(u32::MAX),
        max_transaction_ops: to_usize(ranged(
            raw.max_transaction_ops,
            100_000,
            1,
            100_000_000,
            &key.field("max_transaction_ops"),
        )?),
        max_transaction_bytes: to_usize(ranged_size(
            raw.max_transaction_bytes.as_ref(),
            64 * MIB,
            1024,
            64 * GIB,
            &key.field("max_transaction_bytes"),
        )?),
        max_open_transactions: to_usize(ranged(
            raw.max_open_transactions,
            64,
            1,
            1_000_000,
            &key.field("max_open_transactions"),
        )?),
        max_connections_per_user: to_usize(ranged(
            raw.max_connections_per_user,
            0,
            0,
            1_000_000,
            &key.field("max_connections_per_user"),
        )?),
        max_connections_per_address: to_usize(ranged(
            raw.max_connections_per_address,
            0,
            0,
            1_000_000,
            &key.field("max_connections_per_address"),
        )?),
        connect_timeout: timeout(
            raw.connect_timeout.as_ref(),
            Duration::from_secs(30),
            false,
            &key.field("connect_timeout"),
        )?,
        amqp_open_timeout: timeout(
            raw.amqp_open_timeout.as_ref(),
            Duration::from_secs(10),
            false,
            &key.field("amqp_open_timeout"),
        )?,
        sasl_timeout: timeout(
            raw.sasl_timeout.as_ref(),
            Duration::from_secs(10),
            false,
            &key.field("sasl_timeout"),
        )?,
        frame_timeout: timeout(
            raw.frame_timeout.as_ref(),
            Duration::from_secs(60),
            true,
            &key.field("frame_timeout"),
        )?,
        max_subscriptions_per_connection: to_usize(ranged(
            raw.max_subscriptions_per_connection,
            10_000,
            1,
            10_000_000,
            &key.field("max_subscriptions_per_connection"),
        )?),
        max_sessions_per_connection: to_usize(ranged(
            raw.max_sessions_per_connection,
            256,
            1,
            65_536,
            &key.field("max_sessions_per_connection"),
        )?),
        max_links_per_session: to_usize(ranged(
            raw.max_links_per_session,
            1_000,
            1,
            1_000_000,
            &key.field("max_links_per_session"),
        )?),
        max_unsettled_per_link: to_usize(ranged(
            raw.max_unsettled_per_link,
            10_000,
            1,
            1_000_000,
            &key.field("max_unsettled_per_link"),
        )?),
        max_queues_per_user: to_usize(ranged(
            raw.max_queues_per_user,
            0,
            0,
            1_000_000,
            &key.field("max_queues_per_user"),
        )?),
    })
}

/// A timeout between 100ms and 1h (or zero, where `zero_allowed`: no limit).
fn timeout(
    raw: Option<&RawDuration>,
    default: Duration,
    zero_allowed: bool,
    key: &KeyPath,
) -> Result<Duration, ConfigError> {
    let value = duration_or(raw, default, key)?;
    let (min, max) = (Duration::from_millis(100), Duration::from_secs(3_600));
    if (value.is_zero() && zero_allowed) || (min..=max).contains(&value) {
        return Ok(value);
    }
    Err(ConfigError::key(
        key.clone(),
        Problem::DurationOutOfRange {
            min,
            max,
            zero_allowed,
        },
    ))
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

/// `tls_configured`: there is a `[tls]` section for listeners with `tls = true`.
/// The HTTP listener: on at its default address unless `enabled = false`; its address
/// must differ from every protocol listener's.
fn http(
    raw: &RawHttp,
    acceptors: &Acceptors,
    tls_configured: bool,
) -> Result<Option<Http>, ConfigError> {
    let key = KeyPath::root("http");
    let bind = socket_addr(
        raw.bind.as_deref().unwrap_or(DEFAULT_HTTP),
        &key.field("bind"),
    )?;
    let tls = raw.tls.unwrap_or(false);
    if tls && !tls_configured {
        return Err(ConfigError::key(
            key.field("tls"),
            Problem::TlsWithoutIdentity,
        ));
    }
    if !raw.enabled.unwrap_or(true) {
        return Ok(None);
    }
    check_free(bind, &key.field("bind"), acceptor_addresses(acceptors))?;
    Ok(Some(Http { bind, tls }))
}

/// Every protocol acceptor's address, with the key that sets it.
fn acceptor_addresses(acceptors: &Acceptors) -> impl Iterator<Item = (KeyPath, SocketAddr)> + '_ {
    [("stomp", acceptors.stomp), ("amqp", acceptors.amqp)]
        .into_iter()
        .filter_map(|(name, addr)| Some((KeyPath::root("acceptors").field(name), addr?)))
        .chain(acceptors.extra.iter().enumerate().map(|(i, l)| {
            (
                KeyPath::root("acceptors")
                    .field("extra")
                    .index(i)
                    .field("bind"),
                l.bind,
            )
        }))
}

/// `bind` (set at `key`) is none of `taken`; port 0 picks a free port, so it never clashes.
fn check_free(
    bind: SocketAddr,
    key: &KeyPath,
    taken: impl IntoIterator<Item = (KeyPath, SocketAddr)>,
) -> Result<(), ConfigError> {
    for (other, addr) in taken {
        if addr == bind && bind.port() != 0 {
            return Err(ConfigError::key(
                key.clone(),
                Problem::AddressInUse { addr, other },
            ));
        }
    }
    Ok(())
}

/// The WebSocket listener of its own: off unless `bind` is given; its address must differ
/// from every other listener's.
fn websocket(
    raw: &RawWebSocket,
    acceptors: &Acceptors,
    http: Option<&Http>,
    tls_configured: bool,
) -> Result<Option<WebSocket>, ConfigError> {
    let key = KeyPath::root("websocket");
    let tls = raw.tls.unwrap_or(false);
    if tls && !tls_configured {
        return Err(ConfigError::key(
            key.field("tls"),
            Problem::TlsWithoutIdentity,
        ));
    }
    let Some(text) = raw.bind.as_deref() else {
        return Ok(None);
    };
    let bind = socket_addr(text, &key.field("bind"))?;
    let http = http.map(|h| (KeyPath::root("http").field("bind"), h.bind));
    check_free(
        bind,
        &key.field("bind"),
        acceptor_addresses(acceptors).chain(http),
    )?;
    Ok(Some(WebSocket { bind, tls }))
}

fn acceptors(
    raw: RawAcceptors,
    factories: &[ConnectionFactory],
    tls_configured: bool,
) -> Result<Acceptors, ConfigError> {
    let key = KeyPath::root("acceptors");
    let main = |text: Option<String>, default: &str, field: &str| match text {
        None => socket_addr(default, &key.field(field)).map(Some),
        Some(t) if t.trim().is_empty() => Ok(None),
        Some(t) => socket_addr(&t, &key.field(field)).map(Some),
    };
    let stomp = main(raw.stomp, DEFAULT_STOMP, "stomp")?;
    let amqp = main(raw.amqp, DEFAULT_AMQP, "amqp")?;

    let mut bound: Vec<(SocketAddr, KeyPath)> = Vec::new();
    let mut claim = |addr: SocketAddr, at: KeyPath| {
        // Port 0 asks the OS for a fresh port, so it never collides.
        match bound.iter().find(|(a, _)| *a == addr && addr.port() != 0) {
            Some((_, other)) => Err(ConfigError::key(
                at,
                Problem::AddressInUse {
                    addr,
                    other: other.clone(),
                },
            )),
            None => {
                bound.push((addr, at));
                Ok(())
            }
        }
    };
    if let Some(a) = stomp {
        claim(a, key.field("stomp"))?;
    }
    if let Some(a) = amqp {
        claim(a, key.field("amqp"))?;
    }

    let mut names: HashSet<String> = ["stomp", "amqp"].map(str::to_owned).into();
    let mut extra = Vec::new();
    for (i, e) in raw.extra.into_iter().enumerate() {
        let ekey = key.field("extra").index(i);
        if e.name.is_empty() {
            return Err(ConfigError::key(ekey.field("name"), Problem::Empty));
        }
        if !names.insert(e.name.clone()) {
            return Err(ConfigError::key(
                ekey.field("name"),
                Problem::Duplicate(e.name),
            ));
        }
        let bind = socket_addr(&e.bind, &ekey.field("bind"))?;
        claim(bind, ekey.field("bind"))?;
        let mut protocols = Vec::new();
        for p in e.protocols {
            if !protocols.contains(&p) {
                protocols.push(p);
            }
        }
        if protocols.is_empty() {
            return Err(ConfigError::key(
                ekey.field("protocols"),
                Problem::NoProtocols,
            ));
        }
        if let Some(f) = &e.connection_factory {
            if !factories.iter().any(|cf| &cf.name == f) {
                return Err(ConfigError::key(
                    ekey.field("connection_factory"),
                    Problem::UnknownConnectionFactory(f.clone()),
                ));
            }
        }
        if e.tls && !tls_configured {
            return Err(ConfigError::key(
                ekey.field("tls"),
                Problem::TlsWithoutIdentity,
            ));
        }
        extra.push(Listener {
            name: e.name,
            bind,
            protocols,
            connection_factory: e.connection_factory,
            tls: e.tls,
        });
    }
    Ok(Acceptors { stomp, amqp, extra })
}

fn security(users: Vec<RawUser>, raw: &RawSecurity) -> Result<Security, ConfigError> {
    let mut out: Vec<User> = Vec::with_capacity(users.len());
    for (i, u) in users.into_iter().enumerate() {
        let key = KeyPath::root("users").index(i);
        if u.name.is_empty() {
            return Err(ConfigError::key(key.field("name"), Problem::Empty));
        }
        let secret = match (u.password, u.credential) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::key(key, Problem::PasswordAndCredential))
            }
            (None, None) => {
                return Err(ConfigError::key(
                    key,
                    Problem::Schema("missing field `credential` (or `password`)".into()),
                ))
            }
            (Some(p), None) if p.is_empty() => {
                return Err(ConfigError::key(key.field("password"), Problem::Empty))
            }
            (Some(p), None) => Secret::Password(p),
            (None, Some(c)) => Secret::Credential(c.parse().map_err(|e: CredentialError| {
                ConfigError::key(key.field("credential"), Problem::Credential(e))
            })?),
        };
        if out.iter().any(|o| o.name == u.name) {
            return Err(ConfigError::key(
                key.field("name"),
                Problem::Duplicate(u.name),
            ));
        }
        let per_user = |value: Option<u64>, field: &str| {
            value
                .map(|v| ranged(Some(v), 0, 0, 1_000_000, &key.field(field)).map(to_usize))
                .transpose()
        };
        let max_connections = per_user(u.max_connections, "max_connections")?;
        let max_queues = per_user(u.max_queues, "max_queues")?;
        for (j, role) in u.roles.iter().enumerate() {
            if role.is_empty() {
                return Err(ConfigError::key(
                    key.field("roles").index(j),
                    Problem::Empty,
                ));
            }
        }
        out.push(User {
            name: u.name,
            secret,
            roles: u.roles,
            max_connections,
            max_queues,
        });
    }
    let delay_key = KeyPath::root("security").field("login_failure_delay");
    let login_failure_delay = duration_or(
        raw.login_failure_delay.as_ref(),
        DEFAULT_LOGIN_FAILURE_DELAY,
        &delay_key,
    )?;
    let max_delay = Duration::from_secs(60);
    if login_failure_delay > max_delay {
        return Err(ConfigError::key(
            delay_key,
            Problem::DurationOutOfRange {
                min: Duration::from_millis(1),
                max: max_delay,
                zero_allowed: true,
            },
        ));
    }
    let access = access(&out, raw)?;
    Ok(Security {
        allow_anonymous: raw.allow_anonymous.unwrap_or(out.is_empty()),
        allow_anonymous_set: raw.allow_anonymous.is_some(),
        users: out,
        login_failure_delay,
        access,
        require_tls_for_passwords: raw.require_tls_for_passwords.unwrap_or(false),
    })
}

/// Roles numbered, each user's roles and limits, and the permission table. A role that
/// is granted something but that no user (nor `anonymous_roles`) holds is refused: it is
/// most likely a typo, and as written it would grant nothing.
fn access(users: &[User], raw: &RawSecurity) -> Result<Access, ConfigError> {
    let mut names = RoleNames::default();
    let too_many = |key: KeyPath| {
        ConfigError::key(
            key,
            Problem::OutOfRange {
                min: 1,
                max: RoleSet::MAX_ROLES as u64,
            },
        )
    };
    let mut policies = HashMap::new();
    for (i, user) in users.iter().enumerate() {
        let mut roles = RoleSet::default();
        for role in &user.roles {
            let key = KeyPath::root("users").index(i).field("roles");
            roles = roles.with(names.number(role).ok_or_else(|| too_many(key))?);
        }
        policies.insert(
            user.name.clone(),
            UserPolicy {
                roles,
                max_queues: user.max_queues,
            },
        );
    }
    let mut anonymous_roles = RoleSet::default();
    for role in &raw.anonymous_roles {
        let key = KeyPath::root("security").field("anonymous_roles");
        if role.is_empty() {
            return Err(ConfigError::key(key, Problem::Empty));
        }
        anonymous_roles = anonymous_roles.with(names.number(role).ok_or_else(|| too_many(key))?);
    }
    let mut permissions = Permissions::default();
    for (pattern, raw_grants) in &raw.permissions {
        let key = KeyPath::root("security")
            .field("permissions")
            .field(pattern);
        if pattern.split('.').any(str::is_empty) {
            return Err(ConfigError::key(key, Problem::BadPattern(pattern.clone())));
        }
        let mut grants = Grants::default();
        for (permission, roles) in raw_grants.grants() {
            let mut set = RoleSet::default();
            for role in roles {
                let number = names.get(role).ok_or_else(|| {
                    ConfigError::key(
                        key.field(permission.key()),
                        Problem::UnknownRole(role.clone()),
                    )
                })?;
                set = set.with(number);
            }
            grants.grant(permission, set);
        }
        permissions.add(AddressPattern::new(pattern), grants);
    }
    Ok(Access {
        permissions,
        users: policies,
        anonymous_roles,
    })
}

/// The files must be named here; whether they hold a usable identity is checked when the
/// server loads them (at start and on SIGHUP).
fn tls(raw: RawTls) -> Result<Tls, ConfigError> {
    let key = KeyPath::root("tls");
    let file = |value: Option<PathBuf>, name: &str| match value {
        None => Err(ConfigError::key(
            key.field(name),
            Problem::Schema(format!("missing: [tls] needs `{name}`")),
        )),
        Some(p) if p.as_os_str().is_empty() => {
            Err(ConfigError::key(key.field(name), Problem::Empty))
        }
        Some(p) => Ok(p),
    };
    let cert_file = file(raw.cert_file, "cert_file")?;
    let key_file = file(raw.key_file, "key_file")?;
    let ca_file = raw.ca_file.map(|p| file(Some(p), "ca_file")).transpose()?;
    let client_auth = raw.client_auth.unwrap_or(ClientAuth::None);
    if client_auth != ClientAuth::None && ca_file.is_none() {
        return Err(ConfigError::key(
            key.field("client_auth"),
            Problem::ClientAuthWithoutCa,
        ));
    }
    Ok(Tls {
        cert_file,
        key_file,
        ca_file,
        client_auth,
        external_user: raw.external_user.unwrap_or(ExternalUser::Cn),
    })
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
