//! Claims: leases on deliveries, as OpenStack Zaqar's API offers them.
//!
//! A claim is a consumer that takes up to `limit` messages once and then
//! wants no more: the messages are in flight to it, so no other consumer
//! (STOMP, AMQP, another claim) gets them, until the claim ends. Deleting a
//! claimed message through its claim acknowledges it; when the claim's
//! ttl runs out or it is released, the consumer leaves and the queue takes
//! its deliveries back as it does from any consumer that leaves — a failed
//! attempt, so `max_delivery_attempts` and the dead-letter address apply
//! (Zaqar's `_max_claim_count` and `_dead_letter_queue`). Nothing on the
//! dispatch path knows about claims.
//!
//! A claim is durable: its record (queue, terms, when it ends, the messages
//! it holds with their delivery counts) is written with the store's group
//! commit before the claim is answered, written again when it is renewed,
//! and deleted when it ends. At start, each stored claim takes its messages
//! back from their queue before anyone consumes, so a restart (or `kill -9`)
//! hands nothing a claim held to anybody else before the claim ends; one
//! that ended while the broker was down gives them back at once, its grace
//! counted from its end. An acknowledgement through a claim is on disk before
//! it is answered; the claim's record need not change for it (a message no
//! longer stored is not taken back).

mod open;

use super::broker::Broker;
use super::consumer::{ConsumerId, ConsumerOptions, CreditMode, MessageFilter};
use super::deliveries::{self, Deliveries};
use super::error::CoreError;
use super::message::{now_ms, Message};
use super::queue::Queue;
use super::receipt::Receipt;
use crate::store::{Op, Store};
use bytes::Bytes;
use open::OpenClaims;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What a claim asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTerms {
    /// How long the claim holds its messages.
    pub ttl: Duration,
    /// How long its messages live at least after the claim ends.
    pub grace: Duration,
    /// Most messages it takes.
    pub limit: u32,
}

/// A message a claim holds.
#[derive(Debug, Clone)]
pub struct ClaimedMessage {
    pub seq: u64,
    pub message: Arc<Message>,
    /// Deliveries so far, this one included: how often it was claimed (or
    /// delivered otherwise).
    pub delivery_count: u32,
}

/// A claim as its holder sees it.
#[derive(Debug, Clone)]
pub struct ClaimView {
    pub id: Arc<str>,
    pub queue: Arc<str>,
    pub ttl: Duration,
    pub grace: Duration,
    /// When it was made or last renewed (epoch ms).
    pub renewed_at: u64,
    /// Epoch ms.
    pub created_at: u64,
    /// The messages it still holds, oldest first.
    pub messages: Vec<ClaimedMessage>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// No such claim on that queue (never made, expired or released).
    #[error("claim '{0}' does not exist or has expired")]
    NotFound(String),
    /// The message is not held by that claim.
    #[error("message {seq} is not held by claim '{claim}'")]
    NotClaimed { claim: String, seq: u64 },
}

struct Claim {
    queue: Arc<Queue>,
    consumer: ConsumerId,
    /// Kept open so the queue may push to the claim's consumer; nothing is
    /// read after the claim is made (it wants no more).
    _deliveries: Deliveries,
    terms: ClaimTerms,
    created_at: u64,
    renewed_at: u64,
    expires_at: u64,
    messages: BTreeMap<u64, ClaimedMessage>,
    /// Its consumer is on the queue. It leaves once the claim holds
    /// nothing (its messages were deleted), though the claim stays open
    /// until its ttl: every dispatch of the queue passes over each
    /// consumer, and would over every claim made in the last ttl.
    attached: bool,
}

/// A claim as stored: JSON, versioned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct ClaimRecord {
    version: u8,
    /// The queue's store id.
    queue: u32,
    ttl_ms: u64,
    grace_ms: u64,
    created_at: u64,
    renewed_at: u64,
    expires_at: u64,
    /// Sequence and delivery count of each message it held when written.
    held: Vec<(u64, u32)>,
}

const RECORD_VERSION: u8 = 1;

impl ClaimRecord {
    fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice::<ClaimRecord>(bytes)
            .ok()
            .filter(|r| r.version == RECORD_VERSION)
    }
}

