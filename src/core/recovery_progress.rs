//! Progress of reading a large store at start: every few seconds an INFO line with the
//! messages and queues read so far, the rate, and an estimate of what is left, so an operator
//! watching a long recovery knows it is moving and when it will end. The same figures
//! are shared as a [`RecoveryStatus`] for whoever answers before recovery is done (the
//! management listener's `/health/ready`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How often a line is logged.
const EVERY: Duration = Duration::from_secs(2);
/// Messages between looks at the clock.
const CHECK_EVERY: u64 = 4096;

/// How far the broker's recovery has come, readable from any thread while it runs.
/// The reading loop publishes its count every [`CHECK_EVERY`] messages, so a reader
/// sees at most that many fewer than were read, and the exact count once it is done.
#[derive(Debug, Default)]
pub struct RecoveryStatus {
    started: OnceLock<Instant>,
    queues: AtomicU64,
    /// Queues whose stored messages the reading has reached (the store keeps a queue's
    /// messages together, so it passes each queue once).
    queues_read: AtomicU64,
    /// The store's estimate plus one; 0 while it gave none (or before recovery began).
    estimate_plus_one: AtomicU64,
    messages: AtomicU64,
    /// Milliseconds the reading took, once it is done.
    took_ms: AtomicU64,
    done: AtomicBool,
}

/// A [`RecoveryStatus`] at one moment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecoverySnapshot {
    /// Whether the messages have all been read (the broker may still be starting).
    pub done: bool,
    /// The queues the broker knows.
    pub queues: u64,
    /// Of them, those whose stored messages the reading has reached so far.
    pub queues_read: u64,
    pub messages_read: u64,
    /// RocksDB's estimate of the stored messages, when it has one.
    pub estimated_messages: Option<u64>,
    pub per_second: u64,
    /// Seconds left at the rate so far, while an estimate says some are left.
    pub eta_seconds: Option<u64>,
    pub seconds: f64,
}

impl RecoveryStatus {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn begin(&self, queues: usize, estimate: Option<u64>) {
        let _ = self.started.set(Instant::now());
        self.queues.store(queues as u64, Ordering::Relaxed);
        let encoded = estimate.map_or(0, |e| e.saturating_add(1));
        self.estimate_plus_one.store(encoded, Ordering::Relaxed);
    }

    fn publish(&self, messages: u64, queues_read: u64) {
        self.messages.store(messages, Ordering::Relaxed);
        self.queues_read.store(queues_read, Ordering::Relaxed);
    }

    fn finish(&self, messages: u64, queues_read: u64, took: Duration) {
        self.publish(messages, queues_read);
        self.took_ms
            .store(took.as_millis() as u64, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }

    /// The figures now; all zero before recovery has begun.
    pub fn snapshot(&self) -> RecoverySnapshot {
        let done = self.done.load(Ordering::Acquire);
        let messages = self.messages.load(Ordering::Relaxed);
        let seconds = match (done, self.started.get()) {
            (true, _) => self.took_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            (false, Some(started)) => started.elapsed().as_secs_f64(),
            (false, None) => 0.0,
        };
        let estimate = self
            .estimate_plus_one
            .load(Ordering::Relaxed)
            .checked_sub(1);
        let rate = messages as f64 / seconds.max(0.001);
        let left = estimate.map(|e| e.saturating_sub(messages));
        RecoverySnapshot {
            done,
            queues: self.queues.load(Ordering::Relaxed),
            queues_read: self.queues_read.load(Ordering::Relaxed),
            messages_read: messages,
            estimated_messages: estimate,
            per_second: rate as u64,
            eta_seconds: left
                .filter(|&left| !done && left > 0)
                .map(|left| eta(left, rate)),
            seconds,
        }
    }
}

fn eta(left: u64, rate: f64) -> u64 {
    (left as f64 / rate.max(1.0)).ceil() as u64
}

pub(super) struct RecoveryProgress {
    queues: usize,
    /// RocksDB's estimate of the stored messages; `None` when it has none.
    estimate: Option<u64>,
    started: Instant,
    last_log: Instant,
    messages: u64,
    queues_read: u64,
    last_queue: Option<u32>,
    shared: Arc<RecoveryStatus>,
}

impl RecoveryProgress {
    pub fn new(queues: usize, estimate: Option<u64>, shared: Arc<RecoveryStatus>) -> Self {
        let now = Instant::now();
        shared.begin(queues, estimate);
        RecoveryProgress {
            queues,
            estimate,
            started: now,
            last_log: now,
            messages: 0,
            queues_read: 0,
            last_queue: None,
            shared,
        }
    }

