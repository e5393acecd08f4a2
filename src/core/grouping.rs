//! Message groups: which consumer owns which group, and how group ids map to
//! the lanes a queue keeps its ready messages in.

use super::consumer::ConsumerId;
use super::fast_map::FastMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A lane's owner, and its times (epoch ms) for management.
#[derive(Debug, Clone, Copy)]
struct Binding {
    owner: ConsumerId,
    since_ms: u64,
    /// The last delivery or acknowledgement of one of its messages, or the binding.
    active_ms: u64,
}

/// One binding as management lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindingTimes {
    pub owner: ConsumerId,
    /// When the owner took it (epoch ms).
    pub since_ms: u64,
    /// When one of its messages was last delivered or acknowledged, or it was bound
    /// if that is later (epoch ms, to within a few ms: see [`GroupTable::touch`]).
    pub active_ms: u64,
}

/// The group bindings of one queue.
#[derive(Debug, Default)]
pub struct GroupTable {
    /// Each bound lane's owner, and for management since when and when last active.
    owner: FastMap<Arc<str>, Binding>,
    groups_per_consumer: FastMap<ConsumerId, usize>,
    /// `None` tracks every group; `Some(names)` hashes groups into these buckets.
    buckets: Option<Vec<Arc<str>>>,
    enabled: bool,
}

impl GroupTable {
    /// `group_buckets`: -1 tracks every group, 0 turns grouping off, N hashes into N buckets.
    pub fn new(group_buckets: i32) -> Self {
        let buckets = (group_buckets > 0).then(|| {
            (0..group_buckets)
                .map(|i| Arc::from(format!("\u{0}bucket-{i}")))
                .collect()
        });
        Self {
            owner: FastMap::default(),
            groups_per_consumer: FastMap::default(),
            buckets,
            enabled: group_buckets != 0,
        }
    }

    /// The lane a group id maps to, or `None` when grouping is off.
    pub fn lane_of(&self, group_id: &Arc<str>) -> Option<Arc<str>> {
        if !self.enabled {
            return None;
        }
        match &self.buckets {
            None => Some(group_id.clone()),
            Some(buckets) => {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                group_id.hash(&mut hasher);
                let index = (hasher.finish() % buckets.len() as u64) as usize;
                buckets.get(index).cloned()
            }
        }
    }

    pub fn owner(&self, lane: &str) -> Option<ConsumerId> {
        self.owner.get(lane).map(|b| b.owner)
    }

    pub fn bind(&mut self, lane: Arc<str>, consumer: ConsumerId) {
        let now = super::message::now_ms();
        let binding = Binding {
            owner: consumer,
            since_ms: now,
            active_ms: now,
        };
        if let Some(previous) = self.owner.insert(lane, binding) {
            self.forget(previous.owner);
        }
        *self.groups_per_consumer.entry(consumer).or_default() += 1;
    }

    pub fn unbind(&mut self, lane: &str) -> Option<ConsumerId> {
        let previous = self.owner.remove(lane)?.owner;
        self.forget(previous);
        Some(previous)
    }

    /// A message of `lane` was delivered or acknowledged at `now_ms` (a coarse
    /// clock's reading: [`super::message::coarse_now_ms`]). Never moves back, so
    /// a coarse reading a little behind the binding's exact time is no regress.
    #[inline]
    pub fn touch(&mut self, lane: &str, now_ms: u64) {
        if let Some(binding) = self.owner.get_mut(lane) {
            binding.active_ms = binding.active_ms.max(now_ms);
        }
    }

    /// Releases every group of a consumer; returns the lanes it owned.
    pub fn unbind_consumer(&mut self, consumer: ConsumerId) -> Vec<Arc<str>> {
        if self.groups_per_consumer.remove(&consumer).is_none() {
            return Vec::new();
        }
        let lanes: Vec<Arc<str>> = self
            .owner
            .iter()
            .filter(|(_, b)| b.owner == consumer)
            .map(|(lane, _)| lane.clone())
            .collect();
        for lane in &lanes {
            self.owner.remove(lane);
        }
        lanes
    }

