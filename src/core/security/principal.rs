//! Who a connection is once logged in, and what the broker lets them do: the
//! [`Authorizer`] holds the configured roles, permissions and per-user queue limits;
//! a [`Principal`] is one connection's view of it, handed to the core with every
//! operation that needs a permission.

use super::audit;
use super::permissions::{Denied, Permission, Permissions, RoleSet};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// What one user may hold beyond the permissions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserPolicy {
    pub roles: RoleSet,
    /// Queues the user may have created at once; `None` takes the broker's default.
    pub max_queues: Option<usize>,
}

/// The broker's access rules; one per broker.
#[derive(Debug, Default)]
pub struct Authorizer {
    permissions: Permissions,
    users: HashMap<String, UserPolicy>,
    anonymous_roles: RoleSet,
    /// Queues any user may have created at once; 0 = unlimited.
    default_max_queues: usize,
    /// Queues created by each user and still there (only users with a limit).
    created: Mutex<HashMap<String, usize>>,
}

/// A user's queue limit is reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{who} has created {limit} queues, the most allowed ({setting})")]
pub struct QueueLimit {
    pub who: String,
    pub limit: usize,
    pub setting: &'static str,
}

impl Authorizer {
    pub fn new(
        permissions: Permissions,
        users: HashMap<String, UserPolicy>,
        anonymous_roles: RoleSet,
        default_max_queues: usize,
    ) -> Self {
        Authorizer {
            permissions,
            users,
            anonymous_roles,
            default_max_queues,
            created: Mutex::default(),
        }
    }

    /// Whether any permission is configured; without, everyone may do everything.
    pub fn enforces_permissions(&self) -> bool {
        self.permissions.is_configured()
    }

    fn roles_of(&self, user: Option<&str>) -> RoleSet {
        match user {
            Some(u) => self.users.get(u).map(|p| p.roles).unwrap_or_default(),
            None => self.anonymous_roles,
        }
    }

    fn max_queues_of(&self, user: Option<&str>) -> (usize, &'static str) {
        match user.and_then(|u| self.users.get(u)?.max_queues) {
            Some(n) => (n, "users.max_queues"),
            None => (self.default_max_queues, "limits.max_queues_per_user"),
        }
    }
}

/// One connection's identity: who it logged in as, from where, and the roles that gives.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Principal(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    user: Option<String>,
    roles: RoleSet,
    peer: Option<SocketAddr>,
    client_id: Option<String>,
    authorizer: Arc<Authorizer>,
    /// Copied from the authorizer so the common case is one load, not two.
    enforces: bool,
}

impl Principal {
    pub fn new(
        authorizer: &Arc<Authorizer>,
        user: Option<&str>,
        peer: Option<SocketAddr>,
        client_id: Option<&str>,
    ) -> Self {
        Principal(Arc::new(Inner {
            user: user.map(str::to_owned),
            roles: authorizer.roles_of(user),
            peer,
            client_id: client_id.map(str::to_owned),
            enforces: authorizer.enforces_permissions(),
            authorizer: authorizer.clone(),
        }))
    }

    /// A principal for which everything is allowed: the broker's own work, tests.
    pub fn unrestricted() -> Self {
        Principal::new(&Arc::new(Authorizer::default()), None, None, None)
    }

    pub fn user(&self) -> Option<&str> {
        self.0.user.as_deref()
    }

