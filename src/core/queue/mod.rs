//! A queue: ready messages in lanes ([`ready`]), the disk backlog of a deep
//! queue ([`backlog`]), consumers with credit ([`consumers`]), deliveries in
//! flight and their settlement ([`settle`]), redelivery delays
//! ([`redelivery`]), dispatch ([`dispatch`]) and its gates ([`gate`]),
//! browsers ([`browse`]), producer flow control ([`flow`]) and group
//! rebalancing ([`rebalance`]). One mutex per queue; nothing inside it
//! awaits, so it is never held across a suspension. What must happen after
//! the lock is released (wake-ups, timers) is collected in [`effects`].

mod backlog;
mod browse;
mod claimed;
mod consumers;
mod counters;
mod dispatch;
mod effects;
mod flow;
mod gate;
mod ids;
mod inspect;
#[cfg(test)]
mod model;
mod overview;
mod pending_acks;
mod priority_fifo;
pub mod ready;
mod rebalance;
mod reconfigure;
mod redelivery;
mod settle;

pub use claimed::Peeked;
pub use counters::{Rates, Totals};
pub use gate::GateState;
pub use inspect::{MessagePage, MessageState, QueuedMessage, Taken, Untaken};
pub use overview::{ConsumerInfo, GroupInfo};
pub use pending_acks::PendingAcks;

use self::backlog::Backlog;
use self::consumers::{Consumers, Slot};
use self::counters::Counters;
use self::effects::AfterUnlock;
use self::flow::Flow;
use self::gate::DispatchGate;
use self::ready::{Entry, ReadySet};
pub use self::reconfigure::SettingsConflict;
use self::redelivery::Waiting;
use super::consumer::{ConsumerId, ConsumerOptions, CreditMode, DeliverySink};
use super::fast_map::FastMap;
use super::grouping::GroupTable;
use super::memory::{Budget, QueueMemory};
use super::message::Message;
use super::persist;
use super::queue_record::QueueChanges;
use super::settings::QueueSettings;
use crate::store::{Completion, MessageKey, Op, Store};
use arc_swap::ArcSwap;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// Why a message leaves its queue without being acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Diversion {
    Expired,
    DeadLetter,
}

/// Receives messages a queue gives up on (expired, dead-lettered) so they can
/// be routed elsewhere; implemented by the broker.
pub trait Diverter: Send + Sync {
    fn divert(&self, from: &Queue, message: Arc<Message>, why: Diversion);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    pub ready: usize,
    pub in_flight: usize,
    pub paged: usize,
    /// Returned messages waiting out their redelivery delay.
    pub waiting: usize,
    /// Bytes the queue's messages hold in memory (see [`super::memory`]).
    pub memory_bytes: u64,
    /// Messages discarded by the DROP policy.
    pub dropped: u64,
    pub consumers: usize,
    pub groups: usize,
    /// Sends whose completion waits for the queue to drain (flow control).
    pub held_sends: usize,
    /// Dispatch to consumers is paused (management API).
    pub paused: bool,
    /// The dispatch gate (`consumers_before_dispatch`, `delay_before_dispatch`).
    pub gate: GateState,
}

struct InFlight {
    consumer: ConsumerId,
    /// Where that consumer is in [`consumers::Consumers`]: its in-flight
    /// bytes are counted down without a lookup by id.
    index: usize,
    entry: Entry,
}

struct State {
    /// The queue's settings, replaced whole when they change.
    settings: Arc<QueueSettings>,
    next_seq: u64,
    ready: ReadySet,
    groups: GroupTable,
    consumers: Consumers,
    gate: DispatchGate,
    in_flight: FastMap<u64, InFlight>,
    /// Deliveries still in flight for each group paused by a rebalance; the
    /// group is free when its count reaches zero. Counted only for paused
    /// groups (from `in_flight` when the rebalance starts), so the common
    /// path of dispatch and ack does no per-group bookkeeping.
    paused_in_flight: FastMap<Arc<str>, u32>,
    backlog: Backlog,
    waiting: Waiting,
    /// Scratch for dispatch: consumers with nothing to take this round.
    starved: Vec<bool>,
    flow: Flow,
    /// A wake-up is set for this time (epoch ms) to drop expired group
    /// heads that a selector passes over (see `dispatch`).
    expiry_wake_at: Option<u64>,
    /// Sequences by message id, once a lookup asked for them (see [`ids`]).
    ids: ids::IdIndex,
    /// Bytes of the messages placed under the current lock whose charge is
    /// not applied to the budgets yet (see [`Queue::place`]).
    uncharged: u64,
}

