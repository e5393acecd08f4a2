//! Memory limits in bytes, with Artemis's names and meaning: a broker-wide
//! `global_max_size` and a per-queue `max_size_bytes`, each a [`Budget`] of
//! the bytes the queues' messages hold in memory.
//!
//! Every message a queue holds in memory (ready, in flight, waiting out a
//! redelivery delay) carries a [`Charge`] of its [`footprint`] against its
//! queue's budget and the broker's; the queue gives the bytes back where the
//! message leaves it, acknowledgements a batch at a time. Charging is two
//! atomic additions, giving back two per batch: no lock, and no reference
//! to the budgets kept per message.
//!
//! A budget turns full when its bytes reach the limit and stays full until
//! they fall below the low mark (90% of it), so producers blocked by a full
//! budget are let go once, with room to send, not at every message.

use super::message::Message;
use crate::store::MessageRecord;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// What a queue does with a new message while its budget, or the broker's,
/// is full (Artemis's `address-full-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum AddressFullPolicy {
    /// Write new messages to disk, in order, and read them back as consumers
    /// take them (the default).
    #[default]
    Page,
    /// Keep accepting what arrives but stop the producers: protocols stop
    /// reading their sends (STOMP) or granting them credit (AMQP).
    Block,
    /// Refuse the send with [`CoreError::AddressFull`](super::CoreError::AddressFull).
    Fail,
    /// Accept and discard the message, counting it.
    Drop,
}

impl AddressFullPolicy {
    pub fn name(self) -> &'static str {
        match self {
            AddressFullPolicy::Page => "PAGE",
            AddressFullPolicy::Block => "BLOCK",
            AddressFullPolicy::Fail => "FAIL",
            AddressFullPolicy::Drop => "DROP",
        }
    }
}

/// What a message costs in a queue besides [`Message::weight`]: the queue
/// entry, the shared pointer's counts and the ready set's node, rounded up
/// for the allocator.
const OVERHEAD: u64 = 192;

/// The bytes a message holds in memory: [`Message::weight`] (the message
/// struct, its body, its original encoding when the protocol kept one, its
/// decoded properties) plus its string fields and [`OVERHEAD`].
pub fn footprint(message: &Message) -> u64 {
    let strings = [
        &message.message_id,
        &message.correlation_id,
        &message.reply_to,
        &message.content_type,
        &message.subject,
        &message.user_id,
        &message.group_id,
    ]
    .into_iter()
    .map(|s| s.as_ref().map_or(0, |s| s.len()))
    .sum::<usize>();
    (message.weight() + strings) as u64 + OVERHEAD
}

/// A limit on bytes held in memory, shared by every thread that charges it.
///
/// *Full* at the limit (new messages meet the queue's policy) until below
/// 90% of it. Apart from that, messages being paged out stay charged until
/// written, and are counted as *writing* too: past a write allowance (2.5%
/// of the limit, at least 1 MiB) every producer waits, whatever the policy,
/// until the writer is down to half of it. A producer faster than the disk
/// then waits for the writer instead of queueing its messages in memory on
/// their way to disk; the wait ends by itself, consumers or not.
#[derive(Debug)]
pub struct Budget {
    /// `u64::MAX` when unlimited. The three limits are atomics only so a queue's
    /// `max_size_bytes` can change at run time; they are read relaxed.
    limit: AtomicU64,
    low: AtomicU64,
    write_allowance: AtomicU64,
    /// Written by every charge and release.
    counts: Counters,
    full: AtomicBool,
    over: AtomicBool,
    /// Woken when the budget stops being full or over.
    room: Notify,
}

/// A budget's two counters, on a cache line of their own. Producers charge
/// and consumers release on different cores, so this line moves between
/// them with every batch; the limits and flags every send reads (and the
/// shared pointer's counts) stay on lines that are rarely written.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Counters {
    used: AtomicU64,
    writing: AtomicU64,
}