    /// The client's address, when it came over a network.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.0.peer
    }

    /// The client's name for itself, as it logged in.
    pub fn client_id(&self) -> Option<&str> {
        self.0.client_id.as_deref()
    }

    /// Whether checks can refuse anything; when not, a protocol needs no cache of them.
    #[inline]
    pub fn is_restricted(&self) -> bool {
        self.0.enforces
    }

    /// Whether allowed, without a line in the audit log: for filtering what a
    /// caller is shown, where not showing is no refusal.
    pub fn may(&self, address: &str, permission: Permission) -> bool {
        !self.0.enforces
            || self
                .0
                .authorizer
                .permissions
                .allows(self.0.roles, address, permission)
    }

    /// Allowed, or refused with a line in the audit log.
    #[inline]
    pub fn check(&self, address: &str, permission: Permission) -> Result<(), Denied> {
        if !self.0.enforces {
            return Ok(());
        }
        self.check_slow(address, permission)
    }

    #[cold]
    fn check_slow(&self, address: &str, permission: Permission) -> Result<(), Denied> {
        let p = &self.0;
        if p.authorizer
            .permissions
            .allows(p.roles, address, permission)
        {
            return Ok(());
        }
        audit::denied(
            p.peer,
            p.user.as_deref(),
            p.client_id.as_deref(),
            permission,
            address,
        );
        Err(Denied {
            permission,
            address: address.to_owned(),
            user: p.user.clone(),
        })
    }

    /// A place for one more queue created by this user, held until the slot drops;
    /// `None` when the user has no queue limit.
    pub fn claim_queue(&self) -> Result<Option<QueueSlot>, QueueLimit> {
        let (limit, setting) = self.0.authorizer.max_queues_of(self.user());
        if limit == 0 {
            return Ok(None);
        }
        let key = self.user().unwrap_or_default();
        let mut created = self.0.authorizer.created.lock();
        let count = created.entry(key.to_owned()).or_default();
        if *count >= limit {
            let who = match self.user() {
                Some(u) => format!("user '{u}'"),
                None => "anonymous clients".to_owned(),
            };
            return Err(QueueLimit {
                who,
                limit,
                setting,
            });
        }
        *count += 1;
        Ok(Some(QueueSlot {
            authorizer: self.0.authorizer.clone(),
            user: key.to_owned(),
        }))
    }
}

/// One queue counted against its creator's `max_queues`, until dropped.
#[derive(Debug)]
pub struct QueueSlot {
    authorizer: Arc<Authorizer>,
    user: String,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let mut created = self.authorizer.created.lock();
        if let Some(n) = created.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                created.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::permissions::Grants;
    use super::*;
    use crate::core::settings::AddressPattern;

    fn authorizer(max_queues: usize) -> Arc<Authorizer> {
        let ops = RoleSet::default().with(0);
        let mut grants = Grants::default();
        grants.grant(Permission::Send, ops);
        let mut permissions = Permissions::default();
        permissions.add(AddressPattern::new("orders.#"), grants);
        let users = HashMap::from([(
            "alice".to_owned(),
            UserPolicy {
                roles: ops,
                max_queues: None,
            },
        )]);
        Arc::new(Authorizer::new(
            permissions,
            users,
            RoleSet::default(),
            max_queues,
        ))
    }

    #[test]
    fn roles_come_from_the_user() {
        let a = authorizer(0);
        let alice = Principal::new(&a, Some("alice"), None, None);
        let anon = Principal::new(&a, None, None, None);
        assert!(alice.check("orders.eu", Permission::Send).is_ok());
        assert!(alice.check("orders.eu", Permission::Consume).is_err());
        assert!(anon.check("orders.eu", Permission::Send).is_err());
        assert!(Principal::unrestricted()
            .check("x", Permission::Manage)
            .is_ok());
    }

    #[test]
    fn queue_slots_count_until_dropped() {
        let a = authorizer(2);
        let alice = Principal::new(&a, Some("alice"), None, None);
        let one = alice.claim_queue().unwrap();
        let _two = alice.claim_queue().unwrap();
        let refused = alice.claim_queue().unwrap_err();
        assert_eq!(refused.limit, 2);
        assert!(refused.to_string().contains("limits.max_queues_per_user"));
        drop(one);
        assert!(alice.claim_queue().unwrap().is_some());
        assert!(authorizer(0).max_queues_of(Some("alice")).0.eq(&0));
    }
}
