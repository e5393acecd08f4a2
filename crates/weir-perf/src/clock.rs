//! One clock for every task: monotonic, but expressed as microseconds since
//! the Unix epoch so that a broker's due time (wall clock) and our timestamps
//! can be compared, and so that the stamp a producer writes is read back by a
//! consumer on the same scale.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    origin_unix_us: u64,
}

impl Clock {
    pub fn start() -> Clock {
        let origin_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Clock {
            origin: Instant::now(),
            origin_unix_us,
        }
    }

    /// Microseconds since the Unix epoch, never going backwards.
    pub fn now_us(&self) -> u64 {
        self.origin_unix_us + self.origin.elapsed().as_micros() as u64
    }

    /// The instant at which [`Clock::now_us`] reads `unix_us`.
    pub fn instant_of(&self, unix_us: u64) -> Instant {
        self.origin + Duration::from_micros(unix_us.saturating_sub(self.origin_unix_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_stamps_agree() {
        let clock = Clock::start();
        let now = clock.now_us();
        let later = clock.instant_of(now + 5_000);
        let delta = later.saturating_duration_since(Instant::now());
        assert!(delta <= Duration::from_millis(5));
        assert!(clock.now_us() >= now);
    }
}
