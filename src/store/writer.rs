//! The single writer thread: every change goes through it so writes from many
//! connections share one WriteBatch and one fsync (group commit), and the
//! changes of one queue reach RocksDB in the order the core made them.

use super::keys::{MessageKey, ScheduleKey};
use super::rocks::{CF_MESSAGES, CF_QUEUES, CF_SCHEDULED};
use super::StoreError;
use bytes::Bytes;
use rocksdb::{WriteBatch, WriteOptions, DB};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// When a write counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync every batch before completing it.
    Always,
    /// Gather writes for up to `window`, then one fsync for all of them.
    Batched { window: Duration },
    /// Hand writes to the OS without fsync: survives a broker crash, not a power loss.
    Never,
}

/// One change. Several ops submitted together are applied atomically.
#[derive(Debug)]
pub enum Op {
    PutMessage {
        key: MessageKey,
        record: Bytes,
    },
    DeleteMessage {
        key: MessageKey,
    },
    PutScheduled {
        key: ScheduleKey,
        record: Bytes,
    },
    DeleteScheduled {
        key: ScheduleKey,
    },
    PutQueue {
        name: String,
        record: Bytes,
    },
    DeleteQueue {
        name: String,
    },
    /// Removes every message of a queue (deleted temporary queues).
    PurgeQueue {
        queue: u32,
    },
}

pub(super) struct Submission {
    pub ops: OpList,
    pub done: Option<oneshot::Sender<Result<(), Arc<StoreError>>>>,
}

/// Most submissions carry one op; keep that case free of a Vec allocation.
pub(super) enum OpList {
    One(Op),
    Many(Vec<Op>),
}

/// Resolves once the submission is durable per the fsync policy, and, for a
/// send a queue holds back (producer flow control), once the queue lets it go.
pub struct Completion {
    written: Option<oneshot::Receiver<Result<(), Arc<StoreError>>>>,
    held: Option<oneshot::Receiver<()>>,
}

impl Completion {
    pub(super) fn written(rx: Option<oneshot::Receiver<Result<(), Arc<StoreError>>>>) -> Self {
        Completion {
            written: rx,
            held: None,
        }
    }

    /// A completion for work that needed no write.
    pub fn ready() -> Self {
        Completion::written(None)
    }

    /// This completion, resolving only once the returned [`Hold`] is dropped too.
    pub fn held_back(self) -> (Hold, Completion) {
        let (tx, rx) = oneshot::channel();
        let held = Completion {
            written: self.written,
            held: Some(rx),
        };
        (Hold(Some(tx)), held)
    }

    /// Only what the disk promises, without any flow-control hold: for a
    /// caller that keeps the newest write as proof that all earlier ones are
    /// on disk (the store applies them in order; a hold says nothing of that).
    pub fn durability(self) -> Completion {
        Completion::written(self.written)
    }

    /// True when there is nothing to wait for.
    pub fn is_ready(&self) -> bool {
        self.written.is_none() && self.held.is_none()
    }

    /// One completion for many: resolves when all have, with the first error.
    pub fn all(completions: Vec<Completion>) -> Completion {
        let pending: Vec<Completion> = completions.into_iter().filter(|c| !c.is_ready()).collect();
        if pending.is_empty() {
            return Completion::ready();
        }
        let (tx, rx) = oneshot::channel();
        let wait_all = async move {
            let mut result = Ok(());
            for completion in pending {
                let r = completion.wait().await;
                if result.is_ok() {
                    result = r;
                }
            }
            let _ = tx.send(result);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(wait_all);
            }
            Err(_) => return Completion::ready(),
        }
        Completion::written(Some(rx))
    }

    pub async fn wait(self) -> Result<(), Arc<StoreError>> {
        let written = match self.written {
            None => Ok(()),
            Some(rx) => rx.await.unwrap_or(Err(Arc::new(StoreError::Closed))),
        };
        if let Some(held) = self.held {
            // Sent or dropped, a hold ends the same way: the producer goes on.
            let _ = held.await;
        }
        written
    }
}

/// Holds a [`Completion::held_back`] until dropped.
#[derive(Debug)]
pub struct Hold(Option<oneshot::Sender<()>>);

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

