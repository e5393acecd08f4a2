//! Delayed delivery for the whole broker: one task sleeping until the next due
//! time, a bounded window of upcoming entries in memory, and everything else in
//! the `scheduled` column family (key = due ms ++ queue ++ seq), paged in by
//! range scan as time advances. Millions of waiting messages cost disk, not RAM.
//!
//! The window holds *every* entry with a key up to `bound`; entries past it are
//! on disk only. An insert at or below `bound` goes to the window (evicting the
//! latest entry when full, which lowers `bound`), one past it goes to disk only.
//! Paging in first waits for a write barrier, so a scan sees every entry whose
//! write was submitted before; entries arriving during the scan are kept aside
//! and merged, so the cursor never skips one.
//!
//! Durable entries (persistent message or durable queue) are written when
//! scheduled; the producer's receipt waits for that write. Non-durable entries
//! stay in memory while they fit in the window and are spilled to disk when
//! evicted; they are lost on restart (records from an earlier run without the
//! durable flag are deleted when met). A due entry moves into its queue in one
//! atomic write with the deletion of its record, so a crash neither loses nor
//! duplicates it.
//!
//! A key's time is when the timer acts on its entry: the due time, or the
//! expiry when the message's ttl ends first (Zaqar's ttl < delay). Such a
//! message waits, seen by listings and lookups by id like any other, until
//! its ttl ends; then it leaves as an expired message does (counted, to the
//! queue's expiry address), never delivered. Listings show the due time
//! from the message; ranges and the timeline go by the key's time.

mod by_id;
mod counts;
mod edit;
mod ids;
mod lateness;
mod listing;
mod parked;
mod stored;
#[cfg(test)]
mod tests;

pub use edit::{
    refuse_field, HeaderEdit, HeaderEditError, MessageEdit, ScheduleEditError, EDITABLE_HEADERS,
    FIXED_FIELDS, MAX_TIMELINE_BUCKETS,
};
pub use lateness::{Lateness, LatenessSnapshot, BOUNDS_MS as LATENESS_BOUNDS_MS};
pub use listing::{
    Headers, PropertyEntry, PropertyValue, SchedulePage, ScheduleQuery, ScheduledDetail,
    ScheduledSummary, Timeline,
};
pub use stored::{
    cancel as cancel_stored, edit as edit_stored, format_key, list as list_stored, next_key,
    parse_key, queue_names, read as read_stored, reschedule as reschedule_stored, ScheduledMessage,
    FIRST_KEY,
};

use super::broker::{Broker, DelayedDelivery, WeakBroker};
use super::fast_map::{FastMap, FastSet};
use super::message::{now_ms, Message};
use super::persist::{self, DecodeError};
use super::queue::{Move, Queue};
use crate::store::{Completion, Op, ScheduleKey, Store, StoreError};
use parked::Parked;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Write(#[from] Arc<StoreError>),
    #[error("no scheduled message {0}")]
    NotFound(String),
    #[error("scheduled message {key} is unreadable: {source}")]
    Corrupt { key: String, source: DecodeError },
    #[error("the schedule needs a Tokio runtime to run its timer")]
    NoRuntime,
}

#[derive(Debug, Clone)]
pub struct ScheduleOptions {
    /// Entries held in memory at most; the rest wait on disk.
    pub window: usize,
    /// Message bytes held in memory at most (large messages fill it first).
    pub window_bytes: usize,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        // A burst of a hundred thousand small messages due within seconds is
        // served from memory without paging (an AMQP message of 256 bytes
        // weighs ~700); ten million due over minutes cost a bounded ~128 MiB
        // of it (the rest waits on disk).
        Self {
            window: 131_072,
            window_bytes: 128 << 20,
        }
    }
}

const MAX_KEY: ScheduleKey = ScheduleKey {
    due_ms: u64::MAX,
    queue: u32::MAX,
    seq: u64::MAX,
};

/// Due entries moved per pass before the timer yields to other tasks.
const DELIVER_BATCH: usize = 1024;

