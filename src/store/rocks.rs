//! Opening RocksDB, submitting changes to the writer, and the read paths
//! (recovery at start, paging a deep queue back in, scanning due times).

use super::disk::{DiskLimits, DiskRefusal, DiskState};
use super::holding::Holding;
use super::inbox::Inbox;
use super::keys::MessageKey;
use super::memory::StoreMemory;
use super::scheduled::{build_index, CF_SCHEDULED_BY_QUEUE};
use super::stats::{StoreStats, WriterStats};
use super::writer::{Completion, Failed, FsyncPolicy, Op, OpList, Writer};
use super::StoreError;
use bytes::Bytes;
use parking_lot::RwLock;
use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, ReadOptions, DB};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) const CF_MESSAGES: &str = "messages";
pub(super) const CF_SCHEDULED: &str = "scheduled";
pub(super) const CF_QUEUES: &str = "queues";
/// Claims (leases on deliveries) by id: the core's records, opaque here.
pub(super) const CF_CLAIMS: &str = "claims";
/// Every column family, in the order they are opened.
pub(super) const ALL_CFS: [&str; 5] = [
    CF_MESSAGES,
    CF_SCHEDULED,
    CF_QUEUES,
    CF_CLAIMS,
    CF_SCHEDULED_BY_QUEUE,
];

#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub fsync: FsyncPolicy,
    /// Ops per group-commit batch at most.
    pub max_batch: usize,
    /// Submissions waiting for the writer before producers are slowed down.
    pub queue_depth: usize,
    /// After this long without a write, memtables are flushed and the memory
    /// they held is handed back (see `Writer::release_memory`).
    pub idle_flush_after: std::time::Duration,
    /// How long a new durable message may wait unwritten for its consumer's
    /// acknowledgement (if it comes, the message is never written); zero
    /// writes every message with the next commit. See `holding`.
    pub hold_for_ack: std::time::Duration,
    /// Beyond these, new messages are refused (see `disk`).
    pub disk_limits: DiskLimits,
    /// RocksDB's memtables and block cache.
    pub memory: StoreMemory,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::Always,
            max_batch: 4096,
            queue_depth: 65_536,
            idle_flush_after: std::time::Duration::from_secs(3),
            hold_for_ack: std::time::Duration::from_millis(5),
            disk_limits: DiskLimits::default(),
            memory: StoreMemory::default(),
        }
    }
}

/// A queue found on disk at start.
#[derive(Debug, Clone)]
pub struct RecoveredQueue {
    pub name: String,
    pub record: Bytes,
}

/// Cheap to clone; all clones share the database and the writer thread.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    database: Arc<Database>,
    disk: Arc<DiskState>,
    inbox: Arc<Inbox>,
    thread: Option<std::thread::JoinHandle<()>>,
    writer_stats: Arc<WriterStats>,
}

