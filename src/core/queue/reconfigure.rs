//! A queue's settings changed while it runs (the management API): each setting takes
//! effect for what happens next, without losing or reordering what the queue holds.

use super::effects::AfterUnlock;
use super::Queue;
use crate::core::grouping::GroupTable;
use crate::core::settings::QueueSettings;
use std::sync::Arc;

/// Why a queue cannot take new settings now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsConflict {
    /// Messages and groups are filed by bucket: new buckets would scatter what is
    /// already filed, so the count changes only on an idle queue.
    #[error(
        "group_buckets can change only while the queue holds no messages and owns no \
         groups (it holds {messages} messages and {groups} groups)"
    )]
    GroupBucketsInUse { messages: usize, groups: usize },
}

impl Queue {
    /// Replaces the queue's settings. Limits, policies, delays, dead-letter and
    /// expiry addresses, grouping rules and dispatch gates apply from the next
    /// message, delivery or settlement on; a queue made exclusive gives
    /// everything to one of its consumers from now on; a larger
    /// `max_memory_messages` or `max_size_bytes` pages messages back in at once.
    pub fn change_settings(self: &Arc<Self>, new: QueueSettings) -> Result<(), SettingsConflict> {
        let mut after = AfterUnlock::default();
        {
            let mut st = self.state.lock();
            let old = st.settings.clone();
            if new.group_buckets != old.group_buckets {
                let messages =
                    st.ready.len() + st.backlog.len() + st.in_flight.len() + st.waiting.len();
                let groups = st.groups.len();
                if messages > 0 || groups > 0 {
                    return Err(SettingsConflict::GroupBucketsInUse { messages, groups });
                }
                st.groups = GroupTable::new(new.group_buckets);
            }
            if (new.max_size_bytes, new.address_full_policy)
                != (old.max_size_bytes, old.address_full_policy)
            {
                self.memory
                    .reconfigure(new.max_size_bytes, new.address_full_policy);
            }
            if new.exclusive != old.exclusive {
                st.consumers.set_exclusive(new.exclusive);
            }
            let active = st.consumers.active();
            after.dispatch_at = st
                .gate
                .reconfigured(&old, &new, active, std::time::Instant::now());
            self.has_default_delay.store(
                !new.default_message_delay.is_zero(),
                std::sync::atomic::Ordering::Relaxed,
            );
            let new = Arc::new(new);
            st.settings = new.clone();
            self.settings.store(new);
            if st.settings.group_rebalance && !old.group_rebalance {
                self.rebalance(&mut st);
            }
            self.dispatch(&mut st, &mut after);
        }
        self.finish(&mut after);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::SettingsConflict;
    use crate::core::consumer::{ConsumerOptions, CreditMode};
    use crate::core::deliveries::{self, Deliveries};
    use crate::core::error::CoreError;
    use crate::core::security::Principal;
    use crate::core::settings::{QueueSettings, QueueSettingsOverride};
    use crate::core::tests::open;
    use crate::core::{Broker, Message, RoutingType, Subscription};
    use std::sync::Arc;
    use std::time::Duration;

    fn send(broker: &Broker, body: &str, group: Option<&str>) {
        let message = Message {
            address: Arc::from("q"),
            body: bytes::Bytes::copy_from_slice(body.as_bytes()),
            group_id: group.map(Arc::from),
            priority: 4,
            durable: true,
            ..Default::default()
        };
        broker.publish(message, RoutingType::Anycast).unwrap();
    }

    fn consumer(broker: &Broker, window: u32) -> (Subscription, Deliveries) {
        let (tx, rx) = deliveries::channel();
        let options = ConsumerOptions {
            credit: CreditMode::Window(window),
            ..Default::default()
        };
        let sub = broker
            .subscribe("q", RoutingType::Anycast, options, tx)
            .unwrap();
        (sub, rx)
    }

    async fn bodies(rx: &mut Deliveries, n: usize) -> Vec<String> {
        let mut got = Vec::new();
        while got.len() < n {
            let d = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("only {} of {n} delivered", got.len()))
                .expect("open");
            d.queue.ack(d.consumer, &[d.seq]).unwrap();
            got.push(String::from_utf8_lossy(&d.message.body).into_owned());
        }
        got
    }

