//! Progress of reading a large store at start: every few seconds an INFO line with the
//! messages read so far, the rate, and an estimate of what is left, so an operator
//! watching a long recovery knows it is moving and when it will end.

use std::time::{Duration, Instant};

/// How often a line is logged.
const EVERY: Duration = Duration::from_secs(2);
/// Messages between looks at the clock.
const CHECK_EVERY: u64 = 4096;

pub(super) struct RecoveryProgress {
    queues: usize,
    /// RocksDB's estimate of the stored messages; `None` when it has none.
    estimate: Option<u64>,
    started: Instant,
    last_log: Instant,
    messages: u64,
}

impl RecoveryProgress {
    pub fn new(queues: usize, estimate: Option<u64>) -> Self {
        let now = Instant::now();
        RecoveryProgress {
            queues,
            estimate,
            started: now,
            last_log: now,
            messages: 0,
        }
    }

    #[inline]
    pub fn message_read(&mut self) {
        self.messages += 1;
        if self.messages.is_multiple_of(CHECK_EVERY) && self.last_log.elapsed() >= EVERY {
            self.last_log = Instant::now();
            self.log();
        }
    }

    fn log(&self) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = self.messages as f64 / elapsed.max(0.001);
        let left = self.estimate.map(|e| e.saturating_sub(self.messages));
        match left {
            Some(left) if left > 0 => tracing::info!(
                queues = self.queues,
                messages = self.messages,
                per_second = rate as u64,
                estimated_left = left,
                eta_seconds = (left as f64 / rate.max(1.0)).ceil() as u64,
                "recovering"
            ),
            _ => tracing::info!(
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