impl State {
    /// Gives a group's lane to another owner (or none), wherever its
    /// messages wait.
    fn set_owner(&mut self, lane: &Arc<str>, to: Option<ConsumerId>) {
        let from = match to {
            Some(consumer) => {
                let from = self.groups.owner(lane);
                self.groups.bind(lane.clone(), consumer);
                from
            }
            None => self.groups.unbind(lane),
        };
        if from != to {
            self.ready.rebind(lane, from, to);
            self.backlog.rebind(lane, to);
        }
    }

    fn owner_of(&self, lane: &Option<Arc<str>>) -> Option<ConsumerId> {
        lane.as_deref().and_then(|l| self.groups.owner(l))
    }

    /// Messages waiting to be delivered, in memory or on disk.
    fn waiting_count(&self) -> usize {
        self.ready.len() + self.backlog.len()
    }
}

/// The owner of groups moved by a rebalance whose old owner still holds some
/// of their messages: nobody takes them until those are settled.
const PAUSED: ConsumerId = ConsumerId::MAX;

pub struct Queue {
    name: Arc<str>,
    id: u32,
    /// For readers outside the state lock (senders, the broker); the queue's own
    /// decisions read the copy in [`State`], taken under the same lock.
    settings: ArcSwap<QueueSettings>,
    /// `default_message_delay` is not zero: senders load the settings only then
    /// (or for a message that carries a delay of its own).
    has_default_delay: AtomicBool,
    store: Store,
    diverter: Weak<dyn Diverter>,
    memory: Arc<QueueMemory>,
    /// Set (under the state lock) when the broker deletes the queue; read
    /// without it by senders that hold on to the queue between messages.
    deleted: AtomicBool,
    /// The place this queue takes in its creator's `max_queues`, freed with the queue.
    owner: std::sync::OnceLock<crate::core::security::QueueSlot>,
    /// Totals since start; see [`counters`].
    counters: Counters,
    /// What management changed on the queue at run time, as stored in its record.
    changes: parking_lot::Mutex<QueueChanges>,
    state: StateLock,
    /// Held by the lookup that builds the index of message ids (see [`ids`]).
    id_builder: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

/// A message left on disk at start: its sequence and group.
pub type PagedAtStart = (u64, Option<Arc<str>>);

/// A message moving into a queue: its delivery count so far, and a store
/// operation for the same write (see [`Queue::publish_moving`]).
pub type Move = (Arc<Message>, u32, Option<Op>);

impl Queue {
    pub fn new(
        name: Arc<str>,
        id: u32,
        settings: QueueSettings,
        store: Store,
        diverter: Weak<dyn Diverter>,
        global_memory: Arc<Budget>,
    ) -> Self {
        let groups = GroupTable::new(settings.group_buckets);
        let memory = Arc::new(QueueMemory::new(
            settings.max_size_bytes,
            settings.address_full_policy,
            global_memory,
        ));
        let settings = Arc::new(settings);
        Self {
            name,
            id,
            has_default_delay: AtomicBool::new(!settings.default_message_delay.is_zero()),
            settings: ArcSwap::new(settings.clone()),
            store,
            diverter,
            memory,
            deleted: AtomicBool::new(false),
            owner: std::sync::OnceLock::new(),
            counters: Counters::default(),
            changes: parking_lot::Mutex::new(QueueChanges::default()),
            state: StateLock(std::sync::Mutex::new(State {
                settings,
                next_seq: 1,
                ready: ReadySet::default(),
                groups,
                consumers: Consumers::default(),
                gate: DispatchGate::default(),
                in_flight: FastMap::default(),
                paused_in_flight: FastMap::default(),
                backlog: Backlog::default(),
                waiting: Waiting::default(),
                starved: Vec::new(),
                flow: Flow::default(),
                expiry_wake_at: None,
                ids: ids::IdIndex::Off,
                uncharged: 0,
            })),
            id_builder: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether the broker deleted this queue (a durable subscription
    /// unsubscribed, a temporary queue released): a sender holding it must look
    /// its address up again.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Counts this queue against its creator's queue limit until it is freed.
    /// A queue has one creator: a second slot (two clients raced to create
    /// it) is dropped, freeing its place.
    pub(crate) fn set_owner(&self, slot: crate::core::security::QueueSlot) {
        let _ = self.owner.set(slot);
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// The settings now; they may change at run time (see [`Queue::change_settings`]).
    pub fn settings(&self) -> arc_swap::Guard<Arc<QueueSettings>> {
        self.settings.load()
    }

    /// What management changed on the queue (see [`crate::core::queue_record`]).
    pub fn changes(&self) -> parking_lot::MutexGuard<'_, QueueChanges> {
        self.changes.lock()
    }

    pub(crate) fn set_changes(&self, changes: QueueChanges) {
        *self.changes.lock() = changes;
    }

    /// Whether the queue delays messages by default (one relaxed load).
    #[inline]
    pub fn has_default_delay(&self) -> bool {
        self.has_default_delay.load(Ordering::Relaxed)
    }

    /// The queue's memory account: its bytes, its limits and its policy.
    pub fn memory(&self) -> &Arc<QueueMemory> {
        &self.memory
    }

    /// What the queue's own budget holds besides messages on their way to
    /// disk, and the bytes charged to the messages it keeps in memory: the two
    /// are equal whenever the queue is idle.
    #[cfg(test)]
    pub(crate) fn memory_accounting(&self) -> (u64, u64) {
        let st = self.state.lock();
        let held = st
            .ready
            .entries_after(0)
            .chain(st.waiting.iter().map(|(_, e)| e))
            .chain(st.in_flight.values().map(|f| &f.entry))
            .map(|e| e.charge.bytes())
            .sum();
        (self.memory.used_in_memory(), held)
    }

    /// Whether this queue's producers must stop: its policy is BLOCK and its
    /// memory limit or the broker's is reached. A protocol asks after a send
    /// and, while it holds, reads no more sends for the queue (or grants no
    /// more credit for it) until [`Queue::producers_may_go`] resolves. Two
    /// atomic loads at most.
    #[inline]
    pub fn blocks_producers(&self) -> bool {
        self.memory.blocks_producers()
    }

    /// Resolves once the queue's producers may send again: both limits are
    /// back under their low marks (90%), or the queue was deleted.
    pub async fn producers_may_go(&self) {
        if self.is_deleted() {
            return;
        }
        self.memory.has_room().await
    }

    pub fn stats(&self) -> QueueStats {
        let st = self.state.lock();
        QueueStats {
            ready: st.ready.len(),
            in_flight: st.in_flight.len(),
            paged: st.backlog.len(),
            waiting: st.waiting.len(),
            memory_bytes: self.memory.used(),
            dropped: self.memory.dropped(),
            consumers: st.consumers.len(),
            groups: st.groups.len(),
            held_sends: st.flow.len(),
            paused: st.gate.is_paused(),
            gate: st.gate.state(
                &st.settings,
                st.consumers.active(),
                std::time::Instant::now(),
            ),
        }
    }

    /// What happened to the queue's messages since the broker started. No lock.
    pub fn totals(&self) -> Totals {
        self.counters.totals()
    }

    /// Messages enqueued and acknowledged per second lately (see [`Rates`]).
    pub fn rates(&self) -> Rates {
        self.counters.rates()
    }

    /// Counts a message that left this queue (or never entered it) as expired or
    /// dead-lettered; the broker calls it as it routes the message on.
    pub(crate) fn count_diverted(&self, why: Diversion) {
        match why {
            Diversion::Expired => self.counters.expired(),
            Diversion::DeadLetter => self.counters.dead_lettered(),
        }
    }

    /// Accepts a message that is due now. The completion resolves once it is
    /// durable (immediately for a non-durable message that stayed in memory).
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Completion {
        self.publish_counted(message, 0)
    }

    /// Accepts a message that was delivered before.
    pub fn publish_counted(
        self: &Arc<Self>,
        message: Arc<Message>,
        delivery_count: u32,
    ) -> Completion {
        self.publish_moving(message, delivery_count, None)
    }

    /// Accepts a message and applies `also` in the same atomic store write: the
    /// delay schedule moves a due message with it (its schedule record deleted in
    /// the write that stores it in the queue), so a crash can neither lose nor
    /// duplicate it.
    pub fn publish_moving(
        self: &Arc<Self>,
        message: Arc<Message>,
        delivery_count: u32,
        also: Option<Op>,
    ) -> Completion {
        let mut after = AfterUnlock::default();
        let completion = {
            let mut st = self.state.lock();
            let (completion, placed) =
                self.place(&mut st, message, delivery_count, also, true, &mut after);
            self.apply_charges(&mut st);
            if placed.needs_dispatch() {
                self.dispatch(&mut st, &mut after);
            }
            self.hold_back(&mut st, completion, &mut after)
        };
        self.finish(&mut after);
        completion
    }

    /// [`Queue::publish_moving`] for several messages under one lock, with one
    /// dispatch pass after all of them: the delay schedule moving a burst that
    /// fell due. Moved one by one, each paid for the lock, a dispatch set-up and
    /// a wake-up, and a burst due faster than that fell behind. Nobody waits for
    /// these completions (the producers had theirs when the messages were
    /// scheduled).
    pub fn publish_moving_all(self: &Arc<Self>, moves: impl IntoIterator<Item = Move>) {
        let mut completions = Vec::new();
        self.place_all(moves, &mut completions, true);
    }

    /// [`Queue::publish_counted`] for several new messages under one lock,
    /// with one dispatch pass after all of them: a connection that read many
    /// transfers for this queue at once pays for the lock, the consumers'
    /// wake-ups and the dispatch set-up once per read instead of per message
    /// (and, across worker threads, hands the lock over that much less often).
    /// Completions are appended to `completions` in the messages' order.
    pub fn publish_all(
        self: &Arc<Self>,
        messages: impl IntoIterator<Item = Arc<Message>>,
        completions: &mut Vec<Completion>,
    ) {
        self.place_all(
            messages.into_iter().map(|m| (m, 0, None)),
            completions,
            true,
        );
    }

    /// Places `moves` under one lock, dispatches once, and appends their
    /// completions to `completions` in order, held back by producer flow
    /// control when `hold_back` (a sender's, not an operator's).
    pub(super) fn place_all(
        self: &Arc<Self>,
        moves: impl IntoIterator<Item = Move>,
        completions: &mut Vec<Completion>,
        hold_back: bool,
    ) {
        let first = completions.len();
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            let mut dispatch = false;
            for (message, delivery_count, also) in moves {
                // No hand-over straight to a group's owner: that shortcut is
                // only exact right after a dispatch pass (see `direct_owner`).
                let (completion, placed) =
                    self.place(&mut st, message, delivery_count, also, false, &mut after);
                dispatch |= placed.needs_dispatch();
                completions.push(completion);
            }
            self.apply_charges(&mut st);
            if dispatch {
                self.dispatch(&mut st, &mut after);
            }
            if hold_back {
                for completion in &mut completions[first..] {
                    let c = std::mem::replace(completion, Completion::ready());
                    *completion = self.hold_back(&mut st, c, &mut after);
                }
            }
        }
        self.finish(&mut after);
    }

    /// How many due messages the delay schedule may move in now: it holds
    /// them in memory already, and a queue past its memory limit would write
    /// them to disk only to read them back. Unlimited without consumers
    /// (nothing would make room), while paging (they would page behind the
    /// rest anyway) and while a browser looks (it must see them); otherwise up
    /// to half the memory limit, where producer flow control starts, and
    /// always as many as consumers can take right now (what waits in memory
    /// may be nothing they can take).
    pub fn room_for_due(&self) -> usize {
        let st = self.state.lock();
        let browsing = st.consumers.len() != st.consumers.active();
        if st.consumers.active() == 0 || !st.backlog.is_empty() || browsing {
            return usize::MAX;
        }
        let half = st.settings.max_memory_messages / 2;
        let takers = st.consumers.idle_credit().min(half.max(1));
        half.saturating_sub(st.ready.len()).max(takers)
    }

    fn write(&self, first: Option<Op>, second: Option<Op>) -> Completion {
        match (first, second) {
            (Some(a), Some(b)) => self.store.submit_all(vec![a, b]),
            (Some(op), None) | (None, Some(op)) => self.store.submit(op),
            (None, None) => Completion::ready(),
        }
    }

    /// Charges the budgets with the bytes of the messages just placed, at
    /// once: they are counted before anything can take one out again.
    fn apply_charges(&self, st: &mut State) {
        self.memory.charge_bytes(std::mem::take(&mut st.uncharged));
    }

    /// Loads messages found on disk at start: the first ones into memory, the
    /// rest (their sequence, group and message id) left as a backlog to page in lane by
    /// lane as consumers can take them.
    pub(crate) fn recover(
        &self,
        records: Vec<(u64, Bytes)>,
        backlog: Vec<PagedAtStart>,
        next_seq: u64,
    ) {
        let mut st = self.state.lock();
        for (seq, record) in records {
            match persist::decode(record) {
                Ok(stored) => {
                    let lane = stored
                        .message
                        .group_id
                        .as_ref()
                        .and_then(|g| st.groups.lane_of(g));
                    let entry = Entry::stored(seq, stored, lane, &self.memory);
                    st.ready.push(entry, None);
                }
                Err(e) => {
                    tracing::error!(queue = %self.name, seq, error = %e, "skipping unreadable stored message")
                }
            }
        }
        for (seq, group) in backlog {
            let lane = group.as_ref().and_then(|g| st.groups.lane_of(g));
            st.backlog.push(lane, seq, None);
        }
        st.next_seq = st.next_seq.max(next_seq);
    }

    pub fn add_consumer(
        self: &Arc<Self>,
        options: ConsumerOptions,
        id: ConsumerId,
        sink: DeliverySink,
    ) -> ConsumerId {
        let mut after = AfterUnlock::default();
        {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            let credit = match options.credit {
                CreditMode::Window(n) => n,
                CreditMode::Explicit => 0,
            };
            let browse = options.browse.then(browse::BrowseCursor::default);
            st.consumers.add(
                Slot {
                    id,
                    sink,
                    credit,
                    mode: options.credit,
                    priority: options.priority,
                    filter: options.filter,
                    browse,
                    in_flight_bytes: 0,
                    scanned_to: 0,
                    passed_heads: Default::default(),
                    owner: None,
                    activity: Default::default(),
                },
                st.settings.exclusive,
            );
            if !options.browse {
                let now = std::time::Instant::now();
                let active = st.consumers.active();
                after.dispatch_at = st.gate.consumer_added(&st.settings, active, now);
                if st.settings.group_rebalance {
                    self.rebalance(st);
                }
            }
            self.dispatch(st, &mut after);
        }
        self.finish(&mut after);
        id
    }

    /// Detaches a consumer; its unsettled messages and its groups go back to the queue.
    pub fn remove_consumer(self: &Arc<Self>, consumer: ConsumerId) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            st.consumers.remove(consumer);
            if st.consumers.active() == 0 {
                st.gate.all_consumers_left();
            }
            for lane in st.groups.unbind_consumer(consumer) {
                st.ready.rebind(&lane, Some(consumer), None);
                st.backlog.rebind(&lane, None);
            }
            self.return_all_of(&mut st, consumer, &mut after);
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
    }

    /// Grants more credit (AMQP flow, or a STOMP window refill).
    pub fn add_credit(self: &Arc<Self>, consumer: ConsumerId, credit: u32) {
        self.with_slot(consumer, |slot| {
            slot.credit = slot.credit.saturating_add(credit)
        });
    }

    /// Sets the credit outright (AMQP link-credit).
    pub fn set_credit(self: &Arc<Self>, consumer: ConsumerId, credit: u32) {
        self.with_slot(consumer, |slot| slot.credit = credit);
    }

    /// Delivers what is available now, then drops the remaining credit; returns
    /// the credit dropped (AMQP drain).
    pub fn drain(self: &Arc<Self>, consumer: ConsumerId) -> u32 {
        let mut dropped = 0;
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            self.dispatch(&mut st, &mut after);
            if let Some(slot) = st.consumers.get_mut(consumer) {
                dropped = std::mem::take(&mut slot.credit);
            }
        }
        self.finish(&mut after);
        dropped
    }

