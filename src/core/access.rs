//! The broker as a logged-in client sees it: every operation a protocol does on a
//! client's behalf that needs a permission or counts against a user's queue limit,
//! checked here once, so no protocol repeats the rules.
//!
//! Which permission each operation needs (at the address it names):
//! - sending: `send`;
//! - consuming from a queue or subscribing to a topic: `consume`; browsing a queue: `browse`;
//! - a queue created on first use (anycast): `create_address` and `create_durable_queue`;
//! - a topic subscription's own queue: `create_non_durable_queue`;
//! - a named subscription created: `create_durable_queue` (durable) or
//!   `create_non_durable_queue` (shared, volatile); deleting a durable one:
//!   `delete_durable_queue`;
//! - a temporary queue: `create_non_durable_queue` at its generated name (`temp.#`).
//!
//! The checks cost one branch when no permission is configured; protocols check once
//! per link or subscription, not per message.

use super::broker::{Broker, RoutingType, Subscription, TemporaryQueue};
use super::consumer::{ConsumerOptions, ConsumerOwner, DeliverySink};
use super::error::CoreError;
use super::queue::Queue;
use super::security::{Permission, Principal};
use std::sync::Arc;

impl Broker {
    /// The queue `name` for a client that sends to or consumes from it, created on
    /// first use when the settings and the client's permissions allow.
    pub fn open_queue(&self, name: &str, who: &Principal) -> Result<Arc<Queue>, CoreError> {
        if let Some(queue) = self.queue(name) {
            return Ok(queue);
        }
        self.may_create_queue(name, who)?;
        let slot = who.claim_queue()?;
        let queue = self.queue_or_create(name, false)?;
        if let Some(slot) = slot {
            queue.set_owner(slot);
        }
        Ok(queue)
    }

    /// Refused unless the client may send to `address`, and, when it is a queue
    /// that does not exist yet, create it. Protocols ask once per destination.
    pub fn may_send(
        &self,
        address: &str,
        routing: RoutingType,
        who: &Principal,
    ) -> Result<(), CoreError> {
        who.check(address, Permission::Send)?;
        if routing == RoutingType::Anycast {
            self.may_create_queue(address, who)?;
        }
        Ok(())
    }

    /// Refused unless the client may create the anycast queue `name` (it may not
    /// exist yet: a transaction creates it at commit).
    pub fn may_create_queue(&self, name: &str, who: &Principal) -> Result<(), CoreError> {
        if !who.is_restricted() || self.queue(name).is_some() {
            return Ok(());
        }
        who.check(name, Permission::CreateAddress)?;
        who.check(name, Permission::CreateDurableQueue)?;
        Ok(())
    }

    /// [`Broker::subscribe`] for a client: `consume` (or `browse`) at `address`, and
    /// the queue it reads created as the client may.
    pub fn subscribe_as(
        &self,
        address: &str,
        routing: RoutingType,
        options: ConsumerOptions,
        sink: DeliverySink,
        who: &Principal,
    ) -> Result<Subscription, CoreError> {
        let reading = match options.browse {
            true => Permission::Browse,
            false => Permission::Consume,
        };
        who.check(address, reading)?;
        match routing {
            RoutingType::Anycast => {
                self.open_queue(address, who)?;
                self.subscribe(address, routing, options, sink)
                    .map(|sub| described(sub, who))
            }
            RoutingType::Multicast => {
                who.check(address, Permission::CreateNonDurableQueue)?;
                let slot = who.claim_queue()?;
                let sub = self.subscribe(address, routing, options, sink)?;
                if let Some(slot) = slot {
                    sub.queue().set_owner(slot);
                }
                Ok(described(sub, who))
            }
        }
    }

    /// [`Broker::subscribe_named`] for a client: `consume` at the topic, and a new
    /// subscription created as the client may.
    pub fn subscribe_named_as(
        &self,
        topic: &str,
        subscription: &str,
        durable: bool,
        options: ConsumerOptions,
        sink: DeliverySink,
        who: &Principal,
    ) -> Result<Subscription, CoreError> {
        who.check(topic, Permission::Consume)?;
        let exists = self.has_named_subscription(topic, subscription, durable);
        let mut slot = None;
        if !exists {
            let create = match durable {
                true => Permission::CreateDurableQueue,
                false => Permission::CreateNonDurableQueue,
            };
            who.check(topic, create)?;
            slot = who.claim_queue()?;
        }
        let sub = self.subscribe_named(topic, subscription, durable, options, sink)?;
        if let Some(slot) = slot {
            sub.queue().set_owner(slot);
        }
        Ok(described(sub, who))
    }

