//! Placing new messages (in memory, or on disk when the queue is deep) and
//! handing ready messages to consumers with credit. A consumer that finds
//! nothing it may take in memory reads its next lane from disk, so a stalled
//! group never holds back anything else, at any depth.

use super::backlog::LaneKey;
use super::effects::AfterUnlock;
use super::ready::{Entry, Pick};
use super::{Diversion, InFlight, Queue, State};
use crate::core::consumer::{ConsumerId, Delivery, MessageFilter};
use crate::core::memory::PagingOut;
use crate::core::message::{coarse_now_ms, now_ms, Message};
use crate::core::persist;
use crate::store::{Completion, MessageKey, Op, Record};
use std::sync::Arc;

/// Where [`Queue::place`] put a new message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placed {
    /// Among the ready ones: a dispatch pass should follow.
    Ready,
    /// Given to its group's owner already.
    HandedOver,
    /// Written to disk behind others of its lane, or because memory is full.
    Paged,
}

impl Placed {
    /// A paged message may still be one a waiting consumer can take once read.
    pub fn needs_dispatch(self) -> bool {
        self != Placed::HandedOver
    }
}

/// What the disk head of a lane is to a consumer with a selector.
enum Head {
    Matches,
    /// Expired: dropped; the lane has a new head.
    Expired,
    /// Does not match; `for_good` when it cannot expire either, so it
    /// will never match (a message and a filter do not change).
    Other {
        for_good: bool,
    },
    Failed,
}

/// Memory may hold this many times `max_memory_messages` when consumers read
/// lanes from disk for themselves (their selectors may pass over what they read).
const MEMORY_CEILING: usize = 2;

/// Past the memory limits, a consumer reads from disk for itself only while
/// it holds fewer bytes than this in flight (and always at least one
/// message): enough to keep it busy, and a bound on memory whatever its
/// window and however large the messages.
const READ_PAST_LIMIT_BYTES: u64 = 4 << 20;

