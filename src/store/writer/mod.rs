//! The single writer thread: every change goes through it so writes from many
//! connections share one WriteBatch and one fsync (group commit), and the
//! changes of one queue reach RocksDB in the order the core made them.

mod batch;
mod completion;
mod failed;
mod op;

pub use completion::{Completion, Hold, Written};
pub(super) use failed::Failed;
use failed::{Pending, RETRY_FIRST, RETRY_MAX};
pub(super) use op::OpList;
pub use op::{FsyncPolicy, Op};

use super::answers::Answers;
use super::disk::{DiskRefusal, DiskState};
use super::held::Held;
use super::holding::Holding;
use super::inbox::{Inbox, Submission, Taken, Wait};
use super::release::{Releases, Ticket};
use super::rocks::{Database, ALL_CFS, CF_MESSAGES};
use super::stats::WriterStats;
use super::StoreError;
use rocksdb::{WriteBatch, WriteOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Commit latency and size, for metrics.
    pub stats: Arc<WriterStats>,
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
                    let sync = self.policy != FsyncPolicy::Never;
                    let mut options = WriteOptions::default();
                    options.set_sync(sync);
                    // One clock read on each side of the commit, none per message.
                    let started = sync.then(Instant::now);
                    let written = db.write_opt(batch, &options);
                    if written.is_ok() {
                        if let Some(started) = started {
                            let us =
                                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                            self.stats.sync_us.observe(us);
                        }
                        self.stats.batch.observe(commit.settles.len() as u64);
                    }
                    written.map_err(|e| {
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
                for name in ALL_CFS {
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
