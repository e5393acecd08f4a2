//! What claims (see [`crate::core::claims`]) and HTTP clients that address
//! messages one by one need of a queue beside dispatch: a look at its
//! messages from a position on, one by its sequence or message id, the
//! deliveries one consumer holds, a later expiry for them, and the removal
//! of a waiting message by its sequence.
//! None of it runs on the dispatch path.

use super::browse::Seen;
use super::effects::AfterUnlock;
use super::inspect::{MessageState, Untaken};
use super::Queue;
use crate::core::consumer::ConsumerId;
use crate::core::message::{now_ms, Message};
use crate::core::receipt::Receipt;
use crate::store::{MessageKey, Op};
use std::sync::Arc;

/// A message seen without being taken.
#[derive(Debug, Clone)]
pub struct Peeked {
    pub seq: u64,
    pub message: Arc<Message>,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// The consumer it is in flight to, if it is.
    pub held_by: Option<ConsumerId>,
}

impl Queue {
    /// Up to `limit` messages with a sequence above `after`, oldest first:
    /// those waiting (in memory or paged; expired ones left out) and, with
    /// `in_flight`, those delivered and not settled.
    pub fn peek(&self, after: u64, limit: usize, in_flight: bool) -> Vec<Peeked> {
        let st = self.state.lock();
        let (waiting, _) = self.browse_page(&st, after, limit, None);
        let mut seen: Vec<Peeked> = waiting
            .into_iter()
            .map(
                |Seen {
                     seq,
                     message,
                     delivery_count,
                 }| Peeked {
                    seq,
                    message,
                    delivery_count,
                    held_by: None,
                },
            )
            .collect();
        if in_flight {
            seen.extend(st.in_flight.iter().filter(|(seq, _)| **seq > after).map(
                |(seq, flight)| Peeked {
                    seq: *seq,
                    message: flight.entry.message.clone(),
                    delivery_count: flight.entry.delivery_count,
                    held_by: Some(flight.consumer),
                },
            ));
            seen.sort_unstable_by_key(|p| p.seq);
            seen.truncate(limit);
        }
        seen
    }

    /// One message by sequence, waiting (in memory or paged) or in flight;
    /// an expired one waiting to be dropped is not shown.
    pub fn peek_one(&self, seq: u64) -> Option<Peeked> {
        let found = self.find_message(seq)?;
        let held_by = match found.state {
            MessageState::InFlight { consumer } => Some(consumer),
            _ if found.message.is_expired_at(now_ms()) => return None,
            _ => None,
        };
        Some(Peeked {
            seq,
            message: found.message,
            delivery_count: found.delivery_count,
            held_by,
        })
    }

    /// The messages whose message id is `id`, waiting or in flight, oldest
    /// first (see [`Queue::find_by_message_id`]).
    pub async fn peek_by_id(&self, id: &str) -> Vec<Peeked> {
        self.find_by_message_id(id)
            .await
            .into_iter()
            .map(|found| Peeked {
                seq: found.seq,
                held_by: match found.state {
                    MessageState::InFlight { consumer } => Some(consumer),
                    _ => None,
                },
                message: found.message,
                delivery_count: found.delivery_count,
            })
            .collect()
    }

    /// Hands the messages `held` (sequence, deliveries so far) to
    /// `consumer` as dispatch would, wherever they wait (in memory or paged
    /// to disk): a claim restored at start takes back what it held. Those
    /// that are not waiting any more (acknowledged before the restart) are
    /// skipped. Returns how many it got.
    pub fn deliver_these(self: &Arc<Self>, consumer: ConsumerId, held: &[(u64, u32)]) -> usize {
        let mut after = AfterUnlock::default();
        let mut given = 0;
        {
            let mut st = self.state.lock();
            let Some(index) = st.consumers.index_of(consumer) else {
                return 0;
            };
            for &(seq, delivery_count) in held {
                let Ok(mut entry) = self.take_entry(&mut st, seq) else {
                    continue;
                };
                // Handing over counts the delivery again.
                entry.delivery_count = delivery_count.saturating_sub(1);
                let owned = entry
                    .lane
                    .as_ref()
                    .is_some_and(|l| st.groups.owner(l) == Some(consumer));
                st.consumers.slot_mut(index).credit += 1;
                if self.hand_over(&mut st, index, entry, owned, &mut after) {
                    given += 1;
                }
            }
            if let Some(slot) = st.consumers.get_mut(consumer) {
                slot.credit = 0;
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
        given
    }

    /// Gives each delivery `consumer` holds that would expire before
    /// `at_least` (epoch ms) that expiry instead: a claim's grace keeps its
    /// messages alive past the claim's end (in memory; a restart forgets it
    /// with the claim).
    pub fn extend_expiry_of(&self, consumer: ConsumerId, at_least: u64) {
        let mut st = self.state.lock();
        for flight in st.in_flight.values_mut() {
            if flight.consumer != consumer {
                continue;
            }
            if flight
                .entry
                .message
                .expires_at
                .is_some_and(|at| at < at_least)
            {
                Arc::make_mut(&mut flight.entry.message).expires_at = Some(at_least);
            }
        }
    }

    /// Removes a waiting message (ready, paged to disk, or waiting out a
    /// redelivery delay) for good, as an acknowledgement would; the receipt
    /// resolves once its record is deleted. One in flight stays with its
    /// consumer ([`Untaken::InFlight`]).
    pub fn remove_waiting(self: &Arc<Self>, seq: u64) -> Result<Receipt, Untaken> {
        let mut after = AfterUnlock::default();
        let receipt = {
            let mut st = self.state.lock();
            let entry = self.take_entry(&mut st, seq)?;
            self.counters.acked(1);
            let receipt = match entry.persisted {
                true => Receipt::from(self.store.submit(Op::DeleteMessage {
                    key: MessageKey {
                        queue: self.id,
                        seq,
                    },
                })),
                false => Receipt::ready(),
            };
            self.leave(entry);
            // Senders held back while the queue drained may go on.
            self.dispatch(&mut st, &mut after);
            receipt
        };
        self.finish(&mut after);
        Ok(receipt)
    }
}
