//! `consumers_before_dispatch` / `delay_before_dispatch`, with Artemis's
//! meaning: dispatch starts when enough consumers are attached or the delay,
//! timed from the first consumer's arrival, has passed; then it stays on until
//! the queue has no consumers at all. Management may pause dispatch outright, whatever
//! the consumers, until it resumes it.

use crate::core::settings::QueueSettings;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct DispatchGate {
    open: bool,
    /// When the first consumer of this round arrived.
    first_at: Option<Instant>,
    /// Paused by management: nothing is dispatched, however many consumers wait.
    paused: bool,
}

/// Where the gate stands, for operators: whether dispatch waits for it. A
/// management pause is reported apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GateState {
    /// Dispatch runs: the queue has no gate, or it opened (by the count or
    /// the delay) and stays open until every consumer has left.
    #[default]
    Open,
    /// Fewer consumers than `consumers_before_dispatch`, and no delay running:
    /// no consumer yet, or `delay_before_dispatch = -1`.
    WaitingForConsumers,
    /// Fewer consumers than the count; the delay from the first consumer's
    /// arrival opens the gate anyway in `remaining_ms`.
    WaitingForDelay { remaining_ms: u64 },
}

impl GateState {
    /// The name the management API and the docs use.
    pub fn name(self) -> &'static str {
        match self {
            GateState::Open => "open",
            GateState::WaitingForConsumers => "waiting_for_consumers",
            GateState::WaitingForDelay { .. } => "waiting_for_delay",
        }
    }
}

/// How long to wait for enough consumers: `None` without a time limit.
fn dispatch_delay(settings: &QueueSettings) -> Option<Duration> {
    settings.delay_before_dispatch
}

impl DispatchGate {
    /// A consumer arrived, making `consumers`; returns when to look again, if
    /// the wait has a limit. Reaching the count opens the gate now, whether or
    /// not anything waits to be dispatched.
    pub fn consumer_added(
        &mut self,
        settings: &QueueSettings,
        consumers: usize,
        now: Instant,
    ) -> Option<Instant> {
        if settings.consumers_before_dispatch == 0 || self.open {
            return None;
        }
        if consumers >= settings.consumers_before_dispatch as usize {
            self.open = true;
            return None;
        }
        if self.first_at.is_some() {
            return None;
        }
        self.first_at = Some(now);
        dispatch_delay(settings)
            .filter(|d| !d.is_zero())
            .map(|d| now + d)
    }

    /// The queue has no consumers left: the next ones wait again.
    /// The queue's `consumers_before_dispatch` or `delay_before_dispatch` changed
    /// while `consumers` are attached. A queue that was dispatching goes on (the
    /// gate closes again only when everyone leaves, as for any open gate); one
    /// that has as many consumers as the new rule asks opens now, whether or not
    /// anything waits (as when a consumer arrives); one that is still short
    /// waits under the new rule, its delay counted from now if no consumer had
    /// started it. Returns when to look again.
    pub fn reconfigured(
        &mut self,
        old: &QueueSettings,
        new: &QueueSettings,
        consumers: usize,
        now: Instant,
    ) -> Option<Instant> {
        if consumers == 0 {
            return None;
        }
        if old.consumers_before_dispatch == 0 || consumers >= new.consumers_before_dispatch as usize
        {
            self.open = true;
        }
        if self.open || new.consumers_before_dispatch == 0 {
            return None;
        }
        let first = *self.first_at.get_or_insert(now);
        dispatch_delay(new).map(|d| first + d)
    }

    pub fn all_consumers_left(&mut self) {
        self.open = false;
        self.first_at = None;
    }

    pub fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Where the gate stands at `now` with `consumers` attached, as
    /// [`DispatchGate::allows`] would find it (a count reached or a delay run
    /// out opens it at the queue's next look), without opening it.
    pub fn state(&self, settings: &QueueSettings, consumers: usize, now: Instant) -> GateState {
        let count = settings.consumers_before_dispatch as usize;
        if self.open || count == 0 || consumers >= count {
            return GateState::Open;
        }
        match (dispatch_delay(settings), self.first_at) {
            (Some(delay), Some(first)) => match (first + delay).checked_duration_since(now) {
                Some(left) if !left.is_zero() => GateState::WaitingForDelay {
                    remaining_ms: (left.as_millis() as u64).max(1),
                },
                _ => GateState::Open,
            },
            _ => GateState::WaitingForConsumers,
        }
    }

    /// Whether dispatch may run with `consumers` attached. A pause does not
    /// stop the gate from opening (by the count or the delay) meanwhile.
    pub fn allows(&mut self, settings: &QueueSettings, consumers: usize) -> bool {
        if !self.open && settings.consumers_before_dispatch != 0 {
            self.open = consumers >= settings.consumers_before_dispatch as usize
                || match (dispatch_delay(settings), self.first_at) {
                    (Some(delay), Some(first)) => {
                        delay.is_zero() || Instant::now() >= first + delay
                    }
                    _ => false,
                };
        }
        !self.paused && (self.open || settings.consumers_before_dispatch == 0)
    }

