//! The broker: names to queues, publish and subscribe, recovery at start.
//! Protocols call only this and the handles it returns.

mod publish;
mod recover;
mod subscriptions;

pub(super) use publish::{address_full, admit};
use subscriptions::Topic;
pub use subscriptions::{Subscription, TemporaryQueue};

use super::consumer::ConsumerId;
use super::delay_headers::DelayHeaderNames;
use super::error::CoreError;
use super::factory::ConnectionFactory;
use super::fast_map::FastDashMap;
use super::memory::{AddressFullPolicy, Budget};
use super::message::{Message, Value};
use super::queue::{Diversion, Diverter, Queue};
use super::queue_record::QueueRecord;
use super::recovery_progress::RecoveryStatus;
use super::schedule::Schedule;
use super::security::{Authenticator, Authorizer, Principal};
use super::settings::{QueueSettings, SettingsTable};
use crate::store::{Completion, Op, Store};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// How an address distributes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutingType {
    /// Each message to one consumer of the queue (a JMS queue, STOMP `/queue/`).
    Anycast,
    /// Each subscriber gets its own copy (a JMS topic, STOMP `/topic/`).
    Multicast,
}

pub struct BrokerOptions {
    pub settings: SettingsTable,
    pub auth: Authenticator,
    /// Roles, permissions and per-user queue limits.
    pub authorizer: Authorizer,
    /// Queues that exist from the start, with their own settings.
    pub declared: Vec<(String, QueueSettings)>,
    pub factories: Vec<ConnectionFactory>,
    /// Bytes all queues' messages may hold in memory (Artemis's
    /// `global-max-size`); `None` counts without limiting.
    pub global_max_size: Option<u64>,
    /// Where recovery shows how far it has come, for whoever answers before it ends.
    pub recovery: Arc<RecoveryStatus>,
}

impl BrokerOptions {
    /// Every queue with `settings`, anonymous access, nothing declared and no
    /// connection factories: a broker embedded in a test or a benchmark.
    pub fn with_queue_settings(settings: QueueSettings) -> Self {
        Self {
            settings: SettingsTable::new(settings),
            auth: Authenticator::open(),
            authorizer: Authorizer::default(),
            declared: Vec::new(),
            factories: Vec::new(),
            global_max_size: None,
            recovery: RecoveryStatus::new(),
        }
    }
}

/// Receives messages that became due, from the delay schedule.
pub trait DelayedDelivery: Send + Sync {
    /// Holds `message` for `queue` until `message.due_at`.
    /// `also` is applied in the same atomic store write.
    fn schedule(
        &self,
        queue: &Arc<Queue>,
        message: Arc<Message>,
        delivery_count: u32,
        also: Option<Op>,
    ) -> Completion;
}

/// Handle to the broker; cheap to clone.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

struct Inner {
    settings: SettingsTable,
    /// Every name some queue reads as a delay, for the protocols.
    delay_header_names: DelayHeaderNames,
    auth: Authenticator,
    authorizer: Arc<Authorizer>,
    store: Store,
    queues: FastDashMap<Arc<str>, Arc<Queue>>,
    queues_by_id: FastDashMap<u32, Arc<Queue>>,
    topics: FastDashMap<Arc<str>, Arc<Topic>>,
    /// Queue settings set explicitly in the config, by queue name.
    declared: HashMap<String, QueueSettings>,
    factories: HashMap<String, ConnectionFactory>,
    next_queue_id: AtomicU32,
    next_consumer_id: AtomicU64,
    scheduler: RwLock<Option<Arc<dyn DelayedDelivery>>>,
    /// The same schedule as `scheduler`, for management (list and edit it).
    schedule: std::sync::OnceLock<Arc<Schedule>>,
    /// The broker-wide memory budget every queue charges besides its own.
    memory: Arc<Budget>,
    /// Whether any queue was created with the BLOCK policy: until one is,
    /// protocols need not look for blocking subscribers of a topic.
    has_block_queues: AtomicBool,
    /// Open client connections, for management.
    connections: Arc<super::connections::Connections>,
    /// Open claims (leases on deliveries, see [`super::claims`]).
    claims: Arc<super::claims::Claims>,
    /// How far recovery has come (shared with the management listener).
    recovery: Arc<RecoveryStatus>,
    me: Weak<Inner>,
}

