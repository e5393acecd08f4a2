//! Who holds what in a queue, for management: its message groups and their
//! owners, its consumers, and resetting groups (Artemis `resetAllGroups`).
//! Read under the queue lock, counted at read time: nothing here costs the
//! message path anything.

use super::effects::AfterUnlock;
use super::{Queue, PAUSED};
use crate::core::consumer::{ConsumerId, ConsumerOwner, CreditMode};
use crate::core::fast_map::FastMap;
use crate::core::grouping::GroupTable;
use std::sync::Arc;
use std::time::Instant;

/// One bound group (or, with `group_buckets`, one bucket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group id, or `bucket-N` for a bucket.
    pub group: String,
    pub bucket: bool,
    /// Its owner; `None` while a reset or rebalance waits for the old owner's
    /// unsettled messages of it.
    pub consumer: Option<ConsumerId>,
    /// Its messages delivered and not yet settled.
    pub in_flight: usize,
    /// Its messages waiting in memory.
    pub ready: usize,
    /// When the owner took it (epoch ms).
    pub since_ms: u64,
    /// When one of its messages was last delivered or acknowledged, or it was
    /// bound if that is later (epoch ms, to within a few ms).
    pub last_activity_ms: u64,
}

/// One consumer of a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerInfo {
    pub id: ConsumerId,
    pub owner: Option<ConsumerOwner>,
    pub browser: bool,
    pub priority: i32,
    /// Deliveries it may receive now.
    pub credit: u32,
    /// Its prefetch window, when credit comes back with each settlement.
    pub window: Option<u32>,
    pub in_flight: usize,
    pub in_flight_bytes: u64,
    pub selector: Option<String>,
    pub groups: usize,
    /// Messages handed to it since it attached (a browser: shown to it).
    pub delivered: u64,
    /// Of those, acknowledged.
    pub acked: u64,
    /// Both per second lately (see [`crate::core::rates::RATE_WINDOW`]).
    pub delivered_per_second: f64,
    pub acked_per_second: f64,
}

impl Queue {
    /// Every bound group, by name.
    pub fn groups(&self) -> Vec<GroupInfo> {
        let st = self.state.lock();
        let mut in_flight: FastMap<&str, usize> = FastMap::default();
        for flight in st.in_flight.values() {
            if let Some(lane) = &flight.entry.lane {
                *in_flight.entry(lane).or_default() += 1;
            }
        }
        let mut ready: FastMap<&str, usize> = FastMap::default();
        for entry in st.ready.entries_after(0) {
            if let Some(lane) = &entry.lane {
                *ready.entry(lane).or_default() += 1;
            }
        }
        let bucket = st.groups.has_buckets();
        let mut groups: Vec<GroupInfo> = st
            .groups
            .bindings_since()
            .map(|(lane, times)| GroupInfo {
                group: GroupTable::display_name(lane).to_owned(),
                bucket,
                consumer: (times.owner != PAUSED).then_some(times.owner),
                in_flight: in_flight.get(&**lane).copied().unwrap_or(0),
                ready: ready.get(&**lane).copied().unwrap_or(0),
                since_ms: times.since_ms,
                last_activity_ms: times.active_ms,
            })
            .collect();
        groups.sort_unstable_by(|a, b| a.group.cmp(&b.group));
        groups
    }

    /// Releases the group `name` (a group id, or `bucket-N`) from its owner:
    /// its next message picks a consumer anew. While the owner still holds
    /// some of its messages, nobody gets a newer one until those are settled,
    /// so the group is never split. False when no consumer owns the group.
    pub fn reset_group(self: &Arc<Self>, name: &str) -> bool {
        self.reset_groups(Some(name)) > 0
    }

    /// [`Queue::reset_group`] for every group; returns how many had an owner.
    pub fn reset_all_groups(self: &Arc<Self>) -> usize {
        self.reset_groups(None)
    }

    fn reset_groups(self: &Arc<Self>, name: Option<&str>) -> usize {
        let mut after = AfterUnlock::default();
        let reset = {
            let mut st = self.state.lock();
            let lanes: Vec<(Arc<str>, ConsumerId)> = match name {
                Some(name) => st
                    .groups
                    .lane_named(name)
                    .and_then(|lane| st.groups.owner(&lane).map(|owner| (lane, owner)))
                    .into_iter()
                    .collect(),
                None => st.groups.bindings(),
            };
            // A group already waiting for its old owner has no owner to leave.
            let lanes: Vec<_> = lanes.into_iter().filter(|(_, o)| *o != PAUSED).collect();
            for (lane, owner) in &lanes {
                st.move_group_from(lane, *owner);
            }
            self.dispatch(&mut st, &mut after);
            lanes.len()
        };
        self.finish(&mut after);
        reset
    }

