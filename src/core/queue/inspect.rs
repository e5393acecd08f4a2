//! What management sees of one queue's messages and takes out of it: pages of
//! them in queue order whatever their state (ready, paged to disk, in flight,
//! waiting out a redelivery delay), one by its sequence, and messages taken
//! out to be deleted or moved. Each call does bounded work under the queue
//! lock, as browsing does (see [`super::browse`]): a deep queue is read page
//! by page from disk, never loaded into memory.

use super::effects::AfterUnlock;
use super::ready::Entry;
use super::{Move, Queue, State};
use crate::core::consumer::{ConsumerId, MessageFilter};
use crate::core::message::Message;
use crate::core::persist;
use crate::store::{Completion, MessageKey, Op};
use std::sync::Arc;

/// Where a message is in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageState {
    /// Waiting in memory to be delivered.
    Ready,
    /// Waiting on disk (the queue is deeper than its memory limit).
    Paged,
    /// Delivered to a consumer, not settled yet.
    InFlight { consumer: ConsumerId },
    /// Came back from a failed delivery; delivered again at `due_ms` (epoch ms).
    Redelivering { due_ms: u64 },
}

/// One message of a queue as management sees it.
#[derive(Debug, Clone)]
pub struct QueuedMessage {
    /// Its sequence in the queue: the id management names it by.
    pub seq: u64,
    pub state: MessageState,
    pub message: Arc<Message>,
    /// Deliveries so far.
    pub delivery_count: u32,
}

/// A page of a queue's messages in queue (arrival) order.
#[derive(Debug, Clone)]
pub struct MessagePage {
    pub items: Vec<QueuedMessage>,
    /// Pass as `after` for the next page; `None` when this page reached the end.
    pub next: Option<u64>,
}

/// A message taken out of its queue; its record, if it has one, stays on disk
/// until the write that deletes or moves it.
#[derive(Debug)]
pub struct Taken {
    pub seq: u64,
    pub message: Arc<Message>,
    pub record: Option<MessageKey>,
}

/// Why a message could not be taken out of its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untaken {
    /// No such message (never was, or settled, expired, moved meanwhile).
    NotFound(u64),
    /// A consumer holds it; it leaves or comes back when settled.
    InFlight(u64, ConsumerId),
    /// Paged out, but the store has not written it yet: ask again shortly.
    NotWrittenYet(u64),
}

impl Queue {
    /// Up to `limit` messages with a sequence above `after`, in queue order.
    /// Expired messages waiting to be dropped are not shown.
    pub fn messages_page(&self, after: u64, limit: usize) -> MessagePage {
        let limit = limit.max(1);
        let st = self.state.lock();
        let (available, passed) = self.browse_page(&st, after, limit, None);
        // Everything available in (after, passed] is in `available`; add what
        // is there but not available to take.
        let mut items: Vec<QueuedMessage> = available
            .into_iter()
            .map(|seen| QueuedMessage {
                state: match st.backlog.contains(seen.seq) {
                    true => MessageState::Paged,
                    false => MessageState::Ready,
                },
                seq: seen.seq,
                message: seen.message,
                delivery_count: seen.delivery_count,
            })
            .collect();
        let within = |seq: u64| seq > after && seq <= passed;
        items.extend(
            st.in_flight
                .iter()
                .filter(|(seq, _)| within(**seq))
                .map(|(seq, flight)| QueuedMessage {
                    seq: *seq,
                    state: MessageState::InFlight {
                        consumer: flight.consumer,
                    },
                    message: flight.entry.message.clone(),
                    delivery_count: flight.entry.delivery_count,
                }),
        );
        items.extend(
            st.waiting
                .iter()
                .filter(|(_, e)| within(e.seq))
                .map(|(due_ms, e)| QueuedMessage {
                    seq: e.seq,
                    state: MessageState::Redelivering { due_ms },
                    message: e.message.clone(),
                    delivery_count: e.delivery_count,
                }),
        );
        items.sort_unstable_by_key(|m| m.seq);
        let next = match items.len() > limit {
            true => {
                items.truncate(limit);
                items.last().map(|m| m.seq)
            }
            false if passed < st.next_seq - 1 => Some(passed),
            false => None,
        };
        MessagePage { items, next }
    }

    /// The message `seq`, wherever it is in the queue: O(log n) unless it
    /// is grouped or waits out a redelivery delay; one disk read when paged.
    pub fn find_message(&self, seq: u64) -> Option<QueuedMessage> {
        let st = self.state.lock();
        self.locate(&st, seq)
    }

    pub(super) fn locate(&self, st: &State, seq: u64) -> Option<QueuedMessage> {
        let found = |state, message: &Arc<Message>, delivery_count| QueuedMessage {
            seq,
            state,
            message: message.clone(),
            delivery_count,
        };
        if let Some(e) = st.ready.get(seq) {
            return Some(found(MessageState::Ready, &e.message, e.delivery_count));
        }
        if let Some(flight) = st.in_flight.get(&seq) {
            let state = MessageState::InFlight {
                consumer: flight.consumer,
            };
            return Some(found(
                state,
                &flight.entry.message,
                flight.entry.delivery_count,
            ));
        }
        if st.backlog.contains(seq) {
            let stored = self.read_paged(seq).ok()?;
            return Some(found(
                MessageState::Paged,
                &Arc::new(stored.message),
                stored.delivery_count,
            ));
        }
        if let Some((due_ms, e)) = st.waiting.iter().find(|(_, e)| e.seq == seq) {
            let state = MessageState::Redelivering { due_ms };
            return Some(found(state, &e.message, e.delivery_count));
        }
        None
    }

