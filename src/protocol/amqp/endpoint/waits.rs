//! Transfers the peer sent whose disposition waits: for their disk write, or
//! for a future (a transfer held back by flow control, a transaction). Both
//! come back to the connection's loop as [`Settled`].

use super::condition::write_outcome;
use crate::core::receipt::Written;
use crate::core::{CoreError, Receipt};
use crate::protocol::amqp::wire::definitions::DeliveryState;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use std::collections::VecDeque;

/// A delivery the peer sent, by session (the generation tells a session from
/// a later one on the same channel) and delivery id.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub channel: u16,
    pub generation: u64,
    pub delivery_id: u32,
}

/// A wait finished: the disposition it was holding back.
#[derive(Debug)]
pub struct Settled {
    pub received: Received,
    pub state: DeliveryState,
}

/// A transfer settled once its message is on disk.
pub struct WaitingWrite {
    received: Received,
    written: Written,
}

/// The two queues are fields of their own so that the connection's loop can
/// wait on both at once (one `select!` arm each).
#[derive(Default)]
pub struct Waits {
    /// Transfers waiting for nothing but their disk write, oldest first: the store
    /// answers in submission order, so only the front is polled.
    pub written: VecDeque<WaitingWrite>,
    pub waiting: FuturesUnordered<BoxFuture<'static, Settled>>,
}

impl Waits {
    /// Settles `received` once `receipt` is written.
    pub fn push(&mut self, received: Received, receipt: Receipt) {
        let receipt = match receipt.into_written() {
            Ok(written) => {
                self.written.push_back(WaitingWrite { received, written });
                return;
            }
            Err(receipt) => receipt,
        };
        self.waiting.push(Box::pin(async move {
            let state = write_outcome(receipt.wait().await);
            Settled { received, state }
        }));
    }

    /// The oldest waiting write is on disk (or failed): what it settles.
    pub fn take_written(&mut self, result: Result<(), CoreError>) -> Option<Settled> {
        let w = self.written.pop_front()?;
        Some(Settled {
            received: w.received,
            state: write_outcome(result),
        })
    }

    /// The outcome of the oldest waiting write when the disk has answered it already.
    pub fn answered(&mut self) -> Option<Result<(), CoreError>> {
        self.written.front_mut().and_then(|w| w.written.answered())
    }
}

/// The outcome of the oldest waiting write, once the disk has answered.
pub fn oldest_written(
    queue: &mut VecDeque<WaitingWrite>,
) -> impl std::future::Future<Output = Result<(), CoreError>> + '_ {
    std::future::poll_fn(move |cx| match queue.front_mut() {
        Some(w) => std::future::Future::poll(std::pin::Pin::new(&mut w.written), cx),
        None => std::task::Poll::Pending,
    })
}
