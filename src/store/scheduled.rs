//! The schedule on disk: the `scheduled` column family (key = due ms ++ queue
//! ++ seq, the record) and its per-queue index `scheduled_by_queue` (key =
//! queue ++ due ms ++ seq, no value), so one queue's entries are read by a
//! seek instead of stepping over every other queue's.
//!
//! The writer puts and deletes an index key in the same WriteBatch as its
//! entry (see `Writer::apply`), so a crash never leaves one without the
//! other. A data dir from before the index is indexed when it is opened for
//! writing; a marker written last (under the empty key, which sorts before
//! every queue) says the index is whole, so an interrupted build starts
//! again at the next open, and until it is whole a listing steps over keys
//! as before.

use super::keys::ScheduleKey;
use super::rocks::{cf, read_once, Store, CF_SCHEDULED};
use super::StoreError;
use bytes::Bytes;
use rocksdb::{ReadOptions, WriteBatch, WriteOptions, DB};
use std::ops::Range;

pub(super) const CF_SCHEDULED_BY_QUEUE: &str = "scheduled_by_queue";

/// Present once every entry of `scheduled` has its index key.
const INDEX_BUILT: &[u8] = b"";
const INDEX_VERSION: &[u8] = &[1];

/// Index keys written per batch while building the index.
const BUILD_BATCH: usize = 100_000;

/// `queue (4) ++ due ms (8) ++ seq (8)`: the entry's key reordered.
pub(super) fn index_key(key: &ScheduleKey) -> [u8; ScheduleKey::LEN] {
    let mut out = [0u8; ScheduleKey::LEN];
    out[..4].copy_from_slice(&key.queue.to_be_bytes());
    out[4..12].copy_from_slice(&key.due_ms.to_be_bytes());
    out[12..].copy_from_slice(&key.seq.to_be_bytes());
    out
}

fn decode_index_key(bytes: &[u8]) -> Option<ScheduleKey> {
    if bytes.len() != ScheduleKey::LEN {
        return None;
    }
    let queue = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    let due_ms = u64::from_be_bytes(bytes.get(4..12)?.try_into().ok()?);
    let seq = u64::from_be_bytes(bytes.get(12..)?.try_into().ok()?);
    Some(ScheduleKey { due_ms, queue, seq })
}

/// Where `queue`'s entries with a key >= `bound` begin in the index: an
/// entry (d, queue, s) is >= (bd, bq, bs) when d > bd, or d == bd and
/// (queue, s) >= (bq, bs). Serves as an exclusive end the same way.
fn index_bound(queue: u32, bound: &ScheduleKey) -> Vec<u8> {
    use std::cmp::Ordering::*;
    let (due_ms, seq) = match queue.cmp(&bound.queue) {
        Greater => (bound.due_ms, 0),
        Equal => (bound.due_ms, bound.seq),
        Less => match bound.due_ms.checked_add(1) {
            Some(due_ms) => (due_ms, 0),
            // Past every key of this queue: one byte longer than its last.
            None => {
                let mut past = index_key(&ScheduleKey {
                    due_ms: u64::MAX,
                    queue,
                    seq: u64::MAX,
                })
                .to_vec();
                past.push(0);
                return past;
            }
        },
    };
    index_key(&ScheduleKey { due_ms, queue, seq }).to_vec()
}

/// Indexes a store written before the index existed (or whose build was
/// interrupted). Runs at open, before the writer starts: nothing else
/// writes meanwhile. Index puts are idempotent, so starting over is safe.
pub(super) fn build_index(db: &DB) -> Result<(), StoreError> {
    let index = cf(db, CF_SCHEDULED_BY_QUEUE)?;
    if db.get_cf(index, INDEX_BUILT)?.is_some() {
        return Ok(());
    }
    let scheduled = cf(db, CF_SCHEDULED)?;
    let started = std::time::Instant::now();
    let mut iter = db.raw_iterator_cf_opt(scheduled, read_once());
    iter.seek_to_first();
    // Without the WAL (millions of keys written twice would take minutes):
    // the index is flushed to its files before the marker is written, so a
    // crash before then loses no more than an unfinished build.
    let mut unlogged = WriteOptions::default();
    unlogged.disable_wal(true);
    // Entries come in due-time order, index keys go in queue order: each
    // batch is sorted first, so the memtable takes its keys one after the
    // other instead of searching for each one's place afresh.
    let mut keys = Vec::with_capacity(BUILD_BATCH);
    let mut indexed = 0u64;
    let write = |keys: &mut Vec<[u8; ScheduleKey::LEN]>| {
        keys.sort_unstable();
        let mut batch = WriteBatch::default();
        for key in keys.drain(..) {
            batch.put_cf(index, key, b"");
        }
        db.write_opt(batch, &unlogged)
    };
    while iter.valid() {
        let Some(raw) = iter.key() else { break };
        let key = ScheduleKey::decode(raw).ok_or_else(|| StoreError::Corrupt(raw.to_vec()))?;
        keys.push(index_key(&key));
        indexed += 1;
        if keys.len() >= BUILD_BATCH {
            write(&mut keys)?;
        }
        iter.next();
    }
    iter.status()?;
    write(&mut keys)?;
    db.flush_cf(index)?;
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    db.put_cf_opt(index, INDEX_BUILT, INDEX_VERSION, &sync)?;
    if indexed > 0 {
        tracing::info!(
            indexed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "indexed the stored schedule by queue"
        );
    }
    Ok(())
}

