//! Tells AMQP from STOMP on a shared port by the first bytes: an AMQP client
//! starts with the protocol header `AMQP`, a STOMP client with a command.

use crate::config::Protocol;
use std::time::Duration;
use tokio::net::TcpStream;

/// Waits for the first bytes without consuming them; `None` if the peer says
/// nothing in time or leaves.
pub async fn sniff(stream: &TcpStream) -> Option<Protocol> {
    let mut head = [0u8; 4];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut head))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if n >= 4 || !b"AMQP".starts_with(&head[..n]) {
            return Some(if &head[..n] == b"AMQP" {
                Protocol::Amqp
            } else {
                Protocol::Stomp
            });
        }
        // A prefix of "AMQP" so far: wait for the rest.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
