//! Wires config, store, core and protocols together: acceptors, a connection
//! limit, TLS, protocol sniffing on shared ports, and graceful shutdown.

mod connection;
pub mod http;
mod sniff;
pub mod tls;
pub mod websocket;

use crate::config::{self, Config, Listener};
use crate::core::factory::ConnectionFactory;
use crate::core::schedule::{Schedule, ScheduleError, ScheduleOptions};
use crate::core::security::{Authenticator, Authorizer, CredentialError, Secret};
use crate::core::{Broker, BrokerOptions, CoreError, RecoveryStatus, TransactionLimits};
use crate::http::ListenerInfo;
use crate::protocol::admission::{Admission, AdmissionLimits};
use crate::protocol::amqp::{AmqpOptions, ContainerRegistry};
use crate::protocol::stomp::{self, StompOptions};
use crate::store::{DiskLimits, FsyncPolicy, Store, StoreError, StoreMemory, StoreOptions};
use connection::{Options, TlsMode};
use http::{HttpListener, RouterListener};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tls::{TlsContext, TlsError};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, Semaphore};

/// Sockets beyond `max_connections` that may be in their handshake at once, most of them
/// to be refused in their protocol; past that a new socket is closed at once.
const REFUSAL_ROOM: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot open the store in {path}: {source}")]
    Store { path: String, source: StoreError },
    #[error("cannot recover the broker: {0}")]
    Core(#[from] CoreError),
    #[error("cannot recover the delay schedule: {0}")]
    Schedule(#[from] ScheduleError),
    #[error("cannot listen on {addr} ({name}): {source}")]
    Bind {
        name: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot load the users: {0}")]
    Users(#[from] CredentialError),
    #[error(
        "not listening on {addr} ({name}): anonymous clients are allowed by default only on \
         loopback addresses; add [[users]] to require logins, or set allow_anonymous = true \
         under [security] to accept anonymous clients from the network"
    )]
    AnonymousExposed { name: String, addr: SocketAddr },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("http.tls = true needs the [tls] section")]
    HttpTlsWithoutIdentity,
    #[error("websocket.tls = true needs the [tls] section")]
    WebSocketTlsWithoutIdentity,
}

/// A running broker: its listeners' bound addresses and a shutdown switch.
pub struct Server {
    pub broker: Broker,
    pub bound: Vec<(String, SocketAddr)>,
    shutdown: broadcast::Sender<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Every connection task holds a clone; all gone means every connection is closed.
    open: mpsc::Sender<()>,
    closed: mpsc::Receiver<()>,
    shutdown_timeout: Duration,
    tls: Option<Arc<TlsContext>>,
    http: Option<HttpListener>,
    /// The WebSocket listener of its own, when configured, and what it serves.
    websocket: Option<(RouterListener, Arc<websocket::Endpoint>)>,
}

/// What starts before recovery: the TLS identity and the management HTTP listener
/// (whose health checks then tell a recovering broker from a dead one).
pub struct Early {
    tls: Option<Arc<TlsContext>>,
    http: Option<HttpListener>,
    recovery: Arc<RecoveryStatus>,
}

impl Early {
    /// Checks the anonymous exposure of every listener, loads `[tls]` and starts the
    /// HTTP listener (answering 503 until the server is started).
    pub async fn start(config: &Config) -> Result<Early, ServerError> {
        Self::start_showing(config, RecoveryStatus::new()).await
    }

    /// As [`Early::start`], showing `recovery` (that of a broker already recovered).
    async fn start_showing(
        config: &Config,
        recovery: Arc<RecoveryStatus>,
    ) -> Result<Early, ServerError> {
        check_anonymous_exposure(config)?;
        let tls = config
            .tls()
            .map(TlsContext::load)
            .transpose()?
            .map(Arc::new);
        if let Some(context) = &tls {
            // Ends when the context is dropped, with the server.
            tokio::spawn(tls::watch(Arc::downgrade(context)));
        }
        let http = match config.http() {
            Some(settings) => {
                Some(HttpListener::start(*settings, tls.clone(), recovery.clone()).await?)
            }
            None => None,
        };
        Ok(Early {
            tls,
            http,
            recovery,
        })
    }