/// How often the timer looks for room in queues it holds due entries for.
const PARKED_POLL: Duration = Duration::from_millis(1);

#[derive(Clone)]
struct Waiting {
    queue: u32,
    message: Arc<Message>,
    delivery_count: u32,
    durable: bool,
    /// Its record has been submitted to the store (durable, or spilled).
    on_disk: bool,
}

struct Window {
    entries: BTreeMap<ScheduleKey, Waiting>,
    /// Message bytes held by `entries`.
    bytes: usize,
    /// Every entry with a key up to here is in `entries`.
    bound: ScheduleKey,
    /// A page-in is scanning the disk past `bound`.
    paging: bool,
    /// Entries past `bound` that arrived during a page-in (also on disk).
    arrived: Vec<(ScheduleKey, Waiting)>,
    /// Due entries waiting for room in their queue (counted in the window's size).
    parked: Parked,
}

impl Window {
    fn put(&mut self, key: ScheduleKey, w: Waiting) {
        self.bytes += w.message.weight();
        if let Some(old) = self.entries.insert(key, w) {
            self.released(old);
        }
    }

    fn remove(&mut self, key: &ScheduleKey) -> Option<Waiting> {
        let w = self.entries.remove(key)?;
        Some(self.released(w))
    }

    fn pop_last(&mut self) -> Option<(ScheduleKey, Waiting)> {
        let (key, w) = self.entries.pop_last()?;
        Some((key, self.released(w)))
    }

    /// The earliest entry, if it is due by `now`.
    fn pop_first_due(&mut self, now: u64) -> Option<(ScheduleKey, Waiting)> {
        let first = self.entries.first_entry()?;
        if first.key().due_ms > now {
            return None;
        }
        let (key, w) = first.remove_entry();
        Some((key, self.released(w)))
    }

    /// Accounts for an entry that left `entries`.
    fn released(&mut self, w: Waiting) -> Waiting {
        self.bytes = self.bytes.saturating_sub(w.message.weight());
        w
    }
}

struct Inner {
    store: Store,
    /// For queue names and settings; weak, as the broker holds the schedule.
    broker: WeakBroker,
    window: Mutex<Window>,
    capacity: usize,
    max_bytes: usize,
    wake: Notify,
    next_seq: AtomicU64,
    /// Sequences below this were issued by an earlier run of the broker.
    boot_seq: u64,
    /// Held while paging in, and by auditor operations on entries that are
    /// on disk only, so neither acts on a half-moved bound.
    paging: tokio::sync::Mutex<()>,
    closed: AtomicBool,
    /// A refill from disk is running in its own task; the timer keeps
    /// delivering from memory meanwhile, so a refill never makes anything late.
    refilling: AtomicBool,
    timer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How late due messages reached their queues.
    lateness: Lateness,
    /// Messages waiting, per queue id.
    counts: counts::DelayedCounts,
    /// Waiting messages by message id, for queues looked up by id.
    ids: ids::ScheduleIds,
}

/// The broker's delay schedule. Install it with [`Broker::set_scheduler`].
pub struct Schedule {
    inner: Arc<Inner>,
}

