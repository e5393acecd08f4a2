//! The single writer thread: every change goes through it so writes from many
//! connections share one WriteBatch and one fsync (group commit), and the
//! changes of one queue reach RocksDB in the order the core made them.

use super::answers::{Answers, Outcome, TicketAnswer};
use super::disk::{DiskRefusal, DiskState};
use super::held::{Held, HeldPut};
use super::holding::Holding;
use super::inbox::{Inbox, Submission, Taken, Wait};
use super::keys::{MessageKey, ScheduleKey};
use super::record::Record;
use super::release::{Releases, Ticket};
use super::rocks::{Database, CF_MESSAGES, CF_QUEUES, CF_SCHEDULED};
use super::StoreError;
use bytes::Bytes;
use rocksdb::{WriteBatch, WriteOptions, DB};
use std::collections::HashMap;
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
        record: Record,
        /// The queue keeps it in memory and has consumers, so it may be
        /// acknowledged before it is written (see `holding`). False for a
        /// queue without consumers, and for a message paged straight to disk:
        /// the queue reads those back in order, so they are written in order,
        /// at once.
        consumable: bool,
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

/// Most submissions carry one op; keep that case free of a Vec allocation.
pub(super) enum OpList {
    One(Op),
    Many(Vec<Op>),
}

impl OpList {
    pub fn len(&self) -> usize {
        match self {
            OpList::One(_) => 1,
            OpList::Many(ops) => ops.len(),
        }
    }

    /// Whether it stores a message (what a full disk refuses; deletes,
    /// which free space, and queue records still go through).
    pub fn puts_message(&self) -> bool {
        let puts = |op: &Op| matches!(op, Op::PutMessage { .. } | Op::PutScheduled { .. });
        match self {
            OpList::One(op) => puts(op),
            OpList::Many(ops) => ops.iter().any(puts),
        }
    }
}

/// A change that must still be written after a failed write: everything but
/// new messages (whose senders were told it failed). Acknowledgements above
/// all: they took effect in memory, and must not come back after a restart.
enum Pending {
    Op(Op),
    DeleteRange(MessageKey, MessageKey),
}

/// After a failed write RocksDB refuses every later one (its background
/// error) until it is reopened. Until then the writer writes nothing:
/// new messages are refused, every other change waits here, and once the
/// disk has room again the writer reopens the database and writes them.
pub(super) struct Failed {
    active: bool,
    pending: Vec<Pending>,
    /// The current commit's changes other than new messages, kept in case
    /// its write fails.
    retained: Vec<Pending>,
    next_attempt: Instant,
    backoff: Duration,
}

/// How often a store that failed a write tries to write again, at first.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

impl Failed {
    pub fn new(active: bool) -> Self {
        Self {
            active,
            pending: Vec::new(),
            retained: Vec::new(),
            next_attempt: Instant::now(),
            backoff: RETRY_FIRST,
        }
    }

    fn retain(&mut self, op: &Op) {
        let kept = match op {
            Op::PutMessage { .. } | Op::PutScheduled { .. } => return,
            Op::DeleteMessage { key } => Op::DeleteMessage { key: *key },
            Op::DeleteScheduled { key } => Op::DeleteScheduled { key: *key },
            Op::PutQueue { name, record } => Op::PutQueue {
                name: name.clone(),
                record: record.clone(),
            },
            Op::DeleteQueue { name } => Op::DeleteQueue { name: name.clone() },
            Op::PurgeQueue { queue } => Op::PurgeQueue { queue: *queue },
        };
        self.retained.push(Pending::Op(kept));
    }
}

/// Resolves once the submission is durable per the fsync policy, and, for a
/// send a queue holds back (producer flow control), once the queue lets it go.
pub struct Completion {
    written: Option<Written>,
    held: Option<oneshot::Receiver<()>>,
}

impl Completion {
    fn written(written: Option<Written>) -> Self {
        Completion {
            written,
            held: None,
        }
    }

