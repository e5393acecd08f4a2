//! Browsers (JMS QueueBrowser, STOMP `browser:true`): they see every available
//! message, in memory or paged to disk, in arrival order, each once. A browser
//! keeps only a cursor (the last sequence it passed); each page is merged from
//! the ready messages and a bounded disk scan, so browsing a deep queue never
//! loads it into memory.

use super::effects::AfterUnlock;
use super::{Queue, State};
use crate::core::consumer::{Delivery, MessageFilter};
use crate::core::message::{now_ms, Message};
use crate::core::persist;
use std::sync::Arc;

/// Where a browser is in its queue.
#[derive(Debug, Default, Clone, Copy)]
pub struct BrowseCursor {
    /// The last sequence it passed.
    after: u64,
}

/// Records read from disk per look.
const DISK_PAGE: usize = 256;
/// Looks per page, so one dispatch pass does bounded work under the lock.
const LOOKS: usize = 8;

pub(super) struct Seen {
    pub seq: u64,
    pub message: Arc<Message>,
    pub delivery_count: u32,
}

impl Queue {
    pub(super) fn feed_browsers(self: &Arc<Self>, st: &mut State, after: &mut AfterUnlock) {
        let newest = st.next_seq - 1;
        let mut next = st.consumers.browser_from(0);
        while let Some(index) = next {
            next = st.consumers.browser_from(index + 1);
            let slot = st.consumers.slot(index);
            let Some(cursor) = slot.browse else { continue };
            if slot.credit == 0 || cursor.after >= newest {
                continue;
            }
            let want = slot.credit as usize;
            let filter = slot.filter.clone();
            let (page, passed) = self.browse_page(st, cursor.after, want, filter.as_deref());
            if page.len() < want && st.backlog.last_seq().is_some_and(|last| last > passed) {
                // Paged messages the writer has not stored yet: look again shortly.
                after.retry_page_in |= !st.backlog.retry_scheduled;
                st.backlog.retry_scheduled = true;
            }
            let slot = st.consumers.slot_mut(index);
            slot.browse = Some(BrowseCursor { after: passed });
            let mut wake = false;
            for seen in page {
                slot.credit -= 1;
                let pushed = slot.sink.push(Delivery {
                    consumer: slot.id,
                    queue: self.clone(),
                    seq: seen.seq,
                    message: seen.message,
                    delivery_count: seen.delivery_count + 1,
                    group_first: false,
                });
                wake |= matches!(pushed, Ok(true));
                slot.activity.delivered += u64::from(pushed.is_ok());
            }
            if wake {
                after.wake(&slot.sink);
            }
        }
    }

    /// Up to `want` available messages after sequence `from`, in order, and
    /// the sequence the browser has passed.
    pub(super) fn browse_page(
        &self,
        st: &State,
        mut from: u64,
        want: usize,
        filter: Option<&dyn MessageFilter>,
    ) -> (Vec<Seen>, u64) {
        let mut page = Vec::new();
        let now = now_ms();
        for _ in 0..LOOKS {
            let mut candidates = Vec::new();
            // Candidates are complete up to `limit`: the disk scan may stop short.
            let mut limit = u64::MAX;
            if st.backlog.last_seq().is_some_and(|last| last > from) {
                match self.store.scan_messages(self.id, from + 1, DISK_PAGE) {
                    Ok(records) => {
                        if records.len() == DISK_PAGE {
                            limit = records.last().map_or(u64::MAX, |(seq, _)| *seq);
                        }
                        // A paged message the writer has not stored yet must
                        // not be passed: stop before the first one missing.
                        let mut read = records
                            .iter()
                            .map(|(seq, _)| *seq)
                            .filter(|seq| st.backlog.contains(*seq));
                        if let Some(missing) = st
                            .backlog
                            .seqs_after(from)
                            .take_while(|seq| *seq <= limit)
                            .find(|seq| read.next() != Some(*seq))
                        {
                            limit = limit.min(missing - 1);
                        }
                        for (seq, record) in records {
                            if seq > limit || !st.backlog.contains(seq) {
                                continue; // in memory, in flight, or settled
                            }
                            match persist::decode(record) {
                                Ok(stored) => candidates.push(Seen {
                                    seq,
                                    message: Arc::new(stored.message),
                                    delivery_count: stored.delivery_count,
                                }),
                                Err(e) => {
                                    tracing::error!(queue = %self.name, seq, error = %e, "skipping unreadable paged message")
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::error!(queue = %self.name, error = %e, "browsing the disk backlog failed");
                        return (page, from);
                    }
                }
            }
            candidates.extend(
                st.ready
                    .entries_after(from)
                    .filter(|e| e.seq <= limit)
                    .map(|e| Seen {
                        seq: e.seq,
                        message: e.message.clone(),
                        delivery_count: e.delivery_count,
                    }),
            );
            candidates.sort_unstable_by_key(|c| c.seq);
            for seen in candidates {
                from = seen.seq;
                let hidden = seen.message.is_expired_at(now)
                    || filter.is_some_and(|f| !f.matches(&seen.message));
                if !hidden {
                    page.push(seen);
                    if page.len() == want {
                        return (page, from);
                    }
                }
            }
            if limit == u64::MAX {
                // Everything after `from` is in flight or settled, unless a
                // paged message is not readable yet (the writer is behind).
                let newest = st.next_seq - 1;
                let unread = st.backlog.last_seq().is_some_and(|last| last > from);
                return (page, if unread { from } else { from.max(newest) });
            }
            from = limit;
        }
        (page, from)
    }
}