impl Schedule {
    /// Loads the first window from disk and starts the timer task on the
    /// current Tokio runtime. Entries that fell due while the broker was down
    /// are delivered at once, in due-time order.
    pub fn open(broker: &Broker, options: ScheduleOptions) -> Result<Arc<Schedule>, ScheduleError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| ScheduleError::NoRuntime)?;
        let capacity = options.window.max(2);
        // Sequences are unique across restarts without a stored high-water
        // mark: a run would have to issue 2^20 of them per millisecond of its
        // life to reach the next run's start.
        let boot_seq = now_ms() << 20;
        let inner = Arc::new(Inner {
            store: broker.store().clone(),
            broker: broker.downgrade(),
            window: Mutex::new(Window {
                entries: BTreeMap::new(),
                bytes: 0,
                bound: stored::BARRIER_KEY,
                paging: false,
                arrived: Vec::new(),
                parked: Parked::default(),
            }),
            capacity,
            max_bytes: options.window_bytes.max(1),
            wake: Notify::new(),
            next_seq: AtomicU64::new(boot_seq),
            boot_seq,
            paging: tokio::sync::Mutex::new(()),
            closed: AtomicBool::new(false),
            refilling: AtomicBool::new(false),
            timer: Mutex::new(None),
            lateness: Lateness::default(),
            counts: counts::DelayedCounts::of_store(broker.store())?,
            ids: ids::ScheduleIds::default(),
        });
        // Nothing else writes the scheduled family yet: no barrier needed.
        let page = inner.store.scan_scheduled(FIRST_KEY, capacity)?;
        let loaded = load_page(&inner.store, inner.boot_seq, broker, page, capacity);
        inner.merge(loaded);
        let schedule = Arc::new(Schedule { inner });
        let timer = runtime.spawn(run(schedule.inner.clone(), broker.clone()));
        *schedule.inner.timer.lock() = Some(timer);
        Ok(schedule)
    }

    /// Stops the timer, which holds a broker handle (and so the store) until
    /// then; durable entries stay on disk for the next start.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }

    /// [`close`](Self::close), then waits for the timer to let go of the broker.
    pub async fn shutdown(&self) {
        self.close();
        let timer = self.inner.timer.lock().take();
        if let Some(timer) = timer {
            let _ = timer.await;
        }
    }

    /// How late due messages have reached their queues since the broker started.
    pub fn lateness(&self) -> LatenessSnapshot {
        self.inner.lateness.snapshot()
    }

    /// Messages waiting in the schedule for the queue with this id.
    pub fn delayed(&self, queue: u32) -> u64 {
        self.inner.counts.of(queue)
    }

    /// Entries held in memory now.
    pub fn in_memory(&self) -> usize {
        let window = self.inner.window.lock();
        window.entries.len() + window.parked.len()
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        self.close();
    }
}

impl DelayedDelivery for Schedule {
    fn schedule(
        &self,
        queue: &Arc<Queue>,
        message: Arc<Message>,
        delivery_count: u32,
        also: Option<Op>,
    ) -> Completion {
        let Some(due_ms) = message.due_at else {
            return queue.publish_moving(message, delivery_count, also);
        };
        let durable = message.durable || queue.settings().durable;
        let key = ScheduleKey {
            due_ms: stored::wake_at(&message, due_ms),
            queue: queue.id(),
            seq: self.inner.next_seq.fetch_add(1, Ordering::Relaxed),
        };
        // Submitted before the entry is visible to the timer, so the delete
        // that moves it into its queue always follows this put.
        let put = durable.then(|| Op::PutScheduled {
            key,
            record: persist::encode(&message, delivery_count),
        });
        // `also` (e.g. deleting the queue record of a message sent back for a
        // delayed redelivery) goes in the same atomic write.
        let completion = match (put, also) {
            (Some(put), Some(also)) => self.inner.store.submit_all(vec![put, also]),
            (Some(op), None) | (None, Some(op)) => self.inner.store.submit(op),
            (None, None) => Completion::ready(),
        };
        // Entries wait for minutes and the window keeps a sparse few of them:
        // each would otherwise pin the whole read buffer it arrived in.
        let message = Arc::new(message.detached());
        self.inner.counts.add(key.queue);
        // Entered after the window has it (see `ScheduleIds::entered`), so
        // the id is taken now, whether or not an index wants it then.
        let id = message.message_id.clone();
        self.inner.insert(
            key,
            Waiting {
                queue: key.queue,
                message,
                delivery_count,
                durable,
                on_disk: durable,
            },
        );
        self.inner.ids.entered(key.queue, id.as_deref(), key);
        completion
    }
}

