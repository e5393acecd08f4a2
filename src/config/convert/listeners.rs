//! Listeners: the protocol acceptors, the HTTP listener and the WebSocket one, and
//! the rule that no two share an address.

use std::collections::HashSet;
use std::net::SocketAddr;

use super::socket_addr;
use super::{DEFAULT_AMQP, DEFAULT_HTTP, DEFAULT_STOMP};
use crate::config::error::{ConfigError, KeyPath, Problem};
use crate::config::raw::{RawAcceptors, RawHttp, RawWebSocket};
use crate::config::{Acceptors, ConnectionFactory, Http, Listener, WebSocket};

/// `tls_configured`: there is a `[tls]` section for listeners with `tls = true`.
/// The HTTP listener: on at its default address unless `enabled = false`; its address
/// must differ from every protocol listener's.
pub(super) fn http(
    raw: &RawHttp,
    acceptors: &Acceptors,
    tls_configured: bool,
) -> Result<Option<Http>, ConfigError> {
    let key = KeyPath::root("http");
    let bind = socket_addr(
        raw.bind.as_deref().unwrap_or(DEFAULT_HTTP),
        &key.field("bind"),
    )?;
    let tls = raw.tls.unwrap_or(false);
    if tls && !tls_configured {
        return Err(ConfigError::key(
            key.field("tls"),
            Problem::TlsWithoutIdentity,
        ));
    }
    if !raw.enabled.unwrap_or(true) {
        return Ok(None);
    }
    check_free(bind, &key.field("bind"), acceptor_addresses(acceptors))?;
    Ok(Some(Http { bind, tls }))
}

/// Every protocol acceptor's address, with the key that sets it.
pub(super) fn acceptor_addresses(
    acceptors: &Acceptors,
) -> impl Iterator<Item = (KeyPath, SocketAddr)> + '_ {
    [("stomp", acceptors.stomp), ("amqp", acceptors.amqp)]
        .into_iter()
        .filter_map(|(name, addr)| Some((KeyPath::root("acceptors").field(name), addr?)))
        .chain(acceptors.extra.iter().enumerate().map(|(i, l)| {
            (
                KeyPath::root("acceptors")
                    .field("extra")
                    .index(i)
                    .field("bind"),
                l.bind,
            )
        }))
}

/// `bind` (set at `key`) is none of `taken`; port 0 picks a free port, so it never clashes.
pub(super) fn check_free(
    bind: SocketAddr,
    key: &KeyPath,
    taken: impl IntoIterator<Item = (KeyPath, SocketAddr)>,
) -> Result<(), ConfigError> {
    for (other, addr) in taken {
        if addr == bind && bind.port() != 0 {
            return Err(ConfigError::key(
                key.clone(),
                Problem::AddressInUse { addr, other },
            ));
        }
    }
    Ok(())
}

/// The WebSocket listener of its own: off unless `bind` is given; its address must differ
/// from every other listener's.
pub(super) fn websocket(
    raw: &RawWebSocket,
    acceptors: &Acceptors,
    http: Option<&Http>,
    tls_configured: bool,
) -> Result<Option<WebSocket>, ConfigError> {
    let key = KeyPath::root("websocket");
    let tls = raw.tls.unwrap_or(false);
    if tls && !tls_configured {
        return Err(ConfigError::key(
            key.field("tls"),
            Problem::TlsWithoutIdentity,
        ));
    }
    let Some(text) = raw.bind.as_deref() else {
        return Ok(None);
    };
    let bind = socket_addr(text, &key.field("bind"))?;
    let http = http.map(|h| (KeyPath::root("http").field("bind"), h.bind));
    check_free(
        bind,
        &key.field("bind"),
        acceptor_addresses(acceptors).chain(http),
    )?;
    Ok(Some(WebSocket { bind, tls }))
}

pub(super) fn acceptors(
    raw: RawAcceptors,
    factories: &[ConnectionFactory],
    tls_configured: bool,
) -> Result<Acceptors, ConfigError> {
    let key = KeyPath::root("acceptors");
    let main = |text: Option<String>, default: &str, field: &str| match text {
        None => socket_addr(default, &key.field(field)).map(Some),
        Some(t) if t.trim().is_empty() => Ok(None),
        Some(t) => socket_addr(&t, &key.field(field)).map(Some),
    };
    let stomp = main(raw.stomp, DEFAULT_STOMP, "stomp")?;
    let amqp = main(raw.amqp, DEFAULT_AMQP, "amqp")?;

    let mut bound: Vec<(SocketAddr, KeyPath)> = Vec::new();
    let mut claim = |addr: SocketAddr, at: KeyPath| {
        // Port 0 asks the OS for a fresh port, so it never collides.
        match bound.iter().find(|(a, _)| *a == addr && addr.port() != 0) {
            Some((_, other)) => Err(ConfigError::key(
                at,
                Problem::AddressInUse {
                    addr,
                    other: other.clone(),
                },
            )),
            None => {
                bound.push((addr, at));
                Ok(())
            }
        }
    };
    if let Some(a) = stomp {
        claim(a, key.field("stomp"))?;
    }
    if let Some(a) = amqp {
        claim(a, key.field("amqp"))?;
    }

    let mut names: HashSet<String> = ["stomp", "amqp"].map(str::to_owned).into();
    let mut extra = Vec::new();
    for (i, e) in raw.extra.into_iter().enumerate() {
        let ekey = key.field("extra").index(i);
        if e.name.is_empty() {
            return Err(ConfigError::key(ekey.field("name"), Problem::Empty));
        }
        if !names.insert(e.name.clone()) {
            return Err(ConfigError::key(
                ekey.field("name"),
                Problem::Duplicate(e.name),
            ));
        }
        let bind = socket_addr(&e.bind, &ekey.field("bind"))?;
        claim(bind, ekey.field("bind"))?;
        let mut protocols = Vec::new();
        for p in e.protocols {
            if !protocols.contains(&p) {
                protocols.push(p);
            }
        }
        if protocols.is_empty() {
            return Err(ConfigError::key(
                ekey.field("protocols"),
                Problem::NoProtocols,
            ));
        }
        if let Some(f) = &e.connection_factory {
            if !factories.iter().any(|cf| &cf.name == f) {
                return Err(ConfigError::key(
                    ekey.field("connection_factory"),
                    Problem::UnknownConnectionFactory(f.clone()),
                ));
            }
        }
        if e.tls && !tls_configured {
            return Err(ConfigError::key(
                ekey.field("tls"),
                Problem::TlsWithoutIdentity,
            ));
        }
        extra.push(Listener {
            name: e.name,
            bind,
            protocols,
            connection_factory: e.connection_factory,
            tls: e.tls,
        });
    }
    Ok(Acceptors { stomp, amqp, extra })
}