impl Claim {
    fn record(&self) -> Bytes {
        let record = ClaimRecord {
            version: RECORD_VERSION,
            queue: self.queue.id(),
            ttl_ms: self.terms.ttl.as_millis() as u64,
            grace_ms: self.terms.grace.as_millis() as u64,
            created_at: self.created_at,
            renewed_at: self.renewed_at,
            expires_at: self.expires_at,
            held: self
                .messages
                .values()
                .map(|m| (m.seq, m.delivery_count))
                .collect(),
        };
        // A struct of numbers: serialising it cannot fail.
        Bytes::from(serde_json::to_vec(&record).unwrap_or_default())
    }

    fn view(&self, id: &Arc<str>) -> ClaimView {
        ClaimView {
            id: id.clone(),
            queue: self.queue.name().clone(),
            ttl: self.terms.ttl,
            grace: self.terms.grace,
            renewed_at: self.renewed_at,
            created_at: self.created_at,
            messages: self.messages.values().cloned().collect(),
        }
    }
}

/// Every open claim of the broker, by id.
pub struct Claims {
    /// Each claim's record is written (and deleted) while this lock is
    /// held, so the store applies one claim's writes in the order they
    /// were made.
    open: Mutex<OpenClaims>,
    store: Store,
    /// The task that ends claims when their ttl is over, while any is open.
    watcher: Mutex<Option<Watcher>>,
    /// A claim ends before the watcher would wake (or the broker is gone):
    /// the watcher looks again.
    changed: Arc<tokio::sync::Notify>,
}

struct Watcher {
    _task: tokio::task::JoinHandle<()>,
    /// When it wakes next (epoch ms): a claim ending later needs no
    /// notification, so making one costs the watcher nothing.
    wakes_at: u64,
}

impl Drop for Claims {
    fn drop(&mut self) {
        self.changed.notify_one();
    }
}

impl Claims {
    pub fn new(store: Store) -> Self {
        Claims {
            open: Mutex::default(),
            store,
            watcher: Mutex::default(),
            changed: Arc::default(),
        }
    }

    /// Takes claim `id` out of `open` and deletes its record: nobody waits
    /// for the delete (a record found at start for a claim that has ended
    /// ends it again).
    fn forget(&self, open: &mut OpenClaims, id: &str) -> Option<(Claim, Receipt)> {
        let (id, claim) = open.remove(id)?;
        let deleted = self.store.submit(Op::DeleteClaim { id });
        Some((claim, Receipt::from(deleted)))
    }

    /// Ends the claims whose ttl is over at `now` (epoch ms); their messages
    /// go back to their queues.
    fn expire(&self, now: u64) {
        let ended: Vec<Claim> = {
            let mut open = self.open.lock();
            open.ended_at(now)
                .iter()
                .filter_map(|id| self.forget(&mut open, id))
                .map(|(claim, _)| claim)
                .collect()
        };
        for claim in ended {
            end(claim);
        }
    }

    /// When the earliest open claim ends, if any is open.
    fn next_expiry(&self) -> Option<u64> {
        self.open.lock().first_end()
    }
}

/// The claim's ttl is over: its consumer leaves and the queue takes back
/// what it still holds, each message alive at least `grace` past the end.
fn end(claim: Claim) {
    if !claim.attached {
        return;
    }
    let grace = claim.terms.grace.as_millis() as u64;
    if grace > 0 && !claim.messages.is_empty() {
        claim
            .queue
            .extend_expiry_of(claim.consumer, claim.expires_at.saturating_add(grace));
    }
    claim.queue.remove_consumer(claim.consumer);
}

/// A claim's consumer: it takes what it is given credit for, once.
fn claim_options(filter: Option<Arc<dyn MessageFilter>>) -> ConsumerOptions {
    ConsumerOptions {
        credit: CreditMode::Explicit,
        priority: 0,
        filter,
        browse: false,
    }
}

/// What a claim's consumer has been handed so far, by sequence.
fn received(deliveries: &mut Deliveries) -> BTreeMap<u64, ClaimedMessage> {
    let mut messages = BTreeMap::new();
    while let Ok(delivery) = deliveries.try_recv() {
        messages.insert(
            delivery.seq,
            ClaimedMessage {
                seq: delivery.seq,
                message: delivery.message,
                delivery_count: delivery.delivery_count,
            },
        );
    }
    messages
}

