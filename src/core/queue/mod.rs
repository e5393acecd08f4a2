//! A queue: ready messages (in lanes, see [`ready`]), consumers with credit,
//! deliveries in flight, and the disk backlog of a deep queue. One mutex per
//! queue; nothing inside it awaits, so it is never held across a suspension.

#[cfg(test)]
mod model;
mod pending_acks;
mod priority_fifo;
pub mod ready;

pub use pending_acks::PendingAcks;

use self::ready::{Entry, Pick, ReadySet};
use super::consumer::{
    ConsumerId, ConsumerOptions, CreditMode, Delivery, DeliverySink, MessageFilter, Release,
};
use super::error::CoreError;
use super::grouping::GroupTable;
use super::message::{now_ms, Message};
use super::persist;
use super::settings::QueueSettings;
use crate::core::fast_map::FastMap;
use crate::store::{Completion, Hold, MessageKey, Op, Record, Store};
use bytes::Bytes;
use std::collections::VecDeque;
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
    /// A released message that must wait before its next delivery attempt.
    fn redeliver_later(
        &self,
        queue: &Arc<Queue>,
        message: Arc<Message>,
        delivery_count: u32,
        delay_ms: u64,
        also: Option<Op>,
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    pub ready: usize,
    pub in_flight: usize,
    pub paged: usize,
    pub consumers: usize,
    pub groups: usize,
    /// Sends whose completion waits for the queue to drain (flow control).
    pub held_sends: usize,
}

struct Slot {
    id: ConsumerId,
    sink: DeliverySink,
    credit: u32,
    mode: CreditMode,
    priority: i32,
    filter: Option<Arc<dyn MessageFilter>>,
    /// Messages a browser has yet to see.
    browse: Option<VecDeque<Entry>>,
}

struct InFlight {
    consumer: ConsumerId,
    entry: Entry,
}

/// Messages that went to disk because memory for this queue was full.
#[derive(Default)]
struct Backlog {
    count: usize,
    next_seq: u64,
    retry_scheduled: bool,
}

struct State {
    next_seq: u64,
    ready: ReadySet,
    groups: GroupTable,
    consumers: Vec<Slot>,
    next_rr: usize,
    in_flight: FastMap<u64, InFlight>,
    /// Deliveries still in flight for each group paused by a rebalance; the
    /// group is free when its count reaches zero. Counted only for paused
    /// groups (from `in_flight` when the rebalance starts), so the common
    /// path of dispatch and ack does no per-group bookkeeping.
    paused_in_flight: FastMap<Arc<str>, u32>,
    backlog: Backlog,
    /// `delay_before_dispatch`: when dispatch starts without enough consumers.
    hold_until: Option<std::time::Instant>,
    /// Scratch for dispatch: consumers with nothing to take this round.
    starved: Vec<bool>,
    /// Sends whose completion waits for the queue to drain (producer flow
    /// control, see `Queue::hold_back`); dropping one lets its producer go on.
    held_back: Vec<Hold>,
    /// Deliveries so far: the consumers' progress, which holding waits on.
    delivered: u64,
    /// A watch on the held sends is running (`Queue::watch_held`).
    watching_held: bool,
    /// Consumers made no progress while sends were held (`delivered` then):
    /// nothing is held again until they do.
    stalled_at: Option<u64>,
}

/// The owner of groups moved by a rebalance whose old owner still holds some
/// of their messages: nobody takes them until those are settled.
const PAUSED: ConsumerId = ConsumerId::MAX;

pub struct Queue {
    name: Arc<str>,
    id: u32,
    settings: QueueSettings,
    store: Store,
    diverter: Weak<dyn Diverter>,
    /// Set (under the state lock) when the broker deletes the queue; read
    /// without it by senders that hold on to the queue between messages.
    deleted: AtomicBool,
    state: StateLock,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

/// Where [`Queue::place`] put a new message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placed {
    /// Among the ready ones: a dispatch pass should follow.
    Ready,
    /// Given to its group's owner already.
    HandedOver,
    /// Written to disk behind the ready ones (the queue is paging).
    Paged,
}

/// Work that must happen after the queue lock is released.
#[derive(Default)]
struct AfterUnlock {
    diverted: Vec<(Arc<Message>, Diversion)>,
    /// Messages for delayed redelivery, with the deletion of their record here.
    later: Vec<(Arc<Message>, u32, u64, Option<Op>)>,
    retry_page_in: bool,
    /// Dispatch again at this time (delay_before_dispatch).
    dispatch_at: Option<std::time::Instant>,
    /// Connections that were waiting for a delivery: woken once the lock is
    /// released, so nobody waits for the wake-up syscall. Most dispatches wake one.
    wake_first: Option<DeliverySink>,
    wake_more: Vec<DeliverySink>,
    /// Producers let go because the queue drained (dropped after unlocking).
    released: Vec<Hold>,
    /// Sends were held and nothing watches them yet.
    watch_held: bool,
}

