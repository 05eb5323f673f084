//! # quiesce-model: the stop path of an orchestrator, with `-no-shutdown-delay`
//!
//! This crate is the specification quiesce is checked against: a plain stateright
//! [`Model`](stateright::Model) of what `job stop` and `alloc stop`, with and without
//! HashiCorp Nomad's `-no-shutdown-delay` flag, may and may not do. The request that started
//! it is the seed (`shared/seed/`): an operator in an incident must be able to stop work now,
//! skipping the `shutdown_delay` waits, while every pre-stop hook still runs and the stored
//! job stays exactly as it was.
//!
//! ## What is modelled
//! * **Server**: the stored job versions, a purge tombstone per allocation, each
//!   allocation's desired status and `DesiredTransition` (`Migrate`, the sticky
//!   `NoShutdownDelay`), and one "an evaluation is pending" bit (a newer evaluation
//!   supersedes older ones). The scheduler ([`Action::ProcessEval`]) stops allocations of a
//!   stopped job, stops and replaces migrating ones, and places up to `count`.
//! * **Client**: per allocation, the copy it last pulled, the alloc runner's phase and its
//!   delay cancellation, the group pre-kill hooks and group delay; per task its phase,
//!   pre-kill hooks, delay outcome, kill signal, kill timeout and SIGKILL; poststop tasks.
//! * **Operator**: `job stop [-purge] [-no-shutdown-delay]`, `alloc stop
//!   [-no-shutdown-delay]`, `job start`, `alloc restart [-no-shutdown-delay] ALLOC [TASK]`,
//!   from a bounded budget or a fixed script; client restarts from a script.
//! * **Restarts**: a running task may crash; its restart policy restarts it after the
//!   restart delay or, its attempts used up, fails the allocation, whose other tasks are then
//!   killed through the stop path; an error the driver reported is never retried.
//!
//! ## What is abstracted away, and why it loses nothing the invariants need
//! * Durations: timers are a set of pending events that fire in any order (so a delay is
//!   "set or not"). Caps such as `max_kill_timeout` are durations and are checked by the
//!   implementation's tests instead.
//! * Modify indexes: the client's copy of (desired stop, flag, tombstone) is compared with
//!   the server's instead (`reference/model-sizing.md` §4).
//! * A task exits on its own while it runs (a crash, answered by its restart policy), during
//!   its delay, or after the signal: the races the invariants are about.
//! * Deterministic follow-ups are merged into the step before them, identically on every
//!   side (DESIGN.md, "The step alphabet"): the kill signal with the end of a delay, the
//!   forced exit with SIGKILL, the client's status report with the step that makes the
//!   allocation terminal.
//! * The restart policy's interval is read in the strictest way: every crash falls in one
//!   interval, so the policy is a count of attempts. `mode = "delay"`, which restarts for
//!   ever, is not modelled, and trace validation does not judge a group that uses it.
//! * A batch task's clean end depends on its exit code, which the model does not have:
//!   trace validation of a batch job stops judging at its first `RestartDecision`.
//! * Which tasks may crash is a part's choice (`TaskCfg::may_crash`): `standard`'s restart
//!   parts let the leader and the sidecar crash; trace validation lets every task but a
//!   poststop one.
//!
//! ## The invariants
//! Eleven: the eight of the stop path (read "stop or restart"), then `services_restored`,
//! `restart_policy_respected` and `job_dead_only_when_tasks_ended` (a job reads `dead` only
//! once its tasks have ended), in [`properties`], each with the `sometimes` properties that
//! show it is not vacuous. Each planted [`Fault`] breaks at least the
//! invariant it names.
//!
//! ```
//! use quiesce_model::{config, Checker, Model};
//!
//! let model = config::small().remove(0).into_model();
//! let checker = model.checker().threads(1).spawn_dfs().join();
//! checker.assert_properties(); // every invariant holds, every witness is found
//! ```
//!
//! Architecture Invariant: a pure library, with no I/O and no clock. It depends on nothing
//! of the implementation (stateright is its one dependency, with the hasher of its fingerprints,
//! `ahash`; clap and mimalloc, its allocator, are the binary's), and no
//! crate of the implementation depends on it. The binary's `invariants` command reads the
//! source tree; the library never does.

pub mod checker;
pub mod config;
mod model;
pub mod properties;
pub mod report;
pub mod state;
pub mod step;

pub use config::{Fault, History, ModelCfg, Operator, Request};
pub use model::StopPathModel;
pub use state::State;
pub use stateright::{Checker, Model};
pub use step::Action;

/// The symmetry reduction over allocations, for `CheckerBuilder::symmetry_fn`.
/// stateright's built-in `symmetry()` would sort every actor and is unsound here; this sorts
/// only the allocation records, which nothing else refers to by position.
pub fn representative(state: &State) -> State {
    state.representative()
}

/// How [`checker::depth_first`] tells the model's states apart: by symmetry class
/// ([`class_fingerprint`]) or state by state (stateright's own fingerprint).
pub fn fingerprint_fn(symmetry: bool) -> checker::Fingerprint<StopPathModel> {
    if symmetry {
        class_fingerprint
    } else {
        checker::fingerprint::<State>
    }
}

/// The fingerprint of a state's symmetry class, for [`checker::depth_first`]: the same
/// classes as [`representative`], hashed without building the representative.
pub fn class_fingerprint(state: &State) -> u64 {
    let mut hasher = checker::hasher();
    state.hash_class(&mut hasher);
    std::hash::Hasher::finish(&hasher)
}
