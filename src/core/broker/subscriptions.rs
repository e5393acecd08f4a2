//! Consumers and the queues that live for them: topic subscribers' private
//! queues, named (durable and shared) subscriptions, temporary queues.

use super::{validate_name, Broker, RoutingType};
use crate::core::consumer::{ConsumerId, ConsumerOptions, DeliverySink};
use crate::core::error::CoreError;
use crate::core::fast_map::FastMap;
use crate::core::message::now_ms;
use crate::core::queue::Queue;
use crate::core::queue_record::QueueRecord;
use crate::store::Op;
use parking_lot::RwLock;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Default)]
pub(super) struct Topic {
    pub(super) subscribers: RwLock<Subscribers>,
}

/// A topic's subscriber queues. A connection may subscribe a hundred thousand
/// times, so one leaves in O(1): found by queue id, its place taken by the last.
#[derive(Default)]
pub(super) struct Subscribers {
    pub(super) queues: Vec<Arc<Queue>>,
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
    pub(in crate::core) fn remove_queue(&self, queue: &Arc<Queue>) {
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
    pub(in crate::core) fn temporary_queue_name(&self) -> (u32, Arc<str>) {
        let id = self.inner.next_queue_id.fetch_add(1, Ordering::Relaxed);
        (id, Arc::from(format!("temp.{:x}.{id}", now_ms())))
    }

    pub(in crate::core) fn create_temporary_queue_named(
        &self,
        id: u32,
        name: Arc<str>,
    ) -> TemporaryQueue {
        let queue = self.new_queue(name.clone(), id, self.settings_for(&name));
        self.inner.queues.insert(name, queue.clone());
        self.inner.queues_by_id.insert(id, queue.clone());
        TemporaryQueue {
            broker: self.clone(),
            queue,
        }
    }

    pub(super) fn bind_to_topic(&self, topic: &str, queue: &Arc<Queue>) {
        let topic = self
            .inner
            .topics
            .entry(Arc::from(topic))
            .or_default()
            .clone();
        topic.subscribers.write().add(queue);
    }

    pub(super) fn unbind_from_topic(&self, topic: &str, queue: &Arc<Queue>) {
        if let Some(t) = self.inner.topics.get(topic) {
            t.subscribers.write().remove(queue);
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