/// A broker handle that does not keep the broker alive: for parts the broker
/// itself holds (the delay schedule), which would otherwise keep it forever.
#[derive(Clone)]
pub struct WeakBroker(Weak<Inner>);

impl WeakBroker {
    pub fn upgrade(&self) -> Option<Broker> {
        self.0.upgrade().map(|inner| Broker { inner })
    }
}

impl Broker {
    /// Opens the broker on a store, recovering the queues and messages in it.
    pub fn open(store: Store, options: BrokerOptions) -> Result<Broker, CoreError> {
        let declared_headers = options.declared.iter().flat_map(|(_, s)| &s.delay_headers);
        let delay_header_names =
            DelayHeaderNames::new(options.settings.all_delay_headers().chain(declared_headers));
        let claims = Arc::new(super::claims::Claims::new(store.clone()));
        let inner = Arc::new_cyclic(|me| Inner {
            settings: options.settings,
            delay_header_names,
            auth: options.auth,
            authorizer: Arc::new(options.authorizer),
            store,
            queues: FastDashMap::default(),
            queues_by_id: FastDashMap::default(),
            topics: FastDashMap::default(),
            declared: options.declared.iter().cloned().collect(),
            factories: options
                .factories
                .into_iter()
                .map(|f| (f.name.clone(), f))
                .collect(),
            next_queue_id: AtomicU32::new(1),
            next_consumer_id: AtomicU64::new(1),
            scheduler: RwLock::new(None),
            schedule: std::sync::OnceLock::new(),
            memory: Arc::new(Budget::new(options.global_max_size)),
            has_block_queues: AtomicBool::new(false),
            connections: Arc::default(),
            claims,
            recovery: options.recovery,
            me: me.clone(),
        });
        let broker = Broker { inner };
        broker.recover()?;
        for (name, _) in &options.declared {
            broker.queue_or_create(name, true)?;
        }
        Ok(broker)
    }

    /// How far recovery came (done once [`Broker::open`] has returned).
    pub fn recovery_status(&self) -> Arc<RecoveryStatus> {
        self.inner.recovery.clone()
    }

    /// Every property name some queue reads as a delay: a protocol sets
    /// `Message::may_carry_delay` on a message that has one.
    pub fn delay_header_names(&self) -> &DelayHeaderNames {
        &self.inner.delay_header_names
    }

    /// The open client connections (each protocol registers its own).
    pub fn connections(&self) -> &Arc<super::connections::Connections> {
        &self.inner.connections
    }

    /// The open claims.
    pub(super) fn claims(&self) -> &Arc<super::claims::Claims> {
        &self.inner.claims
    }

    pub fn auth(&self) -> &Authenticator {
        &self.inner.auth
    }

    /// The identity of a logged-in connection, for the checked operations
    /// (see [`super::access`]).
    pub fn principal(
        &self,
        user: Option<&str>,
        peer: Option<std::net::SocketAddr>,
        client_id: Option<&str>,
    ) -> Principal {
        Principal::new(&self.inner.authorizer, user, peer, client_id)
    }

    /// Whether any permission is configured.
    pub fn enforces_permissions(&self) -> bool {
        self.inner.authorizer.enforces_permissions()
    }

