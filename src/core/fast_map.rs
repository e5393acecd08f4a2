//! Hash maps for the per-message bookkeeping of queues (group lanes, owners,
//! in-flight deliveries). std's SipHash costs more than the lookup itself for
//! short keys; foldhash is several times faster and still seeded per process,
//! so clients choosing group ids cannot aim them at one bucket.

pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