/// The index, when it is whole (a store opened read-only may predate it).
fn whole_index(db: &DB) -> Option<&rocksdb::ColumnFamily> {
    let index = db.cf_handle(CF_SCHEDULED_BY_QUEUE)?;
    match db.get_cf(index, INDEX_BUILT) {
        Ok(Some(_)) => Some(index),
        _ => None,
    }
}

impl Store {
    /// Up to `limit` scheduled entries with key >= `from`, in due-time order.
    pub fn scan_scheduled(
        &self,
        from: ScheduleKey,
        limit: usize,
    ) -> Result<Vec<(ScheduleKey, Bytes)>, StoreError> {
        let db = self.db()?;
        let cf = cf(&db, CF_SCHEDULED)?;
        let mut out = Vec::new();
        let mut iter = db.raw_iterator_cf(cf);
        iter.seek(from.encode());
        while iter.valid() && out.len() < limit {
            let (Some(raw), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            let key = ScheduleKey::decode(raw).ok_or_else(|| StoreError::Corrupt(raw.to_vec()))?;
            out.push((key, Bytes::copy_from_slice(value)));
            iter.next();
        }
        iter.status()?;
        Ok(out)
    }

    /// Up to `limit` scheduled entries with a key in `keys`, in due-time
    /// order, of one queue or of all. One queue's are found through the
    /// per-queue index: a seek, however many other entries lie between.
    pub fn scan_scheduled_range(
        &self,
        keys: Range<ScheduleKey>,
        queue: Option<u32>,
        limit: usize,
    ) -> Result<Vec<(ScheduleKey, Bytes)>, StoreError> {
        let mut out = Vec::new();
        if limit == 0 || keys.start >= keys.end {
            return Ok(out);
        }
        let db = self.db()?;
        let scheduled = cf(&db, CF_SCHEDULED)?;
        if let (Some(queue), Some(index)) = (queue, whole_index(&db)) {
            // Index and records read at one point in time: an entry deleted
            // between the two reads cannot show as missing.
            let snapshot = db.snapshot();
            let mut read = ReadOptions::default();
            read.set_snapshot(&snapshot);
            let mut found = Vec::new();
            walk_index(&db, index, queue, &keys, read, |key| {
                found.push(key);
                found.len() < limit
            })?;
            let mut read = ReadOptions::default();
            read.set_snapshot(&snapshot);
            let records =
                db.multi_get_cf_opt(found.iter().map(|key| (scheduled, key.encode())), &read);
            for (key, record) in found.into_iter().zip(records) {
                let record =
                    record?.ok_or_else(|| StoreError::Corrupt(index_key(&key).to_vec()))?;
                out.push((key, Bytes::from(record)));
            }
            return Ok(out);
        }
        walk_scheduled(&db, keys, ReadOptions::default(), |key, iter| {
            if queue.is_none_or(|q| q == key.queue) {
                out.push((
                    key,
                    Bytes::copy_from_slice(iter.value().unwrap_or_default()),
                ));
            }
            out.len() < limit
        })?;
        Ok(out)
    }

    /// Visits the scheduled keys in `keys` (of one queue, or all), in due-time
    /// order, until `visit` returns false. Records are not read out (a
    /// timeline counts keys only).
    pub fn for_each_scheduled_key(
        &self,
        keys: Range<ScheduleKey>,
        queue: Option<u32>,
        mut visit: impl FnMut(ScheduleKey) -> bool,
    ) -> Result<(), StoreError> {
        if keys.start >= keys.end {
            return Ok(());
        }
        let db = self.db()?;
        // Keeps millions of keys' blocks out of the cache the broker's index
        // and filter blocks live in.
        if let (Some(queue), Some(index)) = (queue, whole_index(&db)) {
            return walk_index(&db, index, queue, &keys, read_once(), visit);
        }
        walk_scheduled(&db, keys, read_once(), |key, _| {
            if queue.is_none_or(|q| q == key.queue) {
                visit(key)
            } else {
                true
            }
        })
    }
}

/// `queue`'s index keys whose entries lie in `keys`, in due-time order.
fn walk_index(
    db: &DB,
    index: &rocksdb::ColumnFamily,
    queue: u32,
    keys: &Range<ScheduleKey>,
    mut read: ReadOptions,
    mut visit: impl FnMut(ScheduleKey) -> bool,
) -> Result<(), StoreError> {
    read.set_iterate_upper_bound(index_bound(queue, &keys.end));
    let mut iter = db.raw_iterator_cf_opt(index, read);
    iter.seek(index_bound(queue, &keys.start));
    while iter.valid() {
        let Some(raw) = iter.key() else { break };
        let key = decode_index_key(raw).ok_or_else(|| StoreError::Corrupt(raw.to_vec()))?;
        if !visit(key) {
            return Ok(());
        }
        iter.next();
    }
    iter.status()?;
    Ok(())
}

fn walk_scheduled(
    db: &DB,
    keys: Range<ScheduleKey>,
    mut read: ReadOptions,
    mut visit: impl FnMut(ScheduleKey, &rocksdb::DBRawIteratorWithThreadMode<'_, DB>) -> bool,
) -> Result<(), StoreError> {
    let cf = cf(db, CF_SCHEDULED)?;
    read.set_iterate_upper_bound(keys.end.encode().to_vec());
    let mut iter = db.raw_iterator_cf_opt(cf, read);
    iter.seek(keys.start.encode());
    while iter.valid() {
        let Some(raw) = iter.key() else { break };
        let key = ScheduleKey::decode(raw).ok_or_else(|| StoreError::Corrupt(raw.to_vec()))?;
        if !visit(key, &iter) {
            return Ok(());
        }
        iter.next();
    }
    iter.status()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rocks::{StoreOptions, ALL_CFS};
    use crate::store::Op;

    fn key(due_ms: u64, queue: u32) -> ScheduleKey {
        ScheduleKey {
            due_ms,
            queue,
            seq: due_ms,
        }
    }

    /// The entries' keys and the index's, each in due-time order.
    fn both(store: &Store) -> (Vec<ScheduleKey>, Vec<ScheduleKey>) {
        let db = store.db().unwrap();
        let mut entries = Vec::new();
        let all = ScheduleKey {
            due_ms: 0,
            queue: 0,
            seq: 0,
        }..ScheduleKey {
            due_ms: u64::MAX,
            queue: u32::MAX,
            seq: u64::MAX,
        };
        walk_scheduled(&db, all, ReadOptions::default(), |k, _| {
            entries.push(k);
            true
        })
        .unwrap();
        let index = cf(&db, CF_SCHEDULED_BY_QUEUE).unwrap();
        let mut indexed: Vec<ScheduleKey> = db
            .iterator_cf(index, rocksdb::IteratorMode::Start)
            .map(|item| item.unwrap().0)
            .filter(|k| !k.is_empty())
            .map(|k| decode_index_key(&k).unwrap())
            .collect();
        indexed.sort();
        (entries, indexed)
    }

    async fn filled(dir: &std::path::Path) -> Store {
        let store = Store::open(dir, StoreOptions::default()).unwrap();
        let puts = (1..=100u64)
            .map(|due| Op::PutScheduled {
                key: key(due, (due % 3) as u32),
                record: Bytes::from(due.to_string()),
            })
            .collect();
        store.submit_all(puts).wait().await.unwrap();
        store
    }

    #[tokio::test]
    async fn one_queue_is_listed_through_its_index_as_by_stepping_over_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let store = filled(dir.path()).await;
        assert!(whole_index(&store.db().unwrap()).is_some());
        let range = key(10, 0)..key(40, 1);
        for queue in 0..3u32 {
            let want: Vec<ScheduleKey> = (10..=40)
                .map(|due| key(due, (due % 3) as u32))
                .filter(|k| k.queue == queue && range.contains(k))
                .collect();
            let got = store
                .scan_scheduled_range(range.clone(), Some(queue), 1000)
                .unwrap();
            let keys: Vec<ScheduleKey> = got.iter().map(|(k, _)| *k).collect();
            assert_eq!(keys, want, "queue {queue}");
            for (k, record) in &got {
                assert_eq!(record, &k.due_ms.to_string());
            }
            let page = store.scan_scheduled_range(range.clone(), Some(queue), 3);
            assert_eq!(page.unwrap().len(), 3);
            let mut counted = Vec::new();
            store
                .for_each_scheduled_key(range.clone(), Some(queue), |k| {
                    counted.push(k);
                    true
                })
                .unwrap();
            assert_eq!(counted, want, "queue {queue}, keys only");
        }
        assert!(store
            .scan_scheduled_range(range, Some(7), 10)
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn the_index_follows_every_put_and_delete_of_an_entry() {
        let dir = tempfile::tempdir().unwrap();
        let store = filled(dir.path()).await;
        // Cancelled, rescheduled (delete + put in one write), rewritten in place.
        store
            .submit(Op::DeleteScheduled { key: key(5, 2) })
            .wait()
            .await
            .unwrap();
        store
            .submit_all(vec![
                Op::DeleteScheduled { key: key(6, 0) },
                Op::PutScheduled {
                    key: key(600, 0),
                    record: Bytes::from_static(b"moved"),
                },
            ])
            .wait()
            .await
            .unwrap();
        store
            .submit(Op::PutScheduled {
                key: key(7, 1),
                record: Bytes::from_static(b"edited"),
            })
            .wait()
            .await
            .unwrap();
        let (entries, indexed) = both(&store);
        assert_eq!(entries.len(), 99);
        assert_eq!(entries, indexed);
        let zeros = store
            .scan_scheduled_range(key(0, 0)..key(1000, 0), Some(0), 1000)
            .unwrap();
        assert_eq!(zeros.last().unwrap().1, "moved");
        assert!(!zeros.iter().any(|(k, _)| k.due_ms == 6));
    }

    /// A data dir written before the index existed: the four older families
    /// only. Opening it indexes every entry; so does one whose build was
    /// cut short (index keys without the marker).
    #[tokio::test]
    async fn a_store_from_before_the_index_is_indexed_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut options = rocksdb::Options::default();
            options.create_if_missing(true);
            options.create_missing_column_families(true);
            let old = DB::open_cf(&options, dir.path(), &ALL_CFS[..4]).unwrap();
            let scheduled = old.cf_handle(CF_SCHEDULED).unwrap();
            for due in 1..=50u64 {
                let k = key(due, (due % 5) as u32);
                old.put_cf(scheduled, k.encode(), due.to_string()).unwrap();
            }
        }
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let (entries, indexed) = both(&store);
        assert_eq!(entries.len(), 50);
        assert_eq!(entries, indexed);
        let fours = store
            .scan_scheduled_range(key(0, 0)..key(100, 0), Some(4), 100)
            .unwrap();
        let dues: Vec<u64> = fours.iter().map(|(k, _)| k.due_ms).collect();
        assert_eq!(dues, (1..=50).filter(|d| d % 5 == 4).collect::<Vec<_>>());
        drop(store);

        // Cut short: the marker and some index keys gone.
        {
            let options = rocksdb::Options::default();
            let db = DB::open_cf(&options, dir.path(), ALL_CFS).unwrap();
            let index = db.cf_handle(CF_SCHEDULED_BY_QUEUE).unwrap();
            db.delete_cf(index, INDEX_BUILT).unwrap();
            for due in 20..=50u64 {
                db.delete_cf(index, index_key(&key(due, (due % 5) as u32)))
                    .unwrap();
            }
            assert!(whole_index(&db).is_none(), "not trusted without the marker");
        }
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert!(whole_index(&store.db().unwrap()).is_some());
        let (entries, indexed) = both(&store);
        assert_eq!(entries, indexed);
    }

    #[test]
    fn an_index_bound_keeps_exactly_the_entries_past_it() {
        let bounds = [
            ScheduleKey {
                due_ms: 10,
                queue: 2,
                seq: 5,
            },
            ScheduleKey {
                due_ms: u64::MAX,
                queue: 2,
                seq: 5,
            },
            ScheduleKey {
                due_ms: 0,
                queue: 0,
                seq: 0,
            },
        ];
        for bound in bounds {
            for queue in [0u32, 1, 2, 3, u32::MAX] {
                for due_ms in [0, 9, 10, 11, u64::MAX] {
                    for seq in [0, 4, 5, 6, u64::MAX] {
                        let key = ScheduleKey { due_ms, queue, seq };
                        assert_eq!(
                            key >= bound,
                            index_key(&key).as_slice() >= index_bound(queue, &bound).as_slice(),
                            "{key:?} against {bound:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn index_keys_read_back() {
        let key = ScheduleKey {
            due_ms: 1_700_000_000_000,
            queue: 7,
            seq: 42,
        };
        assert_eq!(decode_index_key(&index_key(&key)), Some(key));
        assert_eq!(decode_index_key(INDEX_BUILT), None);
    }
}