    /// Where [`open_broker`] shows how far recovery has come, for `/health/ready`.
    pub fn recovery(&self) -> Arc<RecoveryStatus> {
        self.recovery.clone()
    }
}

pub fn store_options(config: &Config) -> StoreOptions {
    let fsync = match config.store().fsync {
        config::FsyncPolicy::Always => FsyncPolicy::Always,
        config::FsyncPolicy::Batched { window } => FsyncPolicy::Batched { window },
        config::FsyncPolicy::Never => FsyncPolicy::Never,
    };
    StoreOptions {
        fsync,
        max_batch: config.store().max_batch,
        hold_for_ack: config.store().hold_for_ack,
        disk_limits: DiskLimits {
            max_usage_percent: config.store().max_disk_usage,
            min_free: config.store().min_free_disk,
        },
        memory: StoreMemory::for_budget(Some(config.broker().global_max_size)),
        ..StoreOptions::default()
    }
}

/// Opens the store and recovers the broker from it, with its delay schedule
/// (whose timer runs on the current Tokio runtime).
pub fn open_broker(config: &Config) -> Result<Broker, ServerError> {
    open_broker_showing(config, RecoveryStatus::new())
}

/// As [`open_broker`], showing in `recovery` how far it has come meanwhile (for the
/// HTTP listener that [`Early::start`] started before it).
pub fn open_broker_showing(
    config: &Config,
    recovery: Arc<RecoveryStatus>,
) -> Result<Broker, ServerError> {
    let dir = config.data_dir();
    std::fs::create_dir_all(dir).map_err(|source| ServerError::DataDir {
        path: dir.display().to_string(),
        source,
    })?;
    let store = Store::open(dir, store_options(config)).map_err(|source| ServerError::Store {
        path: dir.display().to_string(),
        source,
    })?;
    let auth = authenticator(config)?;
    let broker = Broker::open(
        store,
        BrokerOptions {
            settings: config.settings_table(),
            auth,
            authorizer: authorizer(config),
            declared: config.declared_queues(),
            // The store's memory is sized from the same budget and counted in it.
            global_max_size: Some(StoreMemory::messages_share(config.broker().global_max_size)),
            factories: config
                .connection_factories()
                .iter()
                .map(|f| ConnectionFactory {
                    name: f.name.clone(),
                    autogroup: f.autogroup,
                    group_id: f.group_id.as_deref().map(Arc::from),
                })
                .collect(),
            recovery,
        },
    )?;
    broker.set_schedule(Schedule::open(&broker, ScheduleOptions::default())?);
    Ok(broker)
}

fn authenticator(config: &Config) -> Result<Authenticator, CredentialError> {
    for user in config.users() {
        if matches!(user.secret, Secret::Password(_)) {
            tracing::warn!(
                user = %user.name,
                "plain-text password in the config: replace it with the `credential` that \
                 `weir user add` prints"
            );
        }
    }
    Ok(Authenticator::new(
        config
            .users()
            .iter()
            .map(|u| (u.name.clone(), u.secret.clone())),
        config.allow_anonymous(),
        config.security().login_failure_delay,
    )?
    .require_tls_for_passwords(config.security().require_tls_for_passwords))
}

fn authorizer(config: &Config) -> Authorizer {
    let access = &config.security().access;
    Authorizer::new(
        access.permissions.clone(),
        access.users.clone(),
        access.anonymous_roles,
        config.limits().max_queues_per_user,
    )
}