/// A fresh claim id: 128 random bits in hex, so an id from before a restart
/// never names a new claim.
fn new_id() -> Arc<str> {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: time and a counter are still unique in this process.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&now_ms().to_be_bytes());
        bytes[8..].copy_from_slice(&n.to_be_bytes());
    }
    // By table, not format! per byte: that was 9k instructions a claim.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        hex.push(DIGITS[usize::from(b >> 4)] as char);
        hex.push(DIGITS[usize::from(b & 15)] as char);
    }
    Arc::from(hex)
}

impl Broker {
    /// Claims up to `terms.limit` of the messages waiting in `queue` now
    /// (those `filter` accepts, when given). `None` when there was nothing
    /// to claim: no claim is made. The receipt resolves once the claim's
    /// record is on disk.
    pub fn claim(
        &self,
        queue: &Arc<Queue>,
        terms: ClaimTerms,
        filter: Option<Arc<dyn MessageFilter>>,
    ) -> Result<Option<(ClaimView, Receipt)>, CoreError> {
        if queue.is_deleted() {
            return Err(CoreError::NotFound(queue.name().to_string()));
        }
        let (sink, mut deliveries) = deliveries::channel();
        let consumer = self.next_consumer_id();
        queue.add_consumer(claim_options(filter), consumer, sink);
        // Dispatch happens under the queue's lock inside these calls: once
        // drained, everything the claim got is in its channel.
        queue.set_credit(consumer, terms.limit);
        queue.drain(consumer);
        let messages = received(&mut deliveries);
        if messages.is_empty() {
            queue.remove_consumer(consumer);
            return Ok(None);
        }
        let now = now_ms();
        let claim = Claim {
            queue: queue.clone(),
            consumer,
            _deliveries: deliveries,
            terms,
            created_at: now,
            renewed_at: now,
            expires_at: now.saturating_add(terms.ttl.as_millis() as u64),
            messages,
            attached: true,
        };
        let ends_at = claim.expires_at;
        let id = new_id();
        let view = claim.view(&id);
        let claims = self.claims();
        let written = {
            let mut open = claims.open.lock();
            let written = claims.store.submit(Op::PutClaim {
                id: id.clone(),
                record: claim.record(),
            });
            open.insert(id, claim);
            written
        };
        self.watch_claims(ends_at);
        Ok(Some((view, Receipt::from(written))))
    }

    /// The claims found in the store take their messages back, before
    /// anyone consumes (recovery at start); those whose ttl ended while the
    /// broker was down give them back at once.
    pub(super) fn restore_claims(&self) -> Result<(), CoreError> {
        let claims = self.claims().clone();
        let now = now_ms();
        let mut restored = 0;
        for (id, bytes) in claims.store.claims()? {
            let id: Arc<str> = Arc::from(id);
            let record = ClaimRecord::decode(&bytes);
            let queue = record.as_ref().and_then(|r| self.queue_by_id(r.queue));
            let (Some(record), Some(queue)) = (record, queue) else {
                // Unreadable, or its queue was deleted: nothing to hold.
                claims.store.submit_detached(Op::DeleteClaim { id });
                continue;
            };
            let (sink, mut deliveries) = deliveries::channel();
            let consumer = self.next_consumer_id();
            queue.add_consumer(claim_options(None), consumer, sink);
            queue.deliver_these(consumer, &record.held);
            let claim = Claim {
                queue,
                consumer,
                messages: received(&mut deliveries),
                _deliveries: deliveries,
                terms: ClaimTerms {
                    ttl: Duration::from_millis(record.ttl_ms),
                    grace: Duration::from_millis(record.grace_ms),
                    limit: record.held.len() as u32,
                },
                created_at: record.created_at,
                renewed_at: record.renewed_at,
                expires_at: record.expires_at,
                attached: true,
            };
            if claim.expires_at <= now {
                claims.store.submit_detached(Op::DeleteClaim { id });
                end(claim);
                continue;
            }
            restored += 1;
            claims.open.lock().insert(id, claim);
        }
        if restored > 0 {
            tracing::info!(claims = restored, "claims restored");
            self.watch_claims(0);
        }
        Ok(())
    }

    /// The claim `id` on the queue named `queue`, while it is open.
    pub fn claim_view(&self, queue: &str, id: &str) -> Option<ClaimView> {
        let now = now_ms();
        let open = self.claims().open.lock();
        let (id, claim) = open.get(id)?;
        (&**claim.queue.name() == queue && claim.expires_at > now).then(|| claim.view(id))
    }