impl Waiting {
    fn to_scheduled(&self, key: ScheduleKey) -> ScheduledMessage {
        ScheduledMessage {
            key,
            message: self.message.clone(),
            delivery_count: self.delivery_count,
            durable: self.durable,
        }
    }
}

/// Entries read from disk, decoded outside the window lock.
struct Loaded {
    entries: Vec<(ScheduleKey, Waiting)>,
    /// The last key read, when the page was full (more may follow on disk).
    more_after: Option<ScheduleKey>,
    /// Queue ids of records dropped (unreadable, or not durable from an earlier run).
    dropped: Vec<u32>,
}

impl Inner {
    fn insert(&self, key: ScheduleKey, mut w: Waiting) {
        let mut window = self.window.lock();
        if key <= window.bound {
            let earliest = window
                .entries
                .first_key_value()
                .is_none_or(|(k, _)| key < *k);
            window.put(key, w);
            if !window.paging {
                self.evict(&mut window);
            }
            drop(window);
            if earliest {
                self.wake.notify_one();
            }
        } else {
            if !w.on_disk {
                self.spill(key, &w);
                w.on_disk = true;
            }
            if window.paging {
                window.arrived.push((key, w));
            }
        }
    }

    /// Drops the latest entries until the window fits, lowering its bound.
    fn evict(&self, window: &mut Window) {
        if !self.over(window) {
            return;
        }
        while self.over(window) {
            let Some((key, w)) = window.pop_last() else {
                break;
            };
            if !w.on_disk {
                self.spill(key, &w);
            }
        }
        if let Some((last, _)) = window.entries.last_key_value() {
            window.bound = window.bound.min(*last);
        }
    }

    /// More in memory than the window may hold.
    fn over(&self, window: &Window) -> bool {
        window.entries.len() + window.parked.len() > self.capacity
            || (window.bytes + window.parked.bytes() > self.max_bytes && window.entries.len() > 1)
    }

    /// Little enough in memory that a page from disk should follow (if the
    /// disk holds more).
    fn low(&self, window: &Window) -> bool {
        window.bound != MAX_KEY
            && window.entries.len() + window.parked.len() <= self.capacity / 2
            && window.bytes + window.parked.bytes() <= self.max_bytes / 2
    }

    fn spill(&self, key: ScheduleKey, w: &Waiting) {
        self.store.submit_detached(Op::PutScheduled {
            key,
            record: persist::encode(&w.message, w.delivery_count),
        });
    }

    /// The entry under `key` out of the window; `Ok(None)` when it may be on
    /// disk only. Call with `paging` held.
    fn take(&self, key: ScheduleKey) -> Result<Option<Waiting>, ScheduleError> {
        let mut window = self.window.lock();
        if let Some(w) = window.parked.remove(&key) {
            return Ok(Some(w));
        }
        match window.remove(&key) {
            Some(w) => Ok(Some(w)),
            // At or below the bound and not in memory: delivered or never there.
            None if key <= window.bound => Err(ScheduleError::NotFound(format_key(&key))),
            None => Ok(None),
        }
    }

    /// Resolves once every write submitted before it is applied (without an
    /// fsync: a listing reads, it makes nothing durable).
    async fn barrier(&self) -> Result<(), ScheduleError> {
        self.store.submit(Op::Barrier).wait().await?;
        Ok(())
    }

    /// Adds a loaded page to the window and moves the bound past it.
    fn merge(&self, loaded: Loaded) {
        for queue in &loaded.dropped {
            self.counts.remove(*queue, 1);
        }
        let bound = loaded.more_after.unwrap_or(MAX_KEY);
        let mut window = self.window.lock();
        for (key, w) in loaded.entries {
            window.put(key, w);
        }
        for (key, w) in std::mem::take(&mut window.arrived) {
            if key <= bound {
                window.put(key, w);
            }
        }
        window.bound = bound;
        window.paging = false;
        self.evict(&mut window);
    }

