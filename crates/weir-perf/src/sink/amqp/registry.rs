//! Which consumer links read which address, with the credit each one gave and
//! the window its session left, shared by every connection of the sink under
//! one short lock (taken once per batch of frames).
//!
//! Routing only decides and counts: a delivery is charged to a consumer's
//! credit and session window here, and encoded later by that consumer's
//! connection ([`super::writer`]). A delivery no consumer can take now is
//! held by its producer's connection until one can ([`Routed::Held`]).

use super::writer::{frames, Chunk, Forward};
use crate::FastMap;
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{mpsc, Notify};
use weir_wire::amqp::{sender_credit, Flow};

#[derive(Default)]
pub struct Registry {
    pub state: Mutex<State>,
    /// Woken when a consumer may take more (credit, window, attach) or went
    /// away: connections holding deliveries try again.
    pub wake: Notify,
}

#[derive(Default)]
pub struct State {
    addresses: FastMap<Arc<str>, Address>,
    /// Sessions by (connection, channel): what they may still be sent.
    sessions: FastMap<(u64, u16), OutSession>,
}

#[derive(Default)]
struct Address {
    consumers: Vec<Consumer>,
    /// The consumer that got the last message.
    next: usize,
    /// A consumer asked for a topic here: every message goes to every consumer.
    topic: bool,
}

/// A link of a connection's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkId {
    pub conn: u64,
    pub channel: u16,
    pub handle: u32,
}

/// A consumer link: the sink sends on it.
pub struct Consumer {
    pub id: LinkId,
    pub tx: mpsc::Sender<Chunk>,
    /// The link's sender settle mode is `settled`: deliveries go pre-settled.
    pub settled: bool,
    pub topic: bool,
    /// Its attach was answered: transfers may follow.
    active: bool,
    credit: u32,
    delivery_count: u32,
}

impl Consumer {
    pub fn new(id: LinkId, tx: mpsc::Sender<Chunk>) -> Consumer {
        Consumer {
            id,
            tx,
            settled: false,
            topic: false,
            active: false,
            credit: 0,
            delivery_count: 0,
        }
    }
}

/// The sending half of a session that consumer links may be on.
struct OutSession {
    /// Transfer frames committed to it so far (its next-outgoing-id).
    next_outgoing_id: u32,
    /// Transfer frames its peer still takes.
    window: u32,
    /// The peer's max-frame-size.
    max_frame: u32,
}

/// What became of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed {
    Sent,
    /// No consumer on the address: gone, as on a topic nobody reads.
    Dropped,
    /// Consumers exist but none can take it now.
    Held,
}

/// One batch's deliveries, by destination connection: each gets one chunk.
#[derive(Default)]
pub struct Peers {
    pub list: Vec<(u64, mpsc::Sender<Chunk>, Vec<Forward>)>,
}

impl Peers {
    fn push(&mut self, c: &Consumer, payload: Bytes) {
        let at = match self.list.iter().position(|(conn, _, _)| *conn == c.id.conn) {
            Some(at) => at,
            None => {
                self.list.push((c.id.conn, c.tx.clone(), Vec::new()));
                self.list.len() - 1
            }
        };
        self.list[at].2.push(Forward {
            channel: c.id.channel,
            handle: c.id.handle,
            settled: c.settled,
            payload,
        });
    }
}

impl State {
    pub fn begin(&mut self, conn: u64, channel: u16, window: u32, max_frame: u32) {
        self.sessions.insert(
            (conn, channel),
            OutSession {
                next_outgoing_id: 0,
                window,
                max_frame,
            },
        );
    }

    /// The next-outgoing-id of a session, for the flows sent on it.
    pub fn next_outgoing_id(&self, conn: u64, channel: u16) -> u32 {
        self.sessions
            .get(&(conn, channel))
            .map_or(0, |s| s.next_outgoing_id)
    }

    /// A flow's session part: the peer's next-incoming-id and window
    /// (transport 2.5.6). True when the window grew.
    pub fn session_flow(
        &mut self,
        conn: u64,
        channel: u16,
        next_incoming_id: Option<u32>,
        incoming_window: u32,
    ) -> bool {
        let Some(s) = self.sessions.get_mut(&(conn, channel)) else {
            return false;
        };
        let before = s.window;
        s.window = next_incoming_id
            .unwrap_or(0)
            .wrapping_add(incoming_window)
            .wrapping_sub(s.next_outgoing_id);
        if s.window > incoming_window {
            // Their count ahead of ours: trust the window alone.
            s.window = incoming_window;
        }
        s.window > before
    }

