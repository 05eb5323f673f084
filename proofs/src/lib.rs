//! # quiesce-proofs: the implementation checked against the model
//!
//! Model-check runs and, growing issue by issue, the conformance suite. This crate is the
//! only one that sees both `quiesce-model` and `quiesce`.
//!
//! So far: [`adapter::group_cfg`], the first piece of the adapter — it maps an
//! implementation jobspec onto the model's abstraction of a task group, so that a model
//! configuration and the jobspec the implementation runs are shown to be the same job.

pub mod adapter;