    /// Refills the window from disk when it runs low. False when that failed.
    async fn page_in(&self, broker: &Broker) -> bool {
        if !self.low(&self.window.lock()) {
            return true;
        }
        let _paging = self.paging.lock().await;
        let (from, want) = {
            let mut window = self.window.lock();
            if !self.low(&window) {
                return true;
            }
            window.paging = true;
            window.arrived.clear();
            (next_key(window.bound), self.capacity - window.entries.len())
        };
        let page = match self.barrier().await {
            Ok(()) => {
                // Reading and decoding a page takes tens of milliseconds: never on a
                // runtime thread, which may be the only one serving every connection.
                let (store, boot_seq, broker) = (self.store.clone(), self.boot_seq, broker.clone());
                tokio::task::spawn_blocking(move || {
                    let page = store.scan_scheduled(from, want)?;
                    Ok(load_page(&store, boot_seq, &broker, page, want))
                })
                .await
                .unwrap_or(Err(StoreError::Closed))
                .map_err(ScheduleError::from)
            }
            Err(e) => Err(e),
        };
        match page {
            Ok(loaded) => {
                self.merge(loaded);
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "paging in scheduled messages failed");
                let mut window = self.window.lock();
                // Arrivals past the bound are on disk; the next page-in finds them.
                window.arrived.clear();
                window.paging = false;
                false
            }
        }
    }

    /// Moves due entries into their queues, as far as the queues have room
    /// (see [`Queue::room_for_due`]); the rest wait parked, in due order, for
    /// a later pass. Parked entries may fill half the window; past that they
    /// go in regardless (and the queue pages them), so one queue whose
    /// consumers stall cannot keep every other queue's entries on disk.
    fn deliver_due(&self, broker: &Broker, now: u64) -> Pass {
        let mut rooms = Rooms::new(broker);
        // Asked outside the window lock: a queue's lock is never taken under it.
        for queue in self.window.lock().parked.queue_ids() {
            rooms.of(queue);
        }
        let (parked, due, mut blocked, force) = {
            let mut window = self.window.lock();
            let force = window.parked.len() >= self.capacity / 2
                || window.parked.bytes() >= self.max_bytes / 2;
            let mut parked = Vec::new();
            for queue in window.parked.queue_ids() {
                let room = if force {
                    DELIVER_BATCH
                } else {
                    rooms.known(queue)
                };
                let taken = window.parked.take_front(queue, room, &mut parked);
                rooms.used(queue, taken);
            }
            // A queue with entries still parked takes nothing new before them.
            let blocked: FastSet<u32> = window.parked.queue_ids().into_iter().collect();
            let mut due = Vec::new();
            while due.len() < DELIVER_BATCH {
                match window.pop_first_due(now) {
                    Some(entry) => due.push(entry),
                    None => break,
                }
            }
            (parked, due, blocked, force)
        };
        let more = due.len() >= DELIVER_BATCH;
        let mut moving = parked;
        let mut park = Vec::new();
        for (key, w) in due {
            if blocked.contains(&w.queue) || (!force && rooms.of(w.queue) == 0) {
                blocked.insert(w.queue);
                park.push((key, w));
            } else {
                rooms.used(w.queue, 1);
                moving.push((key, w));
            }
        }
        self.deliver(broker, moving);
        let mut window = self.window.lock();
        for (key, w) in park {
            window.parked.push(key, w);
        }
        Pass {
            more: more || (force && !window.parked.is_empty()),
            parked: !window.parked.is_empty(),
        }
    }

    /// What the timer does next: page in now, or sleep until a due time (or until woken).
    fn next_step(&self) -> Next {
        let window = self.window.lock();
        if self.low(&window) && !self.refilling.load(Ordering::Acquire) {
            return Next::PageIn;
        }
        match window.entries.first_key_value() {
            Some((key, _)) => Next::At(key.due_ms),
            None => Next::Idle,
        }
    }

    /// Moves due messages into their queues, each queue's in the order given,
    /// with one [`Queue::publish_moving_all`] per queue; expired ones go
    /// where their queue's expired messages go instead.
    fn deliver(&self, broker: &Broker, entries: Vec<(ScheduleKey, Waiting)>) {
        let mut at: FastMap<u32, usize> = FastMap::default();
        let mut by_queue: Vec<(u32, Vec<Move>)> = Vec::new();
        // Only while some queue keeps an index by id.
        let mut left = Vec::new();
        let now = now_ms();
        for (key, w) in entries {
            if w.message.is_expired_at(now) {
                self.expire(broker, key, w);
                continue;
            }
            if w.message.due_at.is_some_and(|due| due > now) {
                // Keyed by an expiry that an edit moved past this time.
                self.rekey(key, w);
                continue;
            }
            self.lateness.observe(now.saturating_sub(key.due_ms));
            self.counts.remove(key.queue, 1);
            if self.ids.kept() {
                left.push((key.queue, w.message.message_id.clone(), key));
            }
            // Its schedule record goes in the write that stores it in the queue.
            let delete = w.on_disk.then_some(Op::DeleteScheduled { key });
            let i = *at.entry(w.queue).or_insert_with(|| {
                by_queue.push((w.queue, Vec::new()));
                by_queue.len() - 1
            });
            by_queue[i].1.push((w.message, w.delivery_count, delete));
        }
        for (queue, moves) in by_queue {
            match broker.queue_by_id(queue) {
                Some(queue) => queue.publish_moving_all(moves),
                None => {
                    tracing::debug!(queue, "scheduled messages for a deleted queue dropped");
                    for op in moves.into_iter().filter_map(|(_, _, delete)| delete) {
                        self.store.submit_detached(op);
                    }
                    self.ids.forget(queue);
                }
            }
        }
        // After their records' deletion was submitted (see `ScheduleIds::left`).
        self.ids.left(
            left.iter()
                .map(|(queue, id, key)| (*queue, id.as_deref(), *key)),
        );
    }
}

