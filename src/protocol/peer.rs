//! What the transport under a connection knows about the client: where it is, whether TLS
//! protects the bytes, and whom a verified TLS client certificate names.

use std::net::SocketAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The connection runs over TLS (a TLS listener, or AMQP's in-protocol upgrade).
    pub tls: bool,
    /// The user a verified TLS client certificate names (`[tls] external_user`), offered
    /// as SASL EXTERNAL and taken by a STOMP CONNECT without `login`.
    pub certified_user: Option<String>,
    /// What carries the protocol's bytes, as management shows it: `"tcp"`, `"websocket"`.
    pub transport: &'static str,
}

/// The transport of a plain socket (TCP, or TLS over it).
pub const TCP: &str = "tcp";

impl Peer {
    /// A client on a plain TCP connection.
    pub fn plain(addr: SocketAddr) -> Self {
        Peer {
            addr,
            tls: false,
            certified_user: None,
            transport: TCP,
        }
    }
}