    fn with_slot(self: &Arc<Self>, consumer: ConsumerId, change: impl FnOnce(&mut Slot)) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            if let Some(slot) = st.consumers.get_mut(consumer) {
                change(slot);
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
    }

    /// Removes the queue's messages (temporary queue deleted). Consumers stay attached.
    pub fn purge(self: &Arc<Self>) -> usize {
        let mut st = self.state.lock();
        self.deleted.store(true, Ordering::Release);
        let mut removed = st.ready.drain_all();
        removed.extend(st.waiting.drain_all());
        let n = removed.len() + st.backlog.len();
        self.free_entries(removed);
        st.backlog.clear();
        self.store
            .submit_detached(Op::PurgeQueue { queue: self.id });
        let released = st.flow.release_all();
        drop(st);
        drop(released);
        n
    }

    /// Removes every message waiting in the queue (ready, paged, waiting out a
    /// redelivery delay) and their records; deliveries in flight stay with their
    /// consumers. The queue stays in use. Returns how many were removed, and the
    /// deletion of their records.
    pub fn clear(self: &Arc<Self>) -> (usize, Completion) {
        let mut after = AfterUnlock::default();
        let (removed, completion) = {
            let mut st = self.state.lock();
            let mut entries = st.ready.drain_all();
            entries.extend(st.waiting.drain_all());
            let on_disk: Vec<u64> = st.backlog.seqs_after(0).collect();
            st.backlog.clear();
            let key = |seq| MessageKey {
                queue: self.id,
                seq,
            };
            let deletes: Vec<Op> = entries
                .iter()
                .filter(|e| e.persisted)
                .map(|e| e.seq)
                .chain(on_disk.iter().copied())
                .map(|seq| Op::DeleteMessage { key: key(seq) })
                .collect();
            // Under the lock, so the store sees this queue's changes in order.
            let completion = self.store.submit_all(deletes);
            let removed = entries.len() + on_disk.len();
            self.free_entries(entries);
            // Senders held back while the queue drained may go on.
            self.dispatch(&mut st, &mut after);
            (removed, completion)
        };
        self.finish(&mut after);
        (removed, completion)
    }