impl Drop for Inner {
    /// Lets the writer finish what was submitted, so the database is closed
    /// (and its lock released) when the last handle goes.
    fn drop(&mut self) {
        self.inbox.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Store {
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Self, StoreError> {
        let disk = DiskState::watch(dir, options.disk_limits);
        let (database, writable) = Database::open(dir, options.memory)?;
        let database = Arc::new(database);
        disk.set_write_failed(!writable);
        let inbox = Arc::new(Inbox::new(options.queue_depth));
        let writer_inbox = inbox.clone();
        let writer_database = database.clone();
        let writer_disk = disk.clone();
        let writer_stats = Arc::new(WriterStats::default());
        let stats = writer_stats.clone();
        let thread = std::thread::Builder::new()
            .name("weir-store-writer".into())
            .spawn(move || {
                Writer {
                    database: writer_database,
                    disk: writer_disk,
                    failed: Failed::new(!writable),
                    policy: options.fsync,
                    max_batch: options.max_batch,
                    idle_flush_after: options.idle_flush_after,
                    idle_flush: None,
                    holding: Holding::new(options.hold_for_ack),
                    held: Default::default(),
                    scratch: Vec::new(),
                    stats,
                }
                .run(writer_inbox)
            })
            .map_err(|_| StoreError::Closed)?;
        Ok(Self {
            inner: Arc::new(Inner {
                database,
                disk,
                inbox,
                thread: Some(thread),
                writer_stats,
            }),
        })
    }

    /// Why durable writes are refused right now (disk limits, a failed
    /// write), if they are: one atomic load when they are not.
    #[inline]
    pub fn disk_refusal(&self) -> Option<StoreError> {
        if !self.inner.disk.refusing() {
            return None;
        }
        self.inner.disk.refusal().map(StoreError::DiskFull)
    }

    /// Queues one op; the returned completion resolves when it is durable.
    pub fn submit(&self, op: Op) -> Completion {
        self.send(OpList::One(op), true)
    }

    /// Queues ops to be applied atomically together.
    pub fn submit_all(&self, ops: Vec<Op>) -> Completion {
        if ops.is_empty() {
            return Completion::ready();
        }
        self.send(OpList::Many(ops), true)
    }

    /// Queues one op nobody waits for (still applied in order with the others).
    pub fn submit_detached(&self, op: Op) {
        let _ = self.send(OpList::One(op), false);
    }

    /// Queues ops to be applied atomically together, nobody waiting for them.
    pub fn submit_detached_all(&self, ops: Vec<Op>) {
        if !ops.is_empty() {
            let _ = self.send(OpList::Many(ops), false);
        }
    }

    fn send(&self, ops: OpList, wait: bool) -> Completion {
        if self.inner.disk.refusing() && ops.puts_message() {
            if let Some(refusal) = self.inner.disk.refusal() {
                return Completion::failed(StoreError::DiskFull(refusal));
            }
        }
        match (self.inner.inbox.submit(ops), wait) {
            (Ok(ticket), true) => Completion::ticket(ticket, self.inner.inbox.answers().clone()),
            (Err(e), true) => Completion::failed(e),
            (_, false) => Completion::ready(),
        }
    }

    pub(super) fn db(&self) -> Result<Arc<DB>, StoreError> {
        self.inner.database.get()
    }

    pub fn queues(&self) -> Result<Vec<RecoveredQueue>, StoreError> {
        let db = self.inner.database.get()?;
        let cf = cf(&db, CF_QUEUES)?;
        let mut out = Vec::new();
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (key, value) = item?;
            let name =
                String::from_utf8(key.to_vec()).map_err(|_| StoreError::Corrupt(key.to_vec()))?;
            out.push(RecoveredQueue {
                name,
                record: Bytes::from(value.into_vec()),
            });
        }
        Ok(out)
    }

    /// Every stored claim record, by id (recovery at start). None from a
    /// store opened read-only before it had claims.
    pub fn claims(&self) -> Result<Vec<(String, Bytes)>, StoreError> {
        let db = self.inner.database.get()?;
        let Some(cf) = db.cf_handle(CF_CLAIMS) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (key, value) = item?;
            let id =
                String::from_utf8(key.to_vec()).map_err(|_| StoreError::Corrupt(key.to_vec()))?;
            out.push((id, Bytes::from(value.into_vec())));
        }
        Ok(out)
    }

    /// Up to `limit` messages of `queue` with sequence >= `from_seq`, in order.
    pub fn scan_messages(
        &self,
        queue: u32,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        self.scan_message_range(queue, from_seq..u64::MAX, limit, u64::MAX)
    }

