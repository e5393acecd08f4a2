//! The broker: names to queues, publish and subscribe, recovery at start.
//! Protocols call only this and the handles it returns.

use super::consumer::{ConsumerId, ConsumerOptions, DeliverySink};
use super::delay_headers::{self, DelayHeaderNames};
use super::error::CoreError;
use super::factory::ConnectionFactory;
use super::fast_map::{FastDashMap, FastMap};
use super::memory::{AddressFullPolicy, Budget};
use super::message::{now_ms, Message, Value};
use super::persist;
use super::queue::{Diversion, Diverter, Queue};
use super::queue_record::QueueRecord;
use super::receipt::Receipt;
use super::recovery_progress::RecoveryProgress;
use super::schedule::Schedule;
use super::security::{Authenticator, Authorizer, Principal};
use super::settings::{DelayOverMax, QueueSettings, SettingsTable};
use crate::store::{Completion, Op, Store, StoreError};
use bytes::Bytes;
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

#[derive(Default)]
struct Topic {
    subscribers: RwLock<Subscribers>,
}

/// A topic's subscriber queues. A connection may subscribe a hundred thousand
/// times, so one leaves in O(1): found by queue id, its place taken by the last.
#[derive(Default)]
struct Subscribers {
    queues: Vec<Arc<Queue>>,
    place_of: FastMap<u32, usize>,
}

impl Subscribers {
    fn add(&mut self, queue: &Arc<Queue>) {
        if self.place_of.contains_key(&queue.id()) {
            return;
        }
        self.place_of.insert(queue.id(), self.queues.len());
        self.queues.push(queue.clone());
    }

    fn remove(&mut self, queue: &Arc<Queue>) {
        let Some(place) = self.place_of.remove(&queue.id()) else {
            return;
        };
        self.queues.swap_remove(place);
        if let Some(moved) = self.queues.get(place) {
            self.place_of.insert(moved.id(), place);
        }
    }
}