/// Anonymous access is on by default only while nobody else can reach the broker:
/// listening beyond loopback needs `allow_anonymous = true` written in the file.
fn check_anonymous_exposure(config: &Config) -> Result<(), ServerError> {
    let security = config.security();
    if !security.allow_anonymous {
        return Ok(());
    }
    let http = config.http().map(|h| Listener {
        name: "http".to_owned(),
        bind: h.bind,
        protocols: Vec::new(),
        connection_factory: None,
        tls: h.tls,
    });
    let websocket = config.websocket().map(|w| Listener {
        name: "websocket".to_owned(),
        bind: w.bind,
        protocols: vec![config::Protocol::Stomp],
        connection_factory: None,
        tls: w.tls,
    });
    let exposed = config
        .listeners()
        .into_iter()
        .chain(http)
        .chain(websocket)
        .find(|l| !l.bind.ip().is_loopback());
    match exposed {
        Some(listener) if !security.allow_anonymous_set => Err(ServerError::AnonymousExposed {
            name: listener.name,
            addr: listener.bind,
        }),
        Some(listener) => {
            tracing::warn!(
                addr = %listener.bind,
                "anonymous clients may connect from the network (security.allow_anonymous = true)"
            );
            Ok(())
        }
        None => {
            tracing::info!(
                "anonymous clients may connect, on loopback only; add [[users]] to require logins"
            );
            Ok(())
        }
    }
}

fn stomp_options(config: &Config, admission: Admission) -> StompOptions {
    let limits = config.limits();
    StompOptions {
        connect_timeout: limits.connect_timeout,
        frame_timeout: limits.frame_timeout,
        admission,
        limits: stomp::Limits {
            max_frame_size: limits.max_frame_size,
            max_headers: limits.max_headers,
            max_header_length: limits.max_header_length,
        },
        heartbeat: limits.heartbeat,
        transactions: transaction_limits(limits),
        max_subscriptions: limits.max_subscriptions_per_connection,
        ..StompOptions::default()
    }
}

fn amqp_options(
    config: &Config,
    containers: ContainerRegistry,
    admission: Admission,
) -> AmqpOptions {
    let limits = config.limits();
    AmqpOptions {
        sasl_timeout: limits.sasl_timeout,
        open_timeout: limits.amqp_open_timeout,
        frame_timeout: limits.frame_timeout,
        admission,
        max_frame_size: u32::try_from(limits.max_frame_size).unwrap_or(u32::MAX),
        max_message_size: limits.max_message_size as u64,
        // AMQP's idle timeout is the deadline, peers heart-beat at half of it.
        idle_timeout: limits.heartbeat * 2,
        containers,
        transactions: transaction_limits(limits),
        max_sessions: limits.max_sessions_per_connection,
        max_links_per_session: limits.max_links_per_session,
        max_unsettled_per_link: limits.max_unsettled_per_link,
        ..AmqpOptions::default()
    }
}

fn transaction_limits(limits: &config::Limits) -> TransactionLimits {
    TransactionLimits {
        max_ops: limits.max_transaction_ops,
        max_bytes: limits.max_transaction_bytes,
        max_open: limits.max_open_transactions,
    }
}

impl Server {
    /// Binds every listener and starts accepting.
    pub async fn start(config: &Config, broker: Broker) -> Result<Server, ServerError> {
        let early = Early::start_showing(config, broker.recovery_status()).await?;
        Self::start_after(config, broker, early).await
    }

