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
//!    records the signal; `refresh_exits` schedules the process's exit.
//! 6. `TaskExit` (or `KillTimeout`: `Command::ForceKill` and the forced exit in one step):
//!    `TaskRunner::exited` records `Terminated` and `Killed`, the stop hooks deregister
//!    again, and `ready_steps` offers the sidecar's `TaskPreKill`, then `PoststopStart`.
//! 7. `PoststopExit`: the last task is dead; `AllocRunner::finish` sets `complete`, the
//!    postrun hooks deregister the group services again, and `Command::Report` becomes
//!    `Server::client_report`, which removes a tombstone once terminal.
//!
//! Each step appends one `LogEntry` to the simulator's `EventLog`, with its effects.

mod schedule;

use crate::client::driver::{Driver, MockDriver, SIGKILL};
use crate::client::{
    AllocRunner, Client, Command, ExitResult, RunnerPhase, RunnerStep, TaskPhase, Timer,
};
use crate::server::structs::{AllocId, JobId, NodeId};
use crate::server::{Server, ServerError, StopJobOptions, WriteResponse};
use crate::spec::{Job, Task, TaskRole};
use crate::step::log::{EventLog, LogEntry};
use crate::step::{Effect, Step};
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
    /// Runners that may have a ready internal step.
    maybe_ready: Arc<BTreeSet<AllocId>>,
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
            maybe_ready: Arc::default(),
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

    fn client_of<Q>(&self, alloc: &Q) -> Option<NodeId>
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.node_and_runner(alloc).map(|(node, _)| node.clone())
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

    // ------------------------------------------------------------------ enabled steps

    /// Every internal step enabled now, in a fixed order: the scheduler, pulls, runner
    /// steps, timers, exits. Operator requests are not listed: they are always offered.
    pub fn enabled_steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        if let Some(job) = self.server.next_eval_job() {
            steps.push(Step::ProcessEval { job: job.clone() });
        }
        for alloc in self.pending_sync.iter() {
            steps.push(Step::ClientSync {
                alloc: alloc.clone(),
            });
        }
        for client in self.clients.values() {
            for (id, runner) in client.runners.iter() {
                self.push_runner_steps(id, runner, &mut steps);
            }
        }
        steps
    }

    fn push_runner_steps(&self, id: &AllocId, runner: &AllocRunner, steps: &mut Vec<Step>) {
        let alloc = id.clone();
        let task = |ix: usize| runner.tasks[ix].name.clone();
        for step in runner.ready_steps() {
            steps.push(step_of_runner(id, runner, step));
        }
        if self.schedule.has_timer(id, Timer::GroupDelay) {
            steps.push(Step::GroupDelayElapsed {
                alloc: alloc.clone(),
            });
        }
        if self.schedule.has_timer(id, Timer::Healthy) {
            steps.push(Step::AllocHealthy {
                alloc: alloc.clone(),
            });
        }
        // Not `AllocUnhealthy`: the model has no health deadline, so the walks never fire
        // it (a timed run does, in its turn, and a replayed log may).
        for (ix, t) in runner.tasks.iter().enumerate() {
            match (t.role, t.phase) {
                (TaskRole::Poststop, TaskPhase::Running) => steps.push(Step::PoststopExit {
                    alloc: alloc.clone(),
                    task: task(ix),
                }),
                (_, TaskPhase::Delaying) => {
                    steps.push(Step::TaskDelayElapsed {
                        alloc: alloc.clone(),
                        task: task(ix),
                    });
                    steps.push(Step::TaskExit {
                        alloc: alloc.clone(),
                        task: task(ix),
                    });
                }
                (_, TaskPhase::Signalled) => {
                    steps.push(Step::TaskExit {
                        alloc: alloc.clone(),
                        task: task(ix),
                    });
                    if self.schedule.has_timer(id, Timer::KillTimeout(ix)) {
                        steps.push(Step::KillTimeout {
                            alloc: alloc.clone(),
                            task: task(ix),
                        });
                    }
                }
                // A task whose mock process is scripted to end on its own may do so at any
                // moment it runs (the model's crash).
                (_, TaskPhase::Running) if self.ends_on_its_own(&alloc, ix) => {
                    steps.push(Step::TaskExit {
                        alloc: alloc.clone(),
                        task: task(ix),
                    })
                }
                (_, TaskPhase::Restarting)
                    if self.schedule.has_timer(id, Timer::RestartDelay(ix)) =>
                {
                    steps.push(Step::RestartDelayElapsed {
                        alloc: alloc.clone(),
                        task: task(ix),
                    })
                }
                _ => {}
            }
        }
    }

    // ------------------------------------------------------------------ applying a step

    /// Applies exactly `step`, or changes nothing and says why.
    pub fn apply(&mut self, step: &Step) -> Result<(), SimError> {
        let (job, group) = self.context_of(step);
        self.effects.clear();
        match step {
            Step::StopJob {
                job,
                purge,
                no_shutdown_delay,
            } => {
                let options = StopJobOptions {
                    purge: *purge,
                    no_shutdown_delay: *no_shutdown_delay,
                    eval_priority: None,
                };
                self.server.stop_job(job, options)?;
                self.after_server_write();
            }
            Step::StopAlloc {
                alloc,
                no_shutdown_delay,
            } => {
                self.server.stop_alloc(alloc, *no_shutdown_delay)?;
                self.after_server_write();
            }
            Step::StartJob { job } => {
                self.server.start_job(job)?;
                self.after_server_write();
            }
            Step::UpdateJob { job } => {
                // Logged as the registration it is (`register`).
                self.register(self.edited(job)?)?;
                return Ok(());
            }
            Step::ProcessEval { job } => {
                if self.server.next_eval_job() != Some(job) {
                    return Err(SimError::NotEnabled(step.to_string()));
                }
                self.server.process_next_eval()?;
                self.after_server_write();
            }
            Step::ClientSync { alloc } => self.client_sync(alloc, step)?,
            Step::ClientRestart => self.client_restart()?,
            Step::RestartAlloc {
                alloc,
                task,
                no_shutdown_delay,
            } => self.restart_alloc(alloc, task.as_deref(), *no_shutdown_delay, step)?,
            _ => self.runner_step(step)?,
        }
        let mut entry = LogEntry::step(step.clone(), job, group);
        entry.time_ns = self.now_ns;
        entry.effects = std::mem::take(&mut self.effects);
        self.log.push(entry);
        self.log_notes();
        Ok(())
    }

    /// Logs what the server's writes that are no step did (a failed replacement's
    /// deployment, an auto-revert's version), after the step that made them, as the agent
    /// does.
    fn log_notes(&mut self) {
        for mut entry in self.server.take_note_entries() {
            entry.time_ns = self.now_ns;
            self.log.push(entry);
        }
    }

    /// The job and task group a step is about, for its log entry.
    fn context_of(&self, step: &Step) -> (Option<JobId>, Option<String>) {
        if let Some(job) = step.job() {
            return (Some(job.clone()), None);
        }
        let Some(alloc) = step.alloc() else {
            return (None, None);
        };
        let record = self
            .runner(alloc)
            .map(|runner| runner.alloc.as_ref())
            .or_else(|| self.server.store.alloc_for_client(alloc));
        match record {
            Some(record) => (Some(record.job_id.clone()), Some(record.task_group.clone())),
            None => (None, None),
        }
    }

    /// Learns which pulls a server write made possible, from the store's change journal.
    fn after_server_write(&mut self) {
        for id in self.server.store.drain_client_changes() {
            let pending = self
                .server
                .store
                .alloc_for_client(&id)
                .is_some_and(|alloc| {
                    self.clients
                        .get(&alloc.node_id)
                        .is_some_and(|client| client.update_pending(alloc))
                });
            if pending != self.pending_sync.contains(&id) {
                let pending_sync = Arc::make_mut(&mut self.pending_sync);
                if pending {
                    pending_sync.insert(id);
                } else {
                    pending_sync.remove(&id);
                }
            }
        }
    }

    fn client_sync(&mut self, alloc_id: &AllocId, step: &Step) -> Result<(), SimError> {
        if !self.pending_sync.contains(alloc_id) {
            return Err(SimError::NotEnabled(step.to_string()));
        }
        Arc::make_mut(&mut self.pending_sync).remove(alloc_id);
        let alloc = self
            .server
            .store
            .alloc_for_client(alloc_id)
            .cloned()
            .expect("a pending pull has a record");
        let node = alloc.node_id.clone();
        let mut commands = Vec::new();
        let now = self.now_ns;
        self.clients
            .get_mut(&node)
            .expect("placed on a known node")
            .pull(alloc, now, &mut commands);
        self.execute(&node, alloc_id, commands)
    }

    /// The mock process of the allocation's task `ix` is scripted to end by itself.
    fn ends_on_its_own(&self, alloc: &AllocId, ix: usize) -> bool {
        self.schedule
            .handle(alloc, ix)
            .and_then(|handle| self.driver.next_exit_at(handle))
            .is_some()
    }

    /// `alloc restart`, straight to the client that runs the allocation; refused (nothing
    /// changes) when the runner refuses it.
    fn restart_alloc(
        &mut self,
        alloc: &AllocId,
        task: Option<&str>,
        no_shutdown_delay: bool,
        step: &Step,
    ) -> Result<(), SimError> {
        let refused = |why: String| SimError::NotEnabled(format!("{step}: {why}"));
        // The server's word first: an allocation it has stopped is not restarted, whether
        // or not its client has pulled the stop.
        let stopped = self.server.store.alloc(alloc).is_none_or(|record| {
            record.desired_status != crate::server::structs::DesiredStatus::Run || record.tombstone
        });
        if stopped {
            return Err(refused("the server has stopped the allocation".into()));
        }
        let node = self
            .client_of(alloc)
            .ok_or_else(|| refused("no client runs it".into()))?;
        let now = self.now_ns;
        let runner = self
            .clients
            .get_mut(&node)
            .and_then(|c| c.runner_mut(alloc))
            .expect("client_of found it");
        let ix = match task {
            Some(name) => Some(
                runner
                    .tasks
                    .iter()
                    .position(|t| t.name == name)
                    .ok_or_else(|| refused(format!("no task {name:?}")))?,
            ),
            None => None,
        };
        let mut commands = Vec::new();
        runner
            .restart(ix, no_shutdown_delay, now, &mut commands)
            .map_err(|why| refused(why.to_string()))?;
        self.execute(&node, alloc, commands)
    }

    fn runner_step(&mut self, step: &Step) -> Result<(), SimError> {
        let not_enabled = || SimError::NotEnabled(step.to_string());
        let alloc = step.alloc().ok_or_else(not_enabled)?.clone();
        let node = self.client_of(&alloc).ok_or_else(not_enabled)?;
        let now = self.now_ns;
        let runner = self
            .clients
            .get_mut(&node)
            .and_then(|c| c.runner_mut(&alloc))
            .ok_or_else(not_enabled)?;
        let task_ix = match step.task() {
            Some(name) => Some(
                runner
                    .tasks
                    .iter()
                    .position(|t| &t.name == name)
                    .ok_or_else(not_enabled)?,
            ),
            None => None,
        };
        let mut commands = Vec::new();
        let taken = match (step, task_ix) {
            (Step::GroupPreKill { .. }, _) => {
                runner.step(RunnerStep::GroupPreKill, now, &mut commands)
            }
            (Step::TaskPreKill { .. }, Some(ix)) => {
                runner.step(RunnerStep::TaskPreKill(ix), now, &mut commands)
            }
            (Step::PoststopStart { .. }, Some(ix)) => {
                runner.step(RunnerStep::PoststopStart(ix), now, &mut commands)
            }
            (Step::RestartDecision { unrecoverable, .. }, Some(ix)) => {
                runner.tasks[ix].unrecoverable() == *unrecoverable
                    && runner.step(RunnerStep::RestartDecision(ix), now, &mut commands)
            }
            (Step::RestartDelayElapsed { .. }, Some(ix)) => {
                self.schedule.has_timer(&alloc, Timer::RestartDelay(ix))
                    && runner.timer_fired(Timer::RestartDelay(ix), now, &mut commands)
            }
            (Step::AllocHealthy { .. }, _) => {
                self.schedule.has_timer(&alloc, Timer::Healthy)
                    && runner.timer_fired(Timer::Healthy, now, &mut commands)
            }
            (Step::AllocUnhealthy { .. }, _) => {
                self.schedule.has_timer(&alloc, Timer::HealthyDeadline)
                    && runner.timer_fired(Timer::HealthyDeadline, now, &mut commands)
            }
            (Step::GroupDelayElapsed { .. }, _) => {
                self.schedule.has_timer(&alloc, Timer::GroupDelay)
                    && runner.timer_fired(Timer::GroupDelay, now, &mut commands)
            }
            (Step::TaskDelayElapsed { .. }, Some(ix)) => {
                self.schedule.has_timer(&alloc, Timer::TaskDelay(ix))
                    && runner.timer_fired(Timer::TaskDelay(ix), now, &mut commands)
            }
            (Step::KillTimeout { .. }, Some(ix)) => {
                self.schedule.has_timer(&alloc, Timer::KillTimeout(ix))
                    && runner.timer_fired(Timer::KillTimeout(ix), now, &mut commands)
            }
            (Step::TaskExit { .. }, Some(ix)) => {
                let crash = runner.tasks[ix].phase == TaskPhase::Running
                    && self
                        .schedule
                        .handle(&alloc, ix)
                        .and_then(|handle| self.driver.next_exit_at(handle))
                        .is_some();
                (crash
                    || matches!(
                        runner.tasks[ix].phase,
                        TaskPhase::Delaying | TaskPhase::Signalled
                    ))
                    && runner.tasks[ix].role != TaskRole::Poststop
                    && runner.task_exited(
                        ix,
                        exit_of(&self.driver, &self.schedule, &alloc, ix),
                        now,
                        &mut commands,
                    )
            }
            (Step::PoststopExit { .. }, Some(ix)) => {
                runner.tasks[ix].role == TaskRole::Poststop
                    && runner.tasks[ix].phase == TaskPhase::Running
                    && runner.task_exited(
                        ix,
                        exit_of(&self.driver, &self.schedule, &alloc, ix),
                        now,
                        &mut commands,
                    )
            }
            _ => false,
        };
        if !taken {
            return Err(not_enabled());
        }
        if let Some(timer) = fired_timer(step, task_ix) {
            self.schedule.stop_timer(&alloc, timer);
        }
        self.execute(&node, &alloc, commands)
    }

    /// The client agent restarts: every runner is restored from its stored state, and
    /// re-arms the timers it had (the supervised processes keep running).
    fn client_restart(&mut self) -> Result<(), SimError> {
        let now = self.now_ns;
        let nodes: Vec<NodeId> = self.clients.keys().cloned().collect();
        for node in nodes {
            let ids: Vec<AllocId> = self.clients[&node].runners.keys().cloned().collect();
            for id in ids {
                let stored = AllocRunner::clone(&self.clients[&node].runners[&id]);
                if stored.phase == RunnerPhase::Terminal {
                    continue;
                }
                for timer in self.schedule.timers_of(&id) {
                    self.schedule.stop_timer(&id, timer);
                }
                let mut commands = Vec::new();
                let restored = AllocRunner::restore(stored, now, &mut commands);
                let client = self.clients.get_mut(&node).expect("node");
                Arc::make_mut(&mut client.runners).insert(id.clone(), Arc::new(restored));
                self.execute(&node, &id, commands)?;
            }
        }
        Ok(())
    }

    /// Carries out a runner's commands. A stop's SIGKILL is followed by the forced exit in the
    /// same step (a deterministic follow-up, merged identically in the model); a restart's
    /// is not — its exit, after which the task runs again, is a `TaskExit` of its own.
    fn execute(
        &mut self,
        node: &NodeId,
        alloc: &AllocId,
        mut commands: Vec<Command>,
    ) -> Result<(), SimError> {
        let mut report = false;
        while !commands.is_empty() {
            let mut follow_ups = Vec::new();
            for command in commands {
                if let Some(runner) = self.clients.get(node).and_then(|c| c.runners.get(alloc)) {
                    self.effects.extend(Effect::of(&command, runner));
                }
                match command {
                    Command::Report => report = true,
                    Command::ForceKill { task, .. } => {
                        if let Some(handle) = self.schedule.handle(alloc, task) {
                            Arc::make_mut(&mut self.driver)
                                .force_kill(handle, self.now_ns)
                                .map_err(|e| SimError::Driver(e.to_string()))?;
                        }
                        let restarting = self
                            .clients
                            .get(node)
                            .and_then(|c| c.runners.get(alloc))
                            .and_then(|r| r.tasks.get(task))
                            .is_some_and(|t| t.restart != crate::client::RestartMark::None);
                        if restarting {
                            continue;
                        }
                        let exit = ExitResult {
                            exit_code: 137,
                            signal: Some(SIGKILL),
                            failure: None,
                        };
                        let now = self.now_ns;
                        let runner = self
                            .clients
                            .get_mut(node)
                            .and_then(|c| c.runner_mut(alloc))
                            .expect("runner");
                        runner.task_exited(task, exit, now, &mut follow_ups);
                    }
                    other => self.execute_one(node, alloc, other)?,
                }
            }
            commands = follow_ups;
        }
        if report {
            let runner = &self.clients[node].runners[alloc];
            self.server.client_report(alloc, runner.report());
            self.after_server_write();
        }
        self.refresh_exits(node, alloc);
        if !self.maybe_ready.contains(alloc) {
            Arc::make_mut(&mut self.maybe_ready).insert(alloc.clone());
        }
        Ok(())
    }

    fn execute_one(
        &mut self,
        node: &NodeId,
        alloc: &AllocId,
        command: Command,
    ) -> Result<(), SimError> {
        let runner = &self.clients[node].runners[alloc];
        let now = self.now_ns;
        match command {
            Command::StartTask { task } => {
                let group = runner
                    .alloc
                    .job
                    .task_groups
                    .iter()
                    .find(|g| g.name == runner.alloc.task_group);
                let unknown;
                let spec = match group.and_then(|g| g.tasks.get(task)) {
                    Some(spec) => spec,
                    None => {
                        unknown = Task::default();
                        &unknown
                    }
                };
                let handle = Arc::make_mut(&mut self.driver)
                    .start(spec, now)
                    .map_err(|e| SimError::Driver(e.to_string()))?;
                self.schedule.set_handle(alloc, task, handle);
            }
            Command::RegisterServices { task, names } => {
                let owner = task_owner(runner, task);
                self.server.register_services(alloc, &owner, &names);
            }
            Command::DeregisterServices { task, names } => {
                let owner = task_owner(runner, task);
                self.server.deregister_services(alloc, &owner, &names);
            }
            Command::StartTimer { timer, after_ns } => {
                self.schedule.start_timer(alloc, timer, now + after_ns);
            }
            Command::CancelTimer { timer } => self.schedule.stop_timer(alloc, timer),
            Command::Signal { task, signal, .. } => {
                if let Some(handle) = self.schedule.handle(alloc, task) {
                    Arc::make_mut(&mut self.driver)
                        .signal(handle, &signal, now)
                        .map_err(|e| SimError::Driver(e.to_string()))?;
                }
            }
            Command::ForceKill { .. } | Command::Report => unreachable!("handled by execute"),
        }
        Ok(())
    }

    /// Re-reads, for every task of one allocation, when it will exit by itself if that exit
    /// is a step now.
    fn refresh_exits(&mut self, node: &NodeId, alloc: &AllocId) {
        let Some(runner) = self.clients[node].runners.get(alloc) else {
            return;
        };
        // The allocation's handles looked up once, not once per task, and a task's exit
        // only for a task whose exit can be a step.
        let handles = self.schedule.handles_of(alloc);
        let dues: Vec<Option<i64>> = runner
            .tasks
            .iter()
            .enumerate()
            .map(|(ix, task)| {
                let eligible = match task.phase {
                    TaskPhase::Delaying | TaskPhase::Signalled | TaskPhase::Running => true,
                    TaskPhase::NotStarted
                    | TaskPhase::Dead
                    | TaskPhase::Crashed
                    | TaskPhase::Restarting => false,
                };
                handles
                    .filter(|_| eligible)
                    .and_then(|handles| handles.get(&ix))
                    .and_then(|handle| self.driver.next_exit_at(handle))
                    .map(|at| at.max(self.now_ns))
            })
            .collect();
        self.schedule.set_exits(alloc, &dues);
    }

    // ------------------------------------------------------------------ run until quiet

    /// Takes steps with a realistic policy until nothing is left to do: steps that wait for
    /// nothing (the scheduler, pulls, runner steps) first; then the timer or process exit
    /// due earliest, advancing the clock to it. At most `max_steps` steps.
    pub fn run_until_quiet(&mut self, max_steps: usize) -> Result<usize, SimError> {
        for taken in 0..max_steps {
            let Some(step) = self.next_immediate().or_else(|| self.next_timed()) else {
                return Ok(taken);
            };
            self.apply(&step)?;
        }
        Err(SimError::NotQuiet { steps: max_steps })
    }

    /// Takes only the steps that wait for nothing (the scheduler, pulls, runner steps) until
    /// none is left, the clock standing still: a job registered so is placed and running,
    /// and no timer or scripted exit has come. At most `max_steps` steps.
    pub fn run_until_idle(&mut self, max_steps: usize) -> Result<usize, SimError> {
        for taken in 0..max_steps {
            let Some(step) = self.next_immediate() else {
                return Ok(taken);
            };
            self.apply(&step)?;
        }
        Err(SimError::NotQuiet { steps: max_steps })
    }

    fn next_immediate(&mut self) -> Option<Step> {
        if let Some(job) = self.server.next_eval_job() {
            return Some(Step::ProcessEval { job: job.clone() });
        }
        if let Some(alloc) = self.pending_sync.first() {
            return Some(Step::ClientSync {
                alloc: alloc.clone(),
            });
        }
        while let Some(alloc) = self.maybe_ready.first().cloned() {
            let step = self.runner(&alloc).and_then(|runner| {
                runner
                    .ready_steps()
                    .first()
                    .map(|&step| step_of_runner(&alloc, runner, step))
            });
            match step {
                Some(step) => return Some(step),
                None => {
                    Arc::make_mut(&mut self.maybe_ready).remove(&alloc);
                }
            }
        }
        None
    }

    fn next_timed(&mut self) -> Option<Step> {
        let timer = self.schedule.first_timer();
        let exit = self.schedule.first_exit();
        let take_exit = match (&timer, &exit) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            // A process exiting at the same instant as a timer wins: it was already going.
            (Some((timer_at, ..)), Some((exit_at, ..))) => exit_at <= timer_at,
        };
        if take_exit {
            let (at, alloc, ix) = exit.expect("checked");
            self.now_ns = self.now_ns.max(at);
            let runner = self.runner(&alloc)?;
            let task = runner.tasks[ix].name.clone();
            return Some(if runner.tasks[ix].role == TaskRole::Poststop {
                Step::PoststopExit { alloc, task }
            } else {
                Step::TaskExit { alloc, task }
            });
        }
        let (at, alloc, timer) = timer.expect("checked");
        self.now_ns = self.now_ns.max(at);
        let runner = self.runner(&alloc)?;
        Some(match timer {
            Timer::GroupDelay => Step::GroupDelayElapsed { alloc },
            Timer::TaskDelay(ix) => Step::TaskDelayElapsed {
                alloc,
                task: runner.tasks[ix].name.clone(),
            },
            Timer::KillTimeout(ix) => Step::KillTimeout {
                alloc,
                task: runner.tasks[ix].name.clone(),
            },
            Timer::RestartDelay(ix) => Step::RestartDelayElapsed {
                alloc,
                task: runner.tasks[ix].name.clone(),
            },
            Timer::Healthy => Step::AllocHealthy { alloc },
            Timer::HealthyDeadline => Step::AllocUnhealthy { alloc },
        })
    }
}