    /// Up to `limit` messages available to consumers (ready or paged) with a
    /// sequence above `after` that pass `filter`, and the sequence the search
    /// passed: the next search goes on from there. `None` when it reached the
    /// end of the queue.
    pub fn matching_page(
        &self,
        after: u64,
        limit: usize,
        filter: &dyn MessageFilter,
    ) -> (Vec<QueuedMessage>, Option<u64>) {
        let st = self.state.lock();
        let (page, passed) = self.browse_page(&st, after, limit.max(1), Some(filter));
        let items = page
            .into_iter()
            .map(|seen| QueuedMessage {
                state: MessageState::Ready,
                seq: seen.seq,
                message: seen.message,
                delivery_count: seen.delivery_count,
            })
            .collect();
        let unread = st.backlog.last_seq().is_some_and(|last| last > passed);
        let more = passed < st.next_seq - 1 || unread;
        // A search that passed nothing while paged messages are unwritten
        // would spin: it ends here, and those are not matched.
        let next = (more && passed > after).then_some(passed);
        (items, next)
    }

    /// Takes the messages `seqs` out of the queue (those waiting; one in
    /// flight stays with its consumer), leaving their records on disk for the
    /// caller to delete or move in one write with their copies.
    pub fn take_messages(self: &Arc<Self>, seqs: &[u64]) -> Vec<Result<Taken, Untaken>> {
        let mut after = AfterUnlock::default();
        let results = {
            let mut st = self.state.lock();
            let results = seqs
                .iter()
                .map(|&seq| self.take_one(&mut st, seq))
                .collect();
            // Senders held back while the queue drained may go on.
            self.dispatch(&mut st, &mut after);
            results
        };
        self.finish(&mut after);
        results
    }

    fn take_one(&self, st: &mut State, seq: u64) -> Result<Taken, Untaken> {
        let entry = self.take_entry(st, seq)?;
        Ok(Taken {
            seq,
            record: entry.persisted.then_some(MessageKey {
                queue: self.id,
                seq,
            }),
            message: self.leave(entry),
        })
    }

    /// Takes the waiting message `seq` out of wherever it waits: among the
    /// ready ones, waiting out a redelivery delay, or paged to disk (read
    /// back; its record stays on disk). One in flight stays with its consumer.
    pub(super) fn take_entry(&self, st: &mut State, seq: u64) -> Result<Entry, Untaken> {
        if let Some(flight) = st.in_flight.get(&seq) {
            return Err(Untaken::InFlight(seq, flight.consumer));
        }
        if st.backlog.contains(seq) {
            let stored = self.read_paged(seq)?;
            let group = stored.message.group_id.as_ref();
            let lane = group.and_then(|g| st.groups.lane_of(g));
            if !st.backlog.remove(&lane, seq) {
                return Err(Untaken::NotFound(seq));
            }
            return Ok(Entry::stored(seq, stored, lane, &self.memory));
        }
        let ready = st.ready.get(seq).map(|e| st.owner_of(&e.lane));
        if let Some(owner) = ready {
            return st.ready.remove(seq, owner).ok_or(Untaken::NotFound(seq));
        }
        if let Some(entry) = st.waiting.remove(seq) {
            if let Some(lane) = &entry.lane {
                let owner = st.owner_of(&entry.lane);
                st.ready.unhold_lane(lane, owner);
            }
            return Ok(entry);
        }
        Err(Untaken::NotFound(seq))
    }

    /// The record of a paged message.
    fn read_paged(&self, seq: u64) -> Result<persist::StoredMessage, Untaken> {
        let records = self
            .store
            .scan_messages(self.id, seq, 1)
            .map_err(|_| Untaken::NotWrittenYet(seq))?;
        match records.into_iter().next() {
            Some((found, record)) if found == seq => {
                persist::decode(record).map_err(|_| Untaken::NotFound(seq))
            }
            _ => Err(Untaken::NotWrittenYet(seq)),
        }
    }

    /// Places messages moved in by management, each with the store operation
    /// (deleting its source record) that must be written with it, under one
    /// lock. The completions resolve when each is durable; unlike a send's,
    /// none is held back by flow control (an operator waits, not a producer).
    pub fn accept_moved(self: &Arc<Self>, moves: Vec<Move>) -> Vec<Completion> {
        let mut completions = Vec::with_capacity(moves.len());
        self.place_all(moves, &mut completions, false);
        completions
    }

    /// Deletes taken messages' records in one write.
    pub fn delete_records(&self, taken: &[Taken]) -> Completion {
        let deletes: Vec<Op> = taken
            .iter()
            .filter_map(|t| t.record)
            .map(|key| Op::DeleteMessage { key })
            .collect();
        match deletes.len() {
            0 => Completion::ready(),
            _ => self.store.submit_all(deletes),
        }
    }
}
