//! What management does to single messages of a queue: delete one, move or copy
//! some (by id, or those a selector matches) to another queue — the dead-letter
//! retry — and send a test message. Changes need `manage` at every queue they
//! touch, checked here like [`super::manage`] does.
//!
//! A move never loses or duplicates a message across a crash: the message is taken
//! out of its queue in memory, and its copy in the target and the deletion of its
//! old record are one store write (as the delay schedule moves a due message into
//! its queue). Until that write, the old record stays; a crash before it finds the
//! message where it was.

use super::broker::Broker;
use super::error::CoreError;
use super::message::Message;
use super::queue::{Move, Queue, QueuedMessage, Taken, Untaken};
use super::receipt::Receipt;
use super::security::{Permission, Principal};
use super::selector::{Selector, SelectorError};
use crate::store::{Completion, Op};
use std::sync::Arc;

/// Messages one lock holds for a selector search or a move; a larger request
/// goes page by page, and other work on the queue goes on in between.
const PAGE: usize = 256;

/// Which messages a move or copy takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These ids (sequences in the queue).
    Ids(Vec<u64>),
    /// Every waiting message a JMS selector matches.
    Selector(String),
}

/// Move (the source loses them) or copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    Move,
    Copy,
}

#[derive(Debug, thiserror::Error)]
pub enum MessageOpError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error("queue '{queue}' has no message {id}")]
    NoMessage { queue: String, id: u64 },
    #[error("message {id} of queue '{queue}' is in flight to consumer {consumer}; it can be deleted once it is settled and back")]
    InFlight {
        queue: String,
        id: u64,
        consumer: u64,
    },
    #[error("message {id} of queue '{queue}' is being paged to disk; try again")]
    NotWrittenYet { queue: String, id: u64 },
    #[error("'{0}' is both the source and the target")]
    SameQueue(String),
    #[error(transparent)]
    Selector(#[from] SelectorError),
}

/// A message a move or copy by id left where it was, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub id: u64,
    pub reason: SkipReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    NotFound,
    /// A consumer holds it (moves only; a copy takes it as it is).
    InFlight,
    NotWrittenYet,
}

impl SkipReason {
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::NotFound => "not_found",
            SkipReason::InFlight => "in_flight",
            SkipReason::NotWrittenYet => "not_written_yet",
        }
    }
}

/// What a move or copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transferred {
    pub count: usize,
    pub skipped: Vec<Skipped>,
}

impl Broker {
    /// Deletes the message `id` from queue `name` (waiting, paged or waiting out
    /// a redelivery delay; one in flight is refused). The receipt resolves when
    /// its record is gone.
    pub fn delete_message_as(
        &self,
        name: &str,
        id: u64,
        who: &Principal,
    ) -> Result<Receipt, MessageOpError> {
        let queue = self.manage_queue_as(name, who)?;
        let mut results = queue.take_messages(&[id]);
        match results.pop() {
            Some(Ok(taken)) => Ok(queue.delete_records(&[taken]).into()),
            Some(Err(untaken)) => Err(refusal(name, untaken)),
            None => Err(MessageOpError::NoMessage {
                queue: name.to_owned(),
                id,
            }),
        }
    }

    /// Moves or copies messages of queue `from` to the end of queue `to`, each
    /// as a new message there (delivery count 0, its address `to`), in their
    /// order. By id, any state but in flight (a copy takes those too); by
    /// selector, every message waiting to be delivered that it matches.
    /// Resolves once every copy (and each move's deletion) is on disk.
    pub async fn transfer_messages_as(
        &self,
        from: &str,
        to: &str,
        selection: Selection,
        transfer: Transfer,
        who: &Principal,
    ) -> Result<Transferred, MessageOpError> {
        let source = self.manage_queue_as(from, who)?;
        let target = self.manage_queue_as(to, who)?;
        if Arc::ptr_eq(&source, &target) {
            return Err(MessageOpError::SameQueue(from.to_owned()));
        }
        let mut done = Transferred::default();
        let mut completions = Vec::new();
        match selection {
            Selection::Ids(ids) => {
                for chunk in ids.chunks(PAGE) {
                    let (moves, skipped) = match transfer {
                        Transfer::Move => take(&source, chunk, &target),
                        Transfer::Copy => copy_ids(&source, chunk, &target),
                    };
                    done.skipped.extend(skipped);
                    done.count += moves.len();
                    completions.extend(target.accept_moved(moves));
                }
            }
            Selection::Selector(text) => {
                let selector = Selector::parse(&text)?;
                let mut after = 0;
                loop {
                    let (page, next) = source.matching_page(after, PAGE, &selector);
                    let moves = match transfer {
                        Transfer::Move => {
                            let ids: Vec<u64> = page.iter().map(|m| m.seq).collect();
                            // Gone since the search (a consumer took it): not moved.
                            take(&source, &ids, &target).0
                        }
                        Transfer::Copy => page.iter().map(|m| copied(m, &target)).collect(),
                    };
                    done.count += moves.len();
                    completions.extend(target.accept_moved(moves));
                    match next {
                        Some(next) => after = next,
                        None => break,
                    }
                }
            }
        }
        Completion::all(completions)
            .wait()
            .await
            .map_err(CoreError::Store)?;
        Ok(done)
    }