pub(super) struct Writer {
    pub db: Arc<DB>,
    pub policy: FsyncPolicy,
    pub max_batch: usize,
    pub idle_flush_after: Duration,
    /// The last idle flush: one at a time, and joined before the writer ends
    /// (it holds the DB open).
    pub idle_flush: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    pub fn run(mut self, rx: Receiver<Submission>) {
        let mut pending: Vec<oneshot::Sender<Result<(), Arc<StoreError>>>> = Vec::new();
        let mut ops: Vec<Op> = Vec::new();
        // Something was written since the last idle flush.
        let mut dirty = false;
        loop {
            let first = if dirty {
                match rx.recv_timeout(self.idle_flush_after) {
                    Ok(s) => s,
                    Err(RecvTimeoutError::Timeout) => {
                        self.release_memory();
                        dirty = false;
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(s) => s,
                    Err(_) => break,
                }
            };
            let mut count = 0usize;
            self.add(&mut ops, first, &mut pending, &mut count);
            let deadline = match self.policy {
                FsyncPolicy::Batched { window } => Some(Instant::now() + window),
                _ => None,
            };
            while count < self.max_batch {
                let next = match deadline {
                    Some(deadline) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        match rx.recv_timeout(left) {
                            Ok(s) => s,
                            Err(RecvTimeoutError::Timeout) => break,
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }
                    None => match rx.try_recv() {
                        Ok(s) => s,
                        Err(_) => break,
                    },
                };
                self.add(&mut ops, next, &mut pending, &mut count);
            }
            // Nothing left (every message of the batch already consumed): no
            // write and no fsync, there is nothing whose loss a crash could cause.
            let result = match self.build(&mut ops) {
                None => Ok(()),
                Some(batch) => {
                    dirty = true;
                    let mut options = WriteOptions::default();
                    options.set_sync(self.policy != FsyncPolicy::Never);
                    self.db.write_opt(batch, &options).map_err(|e| {
                        tracing::error!(error = %e, "store write failed");
                        Arc::new(StoreError::Rocks(e))
                    })
                }
            };
            for done in pending.drain(..) {
                let _ = done.send(result.clone());
            }
        }
        if let Some(flush) = self.idle_flush.take() {
            let _ = flush.join();
        }
    }

    /// The broker went quiet: flush the memtables (a burst of persistent or
    /// delayed messages leaves up to `db_write_buffer_size` of them, mostly
    /// dead entries) and give their memory back. RocksDB allocates through
    /// glibc malloc, which keeps freed arena memory unless trimmed. On its
    /// own thread, so the next write does not wait for the flush.
    fn release_memory(&mut self) {
        if self.idle_flush.as_ref().is_some_and(|f| !f.is_finished()) {
            return;
        }
        let db = self.db.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-store-idle".into())
            .spawn(move || {
                for name in [CF_MESSAGES, CF_SCHEDULED, CF_QUEUES] {
                    if let Some(cf) = db.cf_handle(name) {
                        if let Err(e) = db.flush_cf(&cf) {
                            tracing::warn!(error = %e, cf = name, "idle flush failed");
                        }
                    }
                }
                trim_malloc();
            });
        match spawned {
            Ok(handle) => self.idle_flush = Some(handle),
            Err(e) => tracing::warn!(error = %e, "cannot start the idle flush"),
        }
    }

    fn add(
        &self,
        ops: &mut Vec<Op>,
        submission: Submission,
        pending: &mut Vec<oneshot::Sender<Result<(), Arc<StoreError>>>>,
        count: &mut usize,
    ) {
        match submission.ops {
            OpList::One(op) => {
                *count += 1;
                ops.push(op);
            }
            OpList::Many(mut many) => {
                *count += many.len();
                ops.append(&mut many);
            }
        }
        if let Some(done) = submission.done {
            pending.push(done);
        }
    }

    /// One WriteBatch for the gathered ops, in order; `None` when nothing is
    /// left to write. A message stored and then acknowledged within the same
    /// batch (a consumer that keeps up) is not written at all: neither its put
    /// nor its delete reaches RocksDB. Dropping the delete is safe because a
    /// message key is put once only (sequences are never reused while a record
    /// with that key exists), so nothing older under that key can be on disk.
    /// A delete of a record from an earlier batch (or run) is kept.
    fn build(&self, ops: &mut Vec<Op>) -> Option<WriteBatch> {
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
                        }
                    }
                    _ => {}
                }
            }
            delete_ranges(ops, &mut elided, &put_at)
        } else {
            Vec::new()
        };
        let mut batch = WriteBatch::default();
        let mut any = false;
        for (op, elided) in ops.drain(..).zip(elided) {
            if !elided {
                self.apply(&mut batch, op);
                any = true;
            }
        }
        if let Some(cf) = self.db.cf_handle(CF_MESSAGES) {
            for (from, to) in ranges {
                batch.delete_range_cf(cf, from.encode(), to.encode());
                any = true;
            }
        }
        any.then_some(batch)
    }

    fn apply(&self, batch: &mut WriteBatch, op: Op) {
        let cf = |name| self.db.cf_handle(name);
        match op {
            Op::PutMessage { key, record } => {
                if let Some(cf) = cf(CF_MESSAGES) {
                    batch.put_cf(cf, key.encode(), record);
                }
            }
            Op::DeleteMessage { key } => {
                if let Some(cf) = cf(CF_MESSAGES) {
                    batch.delete_cf(cf, key.encode());
                }
            }
            Op::PutScheduled { key, record } => {
                if let Some(cf) = cf(CF_SCHEDULED) {
                    batch.put_cf(cf, key.encode(), record);
                }
            }
            Op::DeleteScheduled { key } => {
                if let Some(cf) = cf(CF_SCHEDULED) {
                    batch.delete_cf(cf, key.encode());
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
        }
    }
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

/// Returns free heap memory to the system (glibc keeps it by default).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_malloc() {
    // SAFETY: malloc_trim takes the allocator's own locks; no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_malloc() {}
