//! # quiesce-proofs: the implementation checked against the model
//!
//! Model-check runs and the conformance suite. This crate sees both sides: it depends on
//! `quiesce-model`, `quiesce-core` and `quiesce-api` (the benchmarks also see the model and
//! the implementation).
//!
//! * [`adapter`] maps between the two vocabularies: a jobspec and the model's task group,
//!   model actions and simulator steps, both ways.
//! * [`observe`] is the observation both sides project to.
//! * [`lockstep`] walks the model's state graph in step with the simulator.
//! * [`trace`] replays an event log against the model.
//! * [`probe`] runs scenarios against any Nomad-API cluster over its HTTP API alone and
//!   judges the invariants visible from outside.
//! * [`random`] takes long random runs beyond the model's bounds, judging every
//!   observation with the model's invariants.
//!
//! Architecture Invariant: the proofs depend on the model, the core and the API client,
//! never on the agent or the CLI: they judge the agent from outside, over HTTP, and the core
//! through the simulator.

pub mod adapter;
pub mod lockstep;
pub mod observe;
pub mod probe;
pub mod random;
pub mod trace;