    /// Sends `message` to queue `name` as a producer would (its delay resolved,
    /// flow control and limits applied): `manage` and `send` at the queue.
    /// Also says whether it waits in the schedule (its own delay, or the
    /// queue's default one).
    pub fn send_test_message_as(
        &self,
        name: &str,
        mut message: Message,
        who: &Principal,
    ) -> Result<(Receipt, bool), CoreError> {
        let queue = self.manage_queue_as(name, who)?;
        who.check(name, Permission::Send)?;
        message.address = queue.name().clone();
        self.resolve_delay(&mut message, &queue.settings())?;
        let delayed = message.due_at.is_some();
        Ok((self.publish_resolved(&queue, message)?, delayed))
    }
}

/// Takes `ids` out of `source` as moves into `target`, their old records
/// deleted in the write that stores them there.
fn take(source: &Arc<Queue>, ids: &[u64], target: &Queue) -> (Vec<Move>, Vec<Skipped>) {
    let mut moves = Vec::with_capacity(ids.len());
    let mut skipped = Vec::new();
    for result in source.take_messages(ids) {
        match result {
            Ok(Taken {
                message, record, ..
            }) => {
                let delete = record.map(|key| Op::DeleteMessage { key });
                moves.push((retargeted(&message, target), 0, delete));
            }
            Err(untaken) => skipped.push(skip(untaken)),
        }
    }
    (moves, skipped)
}

fn copy_ids(source: &Queue, ids: &[u64], target: &Queue) -> (Vec<Move>, Vec<Skipped>) {
    let mut moves = Vec::with_capacity(ids.len());
    let mut skipped = Vec::new();
    for &id in ids {
        match source.find_message(id) {
            Some(found) => moves.push(copied(&found, target)),
            None => skipped.push(Skipped {
                id,
                reason: SkipReason::NotFound,
            }),
        }
    }
    (moves, skipped)
}

fn copied(found: &QueuedMessage, target: &Queue) -> Move {
    (retargeted(&found.message, target), 0, None)
}

/// The message as a new one in `target`.
fn retargeted(message: &Message, target: &Queue) -> Arc<Message> {
    let mut copy = message.clone();
    copy.address = target.name().clone();
    copy.due_at = None;
    copy.may_carry_delay = false;
    Arc::new(copy)
}

fn skip(untaken: Untaken) -> Skipped {
    let (id, reason) = match untaken {
        Untaken::NotFound(id) => (id, SkipReason::NotFound),
        Untaken::InFlight(id, _) => (id, SkipReason::InFlight),
        Untaken::NotWrittenYet(id) => (id, SkipReason::NotWrittenYet),
    };
    Skipped { id, reason }
}