impl Budget {
    /// A budget of `limit` bytes; `None` counts without limiting.
    pub fn new(limit: Option<u64>) -> Self {
        let budget = Budget {
            limit: AtomicU64::new(u64::MAX),
            low: AtomicU64::new(u64::MAX),
            write_allowance: AtomicU64::new(u64::MAX),
            counts: Counters::default(),
            full: AtomicBool::new(false),
            over: AtomicBool::new(false),
            room: Notify::new(),
        };
        budget.set_limit(limit);
        budget
    }

    /// Changes the limit; what is charged now is measured against the new one
    /// at once (producers waiting for room are woken when it is larger).
    pub fn set_limit(&self, limit: Option<u64>) {
        let write_allowance = limit.map_or(u64::MAX, |l| (l / 40).max(1 << 20));
        let limit = limit.unwrap_or(u64::MAX);
        self.write_allowance
            .store(write_allowance, Ordering::SeqCst);
        self.low.store(limit - limit / 10, Ordering::SeqCst);
        self.limit.store(limit, Ordering::SeqCst);
        let used = self.counts.used.load(Ordering::SeqCst);
        if used >= limit {
            self.set(&self.full, &self.counts.used, limit - limit / 10);
        } else if used < limit - limit / 10 {
            self.clear(&self.full);
        }
        if self.counts.writing.load(Ordering::SeqCst) < write_allowance / 2 {
            self.clear(&self.over);
        }
    }

    fn raw_limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> Option<u64> {
        let limit = self.raw_limit();
        (limit != u64::MAX).then_some(limit)
    }

    pub fn used(&self) -> u64 {
        self.counts.used.load(Ordering::Relaxed)
    }

    /// Reached its limit and not yet back under the low mark.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// Messages waiting to be paged out passed the write allowance and are
    /// not yet down to half of it: producers wait.
    #[inline]
    pub fn is_over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    fn charge(&self, bytes: u64, paging: bool) {
        let now = self.counts.used.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if now >= self.raw_limit() {
            self.set(
                &self.full,
                &self.counts.used,
                self.low.load(Ordering::Relaxed),
            );
        }
        if paging {
            let writing = self.counts.writing.fetch_add(bytes, Ordering::SeqCst) + bytes;
            let allowance = self.write_allowance.load(Ordering::Relaxed);
            if writing >= allowance {
                self.set(&self.over, &self.counts.writing, allowance / 2);
            }
        }
    }

    /// Raises `flag`, unless a release that took `count` below `clear_below`
    /// raced with it.
    fn set(&self, flag: &AtomicBool, count: &AtomicU64, clear_below: u64) {
        if flag.load(Ordering::Relaxed) {
            return;
        }
        flag.store(true, Ordering::SeqCst);
        // A release that went below the mark meanwhile saw the flag still
        // clear and woke nobody: look again.
        if count.load(Ordering::SeqCst) < clear_below {
            self.clear(flag);
        }
    }

    fn release(&self, bytes: u64, paging: bool) {
        if paging {
            let writing = self.counts.writing.fetch_sub(bytes, Ordering::SeqCst) - bytes;
            let allowance = self.write_allowance.load(Ordering::Relaxed);
            if writing < allowance / 2 && self.over.load(Ordering::SeqCst) {
                self.clear(&self.over);
            }
        }
        let now = self.counts.used.fetch_sub(bytes, Ordering::SeqCst) - bytes;
        if now < self.low.load(Ordering::Relaxed) && self.full.load(Ordering::SeqCst) {
            self.clear(&self.full);
        }
    }

    fn clear(&self, flag: &AtomicBool) {
        if flag.swap(false, Ordering::SeqCst) {
            self.room.notify_waiters();
        }
    }
}

/// One queue's account: its own budget, the broker's, and what it does when
/// either is full.
#[derive(Debug)]
pub struct QueueMemory {
    own: Budget,
    global: Arc<Budget>,
    /// An [`AddressFullPolicy`] as its index, atomic so it can change at run time.
    policy: AtomicU8,
    dropped: AtomicU64,
}

