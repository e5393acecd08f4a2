//! A model-based test of one queue: a reference model of
//! /work/spec/queue-semantics.md ([`reference`]), random operation sequences
//! ([`ops`]), a driver of the real core ([`driver`]) and the properties that
//! tie them together ([`tests`]). See `benches/queue-model` for a long run.

mod driver;
mod ops;
mod reference;
mod tests;
