//! What management (the HTTP API) does to the broker, beside what clients do through a
//! protocol: create and delete queues, purge them, pause and resume their dispatch, and
//! read the broker-wide state. Every operation that changes something takes the caller's
//! [`Principal`] and checks its permissions here, like [`super::access`] does for clients.

use super::broker::Broker;
use super::error::CoreError;
use super::memory::AddressFullPolicy;
use super::queue::Queue;
use super::queue_record::QueueRecord;
use super::security::{Permission, Principal};
use super::settings::{QueueSettings, QueueSettingsOverride};
use crate::store::{Completion, Op};
use std::sync::Arc;

/// The address at which broker-wide management permissions are checked.
pub const MANAGEMENT_ADDRESS: &str = "weir.management";

/// What a management create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    New,
    Existing,
}

impl Broker {
    /// Creates the anycast queue `name`, as a client sending to it first would: `manage`
    /// at the name and the create permissions. An existing queue is left as it is.
    pub fn create_queue_as(
        &self,
        name: &str,
        who: &Principal,
    ) -> Result<(Arc<Queue>, Created), CoreError> {
        who.check(name, Permission::Manage)?;
        if let Some(queue) = self.queue(name) {
            return Ok((queue, Created::Existing));
        }
        self.may_create_queue(name, who)?;
        let slot = who.claim_queue()?;
        let queue = self.queue_or_create(name, true)?;
        if let Some(slot) = slot {
            queue.set_owner(slot);
        }
        Ok((queue, Created::New))
    }

    /// Deletes the queue `name` with its messages: `manage` and the delete permission
    /// for its kind (`delete_durable_queue` for a durable queue, else
    /// `delete_non_durable_queue`). Refused while it has consumers, and for a queue
    /// that goes with its owner (temporary queues, subscriptions' own queues). A durable
    /// subscription is deleted as JMS unsubscribe does.
    pub fn delete_queue_as(&self, name: &str, who: &Principal) -> Result<(), CoreError> {
        let queue = self
            .queue(name)
            .ok_or_else(|| CoreError::NotFound(name.to_owned()))?;
        who.check(name, Permission::Manage)?;
        let durable = queue.settings().durable || name.contains("::durable::");
        let delete = match durable {
            true => Permission::DeleteDurableQueue,
            false => Permission::DeleteNonDurableQueue,
        };
        who.check(name, delete)?;
        let consumers = queue.stats().consumers;
        if consumers > 0 {
            return Err(CoreError::QueueInUse {
                queue: name.to_owned(),
                consumers,
            });
        }
        if let Some((topic, subscription)) = name.split_once("::durable::") {
            self.delete_durable_subscription(topic, subscription);
            return Ok(());
        }
        let not_deletable = |what| CoreError::NotDeletable {
            queue: name.to_owned(),
            what,
        };
        if name.contains("::shared::") {
            return Err(not_deletable("a shared subscription's queue"));
        }
        // The namespace create_temporary_queue names its queues in (`temp.#`).
        if name.starts_with("temp.") {
            return Err(not_deletable("a temporary queue"));
        }
        self.remove_queue(&queue);
        Ok(())
    }

    /// Changes a queue's settings at run time: `change` edits the settings set on
    /// this queue (over what the config gives it), `check` vets the settings the
    /// queue would then have. The queue takes them at once (see
    /// [`Queue::change_settings`]); the completion resolves once they are stored,
    /// so a restart keeps them.
    pub fn change_queue_settings_as(
        &self,
        name: &str,
        who: &Principal,
        change: impl FnOnce(&mut QueueSettingsOverride),
        check: impl FnOnce(&QueueSettings) -> Result<(), String>,
    ) -> Result<(Arc<Queue>, Completion), CoreError> {
        let queue = self.manage_queue_as(name, who)?;
        let mut changes = queue.changes();
        let mut layer = changes.settings.clone();
        change(&mut layer);
        let mut settings = self.settings_for(settings_source(name));
        layer.apply_to(&mut settings);
        check(&settings).map_err(CoreError::InvalidSettings)?;
        let names = self.delay_header_names();
        if let Some(h) = settings
            .delay_headers
            .iter()
            .find(|h| !names.contains(&h.name))
        {
            return Err(CoreError::InvalidSettings(format!(
                "delay_headers: \"{}\" is read by no queue; protocols look only for names \
                 the config lists, so add it to a delay_headers list in the config first",
                h.name
            )));
        }
        if settings.address_full_policy == AddressFullPolicy::Block {
            self.note_block_queue();
        }
        queue.change_settings(settings)?;
        changes.settings = layer;
        let written = self.write_record(&queue, &changes);
        drop(changes);
        Ok((queue, written))
    }

    /// Pauses or resumes dispatch to the queue's consumers; stored, so a restart
    /// keeps the queue paused.
    pub fn pause_queue_as(
        &self,
        name: &str,
        who: &Principal,
        paused: bool,
    ) -> Result<(Arc<Queue>, Completion), CoreError> {
        let queue = self.manage_queue_as(name, who)?;
        let mut changes = queue.changes();
        queue.pause(paused);
        changes.paused = paused;
        let written = self.write_record(&queue, &changes);
        drop(changes);
        Ok((queue, written))
    }

    /// Replaces the metadata an API keeps with the queue (Zaqar's queue metadata);
    /// stored with the queue, so a restart keeps it, and gone with the queue.
    pub fn set_queue_metadata_as(
        &self,
        name: &str,
        who: &Principal,
        metadata: Option<String>,
    ) -> Result<Completion, CoreError> {
        let queue = self.manage_queue_as(name, who)?;
        let mut changes = queue.changes();
        changes.metadata = metadata;
        let written = self.write_record(&queue, &changes);
        drop(changes);
        Ok(written)
    }

    /// Stores the queue's record with its changes; queues that do not outlive the
    /// broker (temporary queues, shared subscriptions' queues) have none.
    fn write_record(
        &self,
        queue: &Queue,
        changes: &super::queue_record::QueueChanges,
    ) -> Completion {
        let name = queue.name();
        if name.starts_with("temp.") || name.contains("::shared::") {
            return Completion::ready();
        }
        let record = QueueRecord {
            id: queue.id(),
            topic: name
                .split_once("::durable::")
                .map(|(topic, _)| topic.to_owned()),
            changes: changes.clone(),
        };
        self.store().submit(Op::PutQueue {
            name: name.to_string(),
            record: record.encode(),
        })
    }

    /// `manage` at the queue's name: the queue, for purge, pause and resume.
    pub fn manage_queue_as(&self, name: &str, who: &Principal) -> Result<Arc<Queue>, CoreError> {
        let queue = self
            .queue(name)
            .ok_or_else(|| CoreError::NotFound(name.to_owned()))?;
        who.check(name, Permission::Manage)?;
        Ok(queue)
    }

    /// Why durable messages are refused now (the disk past its limits, or failing),
    /// `None` while the disk is fine.
    pub fn disk_refusal(&self) -> Option<String> {
        self.store().disk_refusal().map(|e| e.to_string())
    }
}

/// The name a queue's configured settings come from: a durable subscription's
/// queue takes its topic's.
fn settings_source(name: &str) -> &str {
    name.split_once("::durable::")
        .map_or(name, |(topic, _)| topic)
}
