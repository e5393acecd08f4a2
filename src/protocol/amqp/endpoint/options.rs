//! What an AMQP acceptor runs with: its options from the config's limits, and
//! the broker-wide registry of containers that asked to be the only connection.

use crate::core::TransactionLimits;
use crate::protocol::admission::Admission;
use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;

/// Limits and names an AMQP acceptor runs with (from the config's limits).
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    /// Largest frame we accept (announced in `open`).
    pub max_frame_size: u32,
    /// Largest message, over all its transfer frames.
    pub max_message_size: u64,
    /// We close a connection silent for this long; peers are asked to send within half.
    /// Zero: no idle timeout.
    pub idle_timeout: Duration,
    /// Credit each receiving link grants its sender.
    pub link_credit: u32,
    /// Sessions one connection may begin (`max_sessions_per_connection`):
    /// announced as channel-max (channels 0 to one less).
    pub max_sessions: usize,
    /// Links one session may attach (`max_links_per_session`).
    pub max_links_per_session: usize,
    /// Deliveries sent on a link and unsettled before it stops (`max_unsettled_per_link`).
    pub max_unsettled_per_link: usize,
    /// Connection factory of the acceptor (an `open` hostname naming one wins).
    pub connection_factory: Option<String>,
    /// The protocol header and SASL exchange must be over within this.
    pub sasl_timeout: Duration,
    /// The peer's `open` must follow its AMQP header within this.
    pub open_timeout: Duration,
    /// A frame that started must finish within this; zero: no limit.
    pub frame_timeout: Duration,
    /// Which connections may open (shared by every acceptor).
    pub admission: Admission,
    /// Container ids of open connections that asked to be the only one for their container.
    pub containers: ContainerRegistry,
    /// What transactions may hold (`[limits]`).
    pub transactions: TransactionLimits,
}

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            max_frame_size: 1 << 20,
            max_message_size: 100 << 20,
            idle_timeout: Duration::from_secs(60),
            link_credit: 1000,
            max_sessions: 256,
            max_links_per_session: 1000,
            max_unsettled_per_link: 10_000,
            connection_factory: None,
            sasl_timeout: Duration::from_secs(10),
            open_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(60),
            admission: Admission::default(),
            containers: ContainerRegistry::default(),
            transactions: TransactionLimits::default(),
        }
    }
}

impl AmqpOptions {
    /// The highest channel a session may use.
    pub(super) fn channel_max(&self) -> u16 {
        u16::try_from(self.max_sessions.saturating_sub(1)).unwrap_or(u16::MAX)
    }
}

/// Broker-wide: which container ids have a connection that claimed them
/// (`sole-connection-for-container`). Shared by all AMQP acceptors.
#[derive(Debug, Clone, Default)]
pub struct ContainerRegistry(Arc<DashMap<String, ()>>);

impl ContainerRegistry {
    /// Claims `id`; the guard releases it.
    pub(super) fn claim(&self, id: &str) -> Option<ContainerClaim> {
        match self.0.entry(id.to_owned()) {
            dashmap::mapref::entry::Entry::Occupied(_) => None,
            dashmap::mapref::entry::Entry::Vacant(v) => {
                v.insert(());
                Some(ContainerClaim {
                    registry: self.clone(),
                    id: id.to_owned(),
                })
            }
        }
    }
}

pub(super) struct ContainerClaim {
    registry: ContainerRegistry,
    id: String,
}

impl Drop for ContainerClaim {
    fn drop(&mut self) {
        self.registry.0.remove(&self.id);
    }
}
