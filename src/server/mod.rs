//! Wires config, store, core and protocols together: acceptors, a connection
//! limit, protocol sniffing on shared ports, and graceful shutdown.

mod sniff;

use crate::config::{self, Config, Listener, Protocol};
use crate::core::auth::Authenticator;
use crate::core::factory::ConnectionFactory;
use crate::core::schedule::{Schedule, ScheduleError, ScheduleOptions};
use crate::core::{Broker, BrokerOptions, CoreError, TransactionLimits};
use crate::protocol::amqp::{self, AmqpOptions, ContainerRegistry};
use crate::protocol::stomp::{self, StompOptions};
use crate::store::{DiskLimits, FsyncPolicy, Store, StoreError, StoreOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, Semaphore};

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
}

/// A running broker: its listeners' bound addresses and a shutdown switch.
pub struct Server {
    pub broker: Broker,
    pub bound: Vec<(String, SocketAddr)>,
    shutdown: broadcast::Sender<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
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
        ..StoreOptions::default()
    }
}

/// Opens the store and recovers the broker from it, with its delay schedule
/// (whose timer runs on the current Tokio runtime).
pub fn open_broker(config: &Config) -> Result<Broker, ServerError> {
    let dir = config.data_dir();
    std::fs::create_dir_all(dir).map_err(|source| ServerError::DataDir {
        path: dir.display().to_string(),
        source,
    })?;
    let store = Store::open(dir, store_options(config)).map_err(|source| ServerError::Store {
        path: dir.display().to_string(),
        source,
    })?;
    let auth = Authenticator::new(
        config
            .users()
            .iter()
            .map(|u| (u.name.clone(), u.password.clone())),
        config.allow_anonymous(),
    );
    let broker = Broker::open(
        store,
        BrokerOptions {
            settings: config.settings_table(),
            auth,
            declared: config.declared_queues(),
            global_max_size: Some(config.broker().global_max_size),
            factories: config
                .connection_factories()
                .iter()
                .map(|f| ConnectionFactory {
                    name: f.name.clone(),
                    autogroup: f.autogroup,
                    group_id: f.group_id.as_deref().map(Arc::from),
                })
                .collect(),
        },
    )?;
    broker.set_scheduler(Schedule::open(&broker, ScheduleOptions::default())?);
    Ok(broker)
}

fn stomp_options(config: &Config) -> StompOptions {
    let limits = config.limits();
    StompOptions {
        limits: stomp::Limits {
            max_frame_size: limits.max_frame_size,
            max_headers: limits.max_headers,
            max_header_length: limits.max_header_length,
        },
        heartbeat: limits.heartbeat,
        transactions: transaction_limits(limits),
        ..StompOptions::default()
    }
}

fn amqp_options(config: &Config, containers: ContainerRegistry) -> AmqpOptions {
    let limits = config.limits();
    AmqpOptions {
        max_frame_size: u32::try_from(limits.max_frame_size).unwrap_or(u32::MAX),
        max_message_size: limits.max_message_size as u64,
        // AMQP's idle timeout is the deadline, peers heart-beat at half of it.
        idle_timeout: limits.heartbeat * 2,
        containers,
        transactions: transaction_limits(limits),
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
        let (shutdown, _) = broadcast::channel(1);
        let permits = Arc::new(Semaphore::new(config.limits().max_connections));
        let mut bound = Vec::new();
        let mut tasks = Vec::new();
        let containers = ContainerRegistry::default();
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
            tracing::info!(name = %listener.name, %addr, protocols = ?listener.protocols, "listening");
            bound.push((listener.name.clone(), addr));
            let mut stomp = stomp_options(config);
            stomp.connection_factory = listener.connection_factory.clone();
            let mut amqp = amqp_options(config, containers.clone());
            amqp.connection_factory = listener.connection_factory.clone();
            let acceptor = Acceptor {
                broker: broker.clone(),
                listener,
                stomp,
                amqp,
                permits: permits.clone(),
                shutdown: shutdown.clone(),
            };
            tasks.push(tokio::spawn(acceptor.run(socket)));
        }
        Ok(Server {
            broker,
            bound,
            shutdown,
            tasks,
        })
    }

    /// Tells every connection to close and stops accepting.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        for task in self.tasks {
            task.abort();
        }
        // Give sessions a moment to send their goodbyes.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

struct Acceptor {
    broker: Broker,
    listener: Listener,
    stomp: StompOptions,
    amqp: AmqpOptions,
    permits: Arc<Semaphore>,
    shutdown: broadcast::Sender<()>,
}

impl Acceptor {
    async fn run(self, socket: TcpListener) {
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
                tracing::warn!(%peer, "connection limit reached; refusing");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let broker = self.broker.clone();
            let stomp = self.stomp.clone();
            let amqp = self.amqp.clone();
            let protocols = self.listener.protocols.clone();
            let shutdown = self.shutdown.subscribe();
            tokio::spawn(async move {
                serve_connection(stream, peer, broker, &protocols, (stomp, amqp), shutdown).await;
                drop(permit);
            });
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Broker,
    protocols: &[Protocol],
    (stomp, amqp): (StompOptions, AmqpOptions),
    shutdown: broadcast::Receiver<()>,
) {
    let protocol = match protocols {
        [only] => *only,
        _ => match sniff::sniff(&stream).await {
            Some(p) => p,
            None => return,
        },
    };
    match protocol {
        Protocol::Stomp => stomp::serve(stream, peer, broker, stomp, shutdown).await,
        Protocol::Amqp => amqp::serve(stream, peer, broker, amqp, shutdown).await,
    }
}
