//! What a connection's sessions and links read of it: fixed once the peer's
//! `open` is answered, but for the arrival clock, which moves once per wake-up.

use crate::core::consumer::DeliverySink;
use crate::core::factory::ConnectionFactory;
use crate::core::security::Principal;
use crate::core::Broker;

pub struct Env {
    pub broker: Broker,
    /// Where the core hands over deliveries for every link of the connection.
    pub sink: DeliverySink,
    pub container_id: String,
    /// Who the peer logged in as; every link checks its permissions.
    pub principal: Principal,
    /// The connection factory the peer's `open` (or the acceptor) named.
    pub factory: Option<ConnectionFactory>,
    /// Largest message, over all its transfer frames.
    pub max_message_size: u64,
    /// Credit each receiving link grants its sender.
    pub link_credit: u32,
    /// Links one session may attach (`max_links_per_session`).
    pub max_links_per_session: usize,
    /// Deliveries a link may have sent and unsettled (`max_unsettled_per_link`).
    pub max_unsettled_per_link: usize,
    /// The wall clock (epoch ms) when the frames being handled were read: a
    /// message's arrival time. Read once per wake-up, not per message (a
    /// clock read was 1.5% of the worker's time under load); every frame of a
    /// wake-up is handled without waiting, so it is off by well under a
    /// millisecond.
    pub read_at_ms: u64,
}
