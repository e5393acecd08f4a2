//! Work a queue operation leaves for after its lock is released: waking
//! consumers, routing diverted messages, and the timers it starts (dispatch
//! gates, redelivery delays, paging retries, the flow-control watch).

use super::flow::{Watch, PATIENCE};
use super::{Diversion, Queue};
use crate::core::consumer::DeliverySink;
use crate::core::message::{now_ms, Message};
use crate::store::Hold;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct AfterUnlock {
    pub diverted: Vec<(Arc<Message>, Diversion)>,
    pub retry_page_in: bool,
    /// Dispatch again at this time (`delay_before_dispatch`).
    pub dispatch_at: Option<Instant>,
    /// Put returned messages back at this time (epoch ms, redelivery delay).
    pub redeliver_at: Option<u64>,
    /// Look for expired group heads again at this time (epoch ms).
    pub expire_heads_at: Option<u64>,
    /// Connections that were waiting for a delivery: woken once the lock is
    /// released, so nobody waits for the wake-up syscall. Most dispatches wake one.
    wake_first: Option<DeliverySink>,
    wake_more: Vec<DeliverySink>,
    /// Producers let go because the queue drained (dropped after unlocking).
    pub released: Vec<Hold>,
    /// Sends were held and nothing watches them yet.
    pub watch_held: bool,
}

impl AfterUnlock {
    pub fn wake(&mut self, sink: &DeliverySink) {
        if self.wake_first.is_none() {
            self.wake_first = Some(sink.clone());
        } else {
            self.wake_more.push(sink.clone());
        }
    }
}

impl Queue {
    /// Takes `after` by reference: moved by value it is copied with a call to
    /// memcpy on every publish and every ack (3.4% of a STOMP broker's samples).
    pub(super) fn finish(self: &Arc<Self>, after: &mut AfterUnlock) {
        after.released.clear();
        // Looked up only when something is to be spawned: the handle is a
        // shared counter, touched by every thread that would clone it.
        let runtime = || tokio::runtime::Handle::try_current().ok();
        if after.watch_held {
            match runtime() {
                Some(handle) => {
                    handle.spawn(self.clone().watch_held());
                }
                // No runtime to watch from: hold nothing.
                None => drop(self.state.lock().flow.release_all()),
            }
        }
        if let Some(sink) = &after.wake_first {
            sink.wake();
            for sink in &after.wake_more {
                sink.wake();
            }
        }
        if let Some((at, handle)) = after.dispatch_at.and_then(|at| Some((at, runtime()?))) {
            let me = self.clone();
            handle.spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                me.redispatch();
            });
        }
        if let Some(at) = after.redeliver_at {
            let me = self.clone();
            match runtime() {
                Some(handle) => {
                    let wait = Duration::from_millis(at.saturating_sub(now_ms()));
                    handle.spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.redeliver_due(now_ms());
                    });
                }
                // No runtime to wait on: they may go now.
                None => me.redeliver_due(at),
            }
        }
        if let Some(at) = after.expire_heads_at {
            match runtime() {
                Some(handle) => {
                    let me = self.clone();
                    let wait = Duration::from_millis(at.saturating_sub(now_ms()));
                    handle.spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.expiry_wake(at);
                    });
                }
                // No runtime to wait on: the next dispatch looks again.
                None => self.state.lock().expiry_wake_at = None,
            }
        }
        if !after.diverted.is_empty() {
            if let Some(diverter) = self.diverter.upgrade() {
                for (message, why) in after.diverted.drain(..) {
                    diverter.divert(self, message, why);
                }
            }
        }
        if let Some(handle) = after.retry_page_in.then(runtime).flatten() {
            let me = self.clone();
            handle.spawn(async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                me.state.lock().backlog.retry_scheduled = false;
                me.redispatch();
            });
        }
    }

    /// Lets held sends go when the consumers stop making progress for a while.
    async fn watch_held(self: Arc<Self>) {
        let mut seen = self.state.lock().flow.progress();
        loop {
            tokio::time::sleep(PATIENCE).await;
            let watch = self.state.lock().flow.watch(&mut seen);
            match watch {
                Watch::Again => continue,
                Watch::Stop => return,
                Watch::Release(held) => {
                    drop(held);
                    return;
                }
            }
        }
    }
}
