//! Publishing: routing a message to its queue or a topic's subscribers, the
//! checks that may refuse it (full disk, full queue, delay over the maximum)
//! and the hand-over to the queue or the delay schedule.

use super::{validate_name, Broker, RoutingType};
use crate::core::delay_headers;
use crate::core::error::CoreError;
use crate::core::memory::AddressFullPolicy;
use crate::core::message::{now_ms, Message};
use crate::core::queue::{Diversion, Diverter, Queue};
use crate::core::receipt::Receipt;
use crate::core::settings::{DelayOverMax, QueueSettings};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Broker {
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
    pub(in crate::core) fn fan_out(&self, message: Message) -> Receipt {
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
    /// full FAIL queue (Artemis fails the send to the address). A transaction
    /// checks it when the send is added and again at commit.
    pub(in crate::core) fn refuse_when_a_subscriber_fails(
        &self,
        topic: &str,
    ) -> Result<(), CoreError> {
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
        // A full FAIL queue refuses before the delay is looked at.
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

    /// [`Broker::publish_to`] for a message whose delay was resolved already:
    /// resolving again would give one made due now the queue's default delay.
    pub(in crate::core) fn publish_resolved(
        &self,
        queue: &Arc<Queue>,
        message: Message,
    ) -> Result<Receipt, CoreError> {
        self.refuse_on_full_disk(&message)?;
        if !admit(queue)? {
            return Ok(Receipt::ready());
        }
        Ok(self.enqueue(queue, Arc::new(message), 0))
    }

    /// [`Broker::publish_to`] for a message whose delay was resolved already
    /// (a committed transaction's): nothing left that can be refused.
    pub(in crate::core) fn publish_checked(&self, queue: &Arc<Queue>, message: Message) -> Receipt {
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
    pub(in crate::core) fn refuse_on_full_disk(&self, message: &Message) -> Result<(), CoreError> {
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
                // One whose ttl ends before it is due waits there too, to be
                // seen (Zaqar gets it by id) until its ttl ends, never delivered.
                if let Some(scheduler) = self.inner.scheduler.read().clone() {
                    return scheduler
                        .schedule(queue, message, delivery_count, None)
                        .into();
                }
                if message.expires_at.is_some_and(|exp| exp <= due) {
                    // No schedule to keep it in: it would be delivered early.
                    self.inner.divert(queue, message, Diversion::Expired);
                    return Receipt::ready();
                }
            }
        }
        queue.publish_counted(message, delivery_count).into()
    }

    /// Reads the queue's `delay_headers` when the protocol found one, then applies the
    /// queue's default delay and the maximum (Zaqar's delayed queues). Apply it once:
    /// a message it made due now has no due time left, and a second pass would give
    /// it the default delay.
    pub(in crate::core) fn resolve_delay(
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
}

/// Whether a new message may go into `queue` as far as memory goes: `false`
/// when a full DROP queue discards it, an error when a full FAIL queue
/// refuses it. PAGE and BLOCK queues take it (the queue pages it; BLOCK
/// also stops its producers, see [`Queue::blocks_producers`]). Two atomic
/// loads while nothing is full.
#[inline]
pub(in crate::core) fn admit(queue: &Queue) -> Result<bool, CoreError> {
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

pub(in crate::core) fn address_full(queue: &Queue) -> CoreError {
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
