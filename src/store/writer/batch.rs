//! One group commit: the queued ops (and the held messages now due) as one
//! RocksDB WriteBatch, with acknowledged puts and their deletes cancelled out
//! and runs of deletes as range tombstones.

use super::failed::Pending;
use super::{Commit, Op, OpList, Writer};
use crate::store::held::HeldPut;
use crate::store::inbox::Submission;
use crate::store::keys::MessageKey;
use crate::store::release::Ticket;
use crate::store::rocks::{CF_CLAIMS, CF_MESSAGES, CF_QUEUES, CF_SCHEDULED};
use crate::store::scheduled::{index_key, CF_SCHEDULED_BY_QUEUE};
use rocksdb::{WriteBatch, DB};
use std::collections::HashMap;
use std::time::Instant;

impl Writer {
    /// One WriteBatch for the queued ops, in order, and for the held messages
    /// that are due; its `batch` is `None` when nothing is left to write. A
    /// message stored and then acknowledged before it is written (a consumer
    /// that keeps up) is not written at all: neither its put nor its delete
    /// reaches RocksDB. Dropping the delete is safe because a message key is
    /// put once only (sequences are never reused while a record with that key
    /// exists), so nothing older under that key can be on disk. A delete of a
    /// record from an earlier commit (or run) is kept.
    ///
    /// New messages of queues whose consumers keep up are kept back in `held`
    /// (`may_hold`; see `holding`). A commit that purges or deletes a queue
    /// writes every held message first: they must not cross it.
    pub(super) fn build(
        &mut self,
        db: &DB,
        queued: &mut Vec<Submission>,
        now: Instant,
        may_hold: bool,
    ) -> Commit {
        let count: usize = queued.iter().map(Submission::op_count).sum();
        let mut ops: Vec<Op> = Vec::with_capacity(count);
        // Per op, the submission it came in.
        let mut owner: Vec<usize> = Vec::with_capacity(count);
        // Per submission, its ticket and whether it is a single op.
        let mut submissions: Vec<(Ticket, bool)> = Vec::with_capacity(queued.len());
        for (i, q) in queued.drain(..).enumerate() {
            submissions.push((q.ticket, matches!(q.ops, OpList::One(_))));
            match q.ops {
                OpList::One(op) => {
                    ops.push(op);
                    owner.push(i);
                }
                OpList::Many(many) => {
                    owner.extend(std::iter::repeat_n(i, many.len()));
                    ops.extend(many);
                }
            }
        }
        let mut batch = WriteBatch::default();
        let mut any = false;
        let mut settles: Vec<Ticket> = Vec::with_capacity(submissions.len());
        // (queue, held messages cancelled out, held messages out of time)
        let mut outcomes: Vec<(u32, usize, usize)> = Vec::new();
        let mut reorders = false;
        for op in &ops {
            match op {
                Op::PurgeQueue { queue } => {
                    self.holding.forget(*queue);
                    reorders = true;
                }
                Op::DeleteQueue { .. } => reorders = true,
                _ => {}
            }
        }
        // Held messages out of time (every one on the way out, or before a
        // purge) go first. Out of time is final: a window this commit widens
        // does not take them back.
        let mut due: Vec<(MessageKey, HeldPut, bool)> = Vec::new();
        self.held.take(
            &self.holding,
            now,
            reorders || !may_hold,
            |key, put, late| due.push((key, put, late)),
        );
        for (key, put, late) in due {
            outcome(&mut outcomes, key.queue).2 += usize::from(late);
            settles.push(put.ticket);
            self.apply(
                db,
                &mut batch,
                Op::PutMessage {
                    key,
                    record: put.record,
                    consumable: true,
                },
            );
            any = true;
        }
        let mut elided = vec![false; ops.len()];
        // Nothing acknowledged in this batch (a producer ahead of its
        // consumers, delayed messages): nothing to pair up.
        let ranges = if ops.iter().any(|op| matches!(op, Op::DeleteMessage { .. })) {
            let mut put_at: HashMap<MessageKey, usize, foldhash::fast::RandomState> =
                HashMap::default();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::PutMessage { key, .. } => {
                        put_at.insert(*key, i);
                    }
                    Op::DeleteMessage { key } => {
                        if let Some(put) = put_at.remove(key) {
                            elided[put] = true;
                            elided[i] = true;
                        } else if let Some(held) = self.held.cancel(key) {
                            elided[i] = true;
                            settles.push(held.ticket);
                            outcome(&mut outcomes, key.queue).1 += 1;
                        }
                    }
                    _ => {}
                }
            }
            delete_ranges(&ops, &mut elided, &put_at)
        } else {
            Vec::new()
        };
        for (queue, consumed, late) in outcomes {
            self.holding.learn(queue, consumed, late, now);
        }
        let hold = may_hold && !reorders;
        let mut held = vec![false; submissions.len()];
        for ((op, elided), i) in ops.into_iter().zip(elided).zip(owner) {
            match op {
                Op::PutMessage {
                    key,
                    record,
                    consumable,
                } if hold
                    && submissions[i].1
                    && consumable
                    && !elided
                    && self.holding.may_hold(key.queue, now) =>
                {
                    held[i] = true;
                    let ticket = submissions[i].0;
                    self.held.keep(key, HeldPut { record, ticket }, now);
                }
                // Settled with the batch; a batch of barriers alone writes nothing.
                Op::Barrier => {}
                op if !elided => {
                    self.apply(db, &mut batch, op);
                    any = true;
                }
                _ => {}
            }
        }
        if let Some(cf) = db.cf_handle(CF_MESSAGES) {
            for (from, to) in ranges {
                batch.delete_range_cf(cf, from.encode(), to.encode());
                self.failed.retained.push(Pending::DeleteRange(from, to));
                any = true;
            }
        }
        settles.extend(
            submissions
                .iter()
                .zip(held)
                .filter(|(_, held)| !held)
                .map(|((ticket, _), _)| *ticket),
        );
        Commit {
            batch: any.then_some(batch),
            settles,
        }
    }

    pub(super) fn apply(&mut self, db: &DB, batch: &mut WriteBatch, op: Op) {
        self.failed.retain(&op);
        let cf = |name| db.cf_handle(name);
        match op {
            Op::PutMessage { key, record, .. } => {
                if let Some(cf) = cf(CF_MESSAGES) {
                    batch.put_cf(cf, key.encode(), record.bytes(&mut self.scratch));
                }
            }
            Op::DeleteMessage { key } => {
                if let Some(cf) = cf(CF_MESSAGES) {
                    batch.delete_cf(cf, key.encode());
                }
            }
            // An entry and its per-queue index key change in the same batch:
            // a crash leaves both or neither.
            Op::PutScheduled { key, record } => {
                if let Some(cf) = cf(CF_SCHEDULED) {
                    batch.put_cf(cf, key.encode(), record);
                }
                if let Some(cf) = cf(CF_SCHEDULED_BY_QUEUE) {
                    batch.put_cf(cf, index_key(&key), b"");
                }
            }
            Op::DeleteScheduled { key } => {
                if let Some(cf) = cf(CF_SCHEDULED) {
                    batch.delete_cf(cf, key.encode());
                }
                if let Some(cf) = cf(CF_SCHEDULED_BY_QUEUE) {
                    batch.delete_cf(cf, index_key(&key));
                }
            }
            Op::PutQueue { name, record } => {
                if let Some(cf) = cf(CF_QUEUES) {
                    batch.put_cf(cf, name.as_bytes(), record);
                }
            }
            Op::DeleteQueue { name } => {
                if let Some(cf) = cf(CF_QUEUES) {
                    batch.delete_cf(cf, name.as_bytes());
                }
            }
            Op::PutClaim { id, record } => {
                if let Some(cf) = cf(CF_CLAIMS) {
                    batch.put_cf(cf, id.as_bytes(), record);
                }
            }
            Op::DeleteClaim { id } => {
                if let Some(cf) = cf(CF_CLAIMS) {
                    batch.delete_cf(cf, id.as_bytes());
                }
            }
            Op::PurgeQueue { queue } => {
                if let Some(cf) = cf(CF_MESSAGES) {
                    let from = MessageKey { queue, seq: 0 }.encode();
                    // The end bound is exclusive: one byte past the queue's last key.
                    let mut to = MessageKey {
                        queue,
                        seq: u64::MAX,
                    }
                    .encode()
                    .to_vec();
                    to.push(0);
                    batch.delete_range_cf(cf, from.to_vec(), to);
                }
            }
            Op::Barrier => {}
        }
    }
}

