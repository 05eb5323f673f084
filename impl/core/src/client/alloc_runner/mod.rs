//! The alloc runner: a sans-IO state machine. Events go in (an allocation update, a timer
//! firing, a process exiting) and commands come out (start a task, deregister services,
//! start or cancel a timer, signal, SIGKILL, report). Internal steps it can take without
//! waiting — the group pre-kill hooks, a task's kill beginning, a poststop task starting —
//! are listed by [`AllocRunner::ready_steps`] and taken one at a time with
//! [`AllocRunner::step`], so the simulator can interleave them and the daemon can just take
//! them in order.

use crate::client::hooks::{GroupServiceHook, RunnerPreKillHook};
use crate::client::task_runner::{event, ExitResult, RestartMark, TaskPhase, TaskRunner};
use crate::client::{Command, DelayOutcome, RunnerStep, Timer};
use crate::server::structs::{event_types, Allocation, ClientStatus, DesiredStatus};
use crate::spec::{RestartPolicy, TaskRole};
use crate::text::joined;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;

mod health;
mod restart;

pub use restart::RestartRefused;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunnerPhase {
    Running,
    /// A stop arrived: the group pre-kill hooks are next.
    PreKill,
    /// The group `shutdown_delay` timer runs.
    GroupDelay,
    /// Tasks are killed in order, then poststop tasks run.
    Killing,
    /// Every task is dead; reported.
    Terminal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocRunner {
    /// The client's copy of the allocation, as last pulled. Shared between copies of the
    /// runner (the lockstep walk's simulator clones), which steps change far more often.
    pub alloc: Arc<Allocation>,
    pub phase: RunnerPhase,
    /// The runner's one delay cancellation (Nomad's `shutdownDelayCtx`): fired by the first
    /// update carrying the flag, never re-armed.
    pub cancelled: bool,
    pub group_pre_kill_done: bool,
    pub group_delay: DelayOutcome,
    /// The delay the pre-kill hooks asked for (the group `shutdown_delay`).
    pub group_shutdown_delay_ns: i64,
    pub group_service_hook: GroupServiceHook,
    pub tasks: Vec<TaskRunner>,
    /// A task's restart policy left it dead and failed: the allocation fails, and its other
    /// tasks are killed through the stop path.
    #[serde(default)]
    pub failed: bool,
    /// Placed by a deployment: the health watch (`health.rs`).
    #[serde(default)]
    pub health: health::Health,
}

impl AllocRunner {
    /// A runner for a newly pulled allocation: it starts every non-poststop task, unless the
    /// allocation is already stopped, in which case nothing runs.
    pub fn new(
        alloc: Allocation,
        max_kill_timeout_ns: i64,
        now: i64,
        out: &mut Vec<Command>,
    ) -> Self {
        let group = alloc
            .job
            .task_groups
            .iter()
            .find(|g| g.name == alloc.task_group)
            .cloned()
            .unwrap_or_default();
        let mut runner = AllocRunner {
            phase: RunnerPhase::Running,
            cancelled: false,
            group_pre_kill_done: false,
            group_delay: DelayOutcome::None,
            group_shutdown_delay_ns: 0,
            group_service_hook: GroupServiceHook {
                services: group
                    .services
                    .iter()
                    .flatten()
                    .map(|s| s.name.clone())
                    .collect(),
                shutdown_delay_ns: group.shutdown_delay_ns.unwrap_or(0),
            },
            failed: false,
            health: health::Health::default(),
            tasks: group
                .tasks
                .iter()
                .map(|task| {
                    let policy = RestartPolicy::effective(
                        &alloc.job.job_type,
                        group.restart_policy.as_ref(),
                        task.restart_policy.as_ref(),
                    );
                    let batch = alloc.job.job_type == "batch";
                    TaskRunner::new(task, policy, batch, max_kill_timeout_ns)
                })
                .collect(),
            alloc: Arc::new(alloc),
        };
        for task in &mut runner.tasks {
            task.record(event(
                event_types::RECEIVED,
                now,
                "Task received by client",
                [],
            ));
        }
        if runner.stop_requested() {
            // Stopped before it started: no task runs, nothing to kill.
            runner.finish(now, out);
            return runner;
        }
        runner.group_service_hook.register(out);
        for (ix, task) in runner.tasks.iter_mut().enumerate() {
            if task.role != TaskRole::Poststop {
                task.start(ix, now, out);
            }
        }
        Arc::make_mut(&mut runner.alloc).client_status = ClientStatus::Running;
        // A first pull may already carry the flag (a flagged stop before the client pulled
        // a new allocation): the cancellation fires now, so no later wait happens.
        if runner
            .alloc
            .desired_transition
            .should_ignore_shutdown_delay()
        {
            runner.cancel_delays(now, out);
        }
        runner.watch_health(out);
        out.push(Command::Report);
        runner
    }

    // invariant: flag_is_honoured
    /// A runner restored from stored state after a client restart. It applies the flag the
    /// stored allocation already carries (DESIGN.md: Nomad's restored runners do not), and
    /// re-arms the timers that were running.
    pub fn restore(mut stored: AllocRunner, now: i64, out: &mut Vec<Command>) -> Self {
        stored.cancelled = false;
        if stored.phase == RunnerPhase::GroupDelay {
            out.push(Command::StartTimer {
                timer: Timer::GroupDelay,
                after_ns: stored.group_shutdown_delay_ns,
            });
        }
        for (ix, task) in stored.tasks.iter().enumerate() {
            match task.phase {
                TaskPhase::Delaying => out.push(Command::StartTimer {
                    timer: Timer::TaskDelay(ix),
                    after_ns: task.shutdown_delay_ns,
                }),
                // The signal went out before the step was stored; the kill timeout is
                // re-armed (with its stored deadline). After SIGKILL the timer has fired; the
                // exit is on its way from the driver.
                TaskPhase::Signalled if !task.sigkilled => out.push(Command::StartTimer {
                    timer: Timer::KillTimeout(ix),
                    after_ns: task.kill_timeout_ns,
                }),
                TaskPhase::Restarting => out.push(Command::StartTimer {
                    timer: Timer::RestartDelay(ix),
                    after_ns: task.restart_delay_ns,
                }),
                _ => {}
            }
        }
        if stored
            .alloc
            .desired_transition
            .should_ignore_shutdown_delay()
        {
            stored.cancel_delays(now, out);
        }
        stored.rearm_health(out);
        stored
    }

    fn stop_requested(&self) -> bool {
        self.alloc.desired_status != DesiredStatus::Run || self.alloc.tombstone
    }

    // invariant: flag_is_honoured
    /// A pulled update. Any update carrying the flag cancels the delays at once, even in the
    /// middle of a wait (§2.2); a stop moves a running runner to its pre-kill hooks.
    pub fn update(&mut self, alloc: Allocation, now: i64, out: &mut Vec<Command>) {
        debug_assert_eq!(alloc.id, self.alloc.id, "an update for another allocation");
        let mut alloc = alloc;
        alloc.task_states = self.alloc.task_states.clone();
        alloc.client_status = self.alloc.client_status;
        self.alloc = Arc::new(alloc);
        if self.phase == RunnerPhase::Running && self.stop_requested() {
            self.phase = RunnerPhase::PreKill;
            self.end_restart_delays(out);
        }
        if self.alloc.desired_transition.should_ignore_shutdown_delay() {
            self.cancel_delays(now, out);
        }
        self.watch_health(out);
    }

    // invariant: delay_skipped_only_when_flagged
    /// Fires the cancellation: a wait in progress ends now, a later wait is skipped.
    fn cancel_delays(&mut self, now: i64, out: &mut Vec<Command>) {
        if self.cancelled || self.phase == RunnerPhase::Terminal {
            return;
        }
        debug_assert!(
            self.alloc.desired_transition.should_ignore_shutdown_delay(),
            "delay_skipped_only_when_flagged: alloc {} cancels its delays unflagged",
            self.alloc.id
        );
        self.cancelled = true;
        if self.phase == RunnerPhase::GroupDelay {
            out.push(Command::CancelTimer {
                timer: Timer::GroupDelay,
            });
            self.group_event(
                event_types::GROUP_SHUTDOWN_DELAY_CUT_SHORT,
                now,
                "cut short by -no-shutdown-delay",
            );
            self.group_delay = DelayOutcome::CutShort;
            self.phase = RunnerPhase::Killing;
        }
        for ix in 0..self.tasks.len() {
            if self.tasks[ix].phase == TaskPhase::Delaying {
                self.tasks[ix].cut_delay_short(ix, now, out);
            }
        }
        self.settle(now, out);
        out.push(Command::Report);
    }

    /// DESIGN.md: the group delay's events are recorded on every task (Nomad emits none).
    fn group_event(&mut self, event_type: &'static str, now: i64, what: &str) {
        let delay = crate::gotime::go_duration(self.group_shutdown_delay_ns);
        let display = joined(&["Group shutdown_delay of ", &delay, ": ", what, "."]);
        for task in &mut self.tasks {
            if !task.is_done() {
                task.record(event(event_type, now, display.clone(), []));
            }
        }
    }

    /// The internal steps the runner can take now, in a fixed order.
    pub fn ready_steps(&self) -> Vec<RunnerStep> {
        let mut steps = self.stop_steps();
        if self.phase != RunnerPhase::Terminal {
            steps.extend(
                (0..self.tasks.len())
                    .filter(|&ix| self.tasks[ix].phase == TaskPhase::Crashed)
                    .map(RunnerStep::RestartDecision),
            );
        }
        steps
    }

    // invariant: kill_order
    fn stop_steps(&self) -> Vec<RunnerStep> {
        match self.phase {
            RunnerPhase::PreKill => vec![RunnerStep::GroupPreKill],
            RunnerPhase::Killing => {
                let mut steps = Vec::new();
                for (ix, task) in self.tasks.iter().enumerate() {
                    match (task.role, task.phase) {
                        (TaskRole::Poststop, TaskPhase::NotStarted) if self.non_poststop_done() => {
                            steps.push(RunnerStep::PoststopStart(ix))
                        }
                        (TaskRole::Poststop, _) => {}
                        (role, TaskPhase::Running) if self.earlier_stages_dead(role) => {
                            steps.push(RunnerStep::TaskPreKill(ix))
                        }
                        _ => {}
                    }
                }
                steps
            }
            RunnerPhase::Running | RunnerPhase::GroupDelay | RunnerPhase::Terminal => Vec::new(),
        }
    }

    // invariant: kill_order
    /// kill_order: leader, then the other main tasks, then sidecars (§2.3).
    fn earlier_stages_dead(&self, role: TaskRole) -> bool {
        let stage = kill_stage(role);
        self.tasks
            .iter()
            .all(|task| kill_stage(task.role) >= stage || task.is_done())
    }

    // invariant: kill_order
    fn non_poststop_done(&self) -> bool {
        self.tasks
            .iter()
            .all(|task| task.role == TaskRole::Poststop || task.is_done())
    }

    /// Takes one internal step; `false` if it is not ready.
    pub fn step(&mut self, step: RunnerStep, now: i64, out: &mut Vec<Command>) -> bool {
        if !self.ready_steps().contains(&step) {
            return false;
        }
        match step {
            RunnerStep::GroupPreKill => self.group_pre_kill(now, out),
            RunnerStep::TaskPreKill(ix) => self.tasks[ix].begin_kill(ix, self.cancelled, now, out),
            RunnerStep::PoststopStart(ix) => self.tasks[ix].start(ix, now, out),
            RunnerStep::RestartDecision(ix) => self.restart_decision(ix, now, out),
        }
        self.settle(now, out);
        self.watch_health(out);
        out.push(Command::Report);
        true
    }

    // invariant: prestop_hooks_always_run
    /// The pre-kill hooks run (the group service hook deregisters the group services), then
    /// the delay they ask for is waited, or skipped if the delays are already cancelled.
    fn group_pre_kill(&mut self, now: i64, out: &mut Vec<Command>) {
        debug_assert!(
            self.phase == RunnerPhase::PreKill && !self.group_pre_kill_done,
            "kill_order: alloc {} runs its group pre-kill hooks in {:?}, or twice",
            self.alloc.id,
            self.phase
        );
        let mut delay_ns = 0;
        for hook in self.pre_kill_hooks() {
            delay_ns = delay_ns.max(hook.pre_kill(out));
        }
        self.group_pre_kill_done = true;
        self.group_shutdown_delay_ns = delay_ns;
        self.phase = RunnerPhase::Killing;
        if delay_ns <= 0 {
            return;
        }
        if self.cancelled {
            self.group_delay = DelayOutcome::Skipped;
            self.group_event(
                event_types::SKIPPING_GROUP_SHUTDOWN_DELAY,
                now,
                "skipped by -no-shutdown-delay",
            );
        } else {
            self.group_event(
                event_types::WAITING_FOR_GROUP_SHUTDOWN_DELAY,
                now,
                "waiting before killing tasks",
            );
            self.phase = RunnerPhase::GroupDelay;
            self.group_delay = DelayOutcome::Waiting;
            out.push(Command::StartTimer {
                timer: Timer::GroupDelay,
                after_ns: delay_ns,
            });
        }
    }

    fn pre_kill_hooks(&self) -> [&dyn RunnerPreKillHook; 1] {
        [&self.group_service_hook]
    }

    // invariant: kill_timeout_respected
    /// A timer fired; `false` if no such timer was running (a stale one).
    pub fn timer_fired(&mut self, timer: Timer, now: i64, out: &mut Vec<Command>) -> bool {
        match timer {
            Timer::GroupDelay if self.phase == RunnerPhase::GroupDelay => {
                debug_assert_eq!(
                    self.group_delay,
                    DelayOutcome::Waiting,
                    "a group delay elapses that was not being waited"
                );
                self.group_delay = DelayOutcome::Elapsed;
                self.phase = RunnerPhase::Killing;
                // Every task may have died during the wait (a crash): then the runner ends.
                self.settle(now, out);
            }
            Timer::TaskDelay(ix)
                if self
                    .tasks
                    .get(ix)
                    .is_some_and(|t| t.phase == TaskPhase::Delaying) =>
            {
                self.tasks[ix].delay_elapsed(ix, now, out)
            }
            Timer::KillTimeout(ix)
                if self
                    .tasks
                    .get(ix)
                    .is_some_and(|t| t.phase == TaskPhase::Signalled && !t.sigkilled) =>
            {
                self.tasks[ix].kill_timeout_fired(ix, out)
            }
            Timer::RestartDelay(ix)
                if self.phase == RunnerPhase::Running
                    && self
                        .tasks
                        .get(ix)
                        .is_some_and(|t| t.phase == TaskPhase::Restarting) =>
            {
                self.tasks[ix].run_again(ix, now, out)
            }
            Timer::Healthy if self.health.timer => self.turn_healthy(now),
            Timer::HealthyDeadline if self.health.deadline => self.turn_unhealthy(now),
            _ => return false,
        }
        self.watch_health(out);
        out.push(Command::Report);
        true
    }

    /// A task's process exited; `false` if the task was not running.
    pub fn task_exited(
        &mut self,
        ix: usize,
        exit: ExitResult,
        now: i64,
        out: &mut Vec<Command>,
    ) -> bool {
        let Some(task) = self.tasks.get_mut(ix) else {
            return false;
        };
        match task.phase {
            TaskPhase::NotStarted
            | TaskPhase::Dead
            | TaskPhase::Crashed
            | TaskPhase::Restarting => return false,
            TaskPhase::Running if task.role != TaskRole::Poststop => {
                // Ended on its own: the restart policy decides next (a ready step).
                task.ended_on_its_own(ix, exit, now, out);
                self.watch_health(out);
                out.push(Command::Report);
                return true;
            }
            _ => {}
        }
        task.exited(ix, exit, now, out);
        // A restart's kill is over: in a runner still running, the task runs again at once
        // (an operator's restart waits no restart delay and uses no attempt).
        if task.restart != RestartMark::None && self.phase == RunnerPhase::Running {
            task.run_again(ix, now, out);
        }
        self.settle(now, out);
        self.watch_health(out);
        out.push(Command::Report);
        true
    }

    // invariant: restart_policy_respected
    /// A task ended on its own before any stop, and its restart policy leaves it dead. As in
    /// Nomad (`reference/nomad-stop-path.md` §2.3, "other kill triggers"), the leader's
    /// death, a task's failure, or the last main task's end kills the rest through the same
    /// path as a stop: pre-kill hooks, the group delay (and the flag, if one comes), the kill
    /// order, then the poststop tasks; no task waiting out a restart delay runs again. The
    /// model's `RestartDecision` with the attempts used up (a failure) takes this path; a
    /// batch task's clean end is outside the model.
    fn task_died_while_running(&mut self, ix: usize, now: i64, out: &mut Vec<Command>) {
        let dead = &self.tasks[ix];
        if dead.role == TaskRole::Poststop {
            return;
        }
        let mains_left = self
            .tasks
            .iter()
            .any(|task| matches!(task.role, TaskRole::Leader | TaskRole::Main) && !task.is_done());
        let (event_type, display) = if dead.role == TaskRole::Leader {
            (
                event_types::LEADER_TASK_DEAD,
                Cow::Borrowed("Leader Task in Group dead"),
            )
        } else if dead.state.failed {
            (
                event_types::SIBLING_TASK_FAILED,
                Cow::Owned(format!("Task's sibling {:?} failed", dead.name)),
            )
        } else if !mains_left {
            (
                event_types::MAIN_TASKS_DEAD,
                Cow::Borrowed("Main tasks in the group died"),
            )
        } else {
            return;
        };
        self.end_restart_delays(out);
        let live = self.tasks.iter().any(|task| {
            task.role != TaskRole::Poststop
                && matches!(
                    task.phase,
                    TaskPhase::Running | TaskPhase::Delaying | TaskPhase::Signalled
                )
        });
        if !live {
            // Nothing left to kill (Nomad calls killTasks only for live tasks): no pre-kill
            // hooks, no group delay; the poststop tasks run, and the postrun hooks
            // deregister the group services when the runner ends.
            self.phase = RunnerPhase::Killing;
            return;
        }
        for task in &mut self.tasks {
            if task.phase == TaskPhase::Running {
                task.record(event(event_type, now, display.clone(), []));
            }
        }
        self.phase = RunnerPhase::PreKill;
    }

    // invariant: kill_order
    /// The runner ends once every task that will run is dead.
    fn settle(&mut self, now: i64, out: &mut Vec<Command>) {
        let all_dead = self.tasks.iter().all(|task| {
            task.phase == TaskPhase::Dead
                || (task.phase == TaskPhase::NotStarted && task.role != TaskRole::Poststop)
        });
        if self.phase == RunnerPhase::Killing && all_dead {
            self.finish(now, out);
        }
    }

    // invariant: stop_completes
    /// Client-terminal: postrun hooks deregister the group services again (idempotent), and
    /// the status is reported.
    fn finish(&mut self, _now: i64, out: &mut Vec<Command>) {
        debug_assert!(
            self.tasks.iter().all(|t| t.phase != TaskPhase::Running
                && t.phase != TaskPhase::Signalled
                && t.phase != TaskPhase::Delaying),
            "stop_completes: alloc {} ends with a task still alive",
            self.alloc.id
        );
        debug_assert_ne!(
            self.phase,
            RunnerPhase::Terminal,
            "an allocation ends twice"
        );
        self.phase = RunnerPhase::Terminal;
        for hook in self.pre_kill_hooks() {
            hook.postrun(out);
        }
        let failed = self.tasks.iter().any(|task| task.state.failed);
        let alloc = Arc::make_mut(&mut self.alloc);
        alloc.client_status = if failed {
            ClientStatus::Failed
        } else {
            ClientStatus::Complete
        };
        alloc.client_description = "All tasks have completed".to_string();
        out.push(Command::Report);
    }

    /// What the client reports of it to the server.
    pub fn report(&self) -> crate::server::ClientReport {
        crate::server::ClientReport {
            client_status: self.alloc.client_status,
            client_description: self.alloc.client_description.clone(),
            task_states: self.task_states(),
            deployment_status: self.health.status(),
        }
    }

    /// The task states as the client reports them (each name shared with its task runner).
    pub fn task_states(&self) -> crate::server::structs::TaskStates {
        self.tasks
            .iter()
            .map(|task| (task.name.clone(), task.state.clone()))
            .collect()
    }
}

fn kill_stage(role: TaskRole) -> u8 {
    match role {
        TaskRole::Leader => 0,
        TaskRole::Main => 1,
        TaskRole::Sidecar => 2,
        TaskRole::Poststop => 3,
    }
}

#[cfg(test)]
mod health_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod tests;