impl Broker {
    /// Opens the broker on a store, recovering the queues and messages in it.
    pub fn open(store: Store, options: BrokerOptions) -> Result<Broker, CoreError> {
        let declared_headers = options.declared.iter().flat_map(|(_, s)| &s.delay_headers);
        let delay_header_names =
            DelayHeaderNames::new(options.settings.all_delay_headers().chain(declared_headers));
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
            claims: Arc::default(),
            me: me.clone(),
        });
        let broker = Broker { inner };
        broker.recover()?;
        for (name, _) in &options.declared {
            broker.queue_or_create(name, true)?;
        }
        Ok(broker)
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

    /// The broker-wide memory budget (`global_max_size`).
    pub fn memory(&self) -> &Arc<Budget> {
        &self.inner.memory
    }

    /// Routes a message. The receipt resolves when every durable copy is on disk.
    pub fn publish(&self, message: Message, routing: RoutingType) -> Result<Receipt, CoreError> {
        self.refuse_on_full_disk(&message)?;
        match routing {
            RoutingType::Anycast => {
                let queue = self.queue_or_create(&message.address, false)?;
                self.publish_to(&queue, message)
            }
            RoutingType::Multicast => {
                if !self.inner.topics.contains_key(&*message.address) {
                    // Nobody subscribed: a topic keeps nothing, as in JMS.
                    validate_name(&message.address)?;
                    return Ok(Receipt::ready());
                }
                let mut message = message;
                let settings = self.settings_for(&message.address);
                self.resolve_delay(&mut message, &settings)?;
                self.refuse_when_a_subscriber_fails(&message.address)?;
                Ok(self.fan_out(message))
            }
        }
    }

    /// A copy of a checked message (see [`Broker::publish`]) for every
    /// subscriber of its topic; nothing when nobody subscribed, as in JMS.
    pub(super) fn fan_out(&self, message: Message) -> Receipt {
        let Some(topic) = self.inner.topics.get(&*message.address).map(|t| t.clone()) else {
            return Receipt::ready();
        };
        let subscribers = topic.subscribers.read().queues.clone();
        let shared = Arc::new(message);
        let mut last = Receipt::ready();
        for queue in &subscribers {
            if queue.memory().is_full() && queue.memory().policy() == AddressFullPolicy::Drop {
                drop_one(queue);
                continue;
            }
            last = self.enqueue(queue, shared.clone(), 0);
        }
        last
    }

    /// A topic send is refused whole when one of its subscriber queues is a
    /// full FAIL queue (Artemis fails the send to the address).
    fn refuse_when_a_subscriber_fails(&self, topic: &str) -> Result<(), CoreError> {
        let Some(topic) = self.inner.topics.get(topic).map(|t| t.clone()) else {
            return Ok(());
        };
        let subscribers = topic.subscribers.read();
        match subscribers
            .queues
            .iter()
            .find(|q| q.memory().is_full() && q.memory().policy() == AddressFullPolicy::Fail)
        {
            Some(queue) => Err(address_full(queue)),
            None => Ok(()),
        }
    }

    /// Whether some queue may block its producers (one has the BLOCK policy).
    #[inline]
    pub fn may_block_producers(&self) -> bool {
        self.inner.has_block_queues.load(Ordering::Relaxed)
    }

    /// A subscriber queue of `topic` whose producers must stop (see
    /// [`Queue::blocks_producers`]), for a protocol that sent to the topic.
    pub fn blocking_subscriber(&self, topic: &str) -> Option<Arc<Queue>> {
        let topic = self.inner.topics.get(topic).map(|t| t.clone())?;
        let subscribers = topic.subscribers.read();
        subscribers
            .queues
            .iter()
            .find(|q| q.blocks_producers())
            .cloned()
    }

    /// Sends straight to a known queue (anonymous relay, internal moves).
    pub fn publish_to(
        &self,
        queue: &Arc<Queue>,
        mut message: Message,
    ) -> Result<Receipt, CoreError> {
        self.refuse_on_full_disk(&message)?;
        if !admit(queue)? {
            return Ok(Receipt::ready());
        }
        // In place: a message is a few hundred bytes, moved on every hand-over.
        if message.due_at.is_some() || message.may_carry_delay || queue.has_default_delay() {
            self.resolve_delay(&mut message, &queue.settings())?;
        }
        Ok(self.enqueue(queue, Arc::new(message), 0))
    }

    /// [`Broker::publish_to`] for a message whose delay was resolved already
    /// (a committed transaction's): nothing left that can be refused.
    pub(super) fn publish_checked(&self, queue: &Arc<Queue>, message: Message) -> Receipt {
        self.enqueue(queue, Arc::new(message), 0)
    }

    /// [`Broker::publish_to`] for messages read together: those due now go
    /// into the queue under one lock ([`Queue::publish_all`]), delayed ones to
    /// the schedule. Results in the messages' order. The messages come already
    /// shared: a message is a few hundred bytes, copied by every move.
    pub fn publish_all_to(
        &self,
        queue: &Arc<Queue>,
        messages: impl IntoIterator<Item = Arc<Message>>,
    ) -> Vec<Result<Receipt, CoreError>> {
        let messages = messages.into_iter();
        let mut results = Vec::with_capacity(messages.size_hint().0);
        let mut now = Vec::with_capacity(messages.size_hint().0);
        let mut now_at = Vec::with_capacity(messages.size_hint().0);
        for mut message in messages {
            if let Err(e) = self.refuse_on_full_disk(&message) {
                results.push(Err(e));
                continue;
            }
            match admit(queue) {
                Ok(true) => {}
                Ok(false) => {
                    results.push(Ok(Receipt::ready()));
                    continue;
                }
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            }
            if message.due_at.is_some() || message.may_carry_delay || queue.has_default_delay() {
                // Not shared yet: no copy.
                let settings = queue.settings();
                if let Err(e) = self.resolve_delay(Arc::make_mut(&mut message), &settings) {
                    results.push(Err(e));
                    continue;
                }
            }
            if message.due_at.is_some() {
                results.push(Ok(self.enqueue(queue, message, 0)));
                continue;
            }
            now_at.push(results.len());
            results.push(Ok(Receipt::ready()));
            now.push(message);
        }
        let mut completions = Vec::with_capacity(now.len());
        queue.publish_all(now, &mut completions);
        for (at, completion) in now_at.into_iter().zip(completions) {
            results[at] = Ok(Receipt::from(completion));
        }
        results
    }

    /// A durable message is refused before it is queued while the disk is
    /// past its limits or the store cannot write: its sender hears why, and
    /// nothing of it is kept. One atomic load while the disk is fine.
    #[inline]
    fn refuse_on_full_disk(&self, message: &Message) -> Result<(), CoreError> {
        match message.durable {
            true => self
                .inner
                .store
                .disk_refusal()
                .map_or(Ok(()), |e| Err(e.into())),
            false => Ok(()),
        }
    }

    fn enqueue(&self, queue: &Arc<Queue>, message: Arc<Message>, delivery_count: u32) -> Receipt {
        if let Some(due) = message.due_at {
            if due > now_ms() {
                if message.expires_at.is_some_and(|exp| exp <= due) {
                    // Expires before it is due: never delivered (Zaqar's ttl < delay).
                    self.inner.divert(queue, message, Diversion::Expired);
                    return Receipt::ready();
                }
                if let Some(scheduler) = self.inner.scheduler.read().clone() {
                    return scheduler
                        .schedule(queue, message, delivery_count, None)
                        .into();
                }
            }
        }
        queue.publish_counted(message, delivery_count).into()
    }

    /// Reads the queue's `delay_headers` when the protocol found one, then applies the
    /// queue's default delay and the maximum (Zaqar's delayed queues). Applied again
    /// to its result it changes nothing: the delay left only shrinks.
    pub(super) fn resolve_delay(
        &self,
        message: &mut Message,
        settings: &QueueSettings,
    ) -> Result<(), CoreError> {
        let from_properties = message.due_at.is_none()
            && message.may_carry_delay
            && !settings.delay_headers.is_empty();
        if message.due_at.is_none() && settings.default_message_delay.is_zero() && !from_properties
        {
            // The common case, without a clock read per message.
            return Ok(());
        }
        let now = now_ms();
        if from_properties {
            message.due_at =
                delay_headers::due_at(&message.properties, &settings.delay_headers, now);
        }
        let due = match message.due_at {
            Some(due) => due,
            None => now + settings.default_message_delay.as_millis() as u64,
        };
        if due <= now {
            message.due_at = None;
            return Ok(());
        }
        let max = settings.max_message_delay.as_millis() as u64;
        let delay = due - now;
        if delay > max {
            match settings.delay_over_max {
                DelayOverMax::Reject => {
                    return Err(CoreError::DelayTooLong {
                        queue: message.address.to_string(),
                        requested_ms: delay,
                        max_ms: max,
                    })
                }
                DelayOverMax::Clamp => message.due_at = Some(now + max),
            }
        } else {
            message.due_at = Some(due);
        }
        Ok(())
    }

    /// Attaches a consumer. Multicast gets a private queue that lives as long as the subscription.
    pub fn subscribe(
        &self,
        address: &str,
        routing: RoutingType,
        options: ConsumerOptions,
        sink: DeliverySink,
    ) -> Result<Subscription, CoreError> {
        let id = self.next_consumer_id();
        match routing {
            RoutingType::Anycast => {
                let queue = self.queue_or_create(address, false)?;
                queue.add_consumer(options, id, sink);
                Ok(Subscription {
                    broker: self.clone(),
                    queue,
                    consumer: id,
                    cleanup: Cleanup::Nothing,
                })
            }
            RoutingType::Multicast => {
                validate_name(address)?;
                let queue_id = self.inner.next_queue_id.fetch_add(1, Ordering::Relaxed);
                let name: Arc<str> = Arc::from(format!("{address}::sub-{id}"));
                let queue = self.new_queue(name, queue_id, self.settings_for(address));
                self.inner.queues_by_id.insert(queue_id, queue.clone());
                self.bind_to_topic(address, &queue);
                queue.add_consumer(options, id, sink);
                Ok(Subscription {
                    broker: self.clone(),
                    queue,
                    consumer: id,
                    cleanup: Cleanup::PrivateQueue(Arc::from(address)),
                })
            }
        }
    }

    /// Attaches to a named subscription of a topic: durable ones (JMS durable
    /// subscribers) outlive their consumers and restarts; volatile shared ones
    /// (JMS shared consumers) live while any consumer is attached. Several
    /// consumers of one subscription share its messages.
    pub fn subscribe_named(
        &self,
        topic: &str,
        subscription: &str,
        durable: bool,
        options: ConsumerOptions,
        sink: DeliverySink,
    ) -> Result<Subscription, CoreError> {
        validate_name(topic)?;
        if subscription.is_empty() || subscription.chars().any(char::is_control) {
            return Err(CoreError::InvalidAddress(subscription.to_owned()));
        }
        let kind = if durable { "durable" } else { "shared" };
        let name: Arc<str> = Arc::from(format!("{topic}::{kind}::{subscription}"));
        let queue = match self.inner.queues.get(&name).map(|q| q.clone()) {
            Some(q) => q,
            None => {
                let id = self.inner.next_queue_id.fetch_add(1, Ordering::Relaxed);
                let queue = self.new_queue(name.clone(), id, self.settings_for(topic));
                if durable {
                    self.inner.store.submit_detached(Op::PutQueue {
                        name: name.to_string(),
                        record: QueueRecord::new(id, Some(topic)).encode(),
                    });
                }
                self.inner.queues.insert(name.clone(), queue.clone());
                self.inner.queues_by_id.insert(id, queue.clone());
                self.bind_to_topic(topic, &queue);
                queue
            }
        };
        let id = self.next_consumer_id();
        queue.add_consumer(options, id, sink);
        Ok(Subscription {
            broker: self.clone(),
            queue,
            consumer: id,
            cleanup: if durable {
                Cleanup::Nothing
            } else {
                Cleanup::WhenUnused(Arc::from(topic))
            },
        })
    }

    /// Whether a named subscription of that kind exists.
    pub fn has_named_subscription(&self, topic: &str, subscription: &str, durable: bool) -> bool {
        let kind = if durable { "durable" } else { "shared" };
        self.inner
            .queues
            .contains_key(format!("{topic}::{kind}::{subscription}").as_str())
    }

    /// Whether a named durable subscription exists.
    pub fn has_durable_subscription(&self, topic: &str, subscription: &str) -> bool {
        self.inner
            .queues
            .contains_key(format!("{topic}::durable::{subscription}").as_str())
    }

    /// Deletes a durable subscription and its messages (JMS unsubscribe).
    pub fn delete_durable_subscription(&self, topic: &str, subscription: &str) -> bool {
        let name = format!("{topic}::durable::{subscription}");
        let Some((_, queue)) = self.inner.queues.remove(name.as_str()) else {
            return false;
        };
        self.unbind_from_topic(topic, &queue);
        self.inner.queues_by_id.remove(&queue.id());
        queue.purge();
        self.inner.store.submit_detached(Op::DeleteQueue { name });
        true
    }

    /// Removes an anycast queue, its messages and its record (management).
    pub(super) fn remove_queue(&self, queue: &Arc<Queue>) {
        if self.inner.queues.remove(queue.name()).is_none() {
            return;
        }
        self.inner.queues_by_id.remove(&queue.id());
        queue.purge();
        self.inner.store.submit_detached(Op::DeleteQueue {
            name: queue.name().to_string(),
        });
    }

    /// A queue that exists until the returned guard is dropped (AMQP dynamic
    /// nodes, JMS temporary queues for request/reply).
    pub fn create_temporary_queue(&self) -> TemporaryQueue {
        let (id, name) = self.temporary_queue_name();
        self.create_temporary_queue_named(id, name)
    }

    /// A fresh queue id and the name of the temporary queue that would have it.
    pub(super) fn temporary_queue_name(&self) -> (u32, Arc<str>) {
        let id = self.inner.next_queue_id.fetch_add(1, Ordering::Relaxed);
        (id, Arc::from(format!("temp.{:x}.{id}", now_ms())))
    }

    pub(super) fn create_temporary_queue_named(&self, id: u32, name: Arc<str>) -> TemporaryQueue {
        let queue = self.new_queue(name.clone(), id, self.settings_for(&name));
        self.inner.queues.insert(name, queue.clone());
        self.inner.queues_by_id.insert(id, queue.clone());
        TemporaryQueue {
            broker: self.clone(),
            queue,
        }
    }

    fn bind_to_topic(&self, topic: &str, queue: &Arc<Queue>) {
        let topic = self
            .inner
            .topics
            .entry(Arc::from(topic))
            .or_default()
            .clone();
        topic.subscribers.write().add(queue);
    }

    fn unbind_from_topic(&self, topic: &str, queue: &Arc<Queue>) {
        if let Some(t) = self.inner.topics.get(topic) {
            t.subscribers.write().remove(queue);
        }
    }

    fn recover(&self) -> Result<(), CoreError> {
        let store = &self.inner.store;
        let mut by_id: HashMap<u32, Arc<Queue>> = HashMap::new();
        let mut max_id = 0;
        for recovered in store.queues()? {
            let record = QueueRecord::decode(&recovered.record)
                .map_err(|_| StoreError::Corrupt(recovered.name.clone().into_bytes()))?;
            let id = record.id;
            max_id = max_id.max(id);
            let name: Arc<str> = Arc::from(recovered.name.as_str());
            let topic = record.topic.as_deref();
            let mut settings = self.settings_for(topic.unwrap_or(&name));
            record.changes.settings.apply_to(&mut settings);
            let queue = self.new_queue(name.clone(), id, settings);
            if record.changes.paused {
                queue.pause(true);
            }
            queue.set_changes(record.changes);
            if let Some(topic) = topic {
                self.bind_to_topic(topic, &queue);
            }
            self.inner.queues.insert(name, queue.clone());
            self.inner.queues_by_id.insert(id, queue.clone());
            by_id.insert(id, queue);
        }
        self.inner
            .next_queue_id
            .store(max_id + 1, Ordering::Relaxed);

        struct Loading {
            in_memory: Vec<(u64, Bytes)>,
            /// Sequence and group of each message left on disk.
            backlog: Vec<(u64, Option<Arc<str>>)>,
            next_seq: u64,
        }
        let mut loading: HashMap<u32, Loading> = HashMap::new();
        let mut stale = Vec::new();
        let mut progress = RecoveryProgress::new(by_id.len(), store.estimate_messages());
        store.for_each_message(|key, record| {
            progress.message_read();
            let Some(queue) = by_id.get(&key.queue) else {
                stale.push(key);
                return;
            };
            // Byte 1 of a record is the durable flag: non-durable messages
            // paged to disk do not survive a restart.
            if record.get(1) != Some(&1) && !queue.settings().durable {
                stale.push(key);
                return;
            }
            let l = loading.entry(key.queue).or_insert(Loading {
                in_memory: Vec::new(),
                backlog: Vec::new(),
                next_seq: 1,
            });
            l.next_seq = key.seq + 1;
            if l.backlog.is_empty() && l.in_memory.len() < queue.settings().max_memory_messages {
                l.in_memory.push((key.seq, record));
            } else {
                // Paged back in lane by lane: only its group is kept.
                match persist::decode(record) {
                    Ok(stored) => l.backlog.push((key.seq, stored.message.group_id)),
                    Err(e) => {
                        tracing::error!(queue = %queue.name(), seq = key.seq, error = %e, "skipping unreadable stored message");
                        stale.push(key);
                    }
                }
            }
        })?;
        store.delete_messages_now(&stale)?;
        let mut total = 0;
        for (id, l) in loading {
            if let Some(queue) = by_id.get(&id) {
                total += l.in_memory.len() + l.backlog.len();
                queue.recover(l.in_memory, l.backlog, l.next_seq);
            }
        }
        tracing::info!(
            queues = by_id.len(),
            messages = total,
            read = progress.messages(),
            seconds = progress.elapsed().as_secs_f64(),
            "recovered"
        );
        Ok(())
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

/// A consumer attached to a queue; detaches when dropped.
pub struct Subscription {
    broker: Broker,
    queue: Arc<Queue>,
    consumer: ConsumerId,
    cleanup: Cleanup,
}

/// What goes when a subscription's consumer does.
enum Cleanup {
    Nothing,
    /// A plain topic subscriber's private queue.
    PrivateQueue(Arc<str>),
    /// A volatile shared subscription, once its last consumer is gone.
    WhenUnused(Arc<str>),
}

/// A queue deleted, with its messages, when this guard is dropped.
pub struct TemporaryQueue {
    broker: Broker,
    queue: Arc<Queue>,
}

impl TemporaryQueue {
    pub fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }

    pub fn name(&self) -> &Arc<str> {
        self.queue.name()
    }
}