    /// Which open claim is the consumer `consumer` of `queue`, if one is
    /// (what holds a message in flight to it).
    pub fn claim_holding(&self, queue: &Arc<Queue>, consumer: ConsumerId) -> Option<Arc<str>> {
        let open = self.claims().open.lock();
        open.of_consumer(consumer)
            .filter(|(_, c)| Arc::ptr_eq(&c.queue, queue))
            .map(|(id, _)| id.clone())
    }

    /// Gives an open claim new terms from now (Zaqar's PATCH of a claim).
    /// The receipt resolves once its new record is on disk.
    pub fn renew_claim(
        &self,
        queue: &str,
        id: &str,
        ttl: Duration,
        grace: Duration,
    ) -> Result<Receipt, ClaimError> {
        let now = now_ms();
        let claims = self.claims();
        let ends_at = now.saturating_add(ttl.as_millis() as u64);
        let written = {
            let mut open = claims.open.lock();
            let not_found = || ClaimError::NotFound(id.to_owned());
            let key = open
                .get(id)
                .filter(|(_, c)| &**c.queue.name() == queue && c.expires_at > now)
                .map(|(key, _)| key.clone())
                .ok_or_else(not_found)?;
            let record = open
                .update(&key, |claim| {
                    claim.terms.ttl = ttl;
                    claim.terms.grace = grace;
                    claim.renewed_at = now;
                    claim.expires_at = ends_at;
                    claim.record()
                })
                .ok_or_else(not_found)?;
            claims.store.submit(Op::PutClaim { id: key, record })
        };
        self.watch_claims(ends_at);
        Ok(Receipt::from(written))
    }

    /// Ends a claim now: its messages are available again. `None` when it
    /// was not open; else the receipt resolves once its record is deleted.
    pub fn release_claim(&self, queue: &str, id: &str) -> Option<Receipt> {
        let claims = self.claims();
        let (claim, deleted) = {
            let mut open = claims.open.lock();
            open.get(id).filter(|(_, c)| &**c.queue.name() == queue)?;
            claims.forget(&mut open, id)?
        };
        // Released, not expired: the grace is for the end of a ttl.
        if claim.attached {
            claim.queue.remove_consumer(claim.consumer);
        }
        Some(deleted)
    }

    /// Ends every claim on `queue` (the queue is about to be deleted).
    pub fn release_claims_on(&self, queue: &str) {
        let claims = self.claims();
        let ended: Vec<Claim> = {
            let mut open = claims.open.lock();
            let ids: Vec<Arc<str>> = open
                .iter()
                .filter(|(_, c)| &**c.queue.name() == queue)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter()
                .filter_map(|id| claims.forget(&mut open, id))
                .map(|(claim, _)| claim)
                .collect()
        };
        for claim in ended.into_iter().filter(|c| c.attached) {
            claim.queue.remove_consumer(claim.consumer);
        }
    }

    /// Acknowledges message `seq` held by claim `id`: it leaves the queue
    /// for good. The receipt resolves once its deletion is on disk.
    pub fn ack_claimed(&self, queue: &str, id: &str, seq: u64) -> Result<Receipt, ClaimError> {
        let now = now_ms();
        let not_found = || ClaimError::NotFound(id.to_owned());
        let not_claimed = || ClaimError::NotClaimed {
            claim: id.to_owned(),
            seq,
        };
        // Acknowledged under the claims' lock: the claim's consumer leaves
        // once it holds nothing (below), which must not happen before every
        // acknowledgement through it is made, or the queue would take back
        // a message being acknowledged. (Nothing takes the claims' lock
        // under a queue's.)
        let (receipt, leaves) = {
            let mut open = self.claims().open.lock();
            open.update(id, |claim| {
                if &**claim.queue.name() != queue || claim.expires_at <= now {
                    return Err(not_found());
                }
                if claim.messages.remove(&seq).is_none() {
                    return Err(not_claimed());
                }
                // A message the queue took back meanwhile (purged, say) is
                // not acknowledged.
                let receipt = claim
                    .queue
                    .ack(claim.consumer, &[seq])
                    .map_err(|_| not_claimed())?;
                let leaves = claim.messages.is_empty() && claim.attached;
                claim.attached &= !leaves;
                Ok((
                    receipt,
                    leaves.then(|| (claim.queue.clone(), claim.consumer)),
                ))
            })
            .ok_or_else(not_found)??
        };
        if let Some((q, consumer)) = leaves {
            q.remove_consumer(consumer);
        }
        Ok(receipt)
    }