    /// Up to `limit` messages of `queue` with a sequence in `seqs`, in order,
    /// stopping after the one that brings their size to `max_bytes` (at least
    /// one is read).
    pub fn scan_message_range(
        &self,
        queue: u32,
        seqs: std::ops::Range<u64>,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        let from_seq = seqs.start;
        let db = self.inner.database.get()?;
        let cf = cf(&db, CF_MESSAGES)?;
        let start = MessageKey {
            queue,
            seq: from_seq,
        }
        .encode();
        let mut read = read_once();
        read.set_iterate_upper_bound(
            MessageKey {
                queue,
                seq: seqs.end,
            }
            .encode()
            .to_vec(),
        );
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for item in db.iterator_cf_opt(cf, read, IteratorMode::From(&start, Direction::Forward)) {
            let (key, value) = item?;
            let key = MessageKey::decode(&key).ok_or_else(|| StoreError::Corrupt(key.to_vec()))?;
            if key.queue != queue {
                break;
            }
            bytes += value.len() as u64;
            out.push((key.seq, Bytes::from(value.into_vec())));
            if out.len() >= limit || bytes >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    /// Deletes messages right away, bypassing the writer; only for recovery,
    /// before anything else writes, so later reads cannot see them. On a
    /// full disk (the store opened read-only) they are left to the writer,
    /// which writes them once space returns.
    pub fn delete_messages_now(&self, keys: &[MessageKey]) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        if self.inner.disk.refusal() == Some(DiskRefusal::WriteFailed) {
            for key in keys {
                self.submit_detached(Op::DeleteMessage { key: *key });
            }
            return Ok(());
        }
        let db = self.inner.database.get()?;
        let cf = cf(&db, CF_MESSAGES)?;
        let mut batch = rocksdb::WriteBatch::default();
        for key in keys {
            batch.delete_cf(cf, key.encode());
        }
        db.write(batch)?;
        Ok(())
    }

    /// Visits every stored message in key order (recovery at start).
    pub fn for_each_message(
        &self,
        mut visit: impl FnMut(MessageKey, Bytes),
    ) -> Result<(), StoreError> {
        let db = self.inner.database.get()?;
        let cf = cf(&db, CF_MESSAGES)?;
        for item in db.iterator_cf_opt(cf, read_once(), IteratorMode::Start) {
            let (key, value) = item?;
            let key = MessageKey::decode(&key).ok_or_else(|| StoreError::Corrupt(key.to_vec()))?;
            visit(key, Bytes::from(value.into_vec()));
        }
        Ok(())
    }

    /// Bytes on disk (SST files + memtables), for benchmarks and metrics.
    /// RocksDB's estimate of the stored messages (for recovery progress); `None`
    /// when it has none.
    pub fn estimate_messages(&self) -> Option<u64> {
        let db = self.inner.database.get().ok()?;
        let cf = cf(&db, CF_MESSAGES).ok()?;
        db.property_int_value_cf(cf, "rocksdb.estimate-num-keys")
            .ok()
            .flatten()
    }

    pub fn disk_usage(&self) -> u64 {
        let Ok(db) = self.inner.database.get() else {
            return 0;
        };
        let sst = |name| db.property_int_value(name).ok().flatten().unwrap_or(0);
        sst("rocksdb.total-sst-files-size") + sst("rocksdb.cur-size-all-mem-tables")
    }

    /// The store's figures for metrics: a few RocksDB property reads and the writer's
    /// histograms. RocksDB's figures are 0 while the database is being reopened.
    pub fn stats(&self) -> StoreStats {
        let (pending_compaction_bytes, running_compactions) = match self.inner.database.get() {
            Ok(db) => {
                let pending = ALL_CFS
                    .into_iter()
                    .filter_map(|name| db.cf_handle(name))
                    .filter_map(|cf| {
                        db.property_int_value_cf(cf, "rocksdb.estimate-pending-compaction-bytes")
                            .ok()
                            .flatten()
                    })
                    .sum();
                let running = db
                    .property_int_value("rocksdb.num-running-compactions")
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                (pending, running)
            }
            Err(_) => (0, 0),
        };
        let writer = &self.inner.writer_stats;
        StoreStats {
            bytes: self.disk_usage(),
            pending_compaction_bytes,
            running_compactions,
            sync_latency_us: writer.sync_us.snapshot(),
            batch_size: writer.batch.snapshot(),
        }
    }
}

pub(super) fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a rocksdb::ColumnFamily, StoreError> {
    db.cf_handle(name)
        .ok_or_else(|| StoreError::Corrupt(name.as_bytes().to_vec()))
}

/// The open database, which the writer may close and open again: after a
/// failed write RocksDB refuses every later one until it is reopened, and a
/// store started on a full disk is open read-only until space returns.
pub(super) struct Database {
    dir: PathBuf,
    memory: StoreMemory,
    slot: RwLock<Option<Arc<DB>>>,
}

/// How long a reopen waits for readers still holding the old database.
const READERS_GONE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

impl Database {
    /// Opens for writing, or read-only when the disk is too full for
    /// RocksDB to start (it writes a new MANIFEST, OPTIONS and WAL at open,
    /// and flushes what the old WAL held): consumers can still drain it.
    /// True when writable.
    fn open(dir: &Path, memory: StoreMemory) -> Result<(Self, bool), StoreError> {
        let (db, writable) = match open_db(dir, memory, false) {
            Ok(db) => {
                index_schedule(&db);
                (db, true)
            }
            Err(e) if is_no_space(&e) => {
                tracing::warn!(error = %e, "disk full: the store is open read-only until space returns");
                (open_db(dir, memory, true)?, false)
            }
            Err(e) => return Err(e.into()),
        };
        let database = Self {
            dir: dir.to_path_buf(),
            memory,
            slot: RwLock::new(Some(Arc::new(db))),
        };
        Ok((database, writable))
    }

