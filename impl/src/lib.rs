//! # quiesce: the reference implementation of the stop path
//!
//! The implementation has Nomad's real structure, not the model's (DESIGN.md,
//! "Architecture"): jobspecs in Nomad's JSON shape ([`spec`]); a server with a state store
//! written one atomic apply at a time, an evaluation broker and a scheduler ([`server`]);
//! clients whose alloc and task runners are sans-IO state machines ([`client`]); drivers;
//! and a deterministic simulator that runs them all on a virtual clock ([`sim`]). It never
//! depends on the model: only `quiesce-proofs` sees both.

pub mod acl;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod fuzzing;
pub mod gotime;
pub mod hcl_jobspec;
pub mod ids;
pub mod server;
pub mod sim;
pub mod spec;
pub mod step;
mod sync;
