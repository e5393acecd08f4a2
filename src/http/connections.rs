//! `/api/connections`: the open client connections, and closing one.

use super::auth::Caller;
use super::error::ApiError;
use crate::core::connections::ConnectionInfo;
use crate::core::manage::MANAGEMENT_ADDRESS;
use crate::core::security::Permission;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;

#[derive(Serialize)]
pub struct Connection {
    id: u64,
    protocol: String,
    version: String,
    /// What carries the protocol: "tcp" or "websocket".
    transport: &'static str,
    peer: String,
    tls: bool,
    user: Option<String>,
    client_id: Option<String>,
    /// Epoch milliseconds.
    connected_at: u64,
    messages: Messages,
    rates: MessageRates,
}

/// Since the connection opened.
#[derive(Serialize)]
pub struct Messages {
    /// From the client.
    received: u64,
    /// Delivered to the client.
    sent: u64,
}

/// Messages per second, averaged since the previous reading at least a second earlier.
#[derive(Serialize)]
pub struct MessageRates {
    received_per_second: f64,
    sent_per_second: f64,
}

impl From<ConnectionInfo> for Connection {
    fn from(c: ConnectionInfo) -> Self {
        let d = c.descriptor;
        Connection {
            id: c.id,
            protocol: d.protocol,
            version: d.version,
            transport: d.transport,
            peer: d.peer.to_string(),
            tls: d.tls,
            user: d.user,
            client_id: d.client_id,
            connected_at: c.connected_at,
            messages: Messages {
                received: c.traffic.received,
                sent: c.traffic.sent,
            },
            rates: MessageRates {
                received_per_second: c.received_per_second,
                sent_per_second: c.sent_per_second,
            },
        }
    }
}

/// View at `weir.management`.
pub async fn list(caller: Caller) -> Result<Json<Vec<Connection>>, ApiError> {
    caller.may(MANAGEMENT_ADDRESS, Permission::View)?;
    let list = caller.broker.connections().list();
    Ok(Json(list.into_iter().map(Connection::from).collect()))
}

/// Manage at `weir.management`: the connection is told in its protocol (a STOMP ERROR,
/// an AMQP close with `amqp:connection:forced`) and closed.
pub async fn close(caller: Caller, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("id: '{id}' is not a connection id")))?;
    caller.may(MANAGEMENT_ADDRESS, Permission::Manage)?;
    match caller.broker.connections().close(id) {
        true => Ok(StatusCode::ACCEPTED),
        false => Err(ApiError::NotFound(format!("no open connection {id}"))),
    }
}