    /// Binds the protocol listeners next to what [`Early::start`] started before
    /// recovery; then the management API answers and reports ready.
    pub async fn start_after(
        config: &Config,
        broker: Broker,
        early: Early,
    ) -> Result<Server, ServerError> {
        let Early { tls, http, .. } = early;
        let (shutdown, _) = broadcast::channel(1);
        let limits = config.limits();
        let permits = Arc::new(Semaphore::new(limits.max_connections + REFUSAL_ROOM));
        let user_limits = config
            .users()
            .iter()
            .filter_map(|u| Some((u.name.clone(), u.max_connections?)))
            .collect();
        let admission = Admission::with_user_limits(
            AdmissionLimits {
                max_connections: limits.max_connections,
                per_user: limits.max_connections_per_user,
                per_address: limits.max_connections_per_address,
            },
            user_limits,
        );
        let (open, closed) = mpsc::channel(1);
        let mut bound = Vec::new();
        let mut listening = Vec::new();
        let mut tasks = Vec::new();
        let containers = ContainerRegistry::default();
        let websocket_stomp = stomp_options(config, admission.clone());
        let websocket = match config.websocket() {
            Some(settings) => {
                let (listener, endpoint) = websocket_listener(
                    settings,
                    &tls,
                    websocket_stomp.clone(),
                    config.websocket_origins().clone(),
                    &broker,
                    &shutdown,
                    &open,
                )
                .await?;
                bound.push(("websocket".to_owned(), listener.addr));
                listening.push(ListenerInfo {
                    name: "websocket".to_owned(),
                    protocols: vec!["stomp".to_owned()],
                    address: listener.addr.to_string(),
                    tls: settings.tls,
                });
                Some((listener, endpoint))
            }
            None => None,
        };
        for listener in config.listeners() {
            let socket =
                TcpListener::bind(listener.bind)
                    .await
                    .map_err(|source| ServerError::Bind {
                        name: listener.name.clone(),
                        addr: listener.bind,
                        source,
                    })?;
            let addr = socket.local_addr().unwrap_or(listener.bind);
            tracing::info!(name = %listener.name, %addr, protocols = ?listener.protocols, tls = listener.tls, "listening");
            bound.push((listener.name.clone(), addr));
            listening.push(ListenerInfo {
                name: listener.name.clone(),
                protocols: listener
                    .protocols
                    .iter()
                    .map(|p| format!("{p:?}").to_lowercase())
                    .collect(),
                address: addr.to_string(),
                tls: listener.tls,
            });
            let mut stomp = stomp_options(config, admission.clone());
            stomp.connection_factory = listener.connection_factory.clone();
            let mut amqp = amqp_options(config, containers.clone(), admission.clone());
            amqp.connection_factory = listener.connection_factory.clone();
            let tls = match (&tls, listener.tls) {
                (Some(context), true) => TlsMode::Listener(context.clone()),
                (context, _) => TlsMode::Plain {
                    upgrade: context.clone(),
                },
            };
            let acceptor = Acceptor {
                broker: broker.clone(),
                listener,
                tls,
                handshake_timeout: limits.connect_timeout,
                stomp,
                amqp,
                permits: permits.clone(),
                shutdown: shutdown.clone(),
                open: open.clone(),
            };
            tasks.push(tokio::spawn(acceptor.run(socket)));
        }
        if let Some(http) = &http {
            bound.push(("http".to_owned(), http.addr));
            // The management listener itself, with STOMP over WebSocket at /stomp.
            listening.push(ListenerInfo {
                name: "http".to_owned(),
                protocols: vec!["http".to_owned(), "stomp".to_owned()],
                address: http.addr.to_string(),
                tls: config.http().is_some_and(|h| h.tls),
            });
            http.websocket.set_ready(
                broker.clone(),
                websocket_stomp,
                config.websocket_origins().clone(),
                shutdown.clone(),
                &open,
            );
            http.management.set_ready(broker.clone(), listening);
        }
        Ok(Server {
            broker,
            bound,
            shutdown,
            tasks,
            open,
            closed,
            shutdown_timeout: config.broker().shutdown_timeout,
            tls,
            http,
            websocket,
        })
    }