impl Queue {
    /// Stores a new message's place in the queue — on disk behind older
    /// messages of its lane or when memory is full, else among the ready ones
    /// or, with `direct`, straight to its group's owner — without dispatching
    /// or holding its sender back. Its bytes are added to `st.uncharged`: the
    /// caller applies them with `apply_charges` before anything can
    /// take a message out again (before dispatching).
    pub(super) fn place(
        self: &Arc<Self>,
        st: &mut State,
        message: Arc<Message>,
        delivery_count: u32,
        also: Option<Op>,
        direct: bool,
        after: &mut AfterUnlock,
    ) -> (Completion, Placed) {
        self.counters.enqueued();
        let durable = message.durable || st.settings.durable;
        let seq = st.next_seq;
        st.next_seq += 1;
        st.index_id(message.message_id.as_deref(), seq);
        let lane = message.group_id.as_ref().and_then(|g| st.groups.lane_of(g));
        let key = MessageKey {
            queue: self.id,
            seq,
        };
        let memory_full = st.ready.len() >= st.settings.max_memory_messages
            || self.memory.is_full_with(st.uncharged);
        if st.backlog.has_lane(&lane) || (memory_full && !self.admits_now(st, &lane, &message)) {
            let owner = st.owner_of(&lane);
            st.backlog.push(lane, seq, owner);
            // Charged until written: a producer faster than the disk must
            // not queue its messages in memory on their way there.
            let paging = PagingOut::new(message, &self.memory);
            let put = Op::PutMessage {
                key,
                record: Record::message(Arc::new(paging), delivery_count),
                consumable: false,
            };
            return (self.write(Some(put), also), Placed::Paged);
        }
        // Without a consumer nothing can acknowledge it before it is
        // written: the store need not wait for one.
        let consumable = st.consumers.active() > 0;
        // A message that will sit in memory (no consumer), or any while
        // memory is short, gets bytes of its own: as a slice of the
        // connection's read buffer it pinned the rest of that buffer
        // (measured: RSS 1.6 times the bytes counted for a flood of 64 KiB
        // messages). A queue whose consumers keep up copies nothing.
        let message = match !consumable || self.memory.is_half_full() {
            true => Arc::new(message.detached()),
            false => message,
        };
        // The writer encodes the record only if it writes it (see `store::record`).
        let put = durable.then(|| Op::PutMessage {
            key,
            record: Record::message(message.clone(), delivery_count),
            consumable,
        });
        let completion = self.write(put, also);
        let owner = st.owner_of(&lane);
        let direct = match (&lane, owner) {
            (Some(lane), Some(owner)) if direct => self.direct_owner(st, lane, owner, &message),
            _ => None,
        };
        let entry = Entry {
            seq,
            charge: self.memory.charge_in(&message, &mut st.uncharged),
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

    /// Whether a consumer could take this message right now, so it may stay
    /// in memory past the limit (it leaves again at once): the in-memory
    /// window always admits what can be dispatched.
    fn admits_now(&self, st: &State, lane: &LaneKey, message: &Message) -> bool {
        if !st.gate.is_open(&st.settings) {
            return false;
        }
        let owner = match lane {
            Some(l) if st.ready.is_held(l) => return false,
            Some(l) => st.groups.owner(l),
            None => None,
        };
        // Ready messages may claim that credit first (a batch placed before
        // its dispatch pass): admit no more than the credit over the limit.
        let over = st.ready.len() - st.settings.max_memory_messages.min(st.ready.len());
        st.consumers.iter().any(|s| {
            s.credit as usize > over
                && !s.is_browser()
                && st.consumers.may_receive(s.id)
                && owner.is_none_or(|o| o == s.id)
                && s.filter.as_ref().is_none_or(|f| f.matches(message))
        })
    }

    pub(super) fn dispatch(self: &Arc<Self>, st: &mut State, after: &mut AfterUnlock) {
        self.dispatch_ready(st, after);
        let gone = self.is_deleted() || st.consumers.active() == 0;
        let waiting = st.waiting_count();
        st.flow.drained(
            waiting,
            st.settings.max_memory_messages,
            gone,
            &mut after.released,
        );
    }

    fn dispatch_ready(self: &Arc<Self>, st: &mut State, after: &mut AfterUnlock) {
        if st.consumers.len() == 0 || self.is_deleted() {
            return;
        }
        self.feed_browsers(st, after);
        if !st.backlog.is_empty() {
            self.refill(st, after);
        }
        let active = st.consumers.active();
        // The gate before the messages: a gate whose delay ran out opens when
        // its timer looks, whether or not anything waits (it stays open then).
        if active == 0 || !st.gate.allows(&st.settings, active) {
            return;
        }
        if st.ready.is_empty() && st.backlog.is_empty() {
            return;
        }
        // Read the clock only for a message that can expire: most cannot, and
        // dispatch runs on every publish and every ack.
        let mut now: Option<u64> = None;
        // Reused between calls: dispatch runs on every publish and every ack.
        let mut starved = std::mem::take(&mut st.starved);
        starved.clear();
        starved.resize(st.consumers.index_bound(), false);
        // Expired group heads were looked for this pass.
        let mut swept = false;
        // Consumers that met a message they declared undeliverable this pass.
        let mut looked_past: Option<Vec<bool>> = None;
        loop {
            if st.ready.is_empty() && st.backlog.is_empty() {
                break;
            }
            let Some(index) = st.consumers.next(&starved) else {
                break;
            };
            let slot = st.consumers.slot(index);
            let consumer = slot.id;
            let pick = match &slot.filter {
                _ if looked_past.as_ref().is_some_and(|l| l[index]) => {
                    let filter = slot.filter.as_deref();
                    st.ready.pick_where(consumer, |e| {
                        e.avoid != Some(consumer) && filter.is_none_or(|f| f.matches(&e.message))
                    })
                }
                Some(filter) => st.ready.pick_filtered(consumer, filter.as_ref()),
                None => st.ready.pick_for(consumer),
            };
            let Some(pick) = pick else {
                // Reading again and again ends: each read either feeds this
                // consumer (its credit runs out) or stays in memory (up to
                // the ceiling), and the backlog only shrinks.
                if !st.backlog.is_empty()
                    && (self.read_for(st, consumer, after) > 0
                        || self.scan_for(st, index, after) > 0)
                {
                    continue;
                }
                let passes_over = st.consumers.slot(index).filter.is_some()
                    || looked_past.as_ref().is_some_and(|l| l[index]);
                if !swept && passes_over {
                    // Its selector, or a message it declared undeliverable,
                    // may pass over an expired group head that nobody takes,
                    // and so never meet expiry: drop those.
                    swept = true;
                    let dropped = st.ready.drop_expired_heads(*now.get_or_insert_with(now_ms));
                    if !dropped.is_empty() {
                        for entry in dropped {
                            self.forget(&entry);
                            after.diverted.push((self.leave(entry), Diversion::Expired));
                        }
                        continue;
                    }
                    // One that expires later would hold the group back
                    // until something else made the queue look again.
                    if let Some(at) = st.ready.earliest_head_expiry() {
                        if st.expiry_wake_at.is_none_or(|set| set > at) {
                            st.expiry_wake_at = Some(at);
                            after.expire_heads_at = Some(at);
                        }
                    }
                }
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
                after.diverted.push((self.leave(entry), Diversion::Expired));
                continue;
            }
            if entry.avoid == Some(consumer) {
                // Put it back for someone else, and look past such messages
                // for this consumer: they must not hold back what it can take.
                st.ready.push(entry, owner);
                looked_past.get_or_insert_with(|| vec![false; starved.len()])[index] = true;
                continue;
            }
            // The last message of a group frees it: consumers that found
            // nothing this pass may find its next message now.
            let frees_group = entry.lane.is_some() && entry.message.group_seq == Some(-1);
            if !self.hand_over(st, index, entry, owner.is_some(), after) {
                starved[index] = true;
            } else if frees_group {
                starved.fill(false);
            }
        }
        st.starved = starved;
    }

    /// Gives a ready message to the consumer at `index`, binding its group if
    /// it has no owner yet (`owned` false). Returns false if the consumer's
    /// session is gone; the message is then back among the ready ones.
    pub(super) fn hand_over(
        self: &Arc<Self>,
        st: &mut State,
        index: usize,
        mut entry: Entry,
        owned: bool,
        after: &mut AfterUnlock,
    ) -> bool {
        let consumer = st.consumers.slot(index).id;
        let mut group_first = false;
        if let Some(lane) = &entry.lane {
            if !owned {
                st.set_owner(lane, Some(consumer));
                group_first = true;
            }
            if entry.message.group_seq == Some(-1) {
                st.set_owner(lane, None);
            }
        }
        entry.delivery_count += 1;
        let slot = st.consumers.slot_mut(index);
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
        st.consumers.served(index);
        if sent {
            st.flow.delivered();
            let slot = st.consumers.slot_mut(index);
            slot.in_flight_bytes += entry.charge.bytes();
            slot.activity.delivered += 1;
            if let (Some(lane), true) = (&entry.lane, owned) {
                // A group bound just now has its binding's time already.
                st.groups.touch(lane, coarse_now_ms());
            }
            st.in_flight.insert(
                entry.seq,
                InFlight {
                    consumer,
                    index,
                    entry,
                },
            );
        } else {
            // The session is gone; it will remove the consumer shortly.
            entry.delivery_count -= 1;
            let owner = st.owner_of(&entry.lane);
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
        if st.settings.exclusive
            || st.settings.consumers_before_dispatch > 0
            || st.gate.is_paused()
            || self.is_deleted()
            || st.ready.has_lane(lane)
            || st.ready.is_held(lane)
            || (message.expires_at.is_some() && message.is_expired_at(now_ms()))
        {
            return None;
        }
        let index = st.consumers.index_of(owner)?;
        let slot = st.consumers.slot(index);
        (slot.credit > 0 && slot.filter.is_none() && !slot.is_browser()).then_some(index)
    }

    /// Keeps about half the memory limit of messages anyone may take in
    /// memory: the oldest lanes on disk that are not bound to a consumer.
    fn refill(&self, st: &mut State, after: &mut AfterUnlock) {
        let target = (st.settings.max_memory_messages / 2).max(1);
        // Within the byte limits too: a consumer's own reads (`read_for`)
        // are bounded by its credit and what it holds in flight instead.
        while st.ready.len() < target && self.memory.has_headroom() {
            let Some(lane) = st.backlog.next_lane(None, |l| is_held(st, l)) else {
                return;
            };
            let want = target - st.ready.len();
            if self.page_in(st, &lane, want, self.memory.headroom(), after) == 0 {
                return;
            }
        }
    }

    /// Reads from disk the next lane `consumer` may take (ungrouped, unbound,
    /// or its own), up to its credit, even past the memory limit: those leave
    /// memory again at once. Returns how many messages were read.
    fn read_for(&self, st: &mut State, consumer: ConsumerId, after: &mut AfterUnlock) -> usize {
        let Some(slot) = st
            .consumers
            .index_of(consumer)
            .map(|i| st.consumers.slot(i))
        else {
            return 0;
        };
        let (credit, filtered) = (slot.credit as usize, slot.filter.is_some());
        // Within the memory limits, up to what is left of them; past them, a
        // consumer with little in flight still reads a few at a time, so
        // messages nobody else can take never starve it, while large ones
        // and a deep window cannot bring a whole lane into memory.
        let max_bytes = match self.memory.headroom() {
            0 if slot.in_flight_bytes >= READ_PAST_LIMIT_BYTES => return 0,
            0 => READ_PAST_LIMIT_BYTES - slot.in_flight_bytes,
            headroom => headroom,
        };
        // Without a filter a consumer takes what it reads at once (a lane
        // read from disk is never one it refused), so its credit bounds the
        // memory; with one, what it reads may not match: a ceiling bounds it.
        let ceiling = st.settings.max_memory_messages.max(1) * MEMORY_CEILING;
        if filtered && st.ready.len() >= ceiling {
            return 0;
        }
        let Some(lane) = st.backlog.next_lane(Some(consumer), |l| is_held(st, l)) else {
            return 0;
        };
        let half = (st.settings.max_memory_messages / 2).max(1);
        let mut want = credit.clamp(1, half);
        if filtered {
            want = want.min(ceiling - st.ready.len());
        }
        self.page_in(st, &lane, want, max_bytes, after)
    }

    /// A consumer with a selector found nothing in memory, and reading lanes
    /// in order stopped at the memory ceiling (what it read did not match):
    /// look further along the ungrouped messages on disk for ones it can
    /// take, a bounded number per pass, remembering how far it looked.
    /// Returns how many it found (read into memory, up to its credit).
    fn scan_for(&self, st: &mut State, index: usize, after: &mut AfterUnlock) -> usize {
        const SCAN: usize = 256;
        let slot = st.consumers.slot(index);
        let Some(filter) = slot.filter.clone() else {
            return 0;
        };
        let credit = slot.credit as usize;
        let from = slot.scanned_to;
        let consumer = slot.id;
        let heads = self.scan_heads_for(st, consumer, filter.as_ref(), after);
        if heads > 0 {
            return heads;
        }
        let Some(last) = st.backlog.runs_of(&None).last().map(|r| r.end()) else {
            return 0;
        };
        let Some(start) = st
            .backlog
            .runs_of(&None)
            .find(|r| r.end() > from)
            .map(|r| r.start.max(from))
        else {
            return 0;
        };
        let records = match self
            .store
            .scan_message_range(self.id, start..last, SCAN, u64::MAX)
        {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(queue = %self.name, error = %e, "paging in failed");
                return 0;
            }
        };
        let mut scanned_to = from;
        let mut found = 0;
        for (seq, record) in records.iter().cloned() {
            if found == credit {
                break;
            }
            scanned_to = seq + 1;
            // Only the ungrouped messages waiting on disk (the range holds
            // others: in memory, in flight, of groups).
            if !st.backlog.contains(seq) {
                continue;
            }
            let Ok(stored) = persist::decode(record) else {
                continue;
            };
            let lane = stored
                .message
                .group_id
                .as_ref()
                .and_then(|g| st.groups.lane_of(g));
            if lane.is_some() || !filter.matches(&stored.message) {
                continue;
            }
            st.backlog.remove(&None, seq);
            st.ready
                .push(Entry::stored(seq, stored, None, &self.memory), None);
            found += 1;
        }
        // Stopped short (the scan's limit, or messages the writer has not
        // stored yet): carry on shortly rather than hold the lock.
        if found < credit && scanned_to < last {
            after.retry_page_in |= !st.backlog.retry_scheduled;
            st.backlog.retry_scheduled = true;
        }
        st.consumers.slot_mut(index).scanned_to = scanned_to;
        found
    }

    /// [`Queue::scan_for`] among groups: the first group on disk (unbound, or
    /// the consumer's own) whose next message, nothing of it being in memory,
    /// matches the consumer's filter is read in. Heads it was found not to
    /// match are remembered (see [`pass_head`]), so a pass reads each at
    /// most once and the next pass looks further.
    fn scan_heads_for(
        &self,
        st: &mut State,
        consumer: ConsumerId,
        filter: &dyn MessageFilter,
        after: &mut AfterUnlock,
    ) -> usize {
        const HEADS: usize = 64;
        let Some(index) = st.consumers.index_of(consumer) else {
            return 0;
        };
        let passed = &st.consumers.slot(index).passed_heads;
        let lanes: Vec<(Arc<str>, u64)> = st
            .backlog
            .lanes_for(consumer)
            .filter_map(|lane| lane.clone())
            .filter(|lane| !st.ready.has_lane(lane) && !st.ready.is_held(lane))
            .filter_map(|lane| {
                st.backlog
                    .front(&Some(lane.clone()))
                    .map(|r| (lane, r.start))
            })
            .filter(|(_, head)| !passed.contains(head))
            .take(HEADS + 1)
            .collect();
        let cut_short = lanes.len() > HEADS;
        let mut newly_passed = 0;
        let now = now_ms();
        for (lane, first) in lanes.into_iter().take(HEADS) {
            let lane = Some(lane);
            let mut seq = first;
            // An expired head is dropped here (dispatch never meets it: it is
            // on disk), and the next one looked at.
            loop {
                match self.head_matches(st, &lane, seq, filter, now, after) {
                    Head::Matches => return self.page_in(st, &lane, 1, u64::MAX, after),
                    Head::Expired => match st.backlog.front(&lane) {
                        Some(run) => seq = run.start,
                        None => break,
                    },
                    Head::Other { for_good } => {
                        if for_good {
                            pass_head(st, index, seq);
                            newly_passed += 1;
                        }
                        break;
                    }
                    Head::Failed => return 0,
                }
            }
        }
        // More groups wait beyond this scan's limit: look at the next ones
        // shortly, rather than hold the lock. Each retry passes over new
        // heads for good, so the retries end.
        if cut_short && newly_passed > 0 {
            after.retry_page_in |= !st.backlog.retry_scheduled;
            st.backlog.retry_scheduled = true;
        }
        0
    }

    /// Whether the message `seq` at the head of `lane` on disk matches
    /// `filter`; an expired one is taken off the disk and diverted.
    fn head_matches(
        &self,
        st: &mut State,
        lane: &LaneKey,
        seq: u64,
        filter: &dyn MessageFilter,
        now: u64,
        after: &mut AfterUnlock,
    ) -> Head {
        let record = match self
            .store
            .scan_message_range(self.id, seq..seq + 1, 1, u64::MAX)
        {
            Ok(mut records) => match records.pop() {
                Some((_, record)) => record,
                None => {
                    // Not written yet: look again shortly.
                    after.retry_page_in |= !st.backlog.retry_scheduled;
                    st.backlog.retry_scheduled = true;
                    return Head::Other { for_good: false };
                }
            },
            Err(e) => {
                tracing::error!(queue = %self.name, error = %e, "paging in failed");
                return Head::Failed;
            }
        };
        let Ok(stored) = persist::decode(record) else {
            return Head::Other { for_good: true };
        };
        if stored.message.expires_at.is_some() && stored.message.is_expired_at(now) {
            st.backlog.consumed(lane, 1);
            let entry = Entry::stored(seq, stored, lane.clone(), &self.memory);
            self.forget(&entry);
            after.diverted.push((self.leave(entry), Diversion::Expired));
            return Head::Expired;
        }
        if filter.matches(&stored.message) {
            Head::Matches
        } else {
            Head::Other {
                for_good: stored.message.expires_at.is_none(),
            }
        }
    }

    /// Reads up to `want` messages of `lane` back from disk into memory.
    fn page_in(
        &self,
        st: &mut State,
        lane: &LaneKey,
        want: usize,
        max_bytes: u64,
        after: &mut AfterUnlock,
    ) -> usize {
        let Some(run) = st.backlog.front(lane) else {
            return 0;
        };
        let n = run.len.min(want.max(1) as u64);
        let records = match self.store.scan_message_range(
            self.id,
            run.start..run.start + n,
            n as usize,
            max_bytes,
        ) {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(queue = %self.name, error = %e, "paging in failed");
                return 0;
            }
        };
        // The writer applies a queue's writes in order: what is readable is a
        // prefix of the run.
        let readable = records
            .iter()
            .enumerate()
            .take_while(|(i, (seq, _))| *seq == run.start + *i as u64)
            .count();
        if readable == 0 {
            // The writer has not applied them yet; look again shortly.
            after.retry_page_in |= !st.backlog.retry_scheduled;
            st.backlog.retry_scheduled = true;
            return 0;
        }
        st.backlog.consumed(lane, readable as u64);
        let owner = st.owner_of(lane);
        for (seq, record) in records.into_iter().take(readable) {
            match persist::decode(record) {
                Ok(stored) => st.ready.push(
                    Entry::stored(seq, stored, lane.clone(), &self.memory),
                    owner,
                ),
                Err(e) => {
                    tracing::error!(queue = %self.name, seq, error = %e, "skipping unreadable paged message")
                }
            }
        }
        readable
    }
}

/// Notes that the consumer at `index` will never take the group head `seq`
/// on disk. Heads no longer on disk are forgotten each time the memo
/// reaches a power of two from a few scans' worth on, so it stays about the
/// size of the groups on disk at an amortised constant cost.
fn pass_head(st: &mut State, index: usize, seq: u64) {
    const PRUNE_FROM: usize = 256;
    let State {
        consumers, backlog, ..
    } = st;
    let passed = &mut consumers.slot_mut(index).passed_heads;
    if passed.len() >= PRUNE_FROM && passed.len().is_power_of_two() {
        passed.retain(|seq| backlog.contains(*seq));
    }
    passed.insert(seq);
}

fn is_held(st: &State, lane: &LaneKey) -> bool {
    lane.as_deref().is_some_and(|l| st.ready.is_held(l))
}