    /// Stops (or restarts) dispatch to consumers; messages keep arriving and browsers
    /// still see them.
    pub fn pause(self: &Arc<Self>, paused: bool) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            st.gate.pause(paused);
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
    }

    /// Holds a send's completion back while the queue drains (see [`flow`]).
    fn hold_back(
        &self,
        st: &mut State,
        completion: Completion,
        after: &mut AfterUnlock,
    ) -> Completion {
        let waiting = st.waiting_count();
        let has_consumers = st.consumers.active() > 0;
        let (completion, watch) = st.flow.hold_back(
            completion,
            waiting,
            st.settings.max_memory_messages,
            has_consumers,
        );
        after.watch_held |= watch;
        completion
    }

    /// The wake-up set for `at` by a dispatch that met a group head
    /// expiring then: dispatching again drops it.
    fn expiry_wake(self: &Arc<Self>, at: u64) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            if st.expiry_wake_at == Some(at) {
                st.expiry_wake_at = None;
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
    }

    fn redispatch(self: &Arc<Self>) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
    }
}

/// [`Queue::producers_may_go`] of the queue a connection's producers wait
/// for; never resolves while they wait for none, so a protocol's event loop
/// can always await it beside its other work.
pub async fn producers_may_go(blocked_by: &Option<Arc<Queue>>) {
    match blocked_by {
        Some(queue) => queue.producers_may_go().await,
        None => std::future::pending().await,
    }
}

/// A queue's state lock. std's futex mutex parks a waiter after a short spin;
/// parking_lot's spins by yielding the CPU, which on two cores shared by a
/// publisher and auto-acking consumers meant tens of thousands of
/// `sched_yield` calls a second. A panic while holding it leaves the state as
/// it was: nothing is half-applied across an await, so poisoning is ignored.
struct StateLock(std::sync::Mutex<State>);

impl Drop for Queue {
    /// A deleted queue's messages give their bytes back to the broker's
    /// budget (and, for the record, the queue's own).
    fn drop(&mut self) {
        let st = self
            .state
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut held = st.ready.drain_all();
        held.extend(st.waiting.drain_all());
        held.extend(st.in_flight.drain().map(|(_, flight)| flight.entry));
        self.free_entries(held);
    }
}

impl StateLock {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, State>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

#[cfg(test)]
mod tests;