    pub fn get(&self) -> Result<Arc<DB>, StoreError> {
        self.slot.read().clone().ok_or(StoreError::Closed)
    }

    /// Closes the database and opens it again for writing (read-only when
    /// that fails). True when writable. Readers wait meanwhile.
    pub fn reopen(&self) -> Result<bool, StoreError> {
        let mut slot = self.slot.write();
        if let Some(old) = slot.take() {
            let deadline = std::time::Instant::now() + READERS_GONE_WITHIN;
            while Arc::strong_count(&old) > 1 {
                if std::time::Instant::now() > deadline {
                    *slot = Some(old);
                    return Err(StoreError::Closed);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            drop(old);
        }
        match open_db(&self.dir, self.memory, false) {
            Ok(db) => {
                index_schedule(&db);
                *slot = Some(Arc::new(db));
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the store cannot reopen for writing yet");
                *slot = Some(Arc::new(open_db(&self.dir, self.memory, true)?));
                Ok(false)
            }
        }
    }
}

/// Builds the schedule's per-queue index if the store lacks it. Listings
/// step over keys without it, so a failure is logged and tried again at the
/// next open.
fn index_schedule(db: &DB) {
    if let Err(e) = build_index(db) {
        tracing::warn!(error = %e, "indexing the stored schedule by queue failed");
    }
}

pub(super) fn is_no_space(e: &rocksdb::Error) -> bool {
    let text = e.to_string();
    text.contains("No space left") || text.contains("quota exceeded")
}

fn open_db(dir: &Path, memory: StoreMemory, read_only: bool) -> Result<DB, rocksdb::Error> {
    let mut db_options = Options::default();
    db_options.create_if_missing(true);
    db_options.create_missing_column_families(true);
    db_options.set_max_background_jobs(2);
    // RocksDB's own LOG file lives on the data disk. Once a write to it
    // failed (disk full), Debian's build (assertions on) aborts the process
    // at the next line logged, and a disk error is exactly when RocksDB
    // logs. Only fatal lines and the header at open reach it; Weir logs
    // store errors itself.
    db_options.set_log_level(rocksdb::LogLevel::Fatal);
    db_options.set_keep_log_file_num(4);
    // Queue data is written once and deleted soon after. Messages consumed
    // at once never reach the memtable (the writer drops put + delete pairs),
    // so 16 MiB still lets most written ones die before a flush, and keeps
    // the broker's resident memory after a persistent burst low.
    let per_family = memory.write_buffer_per_family() as usize;
    db_options.set_write_buffer_size(per_family);
    // Bound what RocksDB holds in memory however much is stored, in
    // proportion to the broker's memory budget (see `StoreMemory`): one
    // budget for every memtable, old WALs flushed away instead of pinning
    // memtables of quiet column families, and index and filter blocks kept
    // in a fixed-size block cache instead of growing with the data.
    db_options.set_db_write_buffer_size(memory.write_buffers as usize);
    db_options.set_max_total_wal_size(256 << 20);
    let cache = rocksdb::Cache::new_lru_cache(memory.block_cache as usize)?;
    // Read-only, RocksDB cannot create a family a store from before it was
    // added lacks: open those it has.
    let existing = match read_only {
        true => DB::list_cf(&db_options, dir).unwrap_or_default(),
        false => Vec::new(),
    };
    let cfs = ALL_CFS
        .into_iter()
        .filter(|name| !read_only || existing.iter().any(|e| e == name))
        .map(|name| {
            let mut table = rocksdb::BlockBasedOptions::default();
            table.set_block_cache(&cache);
            table.set_cache_index_and_filter_blocks(true);
            table.set_pin_l0_filter_and_index_blocks_in_cache(true);
            let mut cf = Options::default();
            cf.set_write_buffer_size(per_family);
            cf.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(name, cf)
        });
    if read_only {
        DB::open_cf_descriptors_read_only(&db_options, dir, cfs, false)
    } else {
        DB::open_cf_descriptors(&db_options, dir, cfs)
    }
}

/// For messages read to be delivered (paging in, recovery): each is read once
/// and deleted soon after, so its blocks would only push the index and filter
/// blocks out of the cache and keep memory resident for nothing.
pub(super) fn read_once() -> ReadOptions {
    let mut read = ReadOptions::default();
    read.fill_cache(false);
    read
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ScheduleKey, Written};

    fn put(queue: u32, seq: u64) -> Op {
        Op::PutMessage {
            key: MessageKey { queue, seq },
            record: Bytes::from(vec![seq as u8]).into(),
            consumable: true,
        }
    }

    fn delete(queue: u32, seq: u64) -> Op {
        Op::DeleteMessage {
            key: MessageKey { queue, seq },
        }
    }

    fn seqs(store: &Store, queue: u32) -> Vec<u64> {
        let got = store.scan_messages(queue, 0, 1000).unwrap();
        got.iter().map(|(s, _)| *s).collect()
    }

    #[tokio::test]
    async fn writes_are_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        for seq in [3u64, 1, 2] {
            store.submit(put(7, seq)).wait().await.unwrap();
        }
        store.submit(put(8, 0)).wait().await.unwrap();
        let got = store.scan_messages(7, 2, 10).unwrap();
        assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![2, 3]);
        store
            .submit(Op::PurgeQueue { queue: 7 })
            .wait()
            .await
            .unwrap();
        assert!(seqs(&store, 7).is_empty());
        assert_eq!(seqs(&store, 8), vec![0]);
    }

