//! Rates (per second) computed from running totals when management reads them.
//!
//! Whatever counts events (a queue, a consumer's slot, a connection) keeps only
//! totals, so counting costs one add per event and nothing else; the reader keeps
//! the previous reading beside them and divides the difference by the time since.

use std::time::{Duration, Instant};

/// Readings closer together than this repeat the last rates: a dashboard that
/// polls often would otherwise see the noise of a few messages.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);

/// The previous reading of `N` totals and the rates it gave.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateWindow<const N: usize> {
    last: Option<Reading<N>>,
}

#[derive(Debug, Clone, Copy)]
struct Reading<const N: usize> {
    at: Instant,
    totals: [u64; N],
    rates: [f64; N],
}

impl<const N: usize> RateWindow<N> {
    /// The rates of `totals` since the previous reading at least [`RATE_WINDOW`]
    /// before `now`: zero at the first reading, the last rates again within the
    /// window. A total that went down (it cannot, but a reset would) counts as none.
    pub fn rates_at(&mut self, now: Instant, totals: [u64; N]) -> [f64; N] {
        let rates = match self.last {
            Some(r) if now.saturating_duration_since(r.at) < RATE_WINDOW => return r.rates,
            Some(r) => {
                let seconds = now.saturating_duration_since(r.at).as_secs_f64();
                let mut rates = [0.0; N];
                for (i, rate) in rates.iter_mut().enumerate() {
                    *rate = totals[i].saturating_sub(r.totals[i]) as f64 / seconds;
                }
                rates
            }
            None => [0.0; N],
        };
        self.last = Some(Reading {
            at: now,
            totals,
            rates,
        });
        rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_averaged_over_at_least_a_window() {
        let mut window = RateWindow::<2>::default();
        let start = Instant::now();
        assert_eq!(window.rates_at(start, [5, 0]), [0.0, 0.0]);
        // Within the window: the last rates again, whatever the totals.
        assert_eq!(
            window.rates_at(start + RATE_WINDOW / 2, [100, 100]),
            [0.0, 0.0]
        );
        assert_eq!(
            window.rates_at(start + 2 * RATE_WINDOW, [35, 10]),
            [15.0, 5.0]
        );
        assert_eq!(
            window.rates_at(start + 2 * RATE_WINDOW + RATE_WINDOW / 2, [1000, 1000]),
            [15.0, 5.0]
        );
        // Idle since: nothing per second.
        assert_eq!(
            window.rates_at(start + 4 * RATE_WINDOW, [35, 10]),
            [0.0, 0.0]
        );
    }

    #[test]
    fn a_total_that_went_down_gives_no_negative_rate() {
        let mut window = RateWindow::<1>::default();
        let start = Instant::now();
        window.rates_at(start, [10]);
        assert_eq!(window.rates_at(start + RATE_WINDOW, [4]), [0.0]);
    }

    #[test]
    fn a_clock_that_did_not_move_repeats_the_last_rates() {
        let mut window = RateWindow::<1>::default();
        let start = Instant::now();
        window.rates_at(start + RATE_WINDOW, [10]);
        // An earlier instant (readers race for the lock) is within the window.
        assert_eq!(window.rates_at(start, [20]), [0.0]);
    }
}