impl Inner {
    /// Removes an entry whose ttl ended while it waited: never delivered,
    /// diverted as an expired message is. The copy to an expiry address is
    /// submitted before the record's deletion, so a crash between the two
    /// expires it again rather than losing it.
    fn expire(&self, broker: &Broker, key: ScheduleKey, w: Waiting) {
        self.counts.remove(key.queue, 1);
        let id = w.message.message_id.clone();
        if let Some(queue) = broker.queue_by_id(w.queue) {
            broker.divert_expired(&queue, w.message);
        }
        if w.on_disk {
            self.store.submit_detached(Op::DeleteScheduled { key });
        }
        self.ids.left([(key.queue, id.as_deref(), key)]);
    }

    /// Puts an entry back under the time it is next acted on (its due time
    /// or its expiry, as edited since it was keyed).
    fn rekey(&self, key: ScheduleKey, w: Waiting) {
        let due = w.message.due_at.unwrap_or(key.due_ms);
        let new_key = ScheduleKey {
            due_ms: stored::wake_at(&w.message, due),
            ..key
        };
        if w.on_disk {
            self.store.submit_detached_all(vec![
                Op::DeleteScheduled { key },
                Op::PutScheduled {
                    key: new_key,
                    record: persist::encode(&w.message, w.delivery_count),
                },
            ]);
        }
        let id = w.message.message_id.clone();
        self.insert(new_key, w);
        self.ids.left([(key.queue, id.as_deref(), key)]);
        self.ids.entered(key.queue, id.as_deref(), new_key);
    }
}

