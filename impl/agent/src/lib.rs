//! # quiesce-agent: the reference daemon
//!
//! The core's server and runners ([`quiesce_core`]) in a real process: the HTTP API with
//! its route table, each route with the ACL capability it needs ([`daemon::http`]); the
//! durable store and its committer ([`daemon::persist`]); the raw_exec driver, its per-task
//! supervisors and the exit watcher ([`raw_exec`]); ACL tokens and policies ([`acl`]);
//! garbage collection; and the entry points of the fuzz targets ([`fuzzing`]).
//!
//! Architecture Invariant: the agent depends on the core and never on the CLI or the API
//! client; what the core decides, the agent carries out (a runner's commands become
//! signals, timers and processes here), and nothing here decides the stop path on its own.

pub mod acl;
pub mod daemon;
pub mod fuzzing;
pub mod raw_exec;
