//! The channel from queues to one protocol connection.
//!
//! A queue hands out messages while it holds its lock, and the order it hands
//! them out in is the order a consumer must see (group order). Waking the
//! connection's task is the expensive part — it may unpark a worker thread, a
//! syscall — and doing it under the queue lock makes every publisher and ack
//! wait for it. So the channel splits the two: [`DeliverySink::push`] only
//! appends (under the queue lock, keeping the order), and says whether the
//! receiver must be woken — only when it is waiting, as a busy connection
//! finds the message anyway; the queue calls [`DeliverySink::wake`] after it
//! has unlocked. A receiver takes everything queued at once.
//!
//! A connection that reads a batch of sends holds a [`WakeBatch`] meanwhile:
//! the wake-ups wait until the whole batch is routed. Woken per message, a
//! consumer on another worker thread ran at once and wrote a frame or two per
//! syscall (14 times the writes, a futex each time); woken per batch, it
//! takes what the batch gave it in one go, as it does on a single thread.

use super::consumer::Delivery;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// A new channel: the sink goes to queues (cloned per consumer), the receiver
/// stays with the connection.
pub fn channel<T>() -> (DeliverySink<T>, Deliveries<T>) {
    let shared = Arc::new(Shared {
        queued: Mutex::new(Queued {
            items: VecDeque::new(),
            waiting: false,
        }),
        notify: Notify::new(),
        closed: AtomicBool::new(false),
    });
    (
        DeliverySink {
            shared: shared.clone(),
        },
        Deliveries {
            shared,
            taken: VecDeque::new(),
        },
    )
}

#[derive(Debug)]
struct Shared<T> {
    queued: Mutex<Queued<T>>,
    notify: Notify,
    /// The receiver is gone: pushes fail, so the queue keeps the message.
    closed: AtomicBool,
}

#[derive(Debug)]
struct Queued<T> {
    items: VecDeque<T>,
    /// The receiver found nothing and is about to sleep: the next push wakes it.
    waiting: bool,
}

impl<T> Shared<T> {
    fn queued(&self) -> MutexGuard<'_, Queued<T>> {
        // A panic while pushing or swapping leaves the deque whole.
        self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where deliveries for one connection go.
#[derive(Debug)]
pub struct DeliverySink<T = Delivery> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for DeliverySink<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// The receiver went away; the delivery comes back.
#[derive(Debug)]
pub struct Closed<T = Delivery>(pub T);

impl<T> DeliverySink<T> {
    /// Appends without waking the receiver. `Ok(true)` when the receiver may be
    /// waiting for this one: call [`wake`](Self::wake) (after unlocking).
    pub fn push(&self, delivery: T) -> Result<bool, Closed<T>> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Closed(delivery));
        }
        let mut queued = self.shared.queued();
        queued.items.push_back(delivery);
        Ok(std::mem::take(&mut queued.waiting))
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}

impl<T: 'static> DeliverySink<T> {
    /// Wakes the receiver now, or at the end of this thread's [`WakeBatch`].
    pub fn wake(&self) {
        let deferred = DEFERRED_WAKES.with(|d| match d.borrow_mut().as_mut() {
            Some(list) => {
                list.push(Arc::clone(&self.shared) as Arc<dyn Wake>);
                true
            }
            None => false,
        });
        if !deferred {
            self.shared.notify.notify_one();
        }
    }
}

/// What a deferred wake-up needs of a channel, whatever it carries.
trait Wake {
    fn wake(&self);
}

impl<T> Wake for Shared<T> {
    fn wake(&self) {
        self.notify.notify_one();
    }
}

thread_local! {
    /// The receivers to wake when the current [`WakeBatch`] ends; `None` when
    /// there is none.
    static DEFERRED_WAKES: RefCell<Option<Vec<Arc<dyn Wake>>>> = const { RefCell::new(None) };
}

/// Defers this thread's wake-ups of receivers until it is dropped (see the
/// module comment). Not `Send`: a guard held across an `.await` would leave
/// the deferral on for other tasks of the thread, and a spawned task that
/// tries fails to compile. A nested guard changes nothing.
#[must_use = "wake-ups are deferred only while the guard lives"]
pub struct WakeBatch {
    /// Whether this guard started the deferral (and so ends it).
    outermost: bool,
    _not_send: PhantomData<*const ()>,
}

impl WakeBatch {
    pub fn begin() -> Self {
        let outermost = DEFERRED_WAKES.with(|d| {
            let mut d = d.borrow_mut();
            let outermost = d.is_none();
            if outermost {
                *d = Some(Vec::new());
            }
            outermost
        });
        WakeBatch {
            outermost,
            _not_send: PhantomData,
        }
    }
}