    /// Where the management HTTP listener listens, when on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.addr)
    }

    /// Reads the TLS certificate, key and CA files again (on SIGHUP): new connections use
    /// them; if they are bad, one error line and the previous ones stay.
    pub fn reload_tls(&self) {
        let Some(tls) = &self.tls else {
            tracing::info!("no [tls] section: nothing to reload");
            return;
        };
        tls.reload_logged("SIGHUP");
    }

    /// Stops accepting, tells every connection to close (each says goodbye in its
    /// protocol and flushes), and waits up to `shutdown_timeout` for them to be gone.
    /// False when some were still open at the deadline.
    pub async fn stop(self) -> bool {
        let Server {
            tasks,
            shutdown,
            open,
            mut closed,
            shutdown_timeout,
            http,
            websocket,
            ..
        } = self;
        // WebSocket upgrades still in progress must not miss the shutdown sent below.
        let endpoints = http
            .as_ref()
            .map(|h| h.websocket.clone())
            .into_iter()
            .chain(websocket.as_ref().map(|(_, endpoint)| endpoint.clone()));
        for endpoint in endpoints {
            endpoint.stop_serving();
        }
        // Not ready from here on; requests in progress finish, beside the connections.
        let http_stopped = async {
            match http {
                Some(http) => http.stop(shutdown_timeout).await,
                None => true,
            }
        };
        for task in &tasks {
            task.abort();
        }
        // An acceptor holds a sender until its task is gone.
        for task in tasks {
            let _ = task.await;
        }
        let _ = shutdown.send(());
        drop(open);
        let connections = async {
            tokio::time::timeout(shutdown_timeout, closed.recv())
                .await
                .is_ok()
        };
        let websocket_stopped = async {
            match websocket {
                Some((listener, _)) => listener.stop(shutdown_timeout).await,
                None => true,
            }
        };
        let (drained, http_drained, websocket_drained) =
            tokio::join!(connections, http_stopped, websocket_stopped);
        let drained = drained && http_drained && websocket_drained;
        if !drained {
            tracing::warn!(timeout = ?shutdown_timeout, "connections still open at the shutdown timeout");
        }
        drained
    }
}

/// Binds the WebSocket listener of its own, serving STOMP at once (it starts with the
/// protocol listeners, after recovery).
async fn websocket_listener(
    settings: &config::WebSocket,
    tls: &Option<Arc<TlsContext>>,
    stomp: StompOptions,
    origins: config::AllowedOrigins,
    broker: &Broker,
    shutdown: &broadcast::Sender<()>,
    open: &mpsc::Sender<()>,
) -> Result<(RouterListener, Arc<websocket::Endpoint>), ServerError> {
    let tls = match settings.tls {
        true => Some(
            tls.clone()
                .ok_or(ServerError::WebSocketTlsWithoutIdentity)?,
        ),
        false => None,
    };
    let endpoint = Arc::new(websocket::Endpoint::default());
    endpoint.set_ready(broker.clone(), stomp, origins, shutdown.clone(), open);
    let router = websocket::listener_router(endpoint.clone());
    let listener = RouterListener::bind("websocket", settings.bind, router, tls).await?;
    Ok((listener, endpoint))
}

struct Acceptor {
    broker: Broker,
    listener: Listener,
    tls: TlsMode,
    /// The TLS handshake must be done within this.
    handshake_timeout: Duration,
    stomp: StompOptions,
    amqp: AmqpOptions,
    permits: Arc<Semaphore>,
    shutdown: broadcast::Sender<()>,
    open: mpsc::Sender<()>,
}

impl Acceptor {
    async fn run(self, socket: TcpListener) {
        let mut full = false;
        loop {
            let (stream, peer) = match socket.accept().await {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                // Too many even to refuse politely; logged once a burst, not per socket.
                if !full {
                    tracing::warn!(%peer, "connection limit and refusal room reached; closing new sockets");
                    full = true;
                }
                drop(stream);
                continue;
            };
            full = false;
            let _ = stream.set_nodelay(true);
            let broker = self.broker.clone();
            let stomp = self.stomp.clone();
            let amqp = self.amqp.clone();
            let protocols = self.listener.protocols.clone();
            let shutdown = self.shutdown.subscribe();
            let open = self.open.clone();
            let tls = self.tls.clone();
            let handshake_timeout = self.handshake_timeout;
            tokio::spawn(async move {
                let options = Options {
                    broker,
                    stomp,
                    amqp,
                    handshake_timeout,
                };
                connection::serve_connection(stream, peer, &protocols, tls, options, shutdown)
                    .await;
                drop(permit);
                drop(open);
            });
        }
    }
}