/// A message moving into a queue: its delivery count so far, and a store
/// operation for the same write (see [`Queue::publish_moving`]).
pub type Move = (Arc<Message>, u32, Option<Op>);

impl AfterUnlock {
    fn wake(&mut self, sink: &DeliverySink) {
        if self.wake_first.is_none() {
            self.wake_first = Some(sink.clone());
        } else {
            self.wake_more.push(sink.clone());
        }
    }
}

impl Queue {
    pub fn new(
        name: Arc<str>,
        id: u32,
        settings: QueueSettings,
        store: Store,
        diverter: Weak<dyn Diverter>,
    ) -> Self {
        let groups = GroupTable::new(settings.group_buckets);
        Self {
            name,
            id,
            settings,
            store,
            diverter,
            deleted: AtomicBool::new(false),
            state: StateLock(std::sync::Mutex::new(State {
                next_seq: 1,
                ready: ReadySet::default(),
                groups,
                consumers: Vec::new(),
                next_rr: 0,
                in_flight: FastMap::default(),
                paused_in_flight: FastMap::default(),
                backlog: Backlog::default(),
                hold_until: None,
                starved: Vec::new(),
                held_back: Vec::new(),
                delivered: 0,
                watching_held: false,
                stalled_at: None,
            })),
        }
    }