impl QueueMemory {
    pub fn new(
        max_size_bytes: Option<u64>,
        policy: AddressFullPolicy,
        global: Arc<Budget>,
    ) -> Self {
        QueueMemory {
            own: Budget::new(max_size_bytes),
            global,
            policy: AtomicU8::new(policy as u8),
            dropped: AtomicU64::new(0),
        }
    }

    /// Unlimited, for a queue outside any broker (tests).
    pub fn unlimited() -> Self {
        Self::new(None, AddressFullPolicy::Page, Arc::new(Budget::new(None)))
    }

    pub fn policy(&self) -> AddressFullPolicy {
        match self.policy.load(Ordering::Relaxed) {
            x if x == AddressFullPolicy::Block as u8 => AddressFullPolicy::Block,
            x if x == AddressFullPolicy::Fail as u8 => AddressFullPolicy::Fail,
            x if x == AddressFullPolicy::Drop as u8 => AddressFullPolicy::Drop,
            _ => AddressFullPolicy::Page,
        }
    }

    /// A run-time change of the queue's `max_size_bytes` and policy. Producers
    /// held by the old limit or by BLOCK go on once the new ones allow it.
    pub fn reconfigure(&self, max_size_bytes: Option<u64>, policy: AddressFullPolicy) {
        self.policy.store(policy as u8, Ordering::SeqCst);
        self.own.set_limit(max_size_bytes);
        // A producer waiting on BLOCK looks again under the new policy.
        self.own.room.notify_waiters();
    }

    /// Bytes this queue's messages hold in memory.
    pub fn used(&self) -> u64 {
        self.own.used()
    }

    /// [`used`](Self::used) less what is on its way to disk.
    #[cfg(test)]
    pub fn used_in_memory(&self) -> u64 {
        self.own.used() - self.own.counts.writing.load(Ordering::SeqCst)
    }

