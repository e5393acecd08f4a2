//! A transport that carries a protocol in messages of its own (WebSocket) refuses a
//! message too large before the protocol's decoder sees a byte of it. It reports that as
//! a read error holding [`MessageTooLarge`], so the protocol can tell the client in its
//! own terms (a STOMP ERROR frame) instead of dropping the connection silently.

use std::io;

#[derive(Debug, thiserror::Error)]
#[error("message larger than the limit of {limit} bytes")]
pub struct MessageTooLarge {
    /// The protocol's own frame limit, which is what the client should be told.
    pub limit: usize,
}

impl MessageTooLarge {
    pub fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }

    /// The refusal a read error carries, if it is one.
    pub fn of(e: &io::Error) -> Option<&MessageTooLarge> {
        e.get_ref()?.downcast_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_in_the_io_error_it_became() {
        let e = MessageTooLarge { limit: 7 }.into_io();
        assert_eq!(MessageTooLarge::of(&e).map(|t| t.limit), Some(7));
        assert!(MessageTooLarge::of(&io::Error::other("other")).is_none());
    }
}