    /// Every binding, for a rebalance.
    pub fn bindings(&self) -> Vec<(Arc<str>, ConsumerId)> {
        self.owner
            .iter()
            .map(|(lane, b)| (lane.clone(), b.owner))
            .collect()
    }

    /// Every binding with its times, for management.
    pub fn bindings_since(&self) -> impl Iterator<Item = (&Arc<str>, BindingTimes)> + '_ {
        self.owner.iter().map(|(lane, b)| {
            let times = BindingTimes {
                owner: b.owner,
                since_ms: b.since_ms,
                active_ms: b.active_ms,
            };
            (lane, times)
        })
    }

    /// The lane a management request names: a group id, or with buckets a
    /// bucket's name as [`GroupTable::display_name`] shows it.
    pub fn lane_named(&self, name: &str) -> Option<Arc<str>> {
        if let Some(buckets) = &self.buckets {
            if let Some(bucket) = buckets.iter().find(|b| Self::display_name(b) == name) {
                return Some(bucket.clone());
            }
        }
        self.lane_of(&Arc::from(name))
    }

    /// A lane's name for people: the group id, or `bucket-N` for a bucket.
    pub fn display_name(lane: &str) -> &str {
        lane.strip_prefix('\u{0}').unwrap_or(lane)
    }

    /// Whether groups hash into buckets (`group_buckets` > 0).
    pub fn has_buckets(&self) -> bool {
        self.buckets.is_some()
    }

    pub fn group_count(&self, consumer: ConsumerId) -> usize {
        self.groups_per_consumer
            .get(&consumer)
            .copied()
            .unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    fn forget(&mut self, consumer: ConsumerId) {
        if let Some(count) = self.groups_per_consumer.get_mut(&consumer) {
            *count -= 1;
            if *count == 0 {
                self.groups_per_consumer.remove(&consumer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_and_releases() {
        let mut t = GroupTable::new(-1);
        let a: Arc<str> = Arc::from("a");
        let lane = t.lane_of(&a).unwrap();
        t.bind(lane.clone(), 1);
        t.bind(Arc::from("b"), 1);
        t.bind(Arc::from("c"), 2);
        assert_eq!(t.owner("a"), Some(1));
        assert_eq!(t.group_count(1), 2);
        let mut released = t.unbind_consumer(1);
        released.sort();
        assert_eq!(released, vec![Arc::from("a"), Arc::from("b")]);
        assert_eq!(t.owner("a"), None);
        assert_eq!(t.group_count(1), 0);
        assert_eq!(t.unbind("c"), Some(2));
        assert!(t.is_empty());
    }

    #[test]
    fn activity_moves_forward_only_and_starts_at_the_binding() {
        let mut t = GroupTable::new(-1);
        t.bind(Arc::from("a"), 1);
        let times = |t: &GroupTable| t.bindings_since().next().map(|(_, b)| b).unwrap();
        let bound = times(&t);
        assert_eq!(bound.active_ms, bound.since_ms);
        t.touch("a", bound.since_ms + 50);
        assert_eq!(times(&t).active_ms, bound.since_ms + 50);
        // A coarse clock a tick behind does not move it back.
        t.touch("a", bound.since_ms + 40);
        assert_eq!(times(&t).active_ms, bound.since_ms + 50);
        t.touch("unbound", u64::MAX);
        assert_eq!(times(&t).since_ms, bound.since_ms);
    }

    #[test]
    fn buckets_and_off() {
        let t = GroupTable::new(4);
        let lanes: std::collections::HashSet<_> = (0..100)
            .map(|i| t.lane_of(&Arc::from(format!("g{i}"))).unwrap())
            .collect();
        assert!(lanes.len() <= 4);
        assert_eq!(GroupTable::new(0).lane_of(&Arc::from("g")), None);
        let lane = t.lane_of(&Arc::from("g7")).unwrap();
        assert_eq!(t.lane_named("g7"), Some(lane.clone()));
        let shown = GroupTable::display_name(&lane).to_owned();
        assert!(shown.starts_with("bucket-"), "{shown}");
        assert_eq!(t.lane_named(&shown), Some(lane));
    }
}