    #[tokio::test]
    async fn commits_are_timed_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            // Every put written, none kept back for an acknowledgement.
            hold_for_ack: std::time::Duration::ZERO,
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), options).unwrap();
        assert_eq!(store.stats().batch_size.count, 0);
        for seq in 0..3 {
            store.submit(put(5, seq)).wait().await.unwrap();
        }
        store.submit(delete(5, 0)).wait().await.unwrap();
        let stats = store.stats();
        // Each submission was settled by a written commit (waited for one by one).
        assert_eq!(stats.batch_size.sum, 4, "{stats:?}");
        assert_eq!(stats.batch_size.count, 4, "{stats:?}");
        assert_eq!(stats.sync_latency_us.count, 4, "fsync always: {stats:?}");
        assert_eq!(stats.sync_latency_us.cumulative.last().unwrap().1, 4);
        assert!(stats.bytes > 0);
        assert_eq!(stats.running_compactions, 0);
    }

    #[tokio::test]
    async fn a_barrier_follows_earlier_writes_without_an_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let key = |seq| ScheduleKey {
            due_ms: 10,
            queue: 1,
            seq,
        };
        for seq in 1..=50 {
            store.submit_detached(Op::PutScheduled {
                key: key(seq),
                record: Bytes::from_static(b"r"),
            });
        }
        store.submit(Op::Barrier).wait().await.unwrap();
        assert_eq!(store.scan_scheduled(key(0), 100).unwrap().len(), 50);
        let synced = store.stats().sync_latency_us.count;
        for _ in 0..5 {
            store.submit(Op::Barrier).wait().await.unwrap();
        }
        assert_eq!(
            store.stats().sync_latency_us.count,
            synced,
            "barriers alone write nothing"
        );
    }

    #[tokio::test]
    async fn written_answers_come_in_submission_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let mut waiting: Vec<Written> = (0..200u64)
            .map(|seq| store.submit(put(9, seq)).into_written().ok().unwrap())
            .collect();
        // Once the newest is on disk, every older one has answered too.
        let newest = waiting.pop().unwrap();
        newest.await.unwrap();
        for mut older in waiting {
            assert!(older.answered().unwrap().is_ok());
        }
        // Nothing to wait for, or a flow-control hold attached: not a bare write.
        assert!(Completion::ready().into_written().is_err());
        let (_hold, held) = store.submit(put(9, 500)).held_back();
        assert!(held.into_written().is_err());
    }

    #[tokio::test]
    async fn scheduled_ranges_step_over_other_queues_and_stop_at_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let key = |due_ms, queue| ScheduleKey {
            due_ms,
            queue,
            seq: due_ms,
        };
        let puts = (1..=100u64)
            .map(|due| Op::PutScheduled {
                key: key(due, (due % 3) as u32),
                record: Bytes::from(due.to_string()),
            })
            .collect();
        store.submit_all(puts).wait().await.unwrap();
        let range = key(10, 0)..key(40, 0);
        let all = store
            .scan_scheduled_range(range.clone(), None, 1000)
            .unwrap();
        let dues: Vec<u64> = all.iter().map(|(k, _)| k.due_ms).collect();
        assert_eq!(dues, (10..40).collect::<Vec<_>>());
        assert_eq!(all[0].1, "10");
        let ones = store
            .scan_scheduled_range(range.clone(), Some(1), 4)
            .unwrap();
        let dues: Vec<u64> = ones.iter().map(|(k, _)| k.due_ms).collect();
        assert_eq!(dues, [10, 13, 16, 19]);
        assert_eq!(ones[3].1, "19");
        let mut counted = 0;
        store
            .for_each_scheduled_key(range, None, |k| {
                counted += 1;
                k.due_ms < 20
            })
            .unwrap();
        assert_eq!(counted, 11, "stops when told to");
        let empty = store.scan_scheduled_range(key(40, 0)..key(40, 0), None, 10);
        assert!(empty.unwrap().is_empty());
    }

    fn memtable_bytes(store: &Store) -> u64 {
        let db = store.inner.database.get().unwrap();
        let cf = cf(&db, CF_MESSAGES).unwrap();
        db.property_int_value_cf(cf, "rocksdb.cur-size-all-mem-tables")
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn an_idle_store_flushes_its_memtables_and_keeps_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            idle_flush_after: std::time::Duration::from_millis(100),
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), options.clone()).unwrap();
        for seq in 0..2000 {
            store.submit(put(3, seq)).wait().await.unwrap();
        }
        let written = memtable_bytes(&store);
        let mut flushed = written;
        for _ in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            flushed = memtable_bytes(&store);
            if flushed < written / 4 {
                break;
            }
        }
        assert!(
            flushed < written / 4,
            "memtables {written} B after the writes, still {flushed} B when idle"
        );
        assert_eq!(seqs(&store, 3), (0..1000).collect::<Vec<_>>());
        drop(store);
        let store = Store::open(dir.path(), options).unwrap();
        assert_eq!(store.scan_messages(3, 1000, 5000).unwrap().len(), 1000);
    }

    #[tokio::test]
    async fn rocksdb_gets_the_block_cache_the_memory_budget_allows() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            memory: StoreMemory::for_budget(Some(128 << 20)),
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), options).unwrap();
        let db = store.inner.database.get().unwrap();
        let capacity = db
            .property_int_value("rocksdb.block-cache-capacity")
            .unwrap();
        assert_eq!(capacity, Some(8 << 20));
        // Reopened after a failed write: still the same sizes.
        drop(db);
        assert!(store.inner.database.reopen().unwrap());
        let db = store.inner.database.get().unwrap();
        let capacity = db
            .property_int_value("rocksdb.block-cache-capacity")
            .unwrap();
        assert_eq!(capacity, Some(8 << 20));
    }

    #[tokio::test]
    async fn runs_of_deletes_remove_exactly_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        store
            .submit_all((1..=100).map(|s| put(1, s)).collect())
            .wait()
            .await
            .unwrap();
        // Another queue's neighbouring keys must survive a run in queue 1.
        store.submit(put(2, 30)).wait().await.unwrap();
        let mut ops: Vec<Op> = (10..=60).rev().map(|s| delete(1, s)).collect();
        ops.push(delete(1, 70));
        // Deleted then put again in the same batch: the put wins, whatever the run.
        ops.extend((101..=130).map(|s| delete(1, s)));
        ops.push(put(1, 120));
        store.submit_all(ops).wait().await.unwrap();
        let expected: Vec<u64> = (1..10).chain(61..70).chain(71..=100).chain([120]).collect();
        assert_eq!(seqs(&store, 1), expected);
        assert_eq!(seqs(&store, 2), vec![30]);
        drop(store);
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(seqs(&store, 1), expected);
    }

    #[tokio::test]
    async fn a_put_deleted_in_the_same_batch_is_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        // Stored in an earlier batch: a later delete must still remove it.
        store.submit(put(1, 1)).wait().await.unwrap();
        store
            .submit_all(vec![
                put(1, 2),
                delete(1, 2),
                delete(1, 1),
                // Put again after its delete: the last word wins.
                put(1, 3),
                delete(1, 3),
                put(1, 3),
                put(1, 4),
            ])
            .wait()
            .await
            .unwrap();
        assert_eq!(seqs(&store, 1), vec![3, 4]);
        // A batch that cancels out entirely is not written, and still completes.
        store
            .submit_all(vec![put(1, 5), delete(1, 5)])
            .wait()
            .await
            .unwrap();
        drop(store);
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(seqs(&store, 1), vec![3, 4]);
    }

    fn holding(window_ms: u64) -> StoreOptions {
        StoreOptions {
            hold_for_ack: std::time::Duration::from_millis(window_ms),
            ..StoreOptions::default()
        }
    }

    fn stored_put(queue: u32, seq: u64) -> Op {
        match put(queue, seq) {
            Op::PutMessage { key, record, .. } => Op::PutMessage {
                key,
                record,
                consumable: false,
            },
            other => other,
        }
    }

    #[tokio::test]
    async fn a_held_message_acknowledged_in_time_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), holding(60_000)).unwrap();
        let sent = store.submit(put(1, 1));
        // Long after the commit that would have written it, still unconfirmed:
        // it is kept back, not on disk.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(seqs(&store, 1).is_empty());
        store.submit_detached(delete(1, 1));
        tokio::time::timeout(std::time::Duration::from_secs(5), sent.wait())
            .await
            .expect("confirmed once consumed")
            .unwrap();
        drop(store);
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert!(seqs(&store, 1).is_empty());
    }

    #[tokio::test]
    async fn many_held_messages_do_not_crowd_out_their_acknowledgements() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            max_batch: 100,
            ..holding(500)
        };
        let store = Store::open(dir.path(), options).unwrap();
        let empty = memtable_bytes(&store);
        // Twenty batches' worth kept back at once (four producers with deep
        // windows): a commit must still take a full batch of the deletes that
        // cancel them, not one submission at a time until their time runs out.
        let sent: Vec<Completion> = (0..2000).map(|seq| store.submit(put(1, seq))).collect();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        for seq in 0..2000 {
            store.submit_detached(delete(1, seq));
        }
        for completion in sent {
            completion.wait().await.unwrap();
        }
        assert_eq!(
            memtable_bytes(&store),
            empty,
            "held messages were written instead of cancelled out"
        );
    }

    #[tokio::test]
    async fn a_queue_acknowledged_just_too_late_gets_a_wider_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), holding(40)).unwrap();
        let ms = std::time::Duration::from_millis;
        // Acknowledged 60 ms after it came: too late for 40 ms, so it was written.
        let sent = store.submit(put(1, 1));
        tokio::time::sleep(ms(60)).await;
        sent.wait().await.unwrap();
        assert_eq!(seqs(&store, 1), vec![1]);
        store.submit(delete(1, 1)).wait().await.unwrap();
        // The queue now gets 80 ms: past the configured 40 it is still kept back,
        // and an acknowledgement then cancels it out.
        let sent = store.submit(put(1, 2));
        tokio::time::sleep(ms(50)).await;
        assert!(
            seqs(&store, 1).is_empty(),
            "kept back past the configured window"
        );
        store.submit_detached(delete(1, 2));
        sent.wait().await.unwrap();
        drop(store);
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert!(seqs(&store, 1).is_empty());
    }

    #[tokio::test]
    async fn a_held_message_nobody_acknowledges_is_written_when_its_time_is_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), holding(20)).unwrap();
        let started = std::time::Instant::now();
        store.submit(put(1, 1)).wait().await.unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(20));
        assert_eq!(seqs(&store, 1), vec![1]);
        drop(store);
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(seqs(&store, 1), vec![1]);
    }

    #[tokio::test]
    async fn confirmations_keep_submission_order_past_a_held_message() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), holding(60_000)).unwrap();
        let held = store.submit(put(1, 1));
        // Paged straight to disk: written at once, but not confirmed before
        // the held message that came first.
        let mut paged = Box::pin(store.submit(stored_put(2, 1)).wait());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(seqs(&store, 2), vec![1]);
        assert!(futures_util::poll!(paged.as_mut()).is_pending());
        store.submit_detached(delete(1, 1));
        held.wait().await.unwrap();
        paged.await.unwrap();
    }

    #[tokio::test]
    async fn held_messages_are_written_before_the_store_closes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), holding(60_000)).unwrap();
        let sent = store.submit(put(1, 1));
        drop(store);
        sent.wait().await.unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(seqs(&store, 1), vec![1]);
    }

    #[tokio::test]
    async fn a_purge_is_not_overtaken_by_a_held_message() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), holding(60_000)).unwrap();
        let sent = store.submit(put(1, 1));
        store
            .submit(Op::PurgeQueue { queue: 1 })
            .wait()
            .await
            .unwrap();
        sent.wait().await.unwrap();
        assert!(seqs(&store, 1).is_empty());
    }
}
