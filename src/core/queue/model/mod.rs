//! A model-based test of one queue: a reference model of the queue
//! semantics ([`reference`]), random operation sequences ([`ops`]), a driver
//! of the real core ([`driver`]) and the properties that tie them together
//! ([`tests`]).
//!
//! A failure reads "after op #i <op>: <Invariant>: <what happened>" with the
//! shrunk case; `QUEUE_MODEL_TRACE=1` prints every operation and delivery of
//! a run (use it on a regression test), `QUEUE_MODEL_SKIP=...` leaves out
//! what a known bug breaks (see `tests::skip_known`), `benches/queue-model`
//! runs thousands of cases.

mod driver;
mod ops;
mod reference;
mod tests;
