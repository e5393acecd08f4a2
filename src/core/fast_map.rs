//! Hash maps for per-message bookkeeping: group lanes, owners and in-flight
//! deliveries in queues; sessions, links and unsettled deliveries in the
//! protocol layers (looked up per frame). std's SipHash costs more than the lookup itself for
//! short keys; foldhash is several times faster and still seeded per process,
//! so clients choosing group ids cannot aim them at one bucket.

pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The broker's address tables, looked up on every send.
pub type FastDashMap<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;