    /// Whether the broker deleted this queue (a durable subscription
    /// unsubscribed, a temporary queue released): a sender holding it must look
    /// its address up again.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    pub fn stats(&self) -> QueueStats {
        let st = self.state.lock();
        QueueStats {
            ready: st.ready.len(),
            in_flight: st.in_flight.len(),
            paged: st.backlog.count,
            consumers: st.consumers.len(),
            groups: st.groups.len(),
            held_sends: st.held_back.len(),
        }
    }

    /// Accepts a message that is due now. The completion resolves once it is
    /// durable (immediately for a non-durable message that stayed in memory).
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Completion {
        self.publish_counted(message, 0)
    }

    /// Accepts a message that was delivered before (redelivery after a delay).
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
            if placed == Placed::Ready {
                self.dispatch(&mut st, &mut after);
            }
            self.hold_back(&mut st, completion, &mut after)
        };
        self.finish(after);
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
        self.place_all(moves, &mut completions);
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
        self.place_all(messages.into_iter().map(|m| (m, 0, None)), completions);
    }

    /// Places `moves` under one lock, dispatches once, and appends their
    /// (held back) completions to `completions` in order.
    fn place_all(
        self: &Arc<Self>,
        moves: impl IntoIterator<Item = Move>,
        completions: &mut Vec<Completion>,
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
                dispatch |= placed == Placed::Ready;
                completions.push(completion);
            }
            if dispatch {
                self.dispatch(&mut st, &mut after);
            }
            for completion in &mut completions[first..] {
                let c = std::mem::replace(completion, Completion::ready());
                *completion = self.hold_back(&mut st, c, &mut after);
            }
        }
        self.finish(after);
    }

    /// Stores a new message's place in the queue — on disk when the queue is
    /// paging, else among the ready ones or, with `direct`, straight to its
    /// group's owner — without dispatching or holding its sender back.
    fn place(
        self: &Arc<Self>,
        st: &mut State,
        message: Arc<Message>,
        delivery_count: u32,
        also: Option<Op>,
        direct: bool,
        after: &mut AfterUnlock,
    ) -> (Completion, Placed) {
        let durable = message.durable || self.settings.durable;
        // The writer encodes the record only if it writes it (see `store::record`).
        let record = || Record::message(message.clone(), delivery_count);
        let seq = st.next_seq;
        st.next_seq += 1;
        let lane = message.group_id.as_ref().and_then(|g| st.groups.lane_of(g));
        let to_disk = st.backlog.count > 0 || st.ready.len() >= self.settings.max_memory_messages;
        if to_disk {
            let record = record();
            if st.backlog.count == 0 {
                st.backlog.next_seq = seq;
            }
            st.backlog.count += 1;
            let put = Op::PutMessage {
                key: MessageKey {
                    queue: self.id,
                    seq,
                },
                record,
                consumable: false,
            };
            return (self.write(Some(put), also), Placed::Paged);
        }
        // Without a consumer nothing can acknowledge it before it is
        // written: the store need not wait for one.
        let consumable = Self::has_consumers(st);
        let put = durable.then(|| Op::PutMessage {
            key: MessageKey {
                queue: self.id,
                seq,
            },
            record: record(),
            consumable,
        });
        let completion = self.write(put, also);
        let owner = lane.as_deref().and_then(|l| st.groups.owner(l));
        let direct = match (&lane, owner) {
            (Some(lane), Some(owner)) if direct => self.direct_owner(st, lane, owner, &message),
            _ => None,
        };
        let entry = Entry {
            seq,
            message,
            delivery_count,
            persisted: durable,
            lane,
            avoid: None,
        };
        match direct {
            Some(index) => {
                self.hand_over(st, index, entry, true, after);
                (completion, Placed::HandedOver)
            }
            None => {
                st.ready.push(entry, owner);
                (completion, Placed::Ready)
            }
        }
    }

    /// How many due messages the delay schedule may move in now without
    /// sending the queue into paging: it holds them in memory already, and a
    /// queue past its memory limit would write them to disk only to read them
    /// back. Unlimited without consumers (nothing would make room), none while
    /// paging; otherwise up to half the memory limit, where producer flow
    /// control starts.
    pub fn room_for_due(&self) -> usize {
        let st = self.state.lock();
        if !Self::has_consumers(&st) {
            return usize::MAX;
        }
        if st.backlog.count > 0 {
            return 0;
        }
        (self.settings.max_memory_messages / 2).saturating_sub(st.ready.len())
    }

    fn write(&self, first: Option<Op>, second: Option<Op>) -> Completion {
        match (first, second) {
            (Some(a), Some(b)) => self.store.submit_all(vec![a, b]),
            (Some(op), None) | (None, Some(op)) => self.store.submit(op),
            (None, None) => Completion::ready(),
        }
    }

    /// Loads messages found on disk at start: the first ones into memory, the
    /// rest left as a backlog to page in as consumers drain the queue.
    pub(crate) fn recover(
        &self,
        records: Vec<(u64, Bytes)>,
        backlog_from: Option<(u64, usize)>,
        next_seq: u64,
    ) {
        let mut st = self.state.lock();
        for (seq, record) in records {
            match persist::decode(record) {
                Ok(stored) => {
                    let message = Arc::new(stored.message);
                    let lane = message.group_id.as_ref().and_then(|g| st.groups.lane_of(g));
                    st.ready.push(
                        Entry {
                            seq,
                            message,
                            delivery_count: stored.delivery_count,
                            persisted: true,
                            lane,
                            avoid: None,
                        },
                        None,
                    );
                }
                Err(e) => {
                    tracing::error!(queue = %self.name, seq, error = %e, "skipping unreadable stored message")
                }
            }
        }
        if let Some((from, count)) = backlog_from {
            st.backlog.next_seq = from;
            st.backlog.count = count;
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
            let mut st = self.state.lock();
            let credit = match options.credit {
                CreditMode::Window(n) => n,
                CreditMode::Explicit => 0,
            };
            let browse = options.browse.then(|| st.ready.snapshot().into());
            st.consumers.push(Slot {
                id,
                sink,
                credit,
                mode: options.credit,
                priority: options.priority,
                filter: options.filter,
                browse,
            });
            // Highest priority first; stable so equal priorities keep arrival order.
            st.consumers.sort_by_key(|s| std::cmp::Reverse(s.priority));
            if self.settings.group_rebalance && !options.browse {
                self.rebalance(&mut st);
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(after);
        id
    }

    /// Releases every group binding so groups spread over all consumers again
    /// (Artemis `group-rebalance`). With `group_rebalance_pause_dispatch` a group
    /// whose old owner still holds messages waits until they are settled, so two
    /// consumers never hold the same group at once.
    fn rebalance(&self, st: &mut State) {
        let pause = self.settings.group_rebalance_pause_dispatch;
        let mut busy: FastMap<Arc<str>, u32> = FastMap::default();
        if pause {
            for flight in st.in_flight.values() {
                if let Some(lane) = &flight.entry.lane {
                    *busy.entry(lane.clone()).or_default() += 1;
                }
            }
        }
        for (lane, owner) in st.groups.bindings() {
            if owner == PAUSED {
                continue;
            }
            if let Some(count) = busy.remove(&lane) {
                st.groups.bind(lane.clone(), PAUSED);
                st.ready.rebind(&lane, Some(owner), Some(PAUSED));
                st.paused_in_flight.insert(lane, count);
            } else {
                st.groups.unbind(&lane);
                st.ready.rebind(&lane, Some(owner), None);
            }
        }
    }

    /// Removes a delivery from the in-flight table, freeing a paused group when
    /// its last outstanding message is settled.
    fn take_in_flight(st: &mut State, seq: u64) -> Option<InFlight> {
        let flight = st.in_flight.remove(&seq)?;
        Self::note_taken(st, flight)
    }

    /// [`Queue::take_in_flight`] of a delivery `consumer` holds; one that is
    /// not its own stays where it is. One map lookup either way: acks take
    /// every delivery this way.
    fn take_in_flight_of(st: &mut State, seq: u64, consumer: ConsumerId) -> Option<InFlight> {
        match st.in_flight.remove(&seq) {
            Some(flight) if flight.consumer == consumer => Self::note_taken(st, flight),
            Some(flight) => {
                st.in_flight.insert(seq, flight);
                None
            }
            None => None,
        }
    }

    /// Frees a paused group whose last delivery in flight this was.
    fn note_taken(st: &mut State, flight: InFlight) -> Option<InFlight> {
        if st.paused_in_flight.is_empty() {
            return Some(flight);
        }
        if let Some(lane) = &flight.entry.lane {
            let left = match st.paused_in_flight.get_mut(lane) {
                Some(count) => {
                    *count = count.saturating_sub(1);
                    *count
                }
                None => return Some(flight),
            };
            if left == 0 {
                st.paused_in_flight.remove(lane);
                if st.groups.owner(lane) == Some(PAUSED) {
                    st.groups.unbind(lane);
                    st.ready.rebind(lane, Some(PAUSED), None);
                }
            }
        }
        Some(flight)
    }

    /// Detaches a consumer; its unsettled messages and its groups go back to the queue.
    pub fn remove_consumer(self: &Arc<Self>, consumer: ConsumerId) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            st.consumers.retain(|s| s.id != consumer);
            for lane in st.groups.unbind_consumer(consumer) {
                st.ready.rebind(&lane, Some(consumer), None);
            }
            let mut returned: Vec<u64> = st
                .in_flight
                .iter()
                .filter(|(_, f)| f.consumer == consumer)
                .map(|(seq, _)| *seq)
                .collect();
            returned.sort_unstable();
            for seq in returned {
                if let Some(flight) = Self::take_in_flight(&mut st, seq) {
                    self.return_entry(&mut st, flight.entry, Release::Failed, &mut after);
                }
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(after);
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
            if let Some(slot) = st.consumers.iter_mut().find(|s| s.id == consumer) {
                dropped = std::mem::take(&mut slot.credit);
            }
        }
        self.finish(after);
        dropped
    }

    fn with_slot(self: &Arc<Self>, consumer: ConsumerId, change: impl FnOnce(&mut Slot)) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            if let Some(slot) = st.consumers.iter_mut().find(|s| s.id == consumer) {
                change(slot);
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(after);
    }

    /// Acknowledges deliveries: they leave the queue for good.
    pub fn ack(
        self: &Arc<Self>,
        consumer: ConsumerId,
        seqs: &[u64],
    ) -> Result<Completion, CoreError> {
        self.ack_locked(self.state.lock(), consumer, seqs)
    }

    /// [`ack`](Self::ack) if the queue is free right now; `None` when another
    /// thread holds it. An auto-ack consumer acks after every write, and each
    /// ack used to wait on the publisher's lock (spinning, yielding the CPU);
    /// it can as well ack with its next batch.
    pub fn try_ack(
        self: &Arc<Self>,
        consumer: ConsumerId,
        seqs: &[u64],
    ) -> Option<Result<Completion, CoreError>> {
        let st = self.state.try_lock()?;
        Some(self.ack_locked(st, consumer, seqs))
    }

    fn ack_locked(
        self: &Arc<Self>,
        mut st: std::sync::MutexGuard<'_, State>,
        consumer: ConsumerId,
        seqs: &[u64],
    ) -> Result<Completion, CoreError> {
        let mut after = AfterUnlock::default();
        let mut deletes = Vec::new();
        let result = {
            let mut result = Ok(());
            let mut acked = 0;
            for &seq in seqs {
                let Some(flight) = Self::take_in_flight_of(&mut st, seq, consumer) else {
                    result = Err(CoreError::UnknownDelivery(seq));
                    continue;
                };
                if flight.entry.persisted {
                    deletes.push(Op::DeleteMessage {
                        key: MessageKey {
                            queue: self.id,
                            seq,
                        },
                    });
                }
                acked += 1;
            }
            Self::refill(&mut st, consumer, acked);
            // Submitted under the lock so the store sees this queue's changes in order.
            let completion = match deletes.len() {
                0 => Completion::ready(),
                1 => self.store.submit(deletes.remove(0)),
                _ => self.store.submit_all(deletes),
            };
            self.dispatch(&mut st, &mut after);
            drop(st);
            result.map(|()| completion)
        };
        self.finish(after);
        result
    }

    /// Settles a delivery without acknowledging it.
    pub fn release(
        self: &Arc<Self>,
        consumer: ConsumerId,
        seq: u64,
        how: Release,
    ) -> Result<(), CoreError> {
        let mut after = AfterUnlock::default();
        let result = {
            let mut st = self.state.lock();
            match st.in_flight.get(&seq) {
                Some(f) if f.consumer == consumer => {
                    if let Some(flight) = Self::take_in_flight(&mut st, seq) {
                        Self::refill(&mut st, consumer, 1);
                        let mut entry = flight.entry;
                        if how == Release::NotHere {
                            entry.avoid = Some(consumer);
                            if let Some(lane) = &entry.lane {
                                if st.groups.owner(lane) == Some(consumer) {
                                    st.groups.unbind(lane);
                                    st.ready.rebind(lane, Some(consumer), None);
                                }
                            }
                        }
                        self.return_entry(&mut st, entry, how, &mut after);
                    }
                    self.dispatch(&mut st, &mut after);
                    Ok(())
                }
                _ => Err(CoreError::UnknownDelivery(seq)),
            }
        };
        self.finish(after);
        result
    }

    /// Removes the queue's messages (temporary queue deleted). Consumers stay attached.
    pub fn purge(self: &Arc<Self>) -> usize {
        let mut st = self.state.lock();
        self.deleted.store(true, Ordering::Release);
        let n = st.ready.drain_all().len() + st.backlog.count;
        st.backlog = Backlog::default();
        self.store
            .submit_detached(Op::PurgeQueue { queue: self.id });
        let released = std::mem::take(&mut st.held_back);
        drop(st);
        drop(released);
        n
    }

    /// Gives a window consumer back the credit of `settled` deliveries.
    fn refill(st: &mut State, consumer: ConsumerId, settled: u32) {
        if settled == 0 {
            return;
        }
        if let Some(slot) = st.consumers.iter_mut().find(|s| s.id == consumer) {
            if let CreditMode::Window(window) = slot.mode {
                slot.credit = slot.credit.saturating_add(settled).min(window);
            }
        }
    }

    /// Puts an unsettled message back, or gives up on it after too many attempts.
    fn return_entry(
        &self,
        st: &mut State,
        mut entry: Entry,
        how: Release,
        after: &mut AfterUnlock,
    ) {
        if how == Release::Unused || how == Release::NotHere {
            entry.delivery_count = entry.delivery_count.saturating_sub(1);
        }
        let attempts_exhausted = self.settings.max_delivery_attempts > 0
            && entry.delivery_count >= self.settings.max_delivery_attempts;
        if how == Release::Reject || (how == Release::Failed && attempts_exhausted) {
            self.forget(&entry);
            after.diverted.push((entry.message, Diversion::DeadLetter));
            return;
        }
        if how == Release::Failed && !self.settings.redelivery_delay.is_zero() {
            let delay = redelivery_delay_ms(&self.settings, entry.delivery_count);
            // Deleted here in the same write that schedules it, so a crash
            // in between neither loses nor duplicates it.
            let delete = entry.persisted.then_some(Op::DeleteMessage {
                key: MessageKey {
                    queue: self.id,
                    seq: entry.seq,
                },
            });
            after
                .later
                .push((entry.message, entry.delivery_count, delay, delete));
            return;
        }
        let owner = entry.lane.as_deref().and_then(|l| st.groups.owner(l));
        st.ready.push(entry, owner);
    }

    /// Deletes a message's record, if it has one.
    fn forget(&self, entry: &Entry) {
        if entry.persisted {
            self.store.submit_detached(Op::DeleteMessage {
                key: MessageKey {
                    queue: self.id,
                    seq: entry.seq,
                },
            });
        }
    }

    /// Producer flow control, like RabbitMQ's credit flow: while consumers
    /// are attached and taking messages but the queue holds more than half of
    /// `max_memory_messages`, a send counts as done (receipt, AMQP outcome)
    /// only once the queue is down to a quarter. Producers that wait for those
    /// (a window of unsettled sends, receipts) slow to the consumers' pace
    /// instead of pushing the queue into paging, a disk write and read per
    /// message. It throttles, it never blocks: without consumers, or when they
    /// stop taking messages (a client that sends everything before it reads,
    /// on one thread), held sends are let go and the queue pages to disk.
    fn hold_back(
        &self,
        st: &mut State,
        completion: Completion,
        after: &mut AfterUnlock,
    ) -> Completion {
        let waiting = st.ready.len() + st.backlog.count;
        if waiting < self.settings.max_memory_messages / 2
            || !Self::has_consumers(st)
            || st.stalled_at == Some(st.delivered)
            // Senders that wait for their completions are few (a window, a
            // receipt); one that never waits is not slowed by holding, and
            // its holds must not grow with the backlog.
            || st.held_back.len() >= self.settings.max_memory_messages
        {
            return completion;
        }
        st.stalled_at = None;
        if !st.watching_held {
            st.watching_held = true;
            after.watch_held = true;
        }
        let (hold, held) = completion.held_back();
        st.held_back.push(hold);
        held
    }

    fn has_consumers(st: &State) -> bool {
        st.consumers.iter().any(|s| s.browse.is_none())
    }

    fn dispatch(self: &Arc<Self>, st: &mut State, after: &mut AfterUnlock) {
        self.dispatch_ready(st, after);
        if !st.held_back.is_empty()
            && (st.ready.len() + st.backlog.count <= self.settings.max_memory_messages / 4
                || self.is_deleted()
                || !Self::has_consumers(st))
        {
            after.released.append(&mut st.held_back);
        }
    }

    fn dispatch_ready(self: &Arc<Self>, st: &mut State, after: &mut AfterUnlock) {
        self.feed_browsers(st, after);
        let ready_target = self.settings.max_memory_messages / 2;
        if st.backlog.count > 0 && st.ready.len() <= ready_target {
            self.page_in(st, after);
        }
        if st.ready.is_empty() || st.consumers.is_empty() || self.is_deleted() {
            return;
        }
        if !self.may_dispatch(st, after) {
            return;
        }
        // Read the clock only for a message that can expire: most cannot, and
        // dispatch runs on every publish and every ack.
        let mut now: Option<u64> = None;
        // Reused between calls: dispatch runs on every publish and every ack.
        let mut starved = std::mem::take(&mut st.starved);
        starved.clear();
        starved.resize(st.consumers.len(), false);
        loop {
            if st.ready.is_empty() {
                if st.backlog.count > 0 {
                    self.page_in(st, after);
                }
                if st.ready.is_empty() {
                    break;
                }
            }
            let Some(index) = self.next_consumer(st, &starved) else {
                break;
            };
            let consumer = st.consumers[index].id;
            let pick = match &st.consumers[index].filter {
                Some(filter) => st.ready.pick_filtered(consumer, filter.as_ref()),
                None => st.ready.pick_for(consumer),
            };
            let Some(pick) = pick else {
                starved[index] = true;
                continue;
            };
            let owner = match &pick {
                Pick::Lane(_, true) => Some(consumer),
                Pick::Lane(_, false) | Pick::Ungrouped(_) => None,
            };
            let Some(entry) = st.ready.take(&pick, owner) else {
                starved[index] = true;
                continue;
            };
            if entry.message.expires_at.is_some()
                && entry.message.is_expired_at(*now.get_or_insert_with(now_ms))
            {
                self.forget(&entry);
                after.diverted.push((entry.message, Diversion::Expired));
                continue;
            }
            if entry.avoid == Some(consumer) {
                // Put it back for someone else; this consumer sits out this round.
                st.ready.push(entry, owner);
                starved[index] = true;
                continue;
            }
            if !self.hand_over(st, index, entry, owner.is_some(), after) {
                starved[index] = true;
            }
        }
        st.starved = starved;
    }

    /// Gives a ready message to the consumer at `index`, binding its group if
    /// it has no owner yet (`owned` false). Returns false if the consumer's
    /// session is gone; the message is then back among the ready ones.
    fn hand_over(
        self: &Arc<Self>,
        st: &mut State,
        index: usize,
        mut entry: Entry,
        owned: bool,
        after: &mut AfterUnlock,
    ) -> bool {
        let consumer = st.consumers[index].id;
        let mut group_first = false;
        if let Some(lane) = &entry.lane {
            if !owned {
                st.groups.bind(lane.clone(), consumer);
                st.ready.rebind(lane, None, Some(consumer));
                group_first = true;
            }
            if entry.message.group_seq == Some(-1) {
                st.groups.unbind(lane);
                st.ready.rebind(lane, Some(consumer), None);
            }
        }
        entry.delivery_count += 1;
        let slot = &mut st.consumers[index];
        slot.credit -= 1;
        let delivery = Delivery {
            consumer,
            queue: self.clone(),
            seq: entry.seq,
            message: entry.message.clone(),
            delivery_count: entry.delivery_count,
            group_first,
        };
        let sent = match slot.sink.push(delivery) {
            Ok(wake) => {
                if wake {
                    after.wake(&slot.sink);
                }
                true
            }
            Err(_) => false,
        };
        st.next_rr = index + 1;
        if sent {
            st.delivered += 1;
            st.in_flight.insert(entry.seq, InFlight { consumer, entry });
        } else {
            // The session is gone; it will remove the consumer shortly.
            entry.delivery_count -= 1;
            let owner = entry.lane.as_deref().and_then(|l| st.groups.owner(l));
            st.ready.push(entry, owner);
        }
        sent
    }

    /// The consumer a new message of an owned group can go to straight away,
    /// skipping the ready set: exactly where `dispatch` would put it. Dispatch
    /// leaves no consumer with credit and something it could take, so an owner
    /// with credit has nothing older waiting; the group itself must have
    /// nothing waiting either (its order). Anything unusual takes the long way.
    fn direct_owner(
        &self,
        st: &State,
        lane: &str,
        owner: ConsumerId,
        message: &Message,
    ) -> Option<usize> {
        if self.settings.exclusive
            || self.settings.consumers_before_dispatch > 0
            || self.is_deleted()
            || st.ready.has_lane(lane)
            || (message.expires_at.is_some() && message.is_expired_at(now_ms()))
        {
            return None;
        }
        let index = st.consumers.iter().position(|s| s.id == owner)?;
        let slot = &st.consumers[index];
        (slot.credit > 0 && slot.filter.is_none() && slot.browse.is_none()).then_some(index)
    }

    /// `consumers_before_dispatch` / `delay_before_dispatch`: hold messages until
    /// enough consumers are attached, or the delay has passed.
    fn may_dispatch(&self, st: &mut State, after: &mut AfterUnlock) -> bool {
        let wanted = self.settings.consumers_before_dispatch as usize;
        if wanted == 0 {
            return true;
        }
        let active = st.consumers.iter().filter(|s| s.browse.is_none()).count();
        if active >= wanted {
            return true;
        }
        let delay = self.settings.delay_before_dispatch;
        if delay.is_zero() {
            return false;
        }
        let now = std::time::Instant::now();
        match st.hold_until {
            Some(until) if now >= until => true,
            Some(_) => false,
            None => {
                let until = now + delay;
                st.hold_until = Some(until);
                after.dispatch_at = Some(until);
                false
            }
        }
    }

    /// The next consumer with credit: the highest priority first, round robin among equals.
    fn next_consumer(&self, st: &State, starved: &[bool]) -> Option<usize> {
        let eligible = |i: usize| {
            let s = &st.consumers[i];
            !starved[i] && s.credit > 0 && s.browse.is_none()
        };
        let n = st.consumers.len();
        if self.settings.exclusive {
            // Everything goes to the first consumer (highest priority, then
            // earliest); the next one takes over only when it leaves.
            let first = (0..n).find(|&i| st.consumers[i].browse.is_none())?;
            return eligible(first).then_some(first);
        }
        let top = (0..n)
            .filter(|&i| eligible(i))
            .map(|i| st.consumers[i].priority)
            .max()?;
        (0..n)
            .map(|k| (st.next_rr + k) % n)
            .find(|&i| eligible(i) && st.consumers[i].priority == top)
    }

    fn feed_browsers(self: &Arc<Self>, st: &mut State, after: &mut AfterUnlock) {
        for slot in st.consumers.iter_mut() {
            let Some(pending) = slot.browse.as_mut() else {
                continue;
            };
            while slot.credit > 0 {
                let Some(entry) = pending.pop_front() else {
                    break;
                };
                if slot
                    .filter
                    .as_ref()
                    .is_some_and(|f| !f.matches(&entry.message))
                {
                    continue;
                }
                slot.credit -= 1;
                let pushed = slot.sink.push(Delivery {
                    consumer: slot.id,
                    queue: self.clone(),
                    seq: entry.seq,
                    message: entry.message,
                    delivery_count: entry.delivery_count + 1,
                    group_first: false,
                });
                if matches!(pushed, Ok(true)) {
                    after.wake(&slot.sink);
                }
            }
        }
    }

    /// Reads the next part of the disk backlog into memory.
    fn page_in(&self, st: &mut State, after: &mut AfterUnlock) {
        let want = (self.settings.max_memory_messages / 2).clamp(1, st.backlog.count.max(1));
        let records = match self.store.scan_messages(self.id, st.backlog.next_seq, want) {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(queue = %self.name, error = %e, "paging in failed");
                return;
            }
        };
        if records.is_empty() {
            // The writer has not applied them yet; look again shortly.
            after.retry_page_in = !st.backlog.retry_scheduled;
            st.backlog.retry_scheduled = true;
            return;
        }
        for (seq, record) in records {
            st.backlog.next_seq = seq + 1;
            st.backlog.count = st.backlog.count.saturating_sub(1);
            match persist::decode(record) {
                Ok(stored) => {
                    let message = Arc::new(stored.message);
                    let lane = message.group_id.as_ref().and_then(|g| st.groups.lane_of(g));
                    let owner = lane.as_deref().and_then(|l| st.groups.owner(l));
                    st.ready.push(
                        Entry {
                            seq,
                            message,
                            delivery_count: stored.delivery_count,
                            persisted: true,
                            lane,
                            avoid: None,
                        },
                        owner,
                    );
                }
                Err(e) => {
                    tracing::error!(queue = %self.name, seq, error = %e, "skipping unreadable paged message")
                }
            }
        }
    }

    fn redispatch(self: &Arc<Self>) {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            self.dispatch(&mut st, &mut after);
        }
        self.finish(after);
    }

    /// Lets held sends go when the consumers stop making progress for a while.
    async fn watch_held(self: Arc<Self>) {
        const PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);
        let mut seen = self.state.lock().delivered;
        loop {
            tokio::time::sleep(PATIENCE).await;
            let released = {
                let mut st = self.state.lock();
                if st.held_back.is_empty() {
                    st.watching_held = false;
                    return;
                }
                if st.delivered != seen {
                    seen = st.delivered;
                    continue;
                }
                st.watching_held = false;
                st.stalled_at = Some(st.delivered);
                std::mem::take(&mut st.held_back)
            };
            drop(released);
            return;
        }
    }

    fn finish(self: &Arc<Self>, mut after: AfterUnlock) {
        after.released.clear();
        if after.watch_held {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(self.clone().watch_held());
                }
                Err(_) => {
                    // No runtime to watch from: hold nothing.
                    let released = {
                        let mut st = self.state.lock();
                        st.watching_held = false;
                        std::mem::take(&mut st.held_back)
                    };
                    drop(released);
                }
            }
        }
        if let Some(sink) = &after.wake_first {
            sink.wake();
            for sink in &after.wake_more {
                sink.wake();
            }
        }
        if let Some(at) = after.dispatch_at {
            let me = self.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    me.redispatch();
                });
            }
        }
        if after.diverted.is_empty() && after.later.is_empty() && !after.retry_page_in {
            return;
        }
        if let Some(diverter) = self.diverter.upgrade() {
            for (message, why) in after.diverted {
                diverter.divert(self, message, why);
            }
            if !after.later.is_empty() {
                let me = self.clone();
                for (message, count, delay, delete) in after.later {
                    diverter.redeliver_later(&me, message, count, delay, delete);
                }
            }
        }
        if after.retry_page_in {
            let me = self.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    me.state.lock().backlog.retry_scheduled = false;
                    me.redispatch();
                });
            }
        }
    }
}

fn redelivery_delay_ms(settings: &QueueSettings, delivery_count: u32) -> u64 {
    let base = settings.redelivery_delay.as_millis() as f64;
    let factor = settings
        .redelivery_multiplier
        .powi(delivery_count.saturating_sub(1) as i32);
    let max = settings.max_redelivery_delay.as_millis() as f64;
    (base * factor).min(max.max(base)) as u64
}

/// A queue's state lock. std's futex mutex parks a waiter after a short spin;
/// parking_lot's spins by yielding the CPU, which on two cores shared by a
/// publisher and auto-acking consumers meant tens of thousands of
/// `sched_yield` calls a second. A panic while holding it leaves the state as
/// it was: nothing is half-applied across an await, so poisoning is ignored.
struct StateLock(std::sync::Mutex<State>);

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