    /// The answer to the submission with `ticket`.
    pub(super) fn ticket(ticket: Ticket, answers: Arc<Answers>) -> Self {
        Completion::written(Some(Written(Answer::Ticket(TicketAnswer::new(
            ticket, answers,
        )))))
    }

    /// A completion that failed already (the store is closed).
    pub(super) fn failed(e: StoreError) -> Self {
        Completion::written(Some(Written(Answer::Failed(Arc::new(e)))))
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
        Completion::written(Some(Written(Answer::Channel(rx))))
    }

    /// The disk's answer alone, when no flow-control hold is attached (`Err(self)`
    /// otherwise, or when there is nothing to wait for). Answers come in submission order
    /// (see `store::release`), so a caller may keep these in a queue and poll only the
    /// oldest: one wake-up for a whole group commit, no task per write.
    pub fn into_written(self) -> Result<Written, Completion> {
        match self {
            Completion {
                written: Some(written),
                held: None,
            } => Ok(written),
            other => Err(other),
        }
    }

    pub async fn wait(self) -> Result<(), Arc<StoreError>> {
        let written = match self.written {
            None => Ok(()),
            Some(written) => written.await,
        };
        if let Some(held) = self.held {
            // Sent or dropped, a hold ends the same way: the producer goes on.
            let _ = held.await;
        }
        written
    }
}

/// The disk's answer for one submission: see [`Completion::into_written`].
pub struct Written(Answer);

enum Answer {
    /// A submission's place in the writer's line (the common case).
    Ticket(TicketAnswer),
    /// Several completions joined (`Completion::all`).
    Channel(oneshot::Receiver<Outcome>),
    /// Failed before it was submitted.
    Failed(Arc<StoreError>),
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Written")
    }
}

impl Written {
    /// The answer if it has come, without waiting (and without spending the task's
    /// cooperative budget, which would cut a long run of ready answers short).
    pub fn answered(&mut self) -> Option<Outcome> {
        match &mut self.0 {
            Answer::Ticket(t) => t.answered(),
            Answer::Channel(rx) => match rx.try_recv() {
                Ok(result) => Some(result),
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => {
                    Some(Err(Arc::new(StoreError::Closed)))
                }
            },
            Answer::Failed(e) => Some(Err(e.clone())),
        }
    }
}

impl std::future::Future for Written {
    type Output = Outcome;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match &mut self.0 {
            Answer::Ticket(t) => std::pin::Pin::new(t).poll(cx),
            Answer::Channel(rx) => std::pin::Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(Arc::new(StoreError::Closed)))),
            Answer::Failed(e) => std::task::Poll::Ready(Err(e.clone())),
        }
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
    pub database: Arc<Database>,
    pub disk: Arc<DiskState>,
    pub failed: Failed,
    pub policy: FsyncPolicy,
    pub max_batch: usize,
    pub idle_flush_after: Duration,
    /// The last idle flush: one at a time, and joined before the writer ends
    /// (it holds the DB open).
    pub idle_flush: Option<std::thread::JoinHandle<()>>,
    pub holding: Holding,
    /// New messages kept back for their consumers' acknowledgements. They do
    /// not count against `max_batch`: they are written only when due, and must
    /// not crowd out of a commit the acknowledgements that cancel them.
    pub held: Held,
    /// Where records made only now are encoded (see `record`).
    pub scratch: Vec<u8>,
}

/// Tells waiting submitters when the writer stops, however it stops (a panic
/// included): nobody would answer them otherwise.
struct GoneOnDrop(Arc<Answers>);

impl Drop for GoneOnDrop {
    fn drop(&mut self) {
        self.0.writer_gone();
    }
}

/// One group commit, ready to go.
struct Commit {
    batch: Option<WriteBatch>,
    /// The submissions it settles (written, or cancelled out).
    settles: Vec<Ticket>,
}