    /// Registers a consumer link, not yet active: nothing is routed to it
    /// until [`State::activate`], after its attach went out.
    pub fn attach(&mut self, address: Arc<str>, consumer: Consumer) {
        let a = self.addresses.entry(address).or_default();
        a.topic |= consumer.topic;
        a.consumers.push(consumer);
    }

    pub fn activate(&mut self, links: &[(Arc<str>, LinkId)]) {
        for (address, id) in links {
            if let Some(c) = self.consumer(address, *id) {
                c.active = true;
            }
        }
    }

    fn consumer(&mut self, address: &str, id: LinkId) -> Option<&mut Consumer> {
        self.addresses
            .get_mut(address)?
            .consumers
            .iter_mut()
            .find(|c| c.id == id)
    }

    /// A consumer's flow: credit = its delivery-count + link-credit - ours
    /// (transport 2.6.7). A drain spends what is left at once. Returns the
    /// link's delivery-count and credit after it.
    pub fn consumer_flow(&mut self, address: &str, id: LinkId, flow: &Flow) -> Option<(u32, u32)> {
        let c = self.consumer(address, id)?;
        let theirs = flow.delivery_count.unwrap_or(c.delivery_count);
        let link_credit = flow.link_credit.unwrap_or(0);
        c.credit = sender_credit(theirs, link_credit, c.delivery_count);
        if flow.drain {
            c.delivery_count = c.delivery_count.wrapping_add(c.credit);
            c.credit = 0;
        }
        Some((c.delivery_count, c.credit))
    }

    pub fn detach(&mut self, address: &str, id: LinkId) {
        if let Some(a) = self.addresses.get_mut(address) {
            a.consumers.retain(|c| c.id != id);
            if a.consumers.is_empty() {
                self.addresses.remove(address);
            }
        }
    }

    /// Forgets a session's consumers, or (`channel` None) a connection's.
    pub fn end(&mut self, conn: u64, channel: Option<u16>) {
        let gone = |c: &Consumer| c.id.conn == conn && channel.is_none_or(|ch| c.id.channel == ch);
        for a in self.addresses.values_mut() {
            a.consumers.retain(|c| !gone(c));
        }
        self.addresses.retain(|_, a| !a.consumers.is_empty());
        self.sessions
            .retain(|(c, ch), _| !(*c == conn && channel.is_none_or(|x| *ch == x)));
    }

    /// Routes one message to a consumer of `address` (round robin over those
    /// that can take it), or to all of them for a topic.
    pub fn route(
        &mut self,
        address: &str,
        topic: bool,
        payload: &Bytes,
        out: &mut Peers,
    ) -> Routed {
        let Some(a) = self.addresses.get_mut(address) else {
            return Routed::Dropped;
        };
        let n = a.consumers.len();
        if n == 0 {
            return Routed::Dropped;
        }
        let sessions = &mut self.sessions;
        if topic || a.topic {
            if !a
                .consumers
                .iter()
                .all(|c| ready(c, sessions, payload.len()))
            {
                return Routed::Held;
            }
            for c in a.consumers.iter_mut() {
                take(c, sessions, payload.len());
                out.push(c, payload.clone());
            }
            return Routed::Sent;
        }
        for step in 1..=n {
            let at = (a.next + step) % n;
            let c = &mut a.consumers[at];
            if ready(c, sessions, payload.len()) {
                take(c, sessions, payload.len());
                out.push(c, payload.clone());
                a.next = at;
                return Routed::Sent;
            }
        }
        Routed::Held
    }
}

fn ready(c: &Consumer, sessions: &FastMap<(u64, u16), OutSession>, len: usize) -> bool {
    c.active
        && c.credit > 0
        && sessions
            .get(&(c.id.conn, c.id.channel))
            .is_some_and(|s| s.window >= frames(len, s.max_frame))
}

