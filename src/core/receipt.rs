//! What a protocol waits on before it tells its client that an operation is
//! done: a send on disk, an acknowledgement's delete applied, a producer let
//! go by flow control. A thin wrapper over the store's completion, so that
//! protocols speak only to the core (and a store error reaches them as a
//! [`CoreError`]); it adds no allocation on the message path.

use super::error::CoreError;
use crate::store::Completion;

/// Resolves once the operation it answers is durable (and, for a send a queue
/// holds back, once the queue lets the producer go on).
pub struct Receipt(Completion);

impl Receipt {
    /// A receipt for work that needed no write.
    pub fn ready() -> Self {
        Receipt(Completion::ready())
    }

    /// One receipt for many: resolves when all have, with the first error.
    pub fn all(receipts: impl IntoIterator<Item = Receipt>) -> Receipt {
        Receipt(Completion::all(receipts.into_iter().map(|r| r.0).collect()))
    }

    /// True when there is nothing to wait for.
    pub fn is_ready(&self) -> bool {
        self.0.is_ready()
    }

    /// Only what the disk promises, without any flow-control hold: for a
    /// caller that keeps the newest write as proof that all earlier ones are
    /// on disk (the store applies them in order).
    pub fn durability(self) -> Receipt {
        Receipt(self.0.durability())
    }

    /// The disk's answer alone, when no flow-control hold is attached
    /// (`Err(self)` otherwise, or when there is nothing to wait for). Answers
    /// come in submission order, so a caller may keep these in a queue and
    /// poll only the oldest.
    pub fn into_written(self) -> Result<Written, Receipt> {
        self.0.into_written().map(Written).map_err(Receipt)
    }

    pub async fn wait(self) -> Result<(), CoreError> {
        self.0.wait().await.map_err(CoreError::Store)
    }
}

impl From<Completion> for Receipt {
    fn from(completion: Completion) -> Self {
        Receipt(completion)
    }
}

/// The disk's answer for one write: see [`Receipt::into_written`].
#[derive(Debug)]
pub struct Written(crate::store::Written);

impl Written {
    /// The answer if it has come, without waiting.
    pub fn answered(&mut self) -> Option<Result<(), CoreError>> {
        self.0.answered().map(|r| r.map_err(CoreError::Store))
    }
}

impl std::future::Future for Written {
    type Output = Result<(), CoreError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.map_err(CoreError::Store))
    }
}
