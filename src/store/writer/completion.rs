//! What a submitter waits on: its write, and for a held-back send, its queue.

use crate::store::answers::{Answers, Outcome, TicketAnswer};
use crate::store::release::Ticket;
use crate::store::StoreError;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Resolves once the submission is durable per the fsync policy, and, for a
/// send a queue holds back (producer flow control), once the queue lets it go.
pub struct Completion {
    written: Option<Written>,
    held: Option<oneshot::Receiver<()>>,
}

impl Completion {
    fn written(written: Option<Written>) -> Self {
        Completion {
            written,
            held: None,
        }
    }

    /// The answer to the submission with `ticket`.
    pub(in crate::store) fn ticket(ticket: Ticket, answers: Arc<Answers>) -> Self {
        Completion::written(Some(Written(Answer::Ticket(TicketAnswer::new(
            ticket, answers,
        )))))
    }

    /// A completion that failed already (the store is closed).
    pub(in crate::store) fn failed(e: StoreError) -> Self {
        Completion::written(Some(Written(Answer::Failed(Arc::new(e)))))
    }

    /// A completion for work that needed no write.
    pub fn ready() -> Self {
        Completion::written(None)
    }

    /// This completion, resolving only once the returned [`Hold`] is dropped too.
    pub fn held_back(self) -> (Hold, Completion) {
        let (tx, rx) = oneshot::channel();
        let held = Completion {
            written: self.written,
            held: Some(rx),
        };
        (Hold(Some(tx)), held)
    }

    /// Only what the disk promises, without any flow-control hold: for a
    /// caller that keeps the newest write as proof that all earlier ones are
    /// on disk (the store applies them in order; a hold says nothing of that).
    pub fn durability(self) -> Completion {
        Completion::written(self.written)
    }

    /// True when there is nothing to wait for.
    pub fn is_ready(&self) -> bool {
        self.written.is_none() && self.held.is_none()
    }

    /// One completion for many: resolves when all have, with the first error.
    pub fn all(completions: Vec<Completion>) -> Completion {
        let pending: Vec<Completion> = completions.into_iter().filter(|c| !c.is_ready()).collect();
        if pending.is_empty() {
            return Completion::ready();
        }
        let (tx, rx) = oneshot::channel();
        let wait_all = async move {
            let mut result = Ok(());
            for completion in pending {
                let r = completion.wait().await;
                if result.is_ok() {
                    result = r;
                }
            }
            let _ = tx.send(result);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(wait_all);
            }
            Err(_) => return Completion::ready(),
        }
        Completion::written(Some(Written(Answer::Channel(rx))))
    }

    /// The disk's answer alone, when no flow-control hold is attached (`Err(self)`
    /// otherwise, or when there is nothing to wait for). Answers come in submission order
    /// (see `store::release`), so a caller may keep these in a queue and poll only the
    /// oldest: one wake-up for a whole group commit, no task per write.
    pub fn into_written(self) -> Result<Written, Completion> {
        match self {
            Completion {
                written: Some(written),
                held: None,
            } => Ok(written),
            other => Err(other),
        }
    }

    pub async fn wait(self) -> Result<(), Arc<StoreError>> {
        let written = match self.written {
            None => Ok(()),
            Some(written) => written.await,
        };
        if let Some(held) = self.held {
            // Sent or dropped, a hold ends the same way: the producer goes on.
            let _ = held.await;
        }
        written
    }
}

/// The disk's answer for one submission: see [`Completion::into_written`].
pub struct Written(Answer);

enum Answer {
    /// A submission's place in the writer's line (the common case).
    Ticket(TicketAnswer),
    /// Several completions joined (`Completion::all`).
    Channel(oneshot::Receiver<Outcome>),
    /// Failed before it was submitted.
    Failed(Arc<StoreError>),
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Written")
    }
}

impl Written {
    /// The answer if it has come, without waiting (and without spending the task's
    /// cooperative budget, which would cut a long run of ready answers short).
    pub fn answered(&mut self) -> Option<Outcome> {
        match &mut self.0 {
            Answer::Ticket(t) => t.answered(),
            Answer::Channel(rx) => match rx.try_recv() {
                Ok(result) => Some(result),
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => {
                    Some(Err(Arc::new(StoreError::Closed)))
                }
            },
            Answer::Failed(e) => Some(Err(e.clone())),
        }
    }
}

impl std::future::Future for Written {
    type Output = Outcome;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match &mut self.0 {
            Answer::Ticket(t) => std::pin::Pin::new(t).poll(cx),
            Answer::Channel(rx) => std::pin::Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(Arc::new(StoreError::Closed)))),
            Answer::Failed(e) => std::task::Poll::Ready(Err(e.clone())),
        }
    }
}

/// Holds a [`Completion::held_back`] until dropped.
#[derive(Debug)]
pub struct Hold(Option<oneshot::Sender<()>>);

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}