fn take(c: &mut Consumer, sessions: &mut FastMap<(u64, u16), OutSession>, len: usize) {
    c.credit -= 1;
    c.delivery_count = c.delivery_count.wrapping_add(1);
    if let Some(s) = sessions.get_mut(&(c.id.conn, c.id.channel)) {
        let n = frames(len, s.max_frame);
        s.window -= n;
        s.next_outgoing_id = s.next_outgoing_id.wrapping_add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(conn: u64) -> LinkId {
        LinkId {
            conn,
            channel: 0,
            handle: 0,
        }
    }

    fn consumer(conn: u64, tx: &mpsc::Sender<Chunk>) -> Consumer {
        Consumer::new(link(conn), tx.clone())
    }

    fn credit(delivery_count: u32, link_credit: u32) -> Flow {
        Flow {
            delivery_count: Some(delivery_count),
            link_credit: Some(link_credit),
            ..Flow::default()
        }
    }

    #[test]
    fn messages_go_round_robin_to_consumers_with_credit_and_wait_without() {
        let (tx, _rx) = mpsc::channel(4);
        let mut st = State::default();
        let q: Arc<str> = Arc::from("q");
        let body = Bytes::from_static(b"m");
        let mut peers = Peers::default();
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Dropped);
        for conn in [1, 2] {
            st.begin(conn, 0, 100, 1 << 20);
            st.attach(q.clone(), consumer(conn, &tx));
        }
        // Attached, but not answered yet and no credit: held.
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Held);
        st.activate(&[(q.clone(), link(1))]);
        st.activate(&[(q.clone(), link(2))]);
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Held);
        assert_eq!(st.consumer_flow("q", link(1), &credit(0, 2)), Some((0, 2)));
        assert_eq!(st.consumer_flow("q", link(2), &credit(0, 1)), Some((0, 1)));
        for _ in 0..3 {
            assert_eq!(st.route("q", false, &body, &mut peers), Routed::Sent);
        }
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Held);
        let counts: Vec<(u64, usize)> = peers.list.iter().map(|(c, _, f)| (*c, f.len())).collect();
        assert_eq!(counts, vec![(2, 1), (1, 2)]);
        // Consumer 1 has seen its two and grants two more: credit 2, not 4.
        assert_eq!(st.consumer_flow("q", link(1), &credit(2, 2)), Some((2, 2)));
        // Not yet seen: the two in flight still count against it.
        assert_eq!(st.consumer_flow("q", link(1), &credit(0, 2)), Some((2, 0)));
        st.detach("q", link(1));
        st.end(2, None);
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Dropped);
    }

    #[test]
    fn the_session_window_holds_deliveries_back_too() {
        let (tx, _rx) = mpsc::channel(4);
        let mut st = State::default();
        let q: Arc<str> = Arc::from("q");
        st.begin(1, 0, 2, 1 << 20);
        st.attach(q.clone(), consumer(1, &tx));
        st.activate(&[(q.clone(), link(1))]);
        st.consumer_flow("q", link(1), &credit(0, 100));
        let mut peers = Peers::default();
        let body = Bytes::from_static(b"m");
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Sent);
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Sent);
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Held);
        assert_eq!(st.next_outgoing_id(1, 0), 2);
        // They took both: next-incoming-id 2, window 2 again.
        assert!(st.session_flow(1, 0, Some(2), 2));
        assert_eq!(st.route("q", false, &body, &mut peers), Routed::Sent);
    }

    #[test]
    fn a_topic_waits_for_every_consumer_then_reaches_all() {
        let (tx, _rx) = mpsc::channel(4);
        let mut st = State::default();
        let t: Arc<str> = Arc::from("t");
        for conn in [1, 2] {
            st.begin(conn, 0, 100, 1 << 20);
            st.attach(t.clone(), consumer(conn, &tx));
            st.activate(&[(t.clone(), link(conn))]);
        }
        let mut peers = Peers::default();
        let body = Bytes::from_static(b"m");
        st.consumer_flow("t", link(1), &credit(0, 10));
        assert_eq!(st.route("t", true, &body, &mut peers), Routed::Held);
        st.consumer_flow("t", link(2), &credit(0, 10));
        assert_eq!(st.route("t", true, &body, &mut peers), Routed::Sent);
        assert_eq!(peers.list.len(), 2);
    }
}
