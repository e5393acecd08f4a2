//! What consumers record (latency, lateness, order, group placement) and the
//! final summary printed as one JSON line.

use super::client::{Delivery, Stamp};
use super::error::PerfError;
use hdrhistogram::Histogram;
use std::fmt::Write as _;

/// Values above an hour (in µs) are recorded as an hour.
const MAX_US: u64 = 3_600_000_000;

pub fn histogram() -> Result<Histogram<u64>, PerfError> {
    Histogram::new_with_bounds(1, MAX_US, 3).map_err(|_| PerfError::BadArg {
        flag: "histogram",
        why: "bounds refused",
    })
}

/// What one consumer saw. Locked once per message by its consumer and once a
/// second by the progress line, so it is practically never contended.
#[derive(Debug, Clone)]
pub struct ConsumerStats {
    pub received: u64,
    /// Messages not from this run (left over in the queue, or malformed).
    pub foreign: u64,
    pub latency: Histogram<u64>,
    /// Latency since the last progress line.
    pub interval: Histogram<u64>,
    pub lateness: Histogram<u64>,
    /// Delayed messages delivered more than a millisecond before they were due.
    pub early: u64,
    /// A message whose sequence was not above the last one seen from the same
    /// producer and group (reordered or duplicated).
    pub order_violations: u64,
    /// Receive time of the latest message.
    pub last_us: u64,
    producers: u32,
    groups: u32,
    /// Per (producer, group): the lowest sequence acceptable next.
    next_seq: Vec<u64>,
    groups_seen: Vec<bool>,
}

impl ConsumerStats {
    pub fn new(producers: u32, groups: u32) -> Result<ConsumerStats, PerfError> {
        let lanes = producers as usize * groups.max(1) as usize;
        Ok(ConsumerStats {
            received: 0,
            foreign: 0,
            latency: histogram()?,
            interval: histogram()?,
            lateness: histogram()?,
            early: 0,
            order_violations: 0,
            last_us: 0,
            producers,
            groups,
            next_seq: vec![0; lanes],
            groups_seen: vec![false; groups as usize],
        })
    }

    /// Records a delivery received at `now_us`; `delay_us` is the delay every
    /// message asked for, so that its due time is its send stamp plus that.
    pub fn record(&mut self, delivery: Delivery, now_us: u64, delay_us: Option<u64>) {
        let Some(stamp) = delivery.stamp else {
            self.foreign += 1;
            return;
        };
        let Some(lane) = self.lane(&stamp) else {
            self.foreign += 1;
            return;
        };
        self.received += 1;
        self.last_us = now_us;
        let latency = now_us.saturating_sub(stamp.sent_us).max(1);
        self.latency.saturating_record(latency);
        self.interval.saturating_record(latency);
        if let Some(delay) = delay_us {
            let due = stamp.sent_us + delay;
            if now_us + 1_000 < due {
                // Counted as a violation, and kept out of the lateness figures.
                self.early += 1;
            } else {
                self.lateness
                    .saturating_record(now_us.saturating_sub(due).max(1));
            }
        }
        if let Some(next) = self.next_seq.get_mut(lane) {
            if stamp.seq < *next {
                self.order_violations += 1;
            } else {
                *next = stamp.seq + 1;
            }
        }
        if let Some(seen) = self
            .group_of(&stamp)
            .and_then(|g| self.groups_seen.get_mut(g as usize))
        {
            *seen = true;
        }
    }

    fn lane(&self, stamp: &Stamp) -> Option<usize> {
        if stamp.producer >= self.producers {
            return None;
        }
        let group = self.group_of(stamp).unwrap_or(0);
        Some(stamp.producer as usize * self.groups.max(1) as usize + group as usize)
    }

    /// Producers assign groups round robin by sequence number, so the group
    /// follows from the stamp; messages carry no extra header for it (which
    /// would cost every broker a property per message in grouped runs only).
    fn group_of(&self, stamp: &Stamp) -> Option<u32> {
        (self.groups > 0).then(|| (stamp.seq % u64::from(self.groups)) as u32)
    }
}

/// Groups that more than one consumer received.
pub fn split_groups(consumers: &[ConsumerStats]) -> u64 {
    let groups = consumers.first().map_or(0, |c| c.groups_seen.len());
    (0..groups)
        .filter(|&g| {
            consumers
                .iter()
                .filter(|c| c.groups_seen.get(g).copied().unwrap_or(false))
                .count()
                > 1
        })
        .count() as u64
}

/// The figures of one run.
#[derive(Debug, Clone)]
pub struct Summary {
    pub scenario: String,
    pub sent: u64,
    pub expected: u64,
    pub received: u64,
    pub foreign: u64,
    pub seconds: f64,
    pub send_seconds: f64,
    pub latency: Histogram<u64>,
    pub lateness: Option<Histogram<u64>>,
    pub order_violations: u64,
    pub split_groups: u64,
    pub early: u64,
}