    /// The connection factory of that name (chosen by acceptor or virtual host).
    pub fn connection_factory(&self, name: &str) -> Option<&ConnectionFactory> {
        self.inner.factories.get(name)
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn downgrade(&self) -> WeakBroker {
        WeakBroker(Arc::downgrade(&self.inner))
    }

    /// Installs the delay schedule (done once at start).
    pub fn set_scheduler(&self, scheduler: Arc<dyn DelayedDelivery>) {
        *self.inner.scheduler.write() = Some(scheduler);
    }

    /// Installs the delay schedule, and keeps it for management to list and edit.
    pub fn set_schedule(&self, schedule: Arc<Schedule>) {
        self.set_scheduler(schedule.clone());
        let _ = self.inner.schedule.set(schedule);
    }

    /// The delay schedule, once installed with [`Broker::set_schedule`].
    pub fn schedule(&self) -> Option<&Arc<Schedule>> {
        self.inner.schedule.get()
    }

    pub fn queue(&self, name: &str) -> Option<Arc<Queue>> {
        self.inner.queues.get(name).map(|q| q.clone())
    }

    /// A queue by its store id (the delay schedule names queues by id).
    pub fn queue_by_id(&self, id: u32) -> Option<Arc<Queue>> {
        self.inner.queues_by_id.get(&id).map(|q| q.clone())
    }

    pub fn queue_names(&self) -> Vec<Arc<str>> {
        self.inner.queues.iter().map(|q| q.key().clone()).collect()
    }

    pub fn settings_for(&self, name: &str) -> QueueSettings {
        match self.inner.declared.get(name) {
            Some(s) => s.clone(),
            None => self.inner.settings.resolve(name),
        }
    }

    pub fn next_consumer_id(&self) -> ConsumerId {
        self.inner.next_consumer_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The queue of that name, created when allowed.
    pub fn queue_or_create(&self, name: &str, force: bool) -> Result<Arc<Queue>, CoreError> {
        if let Some(q) = self.inner.queues.get(name) {
            return Ok(q.clone());
        }
        validate_name(name)?;
        let settings = self.settings_for(name);
        if !force && !settings.auto_create {
            return Err(CoreError::NotFound(name.to_owned()));
        }
        let entry = self.inner.queues.entry(Arc::from(name));
        let queue = entry
            .or_try_insert_with(|| {
                let id = self.inner.next_queue_id.fetch_add(1, Ordering::Relaxed);
                self.inner.store.submit_detached(Op::PutQueue {
                    name: name.to_owned(),
                    record: QueueRecord::new(id, None).encode(),
                });
                let queue = self.new_queue(Arc::from(name), id, settings);
                self.inner.queues_by_id.insert(id, queue.clone());
                Ok::<_, CoreError>(queue)
            })?
            .clone();
        Ok(queue)
    }

    /// Some queue may now block its producers (see [`Broker::may_block_producers`]).
    pub(super) fn note_block_queue(&self) {
        self.inner.has_block_queues.store(true, Ordering::Relaxed);
    }

    fn new_queue(&self, name: Arc<str>, id: u32, settings: QueueSettings) -> Arc<Queue> {
        if settings.address_full_policy == AddressFullPolicy::Block {
            self.note_block_queue();
        }
        let diverter: Weak<dyn Diverter> = self.inner.me.clone();
        Arc::new(Queue::new(
            name,
            id,
            settings,
            self.inner.store.clone(),
            diverter,
            self.inner.memory.clone(),
        ))
    }

    /// Sends a message that expired before it reached `queue` where that
    /// queue's expired messages go (counted as expired, to its expiry address).
    pub(in crate::core) fn divert_expired(&self, queue: &Queue, message: Arc<Message>) {
        self.inner.divert(queue, message, Diversion::Expired);
    }

    /// The broker-wide memory budget (`global_max_size`).
    pub fn memory(&self) -> &Arc<Budget> {
        &self.inner.memory
    }
}

pub(super) fn validate_name(name: &str) -> Result<(), CoreError> {
    let bad = name.is_empty()
        || name.len() > 255
        || name.contains("::")
        || name.chars().any(char::is_control);
    if bad {
        Err(CoreError::InvalidAddress(name.to_owned()))
    } else {
        Ok(())
    }
}

impl Diverter for Inner {
    fn divert(&self, from: &Queue, message: Arc<Message>, why: Diversion) {
        from.count_diverted(why);
        let target = match why {
            Diversion::Expired => from.settings().expiry_address.clone(),
            Diversion::DeadLetter => from.settings().dead_letter_address.clone(),
        };
        let Some(target) = target.filter(|t| !t.is_empty() && t.as_str() != &**from.name()) else {
            tracing::debug!(queue = %from.name(), ?why, "message dropped");
            return;
        };
        let Some(me) = self.me.upgrade() else { return };
        let broker = Broker { inner: me };
        let mut copy = (*message).clone();
        copy.properties.push((
            Arc::from("_AMQ_ORIG_ADDRESS"),
            Value::String(from.name().clone()),
        ));
        copy.address = Arc::from(target.as_str());
        copy.expires_at = None;
        copy.due_at = None;
        match broker.queue_or_create(&target, true) {
            Ok(queue) => {
                queue.publish(Arc::new(copy));
            }
            Err(e) => {
                tracing::warn!(queue = %from.name(), target = %target, error = %e, "cannot divert message")
            }
        }
    }
}