    /// [`Broker::delete_durable_subscription`] for a client: `delete_durable_queue` at
    /// the topic.
    pub fn delete_durable_subscription_as(
        &self,
        topic: &str,
        subscription: &str,
        who: &Principal,
    ) -> Result<bool, CoreError> {
        who.check(topic, Permission::DeleteDurableQueue)?;
        Ok(self.delete_durable_subscription(topic, subscription))
    }

    /// [`Broker::create_temporary_queue`] for a client: `create_non_durable_queue` at
    /// the generated name. Its creator may then send to it and read from it.
    pub fn create_temporary_queue_as(&self, who: &Principal) -> Result<TemporaryQueue, CoreError> {
        let (id, name) = self.temporary_queue_name();
        who.check(&name, Permission::CreateNonDurableQueue)?;
        let slot = who.claim_queue()?;
        let temp = self.create_temporary_queue_named(id, name);
        if let Some(slot) = slot {
            temp.queue().set_owner(slot);
        }
        Ok(temp)
    }
}

/// Tells the subscription's queue who attached its consumer, for management.
fn described(sub: Subscription, who: &Principal) -> Subscription {
    let owner = ConsumerOwner {
        user: who.user().map(str::to_owned),
        client_id: who.client_id().map(str::to_owned),
        peer: who.peer(),
    };
    sub.queue().describe_consumer(sub.consumer(), owner);
    sub
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::security::{Authorizer, Grants, Permissions, RoleSet, UserPolicy};
    use crate::core::settings::AddressPattern;
    use crate::core::settings::QueueSettings;
    use crate::core::BrokerOptions;
    use std::collections::HashMap;

    fn broker(max_queues: usize) -> (tempfile::TempDir, Broker) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), Default::default()).unwrap();
        let ops = RoleSet::default().with(0);
        let mut grants = Grants::default();
        for p in [
            Permission::Send,
            Permission::Consume,
            Permission::CreateAddress,
            Permission::CreateDurableQueue,
            Permission::CreateNonDurableQueue,
        ] {
            grants.grant(p, ops);
        }
        let mut permissions = Permissions::default();
        permissions.add(AddressPattern::new("#"), grants);
        let users = HashMap::from([(
            "alice".to_owned(),
            UserPolicy {
                roles: ops,
                max_queues: None,
            },
        )]);
        let mut options = BrokerOptions::with_queue_settings(QueueSettings::default());
        options.authorizer = Authorizer::new(permissions, users, RoleSet::default(), max_queues);
        (dir, Broker::open(store, options).unwrap())
    }

    #[tokio::test]
    async fn creating_a_queue_needs_the_permissions_and_a_free_place() {
        let (_dir, broker) = broker(2);
        let alice = broker.principal(Some("alice"), None, None);
        let nobody = broker.principal(Some("mallory"), None, None);
        assert!(matches!(
            broker.open_queue("a", &nobody),
            Err(CoreError::Denied(_))
        ));
        assert!(broker.queue("a").is_none(), "nothing created on a refusal");
        broker.open_queue("a", &alice).unwrap();
        // Opening an existing queue needs no creation permission and takes no place.
        broker.open_queue("a", &alice).unwrap();
        let temp = broker.create_temporary_queue_as(&alice).unwrap();
        assert!(matches!(
            broker.open_queue("b", &alice),
            Err(CoreError::QueueLimit(_))
        ));
        drop(temp);
        broker.open_queue("b", &alice).unwrap();
    }

    #[tokio::test]
    async fn named_subscriptions_need_create_and_delete_durable_queue() {
        let (_dir, broker) = broker(0);
        let alice = broker.principal(Some("alice"), None, None);
        let nobody = broker.principal(Some("mallory"), None, None);
        let (sink, _deliveries) = crate::core::deliveries::channel();
        let options = ConsumerOptions::default;
        assert!(matches!(
            broker.subscribe_named_as("news", "s", true, options(), sink.clone(), &nobody),
            Err(CoreError::Denied(_))
        ));
        assert!(!broker.has_named_subscription("news", "s", true));
        let sub = broker
            .subscribe_named_as("news", "s", true, options(), sink.clone(), &alice)
            .unwrap();
        drop(sub);
        // alice's role has no delete_durable_queue: the subscription stays.
        assert!(matches!(
            broker.delete_durable_subscription_as("news", "s", &alice),
            Err(CoreError::Denied(d)) if d.permission == Permission::DeleteDurableQueue
        ));
        assert!(broker.has_named_subscription("news", "s", true));
        // Shared non-durable subscriptions need create_non_durable_queue, which alice has.
        broker
            .subscribe_named_as("news", "v", false, options(), sink, &alice)
            .unwrap();
    }
}