    /// Every consumer (browsers too), in the order they attached. Takes each
    /// one's rates, so it moves their readings on (see [`super::consumers::Activity::rates_at`]).
    pub fn consumers(&self) -> Vec<ConsumerInfo> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut in_flight: FastMap<ConsumerId, usize> = FastMap::default();
        for flight in st.in_flight.values() {
            *in_flight.entry(flight.consumer).or_default() += 1;
        }
        let now = Instant::now();
        let groups = &st.groups;
        let mut consumers: Vec<ConsumerInfo> = st
            .consumers
            .iter_mut()
            .map(|slot| {
                let (delivered_per_second, acked_per_second) = slot.activity.rates_at(now);
                ConsumerInfo {
                    id: slot.id,
                    owner: slot.owner.as_deref().cloned(),
                    browser: slot.is_browser(),
                    priority: slot.priority,
                    credit: slot.credit,
                    window: match slot.mode {
                        CreditMode::Window(n) => Some(n),
                        CreditMode::Explicit => None,
                    },
                    in_flight: in_flight.get(&slot.id).copied().unwrap_or(0),
                    in_flight_bytes: slot.in_flight_bytes,
                    selector: slot
                        .filter
                        .as_deref()
                        .and_then(|f| f.text())
                        .map(str::to_owned),
                    groups: groups.group_count(slot.id),
                    delivered: slot.activity.delivered,
                    acked: slot.activity.acked,
                    delivered_per_second,
                    acked_per_second,
                }
            })
            .collect();
        consumers.sort_unstable_by_key(|c| c.id);
        consumers
    }

    /// Records who attached consumer `id` (see [`ConsumerInfo::owner`]).
    pub fn describe_consumer(&self, id: ConsumerId, owner: ConsumerOwner) {
        let mut st = self.state.lock();
        if let Some(slot) = st.consumers.get_mut(id) {
            slot.owner = Some(Arc::new(owner));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::core::consumer::{ConsumerOptions, CreditMode};
    use crate::core::deliveries::{self, Deliveries};
    use crate::core::settings::QueueSettings;
    use crate::core::tests::open;
    use crate::core::{Broker, Delivery, Message, RoutingType, Subscription};
    use std::sync::Arc;
    use std::time::Duration;

    fn send(broker: &Broker, body: &'static str, group: Option<&str>) {
        let mut m = Message::new(Arc::from("q"), body.into(), 0);
        m.group_id = group.map(Arc::from);
        broker.publish(m, RoutingType::Anycast).unwrap();
    }

    fn consumer(broker: &Broker, window: u32) -> (Subscription, Deliveries) {
        let (tx, rx) = deliveries::channel();
        let options = ConsumerOptions {
            credit: CreditMode::Window(window),
            ..Default::default()
        };
        let who = broker.principal(Some("alice"), None, Some("app-1"));
        let sub = broker
            .subscribe_as("q", RoutingType::Anycast, options, tx, &who)
            .unwrap();
        (sub, rx)
    }

    async fn next(rx: &mut Deliveries) -> Delivery {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a delivery")
            .expect("open")
    }

    async fn nothing(rx: &mut Deliveries) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err(), "nothing expected");
    }

    #[tokio::test]
    async fn a_reset_group_goes_to_another_consumer_once_its_owner_settled() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        let (a, mut arx) = consumer(&broker, 1);
        send(&broker, "g1", Some("g"));
        let g1 = next(&mut arx).await;
        let queue = broker.queue("q").unwrap();
        let groups = queue.groups();
        assert_eq!(groups.len(), 1);
        assert_eq!(
            (
                groups[0].group.as_str(),
                groups[0].consumer,
                groups[0].in_flight
            ),
            ("g", Some(a.consumer()), 1)
        );
        let (b, mut brx) = consumer(&broker, 10);
        send(&broker, "g2", Some("g"));
        nothing(&mut brx).await;
        // Reset while A holds g1: g2 waits until g1 is settled.
        assert!(queue.reset_group("g"));
        assert_eq!(queue.groups()[0].consumer, None);
        assert!(!queue.reset_group("g"), "waiting for A already");
        assert_eq!(queue.reset_all_groups(), 0);
        nothing(&mut brx).await;
        queue.ack(a.consumer(), &[g1.seq]).unwrap();
        // A's credit came back, but the group is free: whoever dispatch picks.
        let (got, other) = tokio::select! {
            d = next(&mut brx) => (d, &mut arx),
            d = next(&mut arx) => (d, &mut brx),
        };
        assert_eq!(&got.message.body[..], b"g2");
        nothing(other).await;
        assert!(!queue.reset_group("nope"));
        assert_eq!(queue.reset_all_groups(), 1);
        let consumers = queue.consumers();
        assert_eq!(consumers.len(), 2);
        assert_eq!(consumers[1].id, b.consumer());
        let owner = consumers[0].owner.clone().unwrap();
        assert_eq!(
            (owner.user.as_deref(), owner.client_id.as_deref()),
            (Some("alice"), Some("app-1"))
        );
        assert_eq!(consumers[0].window, Some(1));
    }

    #[tokio::test]
    async fn consumers_count_what_they_were_given_and_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        let (a, mut arx) = consumer(&broker, 10);
        for body in ["1", "2", "3"] {
            send(&broker, body, None);
        }
        let mut seqs = Vec::new();
        for _ in 0..3 {
            seqs.push(next(&mut arx).await.seq);
        }
        let queue = broker.queue("q").unwrap();
        queue.ack(a.consumer(), &seqs[..2]).unwrap();
        let c = &queue.consumers()[0];
        assert_eq!((c.delivered, c.acked), (3, 2));
        // The first reading has nothing to compare with.
        assert_eq!((c.delivered_per_second, c.acked_per_second), (0.0, 0.0));
    }

    #[tokio::test]
    async fn a_reset_group_whose_owner_has_no_credit_goes_to_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), QueueSettings::default());
        let (a, mut arx) = consumer(&broker, 1);
        send(&broker, "g1", Some("g"));
        let g1 = next(&mut arx).await;
        broker
            .queue("q")
            .unwrap()
            .ack(a.consumer(), &[g1.seq])
            .unwrap();
        send(&broker, "u1", None);
        assert_eq!(&next(&mut arx).await.message.body[..], b"u1");
        let (_b, mut brx) = consumer(&broker, 10);
        send(&broker, "g2", Some("g"));
        nothing(&mut brx).await;
        assert_eq!(broker.queue("q").unwrap().reset_all_groups(), 1);
        assert_eq!(&next(&mut brx).await.message.body[..], b"g2");
        nothing(&mut arx).await;
    }
}
