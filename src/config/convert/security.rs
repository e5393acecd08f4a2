//! `[security]` and `[tls]`: users and their secrets, roles and permissions, certificates.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::security::{
    CredentialError, Grants, Permissions, RoleNames, RoleSet, Secret, UserPolicy,
};
use crate::core::settings::AddressPattern;

use super::DEFAULT_LOGIN_FAILURE_DELAY;
use super::{duration_or, ranged, to_usize};
use crate::config::error::{ConfigError, KeyPath, Problem};
use crate::config::raw::{RawSecurity, RawTls, RawUser};
use crate::config::{Access, ClientAuth, ExternalUser, Security, Tls, User};

pub(super) fn security(users: Vec<RawUser>, raw: &RawSecurity) -> Result<Security, ConfigError> {
    let mut out: Vec<User> = Vec::with_capacity(users.len());
    for (i, u) in users.into_iter().enumerate() {
        let key = KeyPath::root("users").index(i);
        if u.name.is_empty() {
            return Err(ConfigError::key(key.field("name"), Problem::Empty));
        }
        let secret = match (u.password, u.credential) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::key(key, Problem::PasswordAndCredential))
            }
            (None, None) => {
                return Err(ConfigError::key(
                    key,
                    Problem::Schema("missing field `credential` (or `password`)".into()),
                ))
            }
            (Some(p), None) if p.is_empty() => {
                return Err(ConfigError::key(key.field("password"), Problem::Empty))
            }
            (Some(p), None) => Secret::Password(p),
            (None, Some(c)) => Secret::Credential(c.parse().map_err(|e: CredentialError| {
                ConfigError::key(key.field("credential"), Problem::Credential(e))
            })?),
        };
        if out.iter().any(|o| o.name == u.name) {
            return Err(ConfigError::key(
                key.field("name"),
                Problem::Duplicate(u.name),
            ));
        }
        let per_user = |value: Option<u64>, field: &str| {
            value
                .map(|v| ranged(Some(v), 0, 0, 1_000_000, &key.field(field)).map(to_usize))
                .transpose()
        };
        let max_connections = per_user(u.max_connections, "max_connections")?;
        let max_queues = per_user(u.max_queues, "max_queues")?;
        for (j, role) in u.roles.iter().enumerate() {
            if role.is_empty() {
                return Err(ConfigError::key(
                    key.field("roles").index(j),
                    Problem::Empty,
                ));
            }
        }
        out.push(User {
            name: u.name,
            secret,
            roles: u.roles,
            max_connections,
            max_queues,
        });
    }
    let delay_key = KeyPath::root("security").field("login_failure_delay");
    let login_failure_delay = duration_or(
        raw.login_failure_delay.as_ref(),
        DEFAULT_LOGIN_FAILURE_DELAY,
        &delay_key,
    )?;
    let max_delay = Duration::from_secs(60);
    if login_failure_delay > max_delay {
        return Err(ConfigError::key(
            delay_key,
            Problem::DurationOutOfRange {
                min: Duration::from_millis(1),
                max: max_delay,
                zero_allowed: true,
            },
        ));
    }
    let access = access(&out, raw)?;
    Ok(Security {
        allow_anonymous: raw.allow_anonymous.unwrap_or(out.is_empty()),
        allow_anonymous_set: raw.allow_anonymous.is_some(),
        users: out,
        login_failure_delay,
        access,
        require_tls_for_passwords: raw.require_tls_for_passwords.unwrap_or(false),
    })
}

/// Roles numbered, each user's roles and limits, and the permission table. A role that
/// is granted something but that no user (nor `anonymous_roles`) holds is refused: it is
/// most likely a typo, and as written it would grant nothing.
pub(super) fn access(users: &[User], raw: &RawSecurity) -> Result<Access, ConfigError> {
    let mut names = RoleNames::default();
    let too_many = |key: KeyPath| {
        ConfigError::key(
            key,
            Problem::OutOfRange {
                min: 1,
                max: RoleSet::MAX_ROLES as u64,
            },
        )
    };
    let mut policies = HashMap::new();
    for (i, user) in users.iter().enumerate() {
        let mut roles = RoleSet::default();
        for role in &user.roles {
            let key = KeyPath::root("users").index(i).field("roles");
            roles = roles.with(names.number(role).ok_or_else(|| too_many(key))?);
        }
        policies.insert(
            user.name.clone(),
            UserPolicy {
                roles,
                max_queues: user.max_queues,
            },
        );
    }
    let mut anonymous_roles = RoleSet::default();
    for role in &raw.anonymous_roles {
        let key = KeyPath::root("security").field("anonymous_roles");
        if role.is_empty() {
            return Err(ConfigError::key(key, Problem::Empty));
        }
        anonymous_roles = anonymous_roles.with(names.number(role).ok_or_else(|| too_many(key))?);
    }
    let mut permissions = Permissions::default();
    for (pattern, raw_grants) in &raw.permissions {
        let key = KeyPath::root("security")
            .field("permissions")
            .field(pattern);
        if pattern.split('.').any(str::is_empty) {
            return Err(ConfigError::key(key, Problem::BadPattern(pattern.clone())));
        }
        let mut grants = Grants::default();
        for (permission, roles) in raw_grants.grants() {
            let mut set = RoleSet::default();
            for role in roles {
                let number = names.get(role).ok_or_else(|| {
                    ConfigError::key(
                        key.field(permission.key()),
                        Problem::UnknownRole(role.clone()),
                    )
                })?;
                set = set.with(number);
            }
            grants.grant(permission, set);
        }
        permissions.add(AddressPattern::new(pattern), grants);
    }
    Ok(Access {
        permissions,
        users: policies,
        anonymous_roles,
    })
}

/// The files must be named here; whether they hold a usable identity is checked when the
/// server loads them (at start and on SIGHUP).
pub(super) fn tls(raw: RawTls) -> Result<Tls, ConfigError> {
    let key = KeyPath::root("tls");
    let file = |value: Option<PathBuf>, name: &str| match value {
        None => Err(ConfigError::key(
            key.field(name),
            Problem::Schema(format!("missing: [tls] needs `{name}`")),
        )),
        Some(p) if p.as_os_str().is_empty() => {
            Err(ConfigError::key(key.field(name), Problem::Empty))
        }
        Some(p) => Ok(p),
    };
    let cert_file = file(raw.cert_file, "cert_file")?;
    let key_file = file(raw.key_file, "key_file")?;
    let ca_file = raw.ca_file.map(|p| file(Some(p), "ca_file")).transpose()?;
    let client_auth = raw.client_auth.unwrap_or(ClientAuth::None);
    if client_auth != ClientAuth::None && ca_file.is_none() {
        return Err(ConfigError::key(
            key.field("client_auth"),
            Problem::ClientAuthWithoutCa,
        ));
    }
    Ok(Tls {
        cert_file,
        key_file,
        ca_file,
        client_auth,
        external_user: raw.external_user.unwrap_or(ExternalUser::Cn),
    })
}