    /// Whether the queue's budget or the broker's is full: new messages meet
    /// the queue's policy.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.own.is_full() || self.global.is_full()
    }

    /// The queue's own limit, when it is what is full.
    pub fn own_limit_reached(&self) -> Option<u64> {
        self.own.limit().filter(|_| self.own.is_full())
    }

    pub fn global_limit(&self) -> Option<u64> {
        self.global.limit()
    }

    /// Whether the queue's bytes, or the broker's, passed half the limit.
    #[inline]
    pub fn is_half_full(&self) -> bool {
        self.own.used() >= self.own.raw_limit() / 2
            || self.global.used() >= self.global.raw_limit() / 2
    }

    /// Whether the queue has room for about half its budget more: paging in
    /// ahead of consumers stops there.
    pub fn has_headroom(&self) -> bool {
        !self.is_full() && self.own.limit().is_none_or(|l| self.own.used() < l / 2)
    }

    /// About how many bytes may still be paged in ahead of consumers: what
    /// is left below half the queue's own limit and below the broker's.
    pub fn headroom(&self) -> u64 {
        if !self.has_headroom() {
            return 0;
        }
        let own = self
            .own
            .limit()
            .map_or(u64::MAX, |l| (l / 2).saturating_sub(self.own.used()));
        let global = self.global.raw_limit().saturating_sub(self.global.used());
        own.min(global)
    }

    /// Whether the queue's producers must wait: a BLOCK queue that is full,
    /// or any queue whose budget (or the broker's) is over its write
    /// allowance: messages wait to be paged out faster than the disk takes them.
    #[inline]
    pub fn blocks_producers(&self) -> bool {
        (self.policy.load(Ordering::Relaxed) == AddressFullPolicy::Block as u8 && self.is_full())
            || self.own.is_over()
            || self.global.is_over()
    }

    /// Resolves once the queue's producers may go on (see
    /// [`QueueMemory::blocks_producers`]).
    pub async fn has_room(&self) {
        loop {
            let own = self.own.room.notified();
            let global = self.global.room.notified();
            tokio::pin!(own, global);
            own.as_mut().enable();
            global.as_mut().enable();
            if !self.blocks_producers() {
                return;
            }
            tokio::select! {
                () = own => {}
                () = global => {}
            }
        }
    }

    /// Counts a message dropped by the DROP policy; returns the count so far.
    pub fn dropped_one(&self) -> u64 {
        self.dropped.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Charges `message` to both budgets until the returned charge is given
    /// back with [`release`](Self::release).
    #[inline]
    pub fn charge(&self, message: &Message) -> Charge {
        let bytes = footprint(message);
        self.own.charge(bytes, false);
        self.global.charge(bytes, false);
        Charge { bytes }
    }

    /// A charge of `message` whose bytes are added to `batch` rather than to
    /// the budgets: a queue placing many messages under one lock applies them
    /// with one [`charge_bytes`](Self::charge_bytes), two atomic additions a
    /// batch instead of two a message.
    #[inline]
    pub fn charge_in(&self, message: &Message, batch: &mut u64) -> Charge {
        let bytes = footprint(message);
        *batch += bytes;
        Charge { bytes }
    }

    /// Applies a batch of [`charge_in`](Self::charge_in) charges.
    #[inline]
    pub fn charge_bytes(&self, bytes: u64) {
        if bytes != 0 {
            self.own.charge(bytes, false);
            self.global.charge(bytes, false);
        }
    }

    /// [`is_full`](Self::is_full), counting `pending` bytes of a batch not
    /// applied yet as charged.
    #[inline]
    pub fn is_full_with(&self, pending: u64) -> bool {
        self.is_full()
            || (pending != 0
                && (self.own.used().saturating_add(pending) >= self.own.raw_limit()
                    || self.global.used().saturating_add(pending) >= self.global.raw_limit()))
    }

    /// Gives a charge back to both budgets.
    #[inline]
    pub fn release(&self, charge: Charge) {
        self.release_bytes(charge.into_bytes());
    }

    /// Gives back charges summed with [`Charge::into_bytes`]: messages
    /// acknowledged together cost two atomic subtractions, not two each.
    #[inline]
    pub fn release_bytes(&self, bytes: u64) {
        if bytes != 0 {
            self.own.release(bytes, false);
            self.global.release(bytes, false);
        }
    }
}

/// A message on its way to disk (paged out), charged, and counted as
/// writing, until the store has written it and drops its record. It keeps
/// its account: the writer drops it on its own thread, maybe after the
/// queue is gone.
pub struct PagingOut {
    message: Arc<Message>,
    bytes: u64,
    account: Arc<QueueMemory>,
}

impl PagingOut {
    pub fn new(message: Arc<Message>, memory: &Arc<QueueMemory>) -> Self {
        let bytes = footprint(&message);
        memory.own.charge(bytes, true);
        memory.global.charge(bytes, true);
        PagingOut {
            message,
            bytes,
            account: memory.clone(),
        }
    }
}

impl Drop for PagingOut {
    fn drop(&mut self) {
        self.account.own.release(self.bytes, true);
        self.account.global.release(self.bytes, true);
    }
}

impl MessageRecord for PagingOut {
    fn encode_record(&self, delivery_count: u32, out: &mut Vec<u8>) {
        self.message.encode_record(delivery_count, out)
    }
}

/// A message's bytes charged to its queue and the broker. It holds no
/// reference to them (an `Arc` per message cost two more locked operations
/// on a line every producer and consumer writes): the queue gives it back
/// with [`QueueMemory::release`] wherever the message leaves. Under test a
/// charge dropped without that panics, so a way out that forgets it shows.
#[derive(Debug, Default)]
pub struct Charge {
    bytes: u64,
}

