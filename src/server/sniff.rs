//! Tells AMQP from STOMP on a shared port by the first bytes: an AMQP client
//! starts with the protocol header `AMQP`, a STOMP client with a command. Also spots
//! AMQP's request to upgrade a plain connection to TLS (header `AMQP 2 1 0 0`).

use crate::config::Protocol;
use bytes::{Bytes, BytesMut};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

/// How long a client may take to say its first bytes.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(30);

/// AMQP's TLS protocol header (AMQP 1.0 part 5.2.1): protocol id 2, version 1.0.0.
pub const AMQP_TLS_HEADER: [u8; 8] = *b"AMQP\x02\x01\x00\x00";

/// The protocol `head` starts, `None` while it is a prefix of "AMQP" (say more).
fn classify(head: &[u8]) -> Option<Protocol> {
    if head.len() >= 4 || !b"AMQP".starts_with(head) {
        return Some(if head.starts_with(b"AMQP") {
            Protocol::Amqp
        } else {
            Protocol::Stomp
        });
    }
    None
}

/// Waits until `decided` says something of the first bytes, peeked (not consumed); `None`
/// if the peer says nothing in time or leaves.
async fn peek_until<T>(
    stream: &TcpStream,
    head: &mut [u8],
    decided: impl Fn(&[u8]) -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + SNIFF_TIMEOUT;
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(head))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if let Some(answer) = decided(&head[..n]) {
            return Some(answer);
        }
        // A prefix so far: wait for the rest.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits for the first bytes without consuming them; `None` if the peer says
/// nothing in time or leaves.
pub async fn sniff(stream: &TcpStream) -> Option<Protocol> {
    peek_until(stream, &mut [0u8; 4], classify).await
}

/// Whether an AMQP client opens with the TLS header (peeked, not consumed).
pub async fn amqp_tls_requested(stream: &TcpStream) -> bool {
    let decided = |head: &[u8]| match head.len() {
        8.. => Some(head[..8] == AMQP_TLS_HEADER),
        n if AMQP_TLS_HEADER[..n] != *head => Some(false),
        _ => None,
    };
    peek_until(stream, &mut [0u8; 8], decided)
        .await
        .unwrap_or(false)
}

/// Like [`sniff`] on a stream that cannot be peeked (TLS): the bytes read to decide come
/// back, to be read again by the protocol.
pub async fn sniff_read<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(Protocol, Bytes)> {
    let mut head = BytesMut::with_capacity(64);
    let read = async {
        loop {
            if stream.read_buf(&mut head).await.ok()? == 0 {
                return None;
            }
            if let Some(protocol) = classify(&head) {
                return Some(protocol);
            }
        }
    };
    let protocol = tokio::time::timeout(SNIFF_TIMEOUT, read).await.ok()??;
    Some((protocol, head.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_the_protocol() {
        assert_eq!(classify(b"AM"), None);
        assert_eq!(classify(b"AMQP\x03"), Some(Protocol::Amqp));
        assert_eq!(classify(b"CONNECT\n"), Some(Protocol::Stomp));
        assert_eq!(classify(b"AX"), Some(Protocol::Stomp));
    }

    #[tokio::test]
    async fn a_read_sniff_gives_back_what_it_read() {
        let mut stream: &[u8] = b"STOMP\naccept-version:1.2\n\n\0";
        let (protocol, head) = sniff_read(&mut stream).await.unwrap();
        assert_eq!(protocol, Protocol::Stomp);
        let mut all = head.to_vec();
        all.extend_from_slice(stream);
        assert_eq!(all, b"STOMP\naccept-version:1.2\n\n\0");
    }
}