impl Drop for WakeBatch {
    fn drop(&mut self) {
        if !self.outermost {
            return;
        }
        // Taken out first: a woken task never runs here, but a wake that
        // pushed again would find the deferral over.
        let deferred = DEFERRED_WAKES.with(|d| d.borrow_mut().take());
        for receiver in deferred.into_iter().flatten() {
            receiver.wake();
        }
    }
}

/// The connection's end: deliveries in the order queues pushed them.
#[derive(Debug)]
pub struct Deliveries<T = Delivery> {
    shared: Arc<Shared<T>>,
    /// Taken from `shared` in one swap, handed out one by one without locking.
    taken: VecDeque<T>,
}

/// Nothing queued right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Empty;

impl<T> Deliveries<T> {
    /// The next delivery, waiting for one. Cancel safe: nothing is taken
    /// unless it is returned.
    pub async fn recv(&mut self) -> Option<T> {
        loop {
            if let Ok(d) = self.try_recv() {
                return Some(d);
            }
            {
                // Checked and flagged under one lock: a push either comes
                // before (and is found) or sees the flag (and wakes us).
                let mut queued = self.shared.queued();
                if !queued.items.is_empty() {
                    continue;
                }
                queued.waiting = true;
            }
            self.shared.notify.notified().await;
        }
    }

    pub fn try_recv(&mut self) -> Result<T, Empty> {
        if self.taken.is_empty() {
            // Swap, not drain: both deques keep their capacity.
            std::mem::swap(&mut self.taken, &mut self.shared.queued().items);
        }
        self.taken.pop_front().ok_or(Empty)
    }
}

impl<T> Drop for Deliveries<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// What a queue does: push under its lock, wake after.
    fn send(sink: &DeliverySink<u32>, value: u32) {
        match sink.push(value) {
            Ok(true) => sink.wake(),
            Ok(false) => {}
            Err(_) => panic!("receiver gone"),
        }
    }

    #[test]
    fn order_is_push_order_and_a_busy_receiver_is_not_woken() {
        let (sink, mut rx) = channel::<u32>();
        assert!(matches!(sink.push(1), Ok(false)));
        assert!(matches!(sink.push(2), Ok(false)));
        assert_eq!(rx.try_recv(), Ok(1));
        assert!(matches!(sink.push(3), Ok(false)));
        assert_eq!(rx.try_recv(), Ok(2));
        assert_eq!(rx.try_recv(), Ok(3));
        assert_eq!(rx.try_recv(), Err(Empty));
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_once() {
        let (sink, mut rx) = channel::<u32>();
        let waiter = tokio::spawn(async move {
            let first = rx.recv().await;
            (first, rx)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(matches!(sink.push(7), Ok(true)), "the receiver waits");
        assert!(matches!(sink.push(8), Ok(false)), "already being woken");
        sink.wake();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        let Ok(Ok((first, mut rx))) = got else {
            panic!("{got:?}")
        };
        assert_eq!(first, Some(7));
        assert_eq!(rx.try_recv(), Ok(8));
    }

    #[tokio::test]
    async fn a_wake_before_the_receiver_waits_is_not_lost() {
        let (sink, mut rx) = channel::<u32>();
        send(&sink, 1);
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got, Ok(Some(1)));
    }

    #[tokio::test]
    async fn a_cancelled_recv_takes_nothing() {
        let (sink, mut rx) = channel::<u32>();
        let timed_out = tokio::time::timeout(Duration::from_millis(10), rx.recv()).await;
        assert!(timed_out.is_err());
        send(&sink, 5);
        assert_eq!(rx.try_recv(), Ok(5));
    }

    #[test]
    fn a_wake_in_a_batch_waits_for_its_end() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (sink, mut rx) = channel::<u32>();
        let waiter = rt.spawn(async move { rx.recv().await });
        std::thread::sleep(Duration::from_millis(100));
        {
            let _batch = WakeBatch::begin();
            let nested = WakeBatch::begin();
            assert!(matches!(sink.push(1), Ok(true)), "the receiver waits");
            sink.wake();
            drop(nested);
            std::thread::sleep(Duration::from_millis(100));
            assert!(!waiter.is_finished(), "woken before the batch ended");
        }
        let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), waiter).await });
        assert!(matches!(got, Ok(Ok(Some(1)))), "{got:?}");
    }

    #[test]
    fn pushes_after_the_receiver_is_gone_come_back() {
        let (sink, rx) = channel::<u32>();
        drop(rx);
        assert!(sink.is_closed());
        assert!(matches!(sink.push(9), Err(Closed(9))));
    }
}
