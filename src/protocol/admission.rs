//! Which connections may open: at most `max_connections` at once, and optionally at most so
//! many per user and per source address. Asked once a connection's handshake says who it
//! is, so that a refusal can be said in the client's protocol (a STOMP ERROR, an AMQP
//! `close` with `amqp:resource-limit-exceeded`) rather than as a reset socket.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// How many connections may be open at once; 0 = unlimited for the per-user and
/// per-address limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    pub max_connections: usize,
    pub per_user: usize,
    pub per_address: usize,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            max_connections: usize::MAX,
            per_user: 0,
            per_address: 0,
        }
    }
}

/// Why a connection was refused; the message names the setting.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("too many connections: the broker allows {0} (limits.max_connections)")]
    Total(usize),
    #[error("too many connections for user '{user}': {limit} allowed ({setting})")]
    User {
        user: String,
        limit: usize,
        /// `limits.max_connections_per_user`, or the user's own `max_connections`.
        setting: &'static str,
    },
    #[error(
        "too many connections from {address}: {limit} allowed (limits.max_connections_per_address)"
    )]
    Address { address: IpAddr, limit: usize },
}

/// The broker-wide count of open connections, shared by every acceptor.
#[derive(Debug, Clone, Default)]
pub struct Admission(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    limits: AdmissionLimits,
    /// Users with their own limit (`max_connections` on `[[users]]`), over `per_user`.
    user_limits: HashMap<String, usize>,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    /// Anonymous connections count under the empty name.
    per_user: HashMap<String, usize>,
    per_address: HashMap<IpAddr, usize>,
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Self {
        Self::with_user_limits(limits, HashMap::new())
    }

    /// With some users' own connection limits (0 = unlimited for that user).
    pub fn with_user_limits(limits: AdmissionLimits, user_limits: HashMap<String, usize>) -> Self {
        Admission(Arc::new(Shared {
            limits,
            user_limits,
            open: Mutex::default(),
        }))
    }

    /// The connection limit for `user` and the setting that gives it.
    fn user_limit(&self, user: &str) -> (usize, &'static str) {
        match self.0.user_limits.get(user) {
            Some(&n) => (n, "users.max_connections"),
            None => (self.0.limits.per_user, "limits.max_connections_per_user"),
        }
    }

    /// Counts a connection from `address` for `user` in, if every limit allows it; it
    /// counts until the ticket is dropped.
    pub fn admit(&self, address: IpAddr, user: Option<&str>) -> Result<Ticket, Refusal> {
        let limits = self.0.limits;
        let user = user.unwrap_or_default();
        let mut open = self.0.open.lock();
        if open.total >= limits.max_connections {
            return Err(Refusal::Total(limits.max_connections));
        }
        let (user_limit, setting) = self.user_limit(user);
        let for_user = open.per_user.get(user).copied().unwrap_or(0);
        if user_limit > 0 && for_user >= user_limit {
            return Err(Refusal::User {
                user: user.to_owned(),
                limit: user_limit,
                setting,
            });
        }
        let for_address = open.per_address.get(&address).copied().unwrap_or(0);
        if limits.per_address > 0 && for_address >= limits.per_address {
            return Err(Refusal::Address {
                address,
                limit: limits.per_address,
            });
        }
        open.total += 1;
        // The maps are only needed where a limit is set; unlimited brokers keep them empty.
        if user_limit > 0 {
            *open.per_user.entry(user.to_owned()).or_default() += 1;
        }
        if limits.per_address > 0 {
            *open.per_address.entry(address).or_default() += 1;
        }
        Ok(Ticket {
            admission: self.clone(),
            address,
            user: (user_limit > 0).then(|| user.to_owned()),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.0.open.lock().total
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Ticket {
    admission: Admission,
    address: IpAddr,
    user: Option<String>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let limits = self.admission.0.limits;
        let mut open = self.admission.0.open.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(user) = &self.user {
            release(&mut open.per_user, user.as_str());
        }
        if limits.per_address > 0 {
            release(&mut open.per_address, &self.address);
        }
    }
}

/// One fewer under `key`; the entry goes when none is left, so the map holds only the
/// users and addresses that have connections open.
fn release<K, Q>(counts: &mut HashMap<K, usize>, key: &Q)
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn each_limit_refuses_one_more_and_frees_its_place_on_drop() {
        let admission = Admission::new(AdmissionLimits {
            max_connections: 3,
            per_user: 2,
            per_address: 2,
        });
        let a = admission.admit(ip(1), Some("ann")).unwrap();
        let _b = admission.admit(ip(1), Some("bob")).unwrap();
        assert!(matches!(
            admission.admit(ip(1), Some("cid")),
            Err(Refusal::Address { limit: 2, .. })
        ));
        let _c = admission.admit(ip(2), Some("ann")).unwrap();
        assert_eq!(admission.admit(ip(3), None).err(), Some(Refusal::Total(3)));
        drop(a);
        let _d = admission.admit(ip(3), Some("ann")).unwrap();
        assert_eq!(admission.open(), 3);
    }

    #[test]
    fn a_users_own_limit_overrides_the_broker_wide_one() {
        let admission = Admission::with_user_limits(
            AdmissionLimits {
                max_connections: 10,
                per_user: 1,
                per_address: 0,
            },
            HashMap::from([("ann".to_owned(), 2), ("bob".to_owned(), 0)]),
        );
        let _a = admission.admit(ip(1), Some("ann")).unwrap();
        let _b = admission.admit(ip(1), Some("ann")).unwrap();
        let refused = admission.admit(ip(1), Some("ann")).unwrap_err();
        assert!(refused.to_string().contains("users.max_connections"));
        for _ in 0..3 {
            std::mem::forget(admission.admit(ip(1), Some("bob")).unwrap());
        }
        let _c = admission.admit(ip(1), Some("cid")).unwrap();
        assert!(admission.admit(ip(1), Some("cid")).is_err());
    }

    #[test]
    fn anonymous_clients_share_one_user() {
        let admission = Admission::new(AdmissionLimits {
            max_connections: 10,
            per_user: 1,
            per_address: 0,
        });
        let _a = admission.admit(ip(1), None).unwrap();
        assert!(matches!(
            admission.admit(ip(2), None),
            Err(Refusal::User { limit: 1, .. })
        ));
    }
}