    async fn change(
        broker: &Broker,
        edit: impl FnOnce(&mut QueueSettingsOverride),
    ) -> Result<(), CoreError> {
        let (_, written) =
            broker.change_queue_settings_as("q", &Principal::unrestricted(), edit, |_| Ok(()))?;
        written.wait().await.map_err(CoreError::Store)
    }

    fn small(max_memory_messages: usize) -> QueueSettings {
        QueueSettings {
            max_memory_messages,
            durable: true,
            ..QueueSettings::default()
        }
    }

    #[tokio::test]
    async fn a_larger_memory_limit_pages_messages_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small(4));
        for i in 0..40 {
            send(&broker, &format!("m{i}"), None);
        }
        let queue = broker.queue("q").unwrap();
        assert!(queue.stats().paged > 0);
        change(&broker, |s| s.max_memory_messages = Some(100))
            .await
            .unwrap();
        let (_c, mut rx) = consumer(&broker, 1000);
        let got = bodies(&mut rx, 40).await;
        let want: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
        assert_eq!(got, want);
        assert_eq!(queue.settings().max_memory_messages, 100);
    }

    #[tokio::test]
    async fn a_smaller_memory_limit_pages_new_messages_out() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small(1000));
        send(&broker, "first", None);
        change(&broker, |s| s.max_memory_messages = Some(2))
            .await
            .unwrap();
        for i in 0..20 {
            send(&broker, &format!("m{i}"), None);
        }
        let queue = broker.queue("q").unwrap();
        assert!(queue.stats().paged >= 18, "{:?}", queue.stats());
        let (_c, mut rx) = consumer(&broker, 1000);
        let got = bodies(&mut rx, 21).await;
        assert_eq!(got[0], "first");
        assert_eq!(got[20], "m19");
    }

    #[tokio::test]
    async fn making_a_queue_exclusive_gives_everything_to_one_consumer() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small(1000));
        let (_a, mut arx) = consumer(&broker, 100);
        let (_b, mut brx) = consumer(&broker, 100);
        change(&broker, |s| s.exclusive = Some(true)).await.unwrap();
        for i in 0..10 {
            send(&broker, &format!("m{i}"), None);
        }
        let got = bodies(&mut arx, 10).await;
        assert_eq!(got.len(), 10);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(brx.try_recv().is_err(), "the second consumer got a message");
        change(&broker, |s| s.exclusive = Some(false))
            .await
            .unwrap();
        for i in 0..10 {
            send(&broker, &format!("n{i}"), None);
        }
        bodies(&mut brx, 5).await;
    }

    #[tokio::test]
    async fn a_new_dispatch_gate_does_not_stop_a_queue_that_is_dispatching() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small(1000));
        let (_a, mut arx) = consumer(&broker, 100);
        change(&broker, |s| s.consumers_before_dispatch = Some(3))
            .await
            .unwrap();
        send(&broker, "m", None);
        assert_eq!(bodies(&mut arx, 1).await, ["m"]);
    }

    #[tokio::test]
    async fn a_gate_whose_delay_ran_out_on_an_empty_queue_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let settings = QueueSettings {
            consumers_before_dispatch: 2,
            delay_before_dispatch: Some(Duration::from_millis(20)),
            ..small(1000)
        };
        let broker = open(dir.path(), settings);
        let (_a, mut arx) = consumer(&broker, 100);
        // The delay runs out with nothing to dispatch: its timer opens the gate.
        tokio::time::sleep(Duration::from_millis(80)).await;
        // On a loaded machine both timers may fall due in one turn: let the
        // gate's run before looking.
        tokio::task::yield_now().await;
        // So the queue is dispatching, and a rule that would wait without a
        // time limit does not stop it.
        change(&broker, |s| s.delay_before_dispatch = Some(None))
            .await
            .unwrap();
        send(&broker, "m", None);
        assert_eq!(bodies(&mut arx, 1).await, ["m"]);
    }

    #[tokio::test]
    async fn group_buckets_change_only_on_an_idle_queue() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small(1000));
        send(&broker, "g", Some("g"));
        let refused = change(&broker, |s| s.group_buckets = Some(4)).await;
        assert!(
            matches!(
                refused,
                Err(CoreError::SettingsConflict(
                    SettingsConflict::GroupBucketsInUse { messages: 1, .. }
                ))
            ),
            "{refused:?}"
        );
        assert_eq!(broker.queue("q").unwrap().settings().group_buckets, -1);
        let (c, mut rx) = consumer(&broker, 10);
        bodies(&mut rx, 1).await;
        drop(c);
        tokio::time::sleep(Duration::from_millis(20)).await;
        change(&broker, |s| s.group_buckets = Some(4))
            .await
            .unwrap();
        assert_eq!(broker.queue("q").unwrap().settings().group_buckets, 4);
    }

    #[tokio::test]
    async fn refused_settings_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), small(1000));
        send(&broker, "m", None);
        let refused = broker.change_queue_settings_as(
            "q",
            &Principal::unrestricted(),
            |s| s.redelivery_delay = Some(Duration::from_secs(5)),
            |_| Err("no".into()),
        );
        assert!(matches!(refused, Err(CoreError::InvalidSettings(_))));
        let queue = broker.queue("q").unwrap();
        assert!(queue.changes().settings.is_empty());
        assert_eq!(queue.settings().redelivery_delay, Duration::ZERO);
        let unknown_header = broker.change_queue_settings_as(
            "q",
            &Principal::unrestricted(),
            |s| {
                s.delay_headers = Some(vec![crate::core::delay_headers::DelayHeader::parse(
                    "x-wait:ms",
                )
                .unwrap()])
            },
            |_| Ok(()),
        );
        assert!(matches!(unknown_header, Err(CoreError::InvalidSettings(_))));
    }

    #[tokio::test]
    async fn changed_settings_and_a_pause_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let broker = open(dir.path(), small(1000));
            send(&broker, "kept", None);
            change(&broker, |s| {
                s.redelivery_delay = Some(Duration::from_millis(1500));
                s.dead_letter_address = Some(None);
                s.max_memory_messages = Some(7);
            })
            .await
            .unwrap();
            let (_, written) = broker
                .pause_queue_as("q", &Principal::unrestricted(), true)
                .unwrap();
            written.wait().await.unwrap();
        }
        let broker = open(dir.path(), small(1000));
        let queue = broker.queue("q").unwrap();
        let s = queue.settings();
        assert_eq!(s.redelivery_delay, Duration::from_millis(1500));
        assert_eq!(s.dead_letter_address, None);
        assert_eq!(s.max_memory_messages, 7);
        assert!(queue.stats().paused);
        let (_c, mut rx) = consumer(&broker, 10);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err(), "a paused queue dispatched");
        let (_, written) = broker
            .pause_queue_as("q", &Principal::unrestricted(), false)
            .unwrap();
        written.wait().await.unwrap();
        assert_eq!(bodies(&mut rx, 1).await, ["kept"]);
        // Back to the config's value, and stored so.
        change(&broker, |s| {
            s.clear("redelivery_delay");
        })
        .await
        .unwrap();
        drop((_c, rx, queue, s));
        drop(broker);
        let broker = open(dir.path(), small(1000));
        let queue = broker.queue("q").unwrap();
        assert_eq!(queue.settings().redelivery_delay, Duration::ZERO);
        assert_eq!(queue.settings().max_memory_messages, 7);
        assert!(!queue.stats().paused);
    }
}