/// The step alphabet's name for a runner's ready step.
fn step_of_runner(alloc: &AllocId, runner: &AllocRunner, step: RunnerStep) -> Step {
    let alloc = alloc.clone();
    let task = |ix: usize| runner.tasks[ix].name.clone();
    match step {
        RunnerStep::GroupPreKill => Step::GroupPreKill { alloc },
        RunnerStep::TaskPreKill(ix) => Step::TaskPreKill {
            alloc,
            task: task(ix),
        },
        RunnerStep::PoststopStart(ix) => Step::PoststopStart {
            alloc,
            task: task(ix),
        },
        RunnerStep::RestartDecision(ix) => Step::RestartDecision {
            alloc,
            task: task(ix),
            unrecoverable: runner.tasks[ix].unrecoverable(),
        },
    }
}

fn fired_timer(step: &Step, task: Option<usize>) -> Option<Timer> {
    match (step, task) {
        (Step::GroupDelayElapsed { .. }, _) => Some(Timer::GroupDelay),
        (Step::TaskDelayElapsed { .. }, Some(ix)) => Some(Timer::TaskDelay(ix)),
        (Step::KillTimeout { .. }, Some(ix)) => Some(Timer::KillTimeout(ix)),
        (Step::RestartDelayElapsed { .. }, Some(ix)) => Some(Timer::RestartDelay(ix)),
        (Step::AllocHealthy { .. }, _) => Some(Timer::Healthy),
        (Step::AllocUnhealthy { .. }, _) => Some(Timer::HealthyDeadline),
        _ => None,
    }
}

/// How the mock process ends when it exits now: as its script says, or cleanly.
fn exit_of(driver: &MockDriver, schedule: &Schedule, alloc: &AllocId, task: usize) -> ExitResult {
    schedule
        .handle(alloc, task)
        .and_then(|handle| driver.next_exit(handle))
        .map_or(
            ExitResult {
                exit_code: 0,
                signal: None,
                failure: None,
            },
            |(_, exit)| exit,
        )
}

/// The task a service belongs to, by name; empty for a group service.
fn task_owner(runner: &AllocRunner, task: Option<usize>) -> String {
    task.map_or(String::new(), |ix| runner.tasks[ix].name.clone())
}
