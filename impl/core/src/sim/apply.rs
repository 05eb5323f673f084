//! Applying one step: an operator's request, the scheduler's evaluation, a client's pull,
//! or a runner's step (a hook, a timer, a process's exit), each logged with its effects.

use super::schedule::Schedule;
use super::{SimError, Simulator};
use crate::client::driver::{Driver, MockDriver};
use crate::client::{AllocRunner, ExitResult, RunnerPhase, RunnerStep, TaskPhase, Timer};
use crate::server::structs::{AllocId, Id, JobId, NodeId};
use crate::server::StopJobOptions;
use crate::spec::TaskRole;
use crate::step::log::LogEntry;
use crate::step::Step;
use std::sync::Arc;

impl Simulator {
    /// Applies exactly `step`, or changes nothing and says why.
    pub fn apply(&mut self, step: &Step) -> Result<(), SimError> {
        let context = self.context_of(step);
        self.apply_in(step, context)
    }

    /// [`Simulator::apply`], with the step's context already found (by whoever found the
    /// step on its runner, see `run.rs`).
    pub(super) fn apply_in(&mut self, step: &Step, context: StepContext) -> Result<(), SimError> {
        let (job, group, node) = context;
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
            } => self.restart_alloc(alloc, node, task.as_deref(), *no_shutdown_delay, step)?,
            _ => self.runner_step(step, node)?,
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

    /// The job and task group a step is about, for its log entry, and the node whose client
    /// runs the step's allocation (looked up once here for the step that follows).
    fn context_of(&self, step: &Step) -> StepContext {
        if let Some(job) = step.job() {
            return (Some(job.clone()), None, None);
        }
        let Some(alloc) = step.alloc() else {
            return (None, None, None);
        };
        if let Some((node, runner)) = self.node_and_runner(alloc) {
            return runner_context(node, runner);
        }
        match self.server.store.alloc_for_client(alloc) {
            Some(record) => (
                Some(record.job_id.clone()),
                Some(record.task_group.clone()),
                None,
            ),
            None => (None, None, None),
        }
    }

    /// Learns which pulls a server write made possible, from the store's change journal.
    pub(super) fn after_server_write(&mut self) {
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

    /// `alloc restart`, straight to the client that runs the allocation (`node`, from the
    /// step's context); refused (nothing changes) when the runner refuses it.
    fn restart_alloc(
        &mut self,
        alloc: &AllocId,
        node: Option<NodeId>,
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
        let node = node.ok_or_else(|| refused("no client runs it".into()))?;
        let now = self.now_ns;
        let runner = self
            .clients
            .get_mut(&node)
            .and_then(|c| c.runner_mut(alloc))
            .expect("the step's context found its runner");
        let ix = match task {
            Some(name) => Some(
                runner
                    .tasks
                    .iter()
                    .position(|t| *t.name == *name)
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

    /// A runner's step, on `node`: the client that runs its allocation, if any.
    fn runner_step(&mut self, step: &Step, node: Option<NodeId>) -> Result<(), SimError> {
        let not_enabled = || SimError::NotEnabled(step.to_string());
        let alloc = step.alloc().ok_or_else(not_enabled)?.clone();
        let node = node.ok_or_else(not_enabled)?;
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
                    .position(|t| *t.name == **name)
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
}

/// What a step logs and where it runs: the job and task group it is about, and the node
/// whose client runs its allocation.
pub(super) type StepContext = (Option<JobId>, Option<Id>, Option<NodeId>);

/// The context of a step of `runner`'s, on `node`.
pub(super) fn runner_context(node: &NodeId, runner: &AllocRunner) -> StepContext {
    (
        Some(runner.alloc.job_id.clone()),
        Some(runner.alloc.task_group.clone()),
        Some(node.clone()),
    )
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
