//! Who may do what at which address: Artemis's security settings. Each address pattern
//! grants every permission to a set of roles; the most specific pattern matching an
//! address decides alone (patterns do not combine), and an address no pattern matches
//! is denied. With no patterns configured at all, everything is allowed.

use crate::core::settings::AddressPattern;
use std::fmt;

/// One thing a client may be allowed to do at an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    Send,
    Consume,
    Browse,
    CreateDurableQueue,
    DeleteDurableQueue,
    CreateNonDurableQueue,
    DeleteNonDurableQueue,
    CreateAddress,
    Manage,
    /// Read-only management (the HTTP API's reads, metrics); `manage` implies it.
    View,
}

impl Permission {
    pub const ALL: [Permission; 10] = [
        Permission::Send,
        Permission::Consume,
        Permission::Browse,
        Permission::CreateDurableQueue,
        Permission::DeleteDurableQueue,
        Permission::CreateNonDurableQueue,
        Permission::DeleteNonDurableQueue,
        Permission::CreateAddress,
        Permission::Manage,
        Permission::View,
    ];

    /// The configuration key, also how a refusal names it.
    pub fn key(self) -> &'static str {
        match self {
            Permission::Send => "send",
            Permission::Consume => "consume",
            Permission::Browse => "browse",
            Permission::CreateDurableQueue => "create_durable_queue",
            Permission::DeleteDurableQueue => "delete_durable_queue",
            Permission::CreateNonDurableQueue => "create_non_durable_queue",
            Permission::DeleteNonDurableQueue => "delete_non_durable_queue",
            Permission::CreateAddress => "create_address",
            Permission::Manage => "manage",
            Permission::View => "view",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Roles as bits: a principal's roles and a permission's roles meet in one AND.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleSet(u64);

impl RoleSet {
    /// Most distinct role names a broker may use.
    pub const MAX_ROLES: usize = 64;

    pub fn with(self, role: usize) -> RoleSet {
        debug_assert!(role < Self::MAX_ROLES);
        RoleSet(self.0 | (1u64 << role))
    }

    pub fn union(self, other: RoleSet) -> RoleSet {
        RoleSet(self.0 | other.0)
    }

    pub fn meets(self, other: RoleSet) -> bool {
        self.0 & other.0 != 0
    }
}

/// Role names, numbered in the order first seen.
#[derive(Debug, Clone, Default)]
pub struct RoleNames(Vec<String>);

impl RoleNames {
    /// The number of `name`, numbering it if new; `None` past [`RoleSet::MAX_ROLES`].
    pub fn number(&mut self, name: &str) -> Option<usize> {
        if let Some(i) = self.0.iter().position(|n| n == name) {
            return Some(i);
        }
        if self.0.len() == RoleSet::MAX_ROLES {
            return None;
        }
        self.0.push(name.to_owned());
        Some(self.0.len() - 1)
    }

    pub fn get(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|n| n == name)
    }
}

/// The roles granted each permission at one pattern.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants([RoleSet; 10]);

impl Grants {
    pub fn grant(&mut self, permission: Permission, roles: RoleSet) {
        let slot = &mut self.0[permission.index()];
        *slot = slot.union(roles);
    }

    fn roles(&self, permission: Permission) -> RoleSet {
        self.0[permission.index()]
    }

    /// The roles that may do `permission`: those granted it, and for `view` also those
    /// granted `manage` (who may change something may look at it).
    fn roles_for(&self, permission: Permission) -> RoleSet {
        match permission {
            Permission::View => self
                .roles(Permission::View)
                .union(self.roles(Permission::Manage)),
            _ => self.roles(permission),
        }
    }
}

/// Every configured pattern with its grants; empty = no permissions configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Least specific first, so the last match is the one that decides.
    rules: Vec<(AddressPattern, Grants)>,
}

impl Permissions {
    pub fn add(&mut self, pattern: AddressPattern, grants: Grants) {
        self.rules.push((pattern, grants));
        self.rules.sort_by_key(|(p, _)| p.specificity());
    }

    /// Whether any pattern is configured (else everything is allowed).
    pub fn is_configured(&self) -> bool {
        !self.rules.is_empty()
    }

    /// Whether `roles` may do `permission` at `address`.
    pub fn allows(&self, roles: RoleSet, address: &str, permission: Permission) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        match self.rules.iter().rev().find(|(p, _)| p.matches(address)) {
            Some((_, grants)) => grants.roles_for(permission).meets(roles),
            None => false,
        }
    }
}

/// A refused operation, for the client and for the audit log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{who} may not {permission} at '{address}' (security.permissions)", who = Who(user.as_deref()))]
pub struct Denied {
    pub permission: Permission,
    pub address: String,
    pub user: Option<String>,
}

struct Who<'a>(Option<&'a str>);

impl fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(user) => write!(f, "user '{user}'"),
            None => f.write_str("an anonymous client"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(permission: Permission, roles: RoleSet) -> Grants {
        let mut g = Grants::default();
        g.grant(permission, roles);
        g
    }

    #[test]
    fn the_most_specific_pattern_decides_alone() {
        let ops = RoleSet::default().with(0);
        let dev = RoleSet::default().with(1);
        let mut p = Permissions::default();
        p.add(
            AddressPattern::new("#"),
            grants(Permission::Send, ops.union(dev)),
        );
        p.add(
            AddressPattern::new("orders.#"),
            grants(Permission::Send, ops),
        );
        p.add(
            AddressPattern::new("orders.eu"),
            grants(Permission::Consume, dev),
        );
        assert!(p.allows(dev, "misc", Permission::Send));
        assert!(!p.allows(dev, "orders.us", Permission::Send));
        assert!(p.allows(ops, "orders.us", Permission::Send));
        // orders.eu grants no send at all: the broader patterns do not fill in.
        assert!(!p.allows(ops, "orders.eu", Permission::Send));
        assert!(p.allows(dev, "orders.eu", Permission::Consume));
    }

    #[test]
    fn nothing_configured_allows_all_and_no_match_denies() {
        let none = RoleSet::default();
        assert!(Permissions::default().allows(none, "x", Permission::Manage));
        let mut p = Permissions::default();
        p.add(
            AddressPattern::new("a.*"),
            grants(Permission::Send, none.with(0)),
        );
        assert!(!p.allows(none.with(0), "b", Permission::Send));
    }

    #[test]
    fn manage_implies_view_and_not_the_other_way() {
        let ops = RoleSet::default().with(0);
        let audit = RoleSet::default().with(1);
        let mut g = grants(Permission::Manage, ops);
        g.grant(Permission::View, audit);
        let mut p = Permissions::default();
        p.add(AddressPattern::new("#"), g);
        assert!(p.allows(ops, "q", Permission::View));
        assert!(p.allows(audit, "q", Permission::View));
        assert!(!p.allows(audit, "q", Permission::Manage));
    }

    #[test]
    fn roles_are_numbered_up_to_the_limit() {
        let mut names = RoleNames::default();
        for i in 0..RoleSet::MAX_ROLES {
            assert_eq!(names.number(&format!("r{i}")), Some(i));
        }
        assert_eq!(names.number("r3"), Some(3));
        assert_eq!(names.number("one-too-many"), None);
    }

    #[test]
    fn a_denial_names_the_permission_the_address_and_the_user() {
        let d = Denied {
            permission: Permission::CreateDurableQueue,
            address: "orders".into(),
            user: Some("bob".into()),
        };
        assert_eq!(
            d.to_string(),
            "user 'bob' may not create_durable_queue at 'orders' (security.permissions)"
        );
    }
}