/// The tally of one queue's held messages in a commit.
fn outcome(outcomes: &mut Vec<(u32, usize, usize)>, queue: u32) -> &mut (u32, usize, usize) {
    let at = match outcomes.iter().position(|(q, _, _)| *q == queue) {
        Some(at) => at,
        None => {
            outcomes.push((queue, 0, 0));
            outcomes.len() - 1
        }
    };
    &mut outcomes[at]
}

/// Shortest run of consecutive deletes written as one range tombstone.
const MIN_DELETE_RUN: usize = 16;

/// Acknowledgements mostly come in sequence order, so a batch deletes runs of
/// consecutive keys of one queue: each run of at least [`MIN_DELETE_RUN`]
/// becomes one range tombstone `[first, last + 1)` instead of a point tombstone
/// per message (the writer's memtable inserts were most of a persistent run's
/// CPU, and scans skip a range faster than thousands of points). A range only
/// ever covers keys this batch deletes, every one of them, and none that it
/// puts, so it removes exactly what the point deletes would have. The deletes
/// it replaces are marked in `elided`; the ranges are returned as (from, to).
fn delete_ranges(
    ops: &[Op],
    elided: &mut [bool],
    put_at: &HashMap<MessageKey, usize, foldhash::fast::RandomState>,
) -> Vec<(MessageKey, MessageKey)> {
    let mut deletes: Vec<(MessageKey, usize)> = ops
        .iter()
        .enumerate()
        .filter(|(i, _)| !elided[*i])
        .filter_map(|(i, op)| match op {
            Op::DeleteMessage { key } if !put_at.contains_key(key) => Some((*key, i)),
            _ => None,
        })
        .collect();
    if deletes.len() < MIN_DELETE_RUN {
        return Vec::new();
    }
    deletes.sort_unstable_by_key(|(k, _)| (k.queue, k.seq));
    let mut ranges = Vec::new();
    let mut start = 0;
    for end in 1..=deletes.len() {
        let continues = deletes.get(end).is_some_and(|(k, _)| {
            let prev = deletes[end - 1].0;
            k.queue == prev.queue && (k.seq == prev.seq || k.seq == prev.seq + 1)
        });
        if continues {
            continue;
        }
        let run = &deletes[start..end];
        let (first, last) = (run[0].0, run[run.len() - 1].0);
        if run.len() >= MIN_DELETE_RUN {
            if let Some(after) = last.seq.checked_add(1) {
                for (_, i) in run {
                    elided[*i] = true;
                }
                ranges.push((
                    first,
                    MessageKey {
                        queue: last.queue,
                        seq: after,
                    },
                ));
            }
        }
        start = end;
    }
    ranges
}