impl Writer {
    pub fn run(mut self, inbox: Arc<Inbox>) {
        let _gone = GoneOnDrop(inbox.answers().clone());
        let mut releases = Releases::default();
        // Submissions for the next commit, taken from the line.
        let mut queued: Vec<Submission> = Vec::new();
        // Something was written since the last idle flush.
        let mut dirty = false;
        let mut open = true;
        while open {
            if self.failed.active {
                self.try_recover(false);
            }
            let held_until = self.held.next_due(&self.holding);
            let wait = match held_until {
                // Look again soon whether space has returned.
                _ if self.failed.active => Wait::Until(Instant::now() + RETRY_FIRST),
                Some(until) => Wait::Until(until),
                None if dirty => Wait::Until(Instant::now() + self.idle_flush_after),
                None => Wait::Forever,
            };
            match inbox.take(&mut queued, self.max_batch, wait) {
                Taken::Some => {}
                Taken::Nothing if self.failed.active => continue,
                // Quiet, and nothing kept back: give memory back.
                Taken::Nothing if held_until.is_none() => {
                    self.release_memory();
                    dirty = false;
                    continue;
                }
                // A message kept back is due.
                Taken::Nothing => {}
                Taken::Closed => open = false,
            }
            let mut count: usize = queued.iter().map(Submission::op_count).sum();
            // Batched: let more come in until the window closes (or the batch is full).
            if let FsyncPolicy::Batched { window } = self.policy {
                let deadline = Instant::now() + window;
                while open && count < self.max_batch {
                    let before = queued.len();
                    match inbox.take(&mut queued, self.max_batch - count, Wait::Until(deadline)) {
                        Taken::Some => {
                            count += queued[before..]
                                .iter()
                                .map(Submission::op_count)
                                .sum::<usize>()
                        }
                        Taken::Nothing => break,
                        Taken::Closed => open = false,
                    }
                }
            }
            for s in &queued {
                releases.enqueue(s.ticket);
            }
            let db = match self.database.get() {
                Ok(db) if !self.failed.active => db,
                _ => {
                    self.refuse(&mut queued, &mut releases);
                    releases.release(inbox.answers());
                    continue;
                }
            };
            // On the way out nothing is kept back.
            let commit = self.build(&db, &mut queued, Instant::now(), open);
            // Nothing left (every message of the batch already consumed): no
            // write and no fsync, there is nothing whose loss a crash could cause.
            let wrote = commit.batch.is_some();
            let result = match commit.batch {
                None => Ok(()),
                Some(batch) => {
                    dirty = true;
                    let mut options = WriteOptions::default();
                    options.set_sync(self.policy != FsyncPolicy::Never);
                    db.write_opt(batch, &options).map_err(|e| {
                        tracing::error!(error = %e, "store write failed; new messages are refused until the disk has room");
                        Arc::new(write_error(e))
                    })
                }
            };
            drop(db);
            if result.is_err() {
                self.enter_failed(&mut releases);
            } else {
                self.failed.retained.clear();
            }
            for ticket in commit.settles {
                releases.resolve(ticket, result.clone());
            }
            releases.release(inbox.answers());
            if !wrote && !self.held.is_empty() && open {
                // Only messages kept back and their cancelled pairs: without an
                // fsync to wait for, the next commit would otherwise be a wake-up
                // per submission. Let some gather (well within the hold window).
                std::thread::sleep(self.holding.gather_pause());
            }
        }
        if self.failed.active {
            // A last chance for acknowledgements given while the disk was full.
            self.try_recover(true);
        }
        if let Some(flush) = self.idle_flush.take() {
            let _ = flush.join();
        }
    }

    /// A write failed: RocksDB now refuses every write until reopened. Keep
    /// the failed commit's changes other than new messages for later, and
    /// fail the messages kept back for their acknowledgements.
    fn enter_failed(&mut self, releases: &mut Releases) {
        self.failed.active = true;
        self.failed.backoff = RETRY_FIRST;
        self.failed.next_attempt = Instant::now() + RETRY_FIRST;
        self.disk.set_write_failed(true);
        let retained = std::mem::take(&mut self.failed.retained);
        self.failed.pending.extend(retained);
        let refused = Arc::new(StoreError::DiskFull(DiskRefusal::WriteFailed));
        self.held
            .take(&self.holding, Instant::now(), true, |_, put, _| {
                releases.resolve(put.ticket, Err(refused.clone()))
            });
    }