    /// [`DispatchGate::allows`] without opening it (a look from the publish path).
    pub fn is_open(&self, settings: &QueueSettings) -> bool {
        !self.paused && (self.open || settings.consumers_before_dispatch == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(count: u32, delay: Option<Duration>) -> QueueSettings {
        QueueSettings {
            consumers_before_dispatch: count,
            delay_before_dispatch: delay,
            ..QueueSettings::default()
        }
    }

    #[test]
    fn opens_at_the_count_and_stays_open_until_everyone_leaves() {
        let s = settings(2, None);
        let mut gate = DispatchGate::default();
        assert_eq!(gate.consumer_added(&s, 1, Instant::now()), None);
        assert!(!gate.allows(&s, 1));
        // The second one opens it, with nothing to dispatch yet.
        gate.consumer_added(&s, 2, Instant::now());
        assert!(gate.is_open(&s));
        // One of the two leaves: still open.
        assert!(gate.allows(&s, 1));
        gate.all_consumers_left();
        assert!(!gate.allows(&s, 1));
    }

    #[test]
    fn the_delay_runs_from_the_first_consumer() {
        let s = settings(3, Some(Duration::from_millis(30)));
        let mut gate = DispatchGate::default();
        let at = gate.consumer_added(&s, 1, Instant::now());
        assert!(at.is_some());
        assert_eq!(gate.consumer_added(&s, 2, Instant::now()), None);
        assert!(!gate.allows(&s, 2));
        std::thread::sleep(Duration::from_millis(40));
        assert!(gate.allows(&s, 1));
    }

    #[test]
    fn a_pause_holds_dispatch_back_until_resumed() {
        let s = settings(0, None);
        let mut gate = DispatchGate::default();
        gate.pause(true);
        assert!(!gate.allows(&s, 3));
        assert!(!gate.is_open(&s));
        gate.pause(false);
        assert!(gate.allows(&s, 3));
    }

    #[test]
    fn a_delay_runs_out_while_paused_and_the_gate_is_open_on_resume() {
        let s = settings(3, Some(Duration::from_millis(10)));
        let mut gate = DispatchGate::default();
        gate.consumer_added(&s, 1, Instant::now());
        gate.pause(true);
        std::thread::sleep(Duration::from_millis(20));
        // The timer looks while paused: nothing goes, but the gate opens.
        assert!(!gate.allows(&s, 1));
        gate.pause(false);
        // A stricter rule now does not close it again.
        let stricter = settings(3, None);
        assert_eq!(gate.reconfigured(&s, &stricter, 1, Instant::now()), None);
        assert!(gate.is_open(&stricter));
    }

    #[test]
    fn a_count_lowered_to_the_consumers_attached_opens_the_gate_at_once() {
        let (old, new) = (settings(3, None), settings(2, None));
        let mut gate = DispatchGate::default();
        gate.consumer_added(&old, 1, Instant::now());
        gate.consumer_added(&old, 2, Instant::now());
        assert!(!gate.is_open(&old));
        // Open with nothing to dispatch yet, so one leaving does not close it.
        assert_eq!(gate.reconfigured(&old, &new, 2, Instant::now()), None);
        assert!(gate.allows(&new, 1));
    }

    #[test]
    fn the_state_names_what_dispatch_waits_for() {
        let now = Instant::now();
        let mut gate = DispatchGate::default();
        let s = settings(2, Some(Duration::from_secs(10)));
        // No consumer yet: no delay runs.
        assert_eq!(gate.state(&s, 0, now), GateState::WaitingForConsumers);
        gate.consumer_added(&s, 1, now);
        assert_eq!(
            gate.state(&s, 1, now + Duration::from_secs(4)),
            GateState::WaitingForDelay {
                remaining_ms: 6_000
            }
        );
        // The delay ran out: open at the next look, and the look opens it.
        assert_eq!(
            gate.state(&s, 1, now + Duration::from_secs(10)),
            GateState::Open
        );
        // Without a time limit it waits for the count.
        let mut gate = DispatchGate::default();
        let forever = settings(2, None);
        gate.consumer_added(&forever, 1, now);
        assert_eq!(
            gate.state(&forever, 1, now + Duration::from_secs(3_600)),
            GateState::WaitingForConsumers
        );
        gate.consumer_added(&forever, 2, now);
        // Open stays open when one of the two leaves, and closes when both have.
        assert_eq!(gate.state(&forever, 1, now), GateState::Open);
        gate.all_consumers_left();
        assert_eq!(gate.state(&forever, 0, now), GateState::WaitingForConsumers);
        // No gate: open. A pause is not the gate's state.
        let mut none = DispatchGate::default();
        none.pause(true);
        assert_eq!(none.state(&settings(0, None), 0, now), GateState::Open);
        assert_eq!(
            GateState::WaitingForConsumers.name(),
            "waiting_for_consumers"
        );
    }

    #[test]
    fn zero_does_not_wait_and_no_count_means_no_gate() {
        let mut gate = DispatchGate::default();
        let s = settings(2, Some(Duration::ZERO));
        assert_eq!(gate.consumer_added(&s, 1, Instant::now()), None);
        assert!(gate.allows(&s, 1));
        assert!(DispatchGate::default().allows(&settings(0, None), 0));
    }
}
