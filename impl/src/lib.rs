//! # quiesce: the reference implementation of the stop path
//!
//! The implementation has Nomad's real structure, not the model's (DESIGN.md,
//! "Architecture"): jobspecs in Nomad's JSON shape (`spec`); later a state store, scheduler,
//! client runners, a deterministic simulator and the daemon. It never depends on the model:
//! only `quiesce-proofs` sees both.
//!
//! So far: [`spec`], the jobspec types with Nomad's defaults and a validation pass.

pub mod spec;