    /// While a write has failed: refuse submissions that store messages;
    /// take every other change in memory (it is written once space returns)
    /// and confirm it, so an acknowledgement still takes effect.
    fn refuse(&mut self, queued: &mut Vec<Submission>, releases: &mut Releases) {
        let refused = Arc::new(StoreError::DiskFull(DiskRefusal::WriteFailed));
        for submission in queued.drain(..) {
            if submission.ops.puts_message() {
                releases.resolve(submission.ticket, Err(refused.clone()));
                continue;
            }
            match submission.ops {
                OpList::One(op) => self.failed.pending.push(Pending::Op(op)),
                OpList::Many(ops) => self.failed.pending.extend(ops.into_iter().map(Pending::Op)),
            }
            releases.resolve(submission.ticket, Ok(()));
        }
    }

    /// Once the disk has room: reopen the database, write what waited, and
    /// take new messages again. `now` skips the back-off (closing).
    fn try_recover(&mut self, now: bool) {
        let started = Instant::now();
        if !now && (started < self.failed.next_attempt || !self.disk.space_returned()) {
            return;
        }
        self.failed.next_attempt = started + self.failed.backoff;
        self.failed.backoff = (self.failed.backoff * 2).min(RETRY_MAX);
        // The idle flush holds the database open.
        if let Some(flush) = self.idle_flush.take() {
            let _ = flush.join();
        }
        match self.database.reopen() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reopen the store");
                return;
            }
        }
        match self.write_pending() {
            Ok(written) => {
                tracing::info!(
                    written,
                    "the store writes again: durable messages are accepted"
                );
                self.failed.active = false;
                self.failed.backoff = RETRY_FIRST;
                self.disk.set_write_failed(false);
            }
            Err(e) => tracing::warn!(error = %e, "store still cannot write"),
        }
    }

    /// Writes the changes kept while writes failed, in order, in one batch.
    fn write_pending(&mut self) -> Result<usize, StoreError> {
        let db = self.database.get()?;
        let mut batch = WriteBatch::default();
        let pending = std::mem::take(&mut self.failed.pending);
        let count = pending.len();
        let mut kept = Vec::with_capacity(count);
        for change in pending {
            match change {
                // `apply` keeps it again, in case this write fails too.
                Pending::Op(op) => self.apply(&db, &mut batch, op),
                Pending::DeleteRange(from, to) => {
                    if let Some(cf) = db.cf_handle(CF_MESSAGES) {
                        batch.delete_range_cf(cf, from.encode(), to.encode());
                    }
                    self.failed.retained.push(Pending::DeleteRange(from, to));
                }
            }
        }
        kept.append(&mut self.failed.retained);
        let mut options = WriteOptions::default();
        options.set_sync(self.policy != FsyncPolicy::Never);
        if let Err(e) = db.write_opt(batch, &options) {
            // Nothing of it is written (a batch is atomic): keep it all.
            self.failed.pending = kept;
            self.disk.set_write_failed(true);
            return Err(e.into());
        }
        Ok(count)
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
        let Ok(db) = self.database.get() else {
            return;
        };
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
    fn build(
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

    fn apply(&mut self, db: &DB, batch: &mut WriteBatch, op: Op) {
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

/// A full disk is named as such to the senders of the failed commit (the
/// same refusal later senders get); any other error as RocksDB put it.
fn write_error(e: rocksdb::Error) -> StoreError {
    if super::rocks::is_no_space(&e) {
        StoreError::DiskFull(DiskRefusal::WriteFailed)
    } else {
        StoreError::Rocks(e)
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