    /// Makes sure one task ends claims as their ttls run out. It sleeps
    /// until the earliest end, and stops when no claim is open.
    /// `ends_at` is when the claim just made or renewed ends.
    fn watch_claims(&self, ends_at: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let claims = self.claims().clone();
        let mut watcher = claims.watcher.lock();
        if let Some(w) = watcher.as_ref() {
            if ends_at < w.wakes_at {
                claims.changed.notify_one();
            }
            return;
        }
        // Weak: open claims hold their queues, and so the store; a broker
        // dropped with claims open must let go of both.
        let weak = Arc::downgrade(&claims);
        let changed = claims.changed.clone();
        let task = runtime.spawn(async move {
            loop {
                let notified = changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let next = {
                    let Some(claims) = weak.upgrade() else { return };
                    claims.expire(now_ms());
                    // Checked under the watcher's lock: a claim made meanwhile
                    // either is seen here or finds no watcher and starts one.
                    let mut watcher = claims.watcher.lock();
                    match (claims.next_expiry(), watcher.as_mut()) {
                        (Some(next), Some(w)) => {
                            w.wakes_at = next;
                            next
                        }
                        // Cannot be: the spawner holds this lock until
                        // it has stored the watcher.
                        (Some(next), None) => next,
                        (None, _) => {
                            *watcher = None;
                            return;
                        }
                    }
                };
                let wait = Duration::from_millis(next.saturating_sub(now_ms()));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = notified => {}
                }
            }
        });
        // Woken by every claim until it has looked once.
        *watcher = Some(Watcher {
            _task: task,
            wakes_at: 0,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::consumer::ConsumerOptions;
    use crate::core::settings::QueueSettings;
    use crate::core::tests::open;
    use crate::core::RoutingType;

    fn put(broker: &Broker, queue: &str, body: &str) {
        let mut m = Message::new(
            Arc::from(queue),
            bytes::Bytes::from(body.to_owned()),
            now_ms(),
        );
        m.durable = true;
        broker.publish(m, RoutingType::Anycast).unwrap();
    }

    fn terms(ttl_ms: u64, limit: u32) -> ClaimTerms {
        ClaimTerms {
            ttl: Duration::from_millis(ttl_ms),
            grace: Duration::ZERO,
            limit,
        }
    }

    /// A claim of up to `limit` messages for `ttl_ms`, which must find some.
    fn claimed(broker: &Broker, queue: &Arc<Queue>, ttl_ms: u64, limit: u32) -> ClaimView {
        broker
            .claim(queue, terms(ttl_ms, limit), None)
            .expect("claim")
            .expect("something to claim")
            .0
    }

    #[test]
    fn claim_ids_are_32_lowercase_hex_digits() {
        let id = new_id();
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_ne!(new_id(), id);
    }

    fn bodies(view: &ClaimView) -> Vec<String> {
        view.messages
            .iter()
            .map(|m| String::from_utf8_lossy(&m.message.body).into_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_claim_takes_up_to_its_limit_and_other_consumers_get_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        for i in 0..5 {
            put(&broker, "q", &i.to_string());
        }
        let queue = broker.queue("q").unwrap();
        let claim = claimed(&broker, &queue, 60_000, 3);
        assert_eq!(bodies(&claim), ["0", "1", "2"]);
        let (tx, mut rx) = deliveries::channel();
        let _sub = broker
            .subscribe("q", RoutingType::Anycast, ConsumerOptions::default(), tx)
            .unwrap();
        let mut got = Vec::new();
        while let Ok(d) = rx.try_recv() {
            got.push(String::from_utf8_lossy(&d.message.body).into_owned());
        }
        assert_eq!(got, ["3", "4"], "claimed messages are not dispatched");
        let again = broker.claim(&queue, terms(60_000, 3), None).unwrap();
        assert!(again.is_none(), "nothing left to claim");
    }

    #[tokio::test]
    async fn released_and_expired_claims_give_their_messages_back() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        put(&broker, "q", "a");
        put(&broker, "q", "b");
        let queue = broker.queue("q").unwrap();
        let first = claimed(&broker, &queue, 60_000, 1);
        assert!(broker.release_claim("q", &first.id).is_some());
        assert!(broker.claim_view("q", &first.id).is_none());
        let second = claimed(&broker, &queue, 100, 1);
        assert_eq!(
            bodies(&second),
            ["a"],
            "released: available again, in order"
        );
        assert_eq!(second.messages[0].delivery_count, 2);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(broker.claim_view("q", &second.id).is_none(), "expired");
        let third = claimed(&broker, &queue, 60_000, 5);
        assert_eq!(bodies(&third), ["a", "b"], "expired: redelivered");
    }

    #[tokio::test]
    async fn a_renewed_claim_outlives_its_first_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        put(&broker, "q", "a");
        let queue = broker.queue("q").unwrap();
        let claim = claimed(&broker, &queue, 200, 1);
        broker
            .renew_claim("q", &claim.id, Duration::from_secs(60), Duration::ZERO)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let view = broker.claim_view("q", &claim.id).expect("still open");
        assert_eq!(view.ttl, Duration::from_secs(60));
        assert_eq!(
            broker
                .renew_claim("other", &claim.id, Duration::from_secs(1), Duration::ZERO)
                .err(),
            Some(ClaimError::NotFound(claim.id.to_string())),
            "a claim is named with its queue"
        );
    }

    #[tokio::test]
    async fn an_ack_through_the_claim_is_durable_and_final() {
        let dir = tempfile::tempdir().unwrap();
        {
            let broker = open(dir.path(), QueueSettings::default());
            put(&broker, "q", "gone");
            put(&broker, "q", "kept");
            let queue = broker.queue("q").unwrap();
            let claim = claimed(&broker, &queue, 60_000, 2);
            let seq = claim.messages[0].seq;
            broker
                .ack_claimed("q", &claim.id, seq)
                .unwrap()
                .wait()
                .await
                .unwrap();
            assert_eq!(
                broker.ack_claimed("q", &claim.id, seq).err(),
                Some(ClaimError::NotClaimed {
                    claim: claim.id.to_string(),
                    seq
                })
            );
            assert!(broker.release_claim("q", &claim.id).is_some());
            let rest = claimed(&broker, &queue, 60_000, 5);
            assert_eq!(bodies(&rest), ["kept"]);
            broker
                .release_claim("q", &rest.id)
                .unwrap()
                .wait()
                .await
                .unwrap();
        }
        let broker = open(dir.path(), QueueSettings::default());
        let queue = broker.queue("q").unwrap();
        let after = claimed(&broker, &queue, 60_000, 5);
        assert_eq!(
            bodies(&after),
            ["kept"],
            "the acknowledged message stays gone"
        );
    }

    #[tokio::test]
    async fn too_many_claims_dead_letter_the_message() {
        let dir = tempfile::tempdir().unwrap();
        let settings = QueueSettings {
            max_delivery_attempts: 2,
            dead_letter_address: Some("dlq".into()),
            ..QueueSettings::default()
        };
        let broker = open(dir.path(), settings);
        put(&broker, "q", "poison");
        let queue = broker.queue("q").unwrap();
        for _ in 0..2 {
            let c = claimed(&broker, &queue, 60_000, 1);
            assert!(broker.release_claim("q", &c.id).is_some());
        }
        assert!(broker
            .claim(&queue, terms(60_000, 1), None)
            .unwrap()
            .is_none());
        let dlq = broker.queue("dlq").expect("dead-letter queue made");
        let moved = broker
            .claim(&dlq, terms(60_000, 1), None)
            .unwrap()
            .unwrap()
            .0;
        assert_eq!(bodies(&moved), ["poison"]);
    }

    #[tokio::test]
    async fn grace_keeps_an_expiring_message_past_the_claim() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        let mut m = Message::new(Arc::from("q"), bytes::Bytes::from_static(b"x"), now_ms());
        m.expires_at = Some(now_ms() + 150);
        broker.publish(m, RoutingType::Anycast).unwrap();
        let queue = broker.queue("q").unwrap();
        let claim = ClaimTerms {
            ttl: Duration::from_millis(100),
            grace: Duration::from_secs(60),
            limit: 1,
        };
        broker.claim(&queue, claim, None).unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let again = broker.claim(&queue, terms(60_000, 1), None).unwrap();
        assert!(again.is_some(), "its ttl was extended by the grace");
    }