/// The timer: sleeps until the earliest due time or until woken by an earlier
/// arrival, then moves what is due into its queues.
async fn run(inner: Arc<Inner>, broker: Broker) {
    while !inner.closed.load(Ordering::Acquire) {
        start_refill(&inner, &broker);
        let pass = inner.deliver_due(&broker, now_ms());
        if pass.more {
            tokio::task::yield_now().await;
            continue;
        }
        let wait = match inner.next_step() {
            Next::PageIn => continue,
            Next::At(due_ms) => Some(until(due_ms)),
            Next::Idle => None,
        };
        // Parked entries are due: look for room again soon.
        let wait = match (wait, pass.parked) {
            (Some(wait), true) => Some(wait.min(PARKED_POLL)),
            (None, true) => Some(PARKED_POLL),
            (wait, false) => wait,
        };
        match wait {
            Some(wait) if wait.is_zero() => continue,
            Some(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = inner.wake.notified() => {}
                }
            }
            None => inner.wake.notified().await,
        }
    }
}

/// Decodes a page read from disk; forgets non-durable entries of an
/// earlier run (documented as lost on restart) and unreadable ones.
fn load_page(
    store: &Store,
    boot_seq: u64,
    broker: &Broker,
    page: Vec<(ScheduleKey, bytes::Bytes)>,
    want: usize,
) -> Loaded {
    let more_after = (page.len() >= want)
        .then(|| page.last().map(|(k, _)| *k))
        .flatten();
    let mut entries = Vec::with_capacity(page.len());
    let mut dropped = Vec::new();
    for (key, record) in page {
        let entry = match stored::decode(key, record) {
            Ok(entry) => entry,
            Err(e) => {
                tracing::error!(error = %e, "dropping unreadable scheduled message");
                store.submit_detached(Op::DeleteScheduled { key });
                dropped.push(key.queue);
                continue;
            }
        };
        let queue = broker.queue_by_id(key.queue);
        let durable = entry.durable || queue.is_some_and(|q| q.settings().durable);
        if !durable && key.seq < boot_seq {
            store.submit_detached(Op::DeleteScheduled { key });
            dropped.push(key.queue);
            continue;
        }
        entries.push((
            key,
            Waiting {
                queue: key.queue,
                message: entry.message,
                delivery_count: entry.delivery_count,
                durable,
                on_disk: true,
            },
        ));
    }
    Loaded {
        entries,
        more_after,
        dropped,
    }
}

/// Refills the window in a task of its own when it runs low.
fn start_refill(inner: &Arc<Inner>, broker: &Broker) {
    if !inner.low(&inner.window.lock()) {
        return;
    }
    if inner.refilling.swap(true, Ordering::AcqRel) {
        return;
    }
    let (inner, broker) = (inner.clone(), broker.clone());
    tokio::spawn(async move {
        if !inner.page_in(&broker).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        inner.refilling.store(false, Ordering::Release);
        // The window may hold earlier due times now.
        inner.wake.notify_one();
    });
}

enum Next {
    PageIn,
    At(u64),
    Idle,
}

/// What a delivery pass left behind.
struct Pass {
    /// A full batch went out: more may be due at once.
    more: bool,
    /// Due entries wait parked for room in their queue.
    parked: bool,
}

/// The room each queue has for due entries during one pass, asked once.
struct Rooms<'a> {
    broker: &'a Broker,
    room: FastMap<u32, usize>,
}

impl<'a> Rooms<'a> {
    fn new(broker: &'a Broker) -> Self {
        Self {
            broker,
            room: FastMap::default(),
        }
    }

    /// A deleted queue has unlimited room: its entries are dropped on delivery.
    fn of(&mut self, queue: u32) -> usize {
        let broker = self.broker;
        *self.room.entry(queue).or_insert_with(|| {
            broker
                .queue_by_id(queue)
                .map_or(usize::MAX, |q| q.room_for_due())
        })
    }

    /// The room of a queue asked before (none if it was not).
    fn known(&self, queue: u32) -> usize {
        self.room.get(&queue).copied().unwrap_or(0)
    }

    fn used(&mut self, queue: u32, n: usize) {
        if let Some(room) = self.room.get_mut(&queue) {
            *room = room.saturating_sub(n);
        }
    }
}

/// Time from now until `due_ms`, to the microsecond so the timer is not a
/// millisecond late by rounding.
fn until(due_ms: u64) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_millis(due_ms).saturating_sub(now)
}