impl Charge {
    /// Nothing charged (tests' entries).
    pub fn none() -> Self {
        Charge::default()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The bytes to give back, for a batch summed by the caller.
    #[inline]
    pub fn into_bytes(mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }
}

#[cfg(test)]
impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes != 0 && !std::thread::panicking() {
            panic!(
                "a charge of {} bytes was dropped without being given back",
                self.bytes
            );
        }
    }
}

/// Half the machine's physical memory, Artemis's default for
/// `global-max-size`; 1 GiB where it cannot be read.
pub fn default_global_max_size() -> u64 {
    physical_memory().map_or(1 << 30, |m| m / 2)
}

fn physical_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_at_the_limit_until_below_the_low_mark() {
        let global = Arc::new(Budget::new(Some(100_000)));
        let account = Arc::new(QueueMemory::new(
            Some(30_000),
            AddressFullPolicy::Block,
            global.clone(),
        ));
        let message = Message::default();
        let one = footprint(&message);
        assert!(one >= OVERHEAD);
        let mut charges: Vec<Charge> = Vec::new();
        while !account.is_full() {
            charges.push(account.charge(&message));
        }
        assert!(account.used() >= 30_000 && account.blocks_producers());
        assert_eq!(global.used(), account.used());
        account.release(charges.pop().expect("charged"));
        assert!(account.is_full(), "still above the low mark");
        let half = charges.len() / 2;
        account.release_bytes(charges.drain(half..).map(Charge::into_bytes).sum());
        assert!(!account.is_full());
        charges.into_iter().for_each(|c| account.release(c));
        assert_eq!((account.used(), global.used()), (0, 0));
    }

    #[test]
    fn the_global_budget_fills_every_queue() {
        let global = Arc::new(Budget::new(Some(2_000)));
        let a = Arc::new(QueueMemory::new(
            None,
            AddressFullPolicy::Page,
            global.clone(),
        ));
        let b = Arc::new(QueueMemory::new(None, AddressFullPolicy::Fail, global));
        let mut held = Vec::new();
        while !a.is_full() {
            held.push(a.charge(&Message::default()));
        }
        assert!(b.is_full());
        assert!(!a.blocks_producers(), "PAGE never blocks");
        held.into_iter().for_each(|c| a.release(c));
        assert!(!b.is_full());
    }

    #[test]
    fn every_policy_waits_while_paging_outruns_the_disk() {
        let global = Arc::new(Budget::new(Some(4 << 20)));
        let page = Arc::new(QueueMemory::new(
            None,
            AddressFullPolicy::Page,
            global.clone(),
        ));
        let mut held = Vec::new();
        while !global.is_full() {
            held.push(page.charge(&Message::default()));
        }
        assert!(!page.blocks_producers(), "PAGE pages at the limit");
        held.push(page.charge(&Message::default()));
        assert!(
            !page.blocks_producers(),
            "memory past the limit alone never blocks"
        );
        let big = Arc::new(Message {
            body: bytes::Bytes::from(vec![0u8; 600 << 10]),
            ..Message::default()
        });
        let first = PagingOut::new(big.clone(), &page);
        assert!(!page.blocks_producers(), "within the write allowance");
        let second = PagingOut::new(big, &page);
        assert!(page.blocks_producers(), "past it even PAGE producers wait");
        drop(second);
        assert!(page.blocks_producers(), "until half of it is written");
        drop(first);
        assert!(!page.blocks_producers());
        held.into_iter().for_each(|c| page.release(c));
        assert_eq!(global.used(), 0);
    }

    #[tokio::test]
    async fn waiters_go_once_below_the_low_mark() {
        let account = Arc::new(QueueMemory::new(
            Some(1_000),
            AddressFullPolicy::Block,
            Arc::new(Budget::new(None)),
        ));
        let held = account.charge(&Message::default());
        let held2 = account.charge(&Message::default());
        assert!(account.blocks_producers());
        let waiter = tokio::spawn({
            let account = account.clone();
            async move { account.has_room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        account.release(held);
        account.release(held2);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
    }
}