    #[tokio::test]
    async fn a_waiting_message_can_be_removed_by_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        put(&broker, "q", "a");
        put(&broker, "q", "b");
        let queue = broker.queue("q").unwrap();
        let seen = queue.peek(0, 10, false);
        assert_eq!(seen.len(), 2);
        queue
            .remove_waiting(seen[0].seq)
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert!(queue.remove_waiting(seen[0].seq).is_err());
        let rest = claimed(&broker, &queue, 60_000, 5);
        assert_eq!(bodies(&rest), ["b"]);
        let listed = queue.peek(0, 10, true);
        assert_eq!(listed.len(), 1);
        assert!(listed[0].held_by.is_some());
        assert_eq!(
            broker
                .claim_holding(&queue, listed[0].held_by.unwrap())
                .as_deref(),
            Some(&*rest.id)
        );
    }

    #[tokio::test]
    async fn a_claim_holds_its_messages_across_a_restart_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let id = {
            let broker = open(dir.path(), QueueSettings::default());
            for body in ["a", "b", "c"] {
                put(&broker, "q", body);
            }
            let queue = broker.queue("q").unwrap();
            let (claim, written) = broker
                .claim(&queue, terms(60_000, 2), None)
                .unwrap()
                .unwrap();
            written.wait().await.unwrap();
            broker
                .renew_claim("q", &claim.id, Duration::from_millis(600), Duration::ZERO)
                .unwrap()
                .wait()
                .await
                .unwrap();
            claim.id
            // Dropped without releasing: as after kill -9, only the store is left.
        };
        let broker = open(dir.path(), QueueSettings::default());
        let queue = broker.queue("q").unwrap();
        let restored = broker.claim_view("q", &id).expect("restored");
        assert_eq!(bodies(&restored), ["a", "b"]);
        assert_eq!(restored.ttl, Duration::from_millis(600), "as renewed");
        assert_eq!(restored.messages[0].delivery_count, 1);
        let (other, _) = broker
            .claim(&queue, terms(60_000, 5), None)
            .unwrap()
            .unwrap();
        assert_eq!(bodies(&other), ["c"], "held ones are not claimed again");
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(broker.claim_view("q", &id).is_none(), "ended at its ttl");
        let (back, _) = broker
            .claim(&queue, terms(60_000, 5), None)
            .unwrap()
            .unwrap();
        assert_eq!(bodies(&back), ["a", "b"]);
        assert_eq!(back.messages[0].delivery_count, 2);
    }

    #[tokio::test]
    async fn a_claim_that_ended_while_down_gives_its_messages_back_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let id = {
            let broker = open(dir.path(), QueueSettings::default());
            put(&broker, "q", "a");
            let queue = broker.queue("q").unwrap();
            let (claim, written) = broker.claim(&queue, terms(300, 1), None).unwrap().unwrap();
            written.wait().await.unwrap();
            claim.id
            // Gone before its ttl ends: its record is what is left.
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let broker = open(dir.path(), QueueSettings::default());
        assert!(broker.claim_view("q", &id).is_none());
        let queue = broker.queue("q").unwrap();
        let (again, _) = broker
            .claim(&queue, terms(60_000, 1), None)
            .unwrap()
            .unwrap();
        assert_eq!(bodies(&again), ["a"]);
        assert_eq!(again.messages[0].delivery_count, 2, "the claim counted");
        drop((broker, queue));
        // Its record went with it: a third start finds only the new claim's.
        let broker = open(dir.path(), QueueSettings::default());
        assert!(broker.claim_view("q", &id).is_none());
        assert!(broker.claim_view("q", &again.id).is_some());
    }

    #[tokio::test]
    async fn a_released_claim_stays_released_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let broker = open(dir.path(), QueueSettings::default());
            put(&broker, "q", "a");
            let queue = broker.queue("q").unwrap();
            let (claim, _) = broker
                .claim(&queue, terms(60_000, 1), None)
                .unwrap()
                .unwrap();
            broker
                .release_claim("q", &claim.id)
                .unwrap()
                .wait()
                .await
                .unwrap();
        }
        let broker = open(dir.path(), QueueSettings::default());
        let queue = broker.queue("q").unwrap();
        let (again, _) = broker
            .claim(&queue, terms(60_000, 1), None)
            .unwrap()
            .unwrap();
        assert_eq!(bodies(&again), ["a"]);
    }
}
