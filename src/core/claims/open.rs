//! The open claims of a broker, by id, with the two other ways the hot
//! paths look one up, each without a scan: by its consumer (every delete by
//! id of a claimed message asks which claim holds it) and by when it ends
//! (the watcher asks after every claim made). A claim stays open for its
//! ttl after its messages are deleted, so under load hundreds of thousands
//! may be open at once.

use super::Claim;
use crate::core::consumer::ConsumerId;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

#[derive(Default)]
pub(super) struct OpenClaims {
    by_id: HashMap<Arc<str>, Claim>,
    by_consumer: HashMap<ConsumerId, Arc<str>>,
    /// `(expires_at, id)` of every open claim.
    by_end: BTreeSet<(u64, Arc<str>)>,
}

impl OpenClaims {
    pub fn insert(&mut self, id: Arc<str>, claim: Claim) {
        self.by_consumer.insert(claim.consumer, id.clone());
        self.by_end.insert((claim.expires_at, id.clone()));
        if let Some(old) = self.by_id.insert(id.clone(), claim) {
            // Ids are 128 random bits; should one repeat, the indexes
            // must still name only the claim kept.
            self.by_consumer.remove(&old.consumer);
            self.by_end.remove(&(old.expires_at, id));
        }
    }

    pub fn remove(&mut self, id: &str) -> Option<(Arc<str>, Claim)> {
        let (id, claim) = self.by_id.remove_entry(id)?;
        self.by_consumer.remove(&claim.consumer);
        self.by_end.remove(&(claim.expires_at, id.clone()));
        Some((id, claim))
    }

    pub fn get(&self, id: &str) -> Option<(&Arc<str>, &Claim)> {
        self.by_id.get_key_value(id)
    }

    /// Changes claim `id` with `change`, keeping the index of ends right
    /// when it moves `expires_at`.
    pub fn update<R>(&mut self, id: &str, change: impl FnOnce(&mut Claim) -> R) -> Option<R> {
        let key = self.by_id.get_key_value(id)?.0.clone();
        let claim = self.by_id.get_mut(id)?;
        let before = claim.expires_at;
        let result = change(claim);
        let after = claim.expires_at;
        if after != before {
            self.by_end.remove(&(before, key.clone()));
            self.by_end.insert((after, key));
        }
        Some(result)
    }

    /// The claim whose consumer is `consumer`.
    pub fn of_consumer(&self, consumer: ConsumerId) -> Option<(&Arc<str>, &Claim)> {
        let id = self.by_consumer.get(&consumer)?;
        self.by_id.get_key_value(id)
    }

    /// The claims that have ended at `now` (epoch ms).
    pub fn ended_at(&self, now: u64) -> Vec<Arc<str>> {
        self.by_end
            .iter()
            .take_while(|(end, _)| *end <= now)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// When the first open claim ends.
    pub fn first_end(&self) -> Option<u64> {
        self.by_end.first().map(|(end, _)| *end)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Claim)> {
        self.by_id.iter()
    }
}
