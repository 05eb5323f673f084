//! # quiesce-core: the sans-IO core of the reference implementation
//!
//! The implementation has Nomad's real structure, not the model's (DESIGN.md,
//! "Architecture"): jobspecs in Nomad's JSON shape ([`spec`], and HCL2 read into it by
//! [`hcl_jobspec`]); a server with a state store written one atomic apply at a time, an
//! evaluation broker and a scheduler ([`server`]); clients whose alloc and task runners are
//! state machines fed with events that return commands ([`client`]); the step alphabet the
//! conformance suite speaks ([`step`]); and a deterministic simulator that runs them all on
//! a virtual clock ([`sim`]).
//!
//! Architecture Invariant: no I/O. Nothing here opens a socket or a file, starts a process
//! or reads the clock for the runners; the simulator and the agent (`quiesce-agent`) bring
//! time and the world in. The core depends on no other quiesce crate, and never on the
//! model: only `quiesce-proofs` and the benchmarks see both.

pub mod client;
pub mod gotime;
pub mod hcl_jobspec;
pub mod id;
pub mod ids;
pub mod server;
pub mod sim;
pub mod spec;
pub mod step;
mod sync;
pub mod text;
