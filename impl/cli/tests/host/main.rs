//! The daemon's host (`daemon/host/`) judged by what a real program experienced: a
//! `quiesce agent -dev` process runs a Python witness under raw_exec, and the witness
//! records each signal it gets, when (CLOCK_MONOTONIC), and how many registrations of its
//! allocation's services the agent still listed at that moment. The end-to-end suite
//! (`proofs/e2e`) covers the same ground with Nomad's clients; these run under `cargo test`,
//! so that mutation testing (README, "Mutation testing") reaches the host.
//!
//! `harness.rs` holds the agent, the witness and the waits; the scenarios are by theme:
//! `stops.rs`, `restarts.rs`, `crashes.rs` (`kill -9` of the agent) and `tasks.rs`.

mod crashes;
mod harness;
mod restarts;
mod stops;
mod tasks;
