//! # quiesce-proofs: the implementation checked against the model
//!
//! Model-check runs and the conformance suite. This crate is the only one that sees both
//! `quiesce-model` and `quiesce`.
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

pub mod adapter;
pub mod lockstep;
pub mod observe;
pub mod probe;
pub mod random;
pub mod trace;
