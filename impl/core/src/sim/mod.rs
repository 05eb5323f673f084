//! The deterministic simulator: a server, one client per node, the mock driver and a
//! virtual clock. It lists its enabled steps in the terms of the step alphabet
//! (`ARCHITECTURE.md`) and applies exactly the one it is told to, so that the conformance
//! suite can walk it in lockstep with the model; `Clone` lets a walk branch it. Its
//! [`Simulator::run_until_quiet`] mode takes steps with a realistic policy instead: steps
//! that wait for nothing first, then whatever is due earliest on the clock.
//!
//! ## A flagged stop, step by step
//!
//! `Simulator::apply(&Step::StopJob { .. })` with the flag, on running allocations:
//!
//! 1. `StopJob`: `Server::stop_job` makes one indexed write. `StateStore::update_alloc`
//!    sets `DesiredTransition.NoShutdownDelay` on every allocation of the job that lacks it
//!    (client-visible: `AllocModifyIndex` moves, and the ID is journalled for the client);
//!    the job gets a version with `Stop=true` and the same `spec_only()`; the
//!    `job-deregister` evaluation goes to the broker, which cancels an older pending one.
//!    `after_server_write` drains the store's client changes and marks each pull pending.
//! 2. `ProcessEval`: `Server::process_next_eval` → `scheduler::reconcile` plans a stop for
//!    every live allocation; `apply_plan` writes desired stop and keeps the transition.
//! 3. `ClientSync`: `Client::pull` records the `AllocModifyIndex` and calls
//!    `AllocRunner::update`; the runner moves to `PreKill`, and the flag fires
//!    `cancel_delays` (a wait in progress would end here: `CancelTimer`, a `cut short`
//!    event, the signal).
//! 4. `GroupPreKill`: `AllocRunner::step(RunnerStep::GroupPreKill)` runs the pre-kill hooks;
//!    `Command::DeregisterServices` becomes `Server::deregister_services`, and the group
//!    delay is skipped (`Skipping group shutdown delay` on every task).
//! 5. `TaskPreKill` of the leader: `TaskRunner::begin_kill` records `Killing` with the
//!    capped kill timeout, deregisters the task's services, records `Skipping shutdown
//!    delay`, and issues `Command::Signal` and `StartTimer(KillTimeout)`. The mock driver
//!    records the signal; `refresh` schedules the process's exit.
//! 6. `TaskExit` (or `KillTimeout`: `Command::ForceKill` and the forced exit in one step):
//!    `TaskRunner::exited` records `Terminated` and `Killed`, the stop hooks deregister
//!    again, and `ready_steps` offers the sidecar's `TaskPreKill`, then `PoststopStart`.
//! 7. `PoststopExit`: the last task is dead; `AllocRunner::finish` sets `complete`, the
//!    postrun hooks deregister the group services again, and `Command::Report` becomes
//!    `Server::client_report`, which removes a tombstone once terminal.
//!
//! Each step appends one `LogEntry` to the simulator's `EventLog`, with its effects.

mod apply;
mod enabled;
mod execute;
mod run;
mod schedule;