fn refusal(queue: &str, untaken: Untaken) -> MessageOpError {
    let queue = queue.to_owned();
    match untaken {
        Untaken::NotFound(id) => MessageOpError::NoMessage { queue, id },
        Untaken::InFlight(id, consumer) => MessageOpError::InFlight {
            queue,
            id,
            consumer,
        },
        Untaken::NotWrittenYet(id) => MessageOpError::NotWrittenYet { queue, id },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::consumer::ConsumerOptions;
    use crate::core::deliveries;
    use crate::core::queue::MessageState;
    use crate::core::settings::QueueSettings;
    use crate::core::tests::open;
    use crate::core::{CreditMode, RoutingType};

    fn paging() -> QueueSettings {
        QueueSettings {
            max_memory_messages: 5,
            ..QueueSettings::default()
        }
    }

    /// Durable messages `0..n` to `queue`, each with the property `n`.
    async fn fill(broker: &Broker, queue: &str, n: i64) {
        let mut last = None;
        for i in 0..n {
            let mut m = Message::new(Arc::from(queue), i.to_string().into(), 0);
            m.durable = true;
            m.properties
                .push((Arc::from("n"), crate::core::Value::Int(i)));
            last = Some(broker.publish(m, RoutingType::Anycast).unwrap());
        }
        last.unwrap().wait().await.unwrap();
    }

    /// Every message of the queue, page by page.
    fn all(queue: &Queue, page: usize) -> Vec<QueuedMessage> {
        let (mut out, mut after) = (Vec::new(), 0);
        loop {
            let p = queue.messages_page(after, page);
            assert!(p.items.len() <= page);
            out.extend(p.items);
            match p.next {
                Some(next) => after = next,
                None => return out,
            }
        }
    }

    fn bodies(messages: &[QueuedMessage]) -> Vec<String> {
        messages
            .iter()
            .map(|m| String::from_utf8_lossy(&m.message.body).into_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_paging_queue_is_browsed_in_order_with_its_in_flight_messages_marked() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), paging());
        fill(&broker, "q", 30).await;
        let (tx, mut rx) = deliveries::channel();
        let options = ConsumerOptions {
            credit: CreditMode::Window(2),
            ..Default::default()
        };
        let _sub = broker
            .subscribe("q", RoutingType::Anycast, options, tx)
            .unwrap();
        let first = rx.recv().await.unwrap();
        let queue = broker.queue("q").unwrap();
        let seen = all(&queue, 7);
        let expected: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        assert_eq!(bodies(&seen), expected);
        assert_eq!(
            seen[0].state,
            MessageState::InFlight {
                consumer: first.consumer
            }
        );
        assert!(seen.iter().any(|m| m.state == MessageState::Paged));
        assert!(seen.iter().any(|m| m.state == MessageState::Ready));
        let last = seen.last().unwrap();
        let found = queue.find_message(last.seq).unwrap();
        assert_eq!(
            (found.state, &found.message.body[..]),
            (MessageState::Paged, &b"29"[..])
        );
        assert!(queue.find_message(9_999).is_none());
    }

    #[tokio::test]
    async fn moves_survive_a_restart_exactly_once_and_copies_leave_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let who;
        {
            let broker = open(dir.path(), paging());
            who = broker.principal(None, None, None);
            fill(&broker, "dlq", 20).await;
            broker.queue_or_create("q", true).unwrap();
            broker.queue_or_create("copies", true).unwrap();
            let dlq = broker.queue("dlq").unwrap();
            let ids: Vec<u64> = all(&dlq, 100).iter().map(|m| m.seq).collect();
            let by_id = Selection::Ids(vec![ids[1], ids[2], ids[15], 777]);
            let done = broker
                .transfer_messages_as("dlq", "q", by_id, Transfer::Move, &who)
                .await
                .unwrap();
            assert_eq!(done.count, 3);
            assert_eq!(
                done.skipped,
                [Skipped {
                    id: 777,
                    reason: SkipReason::NotFound
                }]
            );
            let by_selector = Selection::Selector("n >= 10".into());
            let done = broker
                .transfer_messages_as("dlq", "q", by_selector, Transfer::Move, &who)
                .await
                .unwrap();
            assert_eq!(done.count, 9, "10..20 but 15, moved already");
            let copy = Selection::Selector("n < 2".into());
            let done = broker
                .transfer_messages_as("dlq", "copies", copy, Transfer::Copy, &who)
                .await
                .unwrap();
            assert_eq!(done.count, 1, "0 (1 was moved)");
            let same = broker
                .transfer_messages_as("dlq", "dlq", Selection::Ids(vec![]), Transfer::Move, &who)
                .await;
            assert!(matches!(same, Err(MessageOpError::SameQueue(_))));
            let bad = broker
                .transfer_messages_as(
                    "dlq",
                    "q",
                    Selection::Selector("n >".into()),
                    Transfer::Move,
                    &who,
                )
                .await;
            assert!(matches!(bad, Err(MessageOpError::Selector(_))));
            let missing = broker
                .transfer_messages_as("dlq", "nope", Selection::Ids(vec![]), Transfer::Move, &who)
                .await;
            assert!(matches!(
                missing,
                Err(MessageOpError::Core(CoreError::NotFound(_)))
            ));
        }
        let broker = open(dir.path(), paging());
        let names = |queue: &str| {
            let mut b = bodies(&all(&broker.queue(queue).unwrap(), 4));
            b.sort_by_key(|s| s.parse::<u32>().unwrap());
            b
        };
        let strings = |v: Vec<u32>| v.into_iter().map(|i| i.to_string()).collect::<Vec<_>>();
        assert_eq!(names("dlq"), strings(vec![0, 3, 4, 5, 6, 7, 8, 9]));
        assert_eq!(
            names("q"),
            strings(vec![1, 2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
        );
        assert_eq!(names("copies"), strings(vec![0]));
    }

    #[tokio::test]
    async fn a_message_is_deleted_unless_a_consumer_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), paging());
        let who = broker.principal(None, None, None);
        fill(&broker, "q", 10).await;
        let queue = broker.queue("q").unwrap();
        let ids: Vec<u64> = all(&queue, 100).iter().map(|m| m.seq).collect();
        // A paged one, and a ready one.
        for id in [ids[9], ids[1]] {
            broker
                .delete_message_as("q", id, &who)
                .unwrap()
                .wait()
                .await
                .unwrap();
        }
        assert!(matches!(
            broker.delete_message_as("q", ids[9], &who),
            Err(MessageOpError::NoMessage { .. })
        ));
        let (tx, mut rx) = deliveries::channel();
        let options = ConsumerOptions {
            credit: CreditMode::Window(1),
            ..Default::default()
        };
        let _sub = broker
            .subscribe("q", RoutingType::Anycast, options, tx)
            .unwrap();
        let held = rx.recv().await.unwrap();
        assert_eq!(&held.message.body[..], b"0");
        assert!(matches!(
            broker.delete_message_as("q", held.seq, &who),
            Err(MessageOpError::InFlight { .. })
        ));
        let left = bodies(&all(&queue, 3));
        assert_eq!(left, ["0", "2", "3", "4", "5", "6", "7", "8"]);
        assert_eq!(
            queue.stats().ready + queue.stats().paged + queue.stats().in_flight,
            8
        );
    }
}