    /// A stored message of queue `queue` was read (in the store's order, queue by queue).
    #[inline]
    pub fn message_read(&mut self, queue: u32) {
        self.messages += 1;
        if self.last_queue != Some(queue) {
            self.last_queue = Some(queue);
            self.queues_read += 1;
        }
        if self.messages.is_multiple_of(CHECK_EVERY) {
            self.shared.publish(self.messages, self.queues_read);
            if self.last_log.elapsed() >= EVERY {
                self.last_log = Instant::now();
                self.log();
            }
        }
    }

    /// Every message has been read: the shared status says so, with the exact count.
    pub fn finish(&self) {
        self.shared
            .finish(self.messages, self.queues_read, self.started.elapsed());
    }

    fn log(&self) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = self.messages as f64 / elapsed.max(0.001);
        let left = self.estimate.map(|e| e.saturating_sub(self.messages));
        match left {
            Some(left) if left > 0 => tracing::info!(
                queues_read = self.queues_read,
                queues = self.queues,
                messages = self.messages,
                per_second = rate as u64,
                estimated_left = left,
                eta_seconds = eta(left, rate),
                "recovering"
            ),
            _ => tracing::info!(
                queues_read = self.queues_read,
                queues = self.queues,
                messages = self.messages,
                per_second = rate as u64,
                "recovering"
            ),
        }
    }

    pub fn messages(&self) -> u64 {
        self.messages
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_status_follows_the_reading_and_is_exact_when_done() {
        let status = RecoveryStatus::new();
        let before = status.snapshot();
        assert_eq!((before.messages_read, before.done), (0, false));
        assert_eq!(
            (before.estimated_messages, before.eta_seconds),
            (None, None)
        );
        let mut progress = RecoveryProgress::new(3, Some(3 * CHECK_EVERY), status.clone());
        // Queue 1's messages, then queue 2's: the third queue has none stored.
        for i in 0..CHECK_EVERY + 10 {
            progress.message_read(if i < 100 { 1 } else { 2 });
        }
        let during = status.snapshot();
        assert!(!during.done);
        assert_eq!((during.queues, during.queues_read), (3, 2));
        // Published every CHECK_EVERY messages, so the last 10 are not shown yet.
        assert_eq!(during.messages_read, CHECK_EVERY);
        assert_eq!(during.estimated_messages, Some(3 * CHECK_EVERY));
        assert!(during.eta_seconds.is_some(), "{during:?}");
        progress.finish();
        let done = status.snapshot();
        assert!(done.done);
        assert_eq!(done.messages_read, CHECK_EVERY + 10);
        assert_eq!(done.eta_seconds, None);
    }

    /// The INFO line an operator watches: queues and messages so far, rate, what is left.
    #[test]
    fn the_progress_line_names_queues_and_messages_so_far_and_the_eta() {
        #[derive(Clone, Default)]
        struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let mut progress = RecoveryProgress::new(3, Some(10_000), RecoveryStatus::new());
            for i in 0..500 {
                progress.message_read(if i < 200 { 4 } else { 9 });
            }
            progress.log();
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains(" INFO "), "{text}");
        for field in [
            "queues_read=2",
            "queues=3",
            "messages=500",
            "estimated_left=9500",
            "eta_seconds=",
            "recovering",
        ] {
            assert!(text.contains(field), "{field} in {text}");
        }
    }

    #[test]
    fn without_an_estimate_there_is_no_eta() {
        let status = RecoveryStatus::new();
        let mut progress = RecoveryProgress::new(1, None, status.clone());
        for _ in 0..CHECK_EVERY {
            progress.message_read(7);
        }
        let s = status.snapshot();
        assert_eq!((s.estimated_messages, s.eta_seconds), (None, None));
        assert_eq!(s.messages_read, CHECK_EVERY);
    }
}