use crate::client::driver::MockDriver;
use crate::client::{AllocRunner, Client};
use crate::server::structs::{AllocId, JobId, NodeId};
use crate::server::{Server, ServerError, WriteResponse};
use crate::spec::Job;
use crate::step::log::{EventLog, LogEntry};
use crate::step::Effect;
use schedule::Schedule;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// The step is not enabled now; nothing changed.
    NotEnabled(String),
    Server(ServerError),
    Driver(String),
    /// `run_until_quiet` took its bound of steps without the cluster going quiet.
    NotQuiet {
        steps: usize,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::NotEnabled(step) => write!(f, "step not enabled: {step}"),
            SimError::Server(error) => write!(f, "{error}"),
            SimError::Driver(error) => write!(f, "driver: {error}"),
            SimError::NotQuiet { steps } => write!(f, "not quiet after {steps} steps"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<ServerError> for SimError {
    fn from(error: ServerError) -> Self {
        SimError::Server(error)
    }
}

/// The deterministic cluster. Cheap to clone, as the lockstep walk does once per model
/// transition: what a step may change is shared between clones and copied by the write
/// that changes it (the store's tables, each client's runners, the schedule, the sets
/// below).
#[derive(Clone, Debug)]
pub struct Simulator {
    pub server: Server,
    pub clients: BTreeMap<NodeId, Client>,
    driver: Arc<MockDriver>,
    now_ns: i64,
    /// Timers, the mock processes' own exits, the driver's handles.
    schedule: Schedule,
    /// Allocations whose client has an update to pull.
    pending_sync: Arc<BTreeSet<AllocId>>,
    /// The runners with an internal step ready, kept by `execute` after each of their steps
    /// (nothing else changes what a runner has ready).
    ready_runners: Arc<BTreeSet<AllocId>>,
    log: EventLog,
    /// The effects of the step being applied, for its log entry.
    effects: Vec<Effect>,
}

/// Nodes are named `node-0`, `node-1`, …
pub fn node_name(index: usize) -> NodeId {
    format!("node-{index}").into()
}

impl Simulator {
    /// A cluster of `nodes` client nodes; `seed` fixes every ID it will generate.
    pub fn new(nodes: usize, seed: u64) -> Self {
        Self::with_max_kill_timeout(nodes, seed, crate::client::DEFAULT_MAX_KILL_TIMEOUT_NS)
    }

    pub fn with_max_kill_timeout(nodes: usize, seed: u64, max_kill_timeout_ns: i64) -> Self {
        let names: Vec<NodeId> = (0..nodes).map(node_name).collect();
        Simulator {
            server: Server::new(names.clone(), seed),
            clients: names
                .iter()
                .map(|n| (n.clone(), Client::new(n.clone(), max_kill_timeout_ns)))
                .collect(),
            driver: Arc::default(),
            now_ns: 0,
            schedule: Schedule::default(),
            pending_sync: Arc::default(),
            ready_runners: Arc::default(),
            log: EventLog::default(),
            effects: Vec::new(),
        }
    }

    pub fn now_ns(&self) -> i64 {
        self.now_ns
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// Registers a job (not a step of the alphabet: the model starts with the job running),
    /// logged with its spec as stored.
    pub fn register(&mut self, job: Job) -> Result<WriteResponse, SimError> {
        let id = job.id.clone();
        let response = self.server.register_job(job)?;
        if let Some(stored) = self.server.store.job(&id) {
            let mut entry = LogEntry::register_job(stored);
            entry.time_ns = self.now_ns;
            self.log.push(entry);
        }
        self.after_server_write();
        Ok(response)
    }

    /// The latest version of `job` with each group's `Meta["generation"]` counted up: the
    /// simulator's `job run` of an edited file (`Step::UpdateJob`).
    fn edited(&self, job: &JobId) -> Result<Job, SimError> {
        let mut edited = self
            .server
            .store
            .job(job)
            .filter(|stored| !stored.stop)
            .ok_or_else(|| {
                SimError::NotEnabled(format!("UpdateJob{{job: {job}}}: no running job"))
            })?
            .spec_only();
        for group in &mut edited.task_groups {
            let meta = group.meta.get_or_insert_with(Default::default);
            let generation = meta
                .get("generation")
                .and_then(|g| g.parse::<u64>().ok())
                .unwrap_or(0);
            meta.insert("generation".into(), (generation + 1).to_string());
        }
        Ok(edited)
    }

    /// The runner of an allocation, on whichever node has it.
    pub fn runner<Q>(&self, alloc: &Q) -> Option<&AllocRunner>
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.node_and_runner(alloc).map(|(_, runner)| runner)
    }

    /// The runner of an allocation and its node: looked up on the node the server placed it
    /// on, rather than every node's runners searched in turn (searched only for a runner
    /// the server no longer knows of, or one before its first pull).
    fn node_and_runner<Q>(&self, alloc: &Q) -> Option<(&NodeId, &AllocRunner)>
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        fn on<'a, Q: Ord + ?Sized>(
            (node, client): (&'a NodeId, &'a Client),
            alloc: &Q,
        ) -> Option<(&'a NodeId, &'a AllocRunner)>
        where
            AllocId: Borrow<Q>,
        {
            client
                .runners
                .get(alloc)
                .map(|runner| (node, runner.as_ref()))
        }
        let placed = self
            .server
            .store
            .alloc_for_client(alloc)
            .and_then(|record| {
                on(
                    self.clients.get_key_value::<NodeId>(&record.node_id)?,
                    alloc,
                )
            });
        placed.or_else(|| self.clients.iter().find_map(|entry| on(entry, alloc)))
    }
}