impl Drop for TemporaryQueue {
    fn drop(&mut self) {
        self.broker.inner.queues.remove(self.queue.name());
        self.broker.inner.queues_by_id.remove(&self.queue.id());
        self.queue.purge();
    }
}

impl Subscription {
    pub fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }

    pub fn consumer(&self) -> ConsumerId {
        self.consumer
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.queue.remove_consumer(self.consumer);
        match &self.cleanup {
            Cleanup::Nothing => {}
            Cleanup::PrivateQueue(topic) => {
                self.broker.unbind_from_topic(topic, &self.queue);
                self.queue.purge();
                self.broker.inner.queues_by_id.remove(&self.queue.id());
            }
            Cleanup::WhenUnused(topic) => {
                if self.queue.stats().consumers == 0 {
                    self.broker.unbind_from_topic(topic, &self.queue);
                    self.broker.inner.queues.remove(self.queue.name());
                    self.broker.inner.queues_by_id.remove(&self.queue.id());
                    self.queue.purge();
                }
            }
        }
    }
}

/// Whether a new message may go into `queue` as far as memory goes: `false`
/// when a full DROP queue discards it, an error when a full FAIL queue
/// refuses it. PAGE and BLOCK queues take it (the queue pages it; BLOCK
/// also stops its producers, see [`Queue::blocks_producers`]). Two atomic
/// loads while nothing is full.
#[inline]
pub(super) fn admit(queue: &Queue) -> Result<bool, CoreError> {
    let memory = queue.memory();
    if !memory.is_full() {
        return Ok(true);
    }
    match memory.policy() {
        AddressFullPolicy::Page | AddressFullPolicy::Block => Ok(true),
        AddressFullPolicy::Fail => Err(address_full(queue)),
        AddressFullPolicy::Drop => {
            drop_one(queue);
            Ok(false)
        }
    }
}

fn drop_one(queue: &Queue) {
    let dropped = queue.memory().dropped_one();
    tracing::debug!(queue = %queue.name(), dropped, "queue full (address_full_policy DROP): message dropped");
}

pub(super) fn address_full(queue: &Queue) -> CoreError {
    let memory = queue.memory();
    let (setting, limit) = match memory.own_limit_reached() {
        Some(limit) => ("max_size_bytes", limit),
        None => ("global_max_size", memory.global_limit().unwrap_or(0)),
    };
    CoreError::AddressFull {
        queue: queue.name().to_string(),
        setting,
        limit,
    }
}
