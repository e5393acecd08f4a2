//! Returned messages waiting out their redelivery delay. They stay in the
//! queue (their record too), so a grouped one keeps its place: its lane is
//! held back meanwhile (see `ReadySet::hold_lane`), and nothing newer of its
//! group overtakes it. An ungrouped one holds back only itself.

use super::ready::Entry;
use crate::core::settings::QueueSettings;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Waiting {
    /// By due time (epoch ms), then sequence.
    entries: BTreeMap<(u64, u64), Entry>,
    /// The due time a wake-up is set for, if any.
    armed: Option<u64>,
}

impl Waiting {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds an entry due at `due_ms`; returns a time to wake up at when no
    /// earlier wake-up is set.
    pub fn add(&mut self, due_ms: u64, entry: Entry) -> Option<u64> {
        self.entries.insert((due_ms, entry.seq), entry);
        match self.armed {
            Some(at) if at <= due_ms => None,
            _ => {
                self.armed = Some(due_ms);
                Some(due_ms)
            }
        }
    }

    /// Takes every entry due by `now_ms`, and the next wake-up to set.
    pub fn take_due(&mut self, now_ms: u64) -> (Vec<Entry>, Option<u64>) {
        let later = self.entries.split_off(&(now_ms + 1, 0));
        let due = std::mem::replace(&mut self.entries, later);
        self.armed = self.entries.keys().next().map(|(at, _)| *at);
        (due.into_values().collect(), self.armed)
    }

    /// Every waiting entry with its due time (epoch ms), in due order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Entry)> + '_ {
        self.entries.iter().map(|((due, _), entry)| (*due, entry))
    }

    /// Takes the entry `seq` out (management deletes or moves it). The wake-up
    /// set for it stays: waking to nothing is harmless.
    pub fn remove(&mut self, seq: u64) -> Option<Entry> {
        let key = *self.entries.keys().find(|(_, s)| *s == seq)?;
        self.entries.remove(&key)
    }

    pub fn drain_all(&mut self) -> Vec<Entry> {
        self.armed = None;
        std::mem::take(&mut self.entries).into_values().collect()
    }
}

/// The wait before the next attempt of a message delivered `delivery_count`
/// times: `redelivery_delay * redelivery_multiplier^(count - 1)`, capped.
pub fn delay_ms(settings: &QueueSettings, delivery_count: u32) -> u64 {
    let base = settings.redelivery_delay.as_millis() as f64;
    let factor = settings
        .redelivery_multiplier
        .powi(delivery_count.saturating_sub(1) as i32);
    let max = settings.max_redelivery_delay.as_millis() as f64;
    (base * factor).min(max.max(base)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(seq: u64) -> Entry {
        Entry::plain(seq, 1)
    }

    #[test]
    fn wakes_for_the_earliest_and_releases_in_due_order() {
        let mut w = Waiting::default();
        assert_eq!(w.add(200, entry(1)), Some(200));
        assert_eq!(w.add(300, entry(2)), None);
        assert_eq!(w.add(100, entry(3)), Some(100));
        let (due, next) = w.take_due(200);
        assert_eq!(due.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 1]);
        assert_eq!(next, Some(300));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn a_removed_entry_is_not_released() {
        let mut w = Waiting::default();
        w.add(200, entry(1));
        w.add(100, entry(2));
        assert_eq!(
            w.iter().map(|(due, e)| (due, e.seq)).collect::<Vec<_>>(),
            [(100, 2), (200, 1)]
        );
        assert_eq!(w.remove(2).map(|e| e.seq), Some(2));
        assert!(w.remove(2).is_none());
        let (due, _) = w.take_due(1_000);
        assert_eq!(due.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn the_delay_grows_and_is_capped() {
        let s = QueueSettings {
            redelivery_delay: Duration::from_millis(100),
            redelivery_multiplier: 2.0,
            max_redelivery_delay: Duration::from_millis(300),
            ..QueueSettings::default()
        };
        assert_eq!(delay_ms(&s, 1), 100);
        assert_eq!(delay_ms(&s, 2), 200);
        assert_eq!(delay_ms(&s, 3), 300);
    }
}