impl Summary {
    pub fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.received)
    }

    pub fn violations(&self) -> u64 {
        self.order_violations + self.split_groups + self.early
    }

    pub fn msgs_per_sec(&self) -> f64 {
        let count = if self.expected > 0 {
            self.received
        } else {
            self.sent
        };
        if self.seconds > 0.0 {
            count as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// One line of JSON; every value is a number or a plain string we made.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(512);
        let _ = write!(
            out,
            "{{\"scenario\":\"{}\",\"sent\":{},\"received\":{},\"expected\":{},\"lost\":{},\
             \"foreign\":{},\"seconds\":{:.3},\"send_seconds\":{:.3},\"msgs_per_sec\":{:.0},\
             \"send_msgs_per_sec\":{:.0},",
            self.scenario.replace(['"', '\\'], "'"),
            self.sent,
            self.received,
            self.expected,
            self.lost(),
            self.foreign,
            self.seconds,
            self.send_seconds,
            self.msgs_per_sec(),
            if self.send_seconds > 0.0 {
                self.sent as f64 / self.send_seconds
            } else {
                0.0
            }
        );
        let h = &self.latency;
        let _ = write!(
            out,
            "\"latency_us\":{{\"p50\":{},\"p90\":{},\"p99\":{},\"p999\":{},\"max\":{}}},",
            q(h, 0.5),
            q(h, 0.9),
            q(h, 0.99),
            q(h, 0.999),
            h.max()
        );
        match &self.lateness {
            Some(h) => {
                let _ = write!(
                    out,
                    "\"lateness_us\":{{\"p50\":{},\"p99\":{},\"max\":{}}},",
                    q(h, 0.5),
                    q(h, 0.99),
                    h.max()
                );
            }
            None => out.push_str("\"lateness_us\":null,"),
        }
        let _ = write!(
            out,
            "\"violations\":{{\"order\":{},\"split_groups\":{},\"early\":{}}}}}",
            self.order_violations, self.split_groups, self.early
        );
        out
    }
}

/// A quantile, 0 for an empty histogram.
pub fn q(h: &Histogram<u64>, quantile: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(quantile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(producer: u32, seq: u64, group: Option<u32>) -> Delivery {
        Delivery {
            stamp: Some(Stamp {
                producer,
                seq,
                sent_us: 1_000,
                group,
            }),
        }
    }

    #[test]
    fn order_is_checked_per_producer_and_group() -> Result<(), PerfError> {
        let mut stats = ConsumerStats::new(2, 2)?;
        stats.record(delivery(0, 0, Some(0)), 2_000, None);
        stats.record(delivery(0, 1, Some(1)), 2_000, None);
        stats.record(delivery(1, 0, Some(0)), 2_000, None);
        stats.record(delivery(0, 2, Some(0)), 2_000, None);
        assert_eq!(stats.order_violations, 0);
        stats.record(delivery(0, 1, Some(1)), 2_000, None); // duplicate
        stats.record(delivery(0, 0, Some(0)), 2_000, None); // reordered
        assert_eq!(stats.order_violations, 2);
        stats.record(delivery(5, 0, Some(0)), 2_000, None);
        stats.record(Delivery { stamp: None }, 2_000, None);
        assert_eq!(stats.foreign, 2);
        assert_eq!(stats.received, 6);
        assert_eq!(stats.latency.value_at_quantile(0.5), 1_000);
        Ok(())
    }

    #[test]
    fn a_group_seen_by_two_consumers_is_split() -> Result<(), PerfError> {
        let mut a = ConsumerStats::new(1, 3)?;
        let mut b = ConsumerStats::new(1, 3)?;
        a.record(delivery(0, 0, Some(0)), 2_000, None);
        b.record(delivery(0, 1, Some(1)), 2_000, None);
        assert_eq!(split_groups(&[a.clone(), b.clone()]), 0);
        b.record(delivery(0, 3, Some(0)), 2_000, None);
        assert_eq!(split_groups(&[a, b]), 1);
        Ok(())
    }

    #[test]
    fn lateness_is_from_the_due_time_and_early_is_caught() -> Result<(), PerfError> {
        let mut stats = ConsumerStats::new(1, 0)?;
        stats.record(delivery(0, 0, None), 6_000, Some(2_000)); // due 3_000
        assert!(stats.lateness.equivalent(stats.lateness.max(), 3_000));
        stats.record(delivery(0, 1, None), 1_500, Some(10_000)); // due 11_000
        assert_eq!(stats.early, 1);
        Ok(())
    }

    #[test]
    fn summary_is_one_json_line_with_lost_counted() -> Result<(), PerfError> {
        let summary = Summary {
            scenario: "s".into(),
            sent: 10,
            expected: 10,
            received: 8,
            foreign: 0,
            seconds: 2.0,
            send_seconds: 1.0,
            latency: histogram()?,
            lateness: None,
            order_violations: 0,
            split_groups: 0,
            early: 0,
        };
        let json = summary.to_json();
        assert!(json.contains("\"lost\":2"), "{json}");
        assert!(json.contains("\"msgs_per_sec\":4,"), "{json}");
        assert!(!json.contains('\n'));
        assert_eq!(summary.violations(), 0);
        Ok(())
    }
}
