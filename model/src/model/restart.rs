//! The restart path: the operator's in-place restarts (the task's half of the kill
//! sequence, then the task runs again), crashes, and the restart policy's decisions.

use super::StopPathModel;
use crate::config::{Fault, TaskKind};
use crate::state::{Alloc, RestartMark, RunnerPhase, State, Task, TaskPhase};

impl StopPathModel {
    /// `alloc restart`, accepted by the client: each targeted task's restart begins.
    pub(super) fn restart_alloc(
        &self,
        state: &mut State,
        ix: usize,
        task: Option<usize>,
        flag: bool,
    ) {
        state.requests_made += 1;
        let alloc = &mut state.allocs[ix];
        let targets: Vec<usize> = match task {
            Some(task) => vec![task],
            None => self.restartable_tasks(alloc).collect(),
        };
        for task in targets {
            self.begin_restart(alloc, task, flag);
        }
    }

    /// `Restart Signaled`, the task's pre-kill hooks, then its delay — skipped if this
    /// restart asked, or if a flagged stop already cancelled the runner's delays — then the
    /// kill signal. The group's services and delay are untouched (DESIGN.md).
    pub(super) fn begin_restart(&self, alloc: &mut Alloc, ix: usize, flag: bool) {
        let cancelled = alloc.cancelled;
        if flag && self.has(Fault::RestartFlagLeaks) {
            alloc.cancelled = true;
        }
        let task = &mut alloc.tasks[ix];
        debug_assert_eq!(task.phase, TaskPhase::Running);
        task.restart = if flag {
            RestartMark::Flagged
        } else {
            RestartMark::Unflagged
        };
        if self.has(Fault::RestartSignalsBeforePreKill) {
            task.signalled = true;
        } else {
            task.pre_kill = true;
            task.service_registered = false;
        }
        let honours_flag = cancelled || (flag && !self.has(Fault::NomadInplaceRestartIgnoresFlag));
        self.start_task_delay(alloc, ix, honours_flag);
    }

    /// The task starts again with a fresh record (its restart count kept) and its services
    /// registered again: the restart is complete, and its flag is gone with it.
    pub(super) fn run_again(&self, alloc: &mut Alloc, ix: usize) {
        let restarts = alloc.tasks[ix].restarts;
        alloc.tasks[ix] = Task {
            phase: TaskPhase::Running,
            service_registered: self.cfg.group.tasks[ix].service
                && !self.has(Fault::RestartLeavesServicesDeregistered),
            restarts,
            ..Task::NOT_STARTED
        };
    }

    /// The restart policy (`mode = "fail"`) decides about a crashed task; an unrecoverable
    /// error is never retried.
    pub(super) fn restart_decision(&self, alloc: &mut Alloc, ix: usize, unrecoverable: bool) {
        let attempts = self.cfg.restart_attempts;
        let task = &mut alloc.tasks[ix];
        debug_assert_eq!(task.phase, TaskPhase::Crashed);
        if alloc.runner != RunnerPhase::Running {
            // The runner is stopping: a dead task is not started again (`Not Restarting`).
            task.phase = TaskPhase::Exited;
            return;
        }
        let retry = !unrecoverable && task.restarts < attempts;
        if retry || self.has(Fault::RestartPastAttempts) {
            task.restarts = (task.restarts + 1).min(attempts + 1);
            task.phase = TaskPhase::Restarting;
            return;
        }
        task.phase = TaskPhase::Exited;
        self.fail(alloc);
    }

    /// A task's policy is exhausted: the allocation fails, and its other tasks are killed
    /// through the stop path — pre-kill hooks, group delay, kill order — or, with none left
    /// alive, the runner goes straight to its poststop tasks (Nomad kills only live tasks).
    pub(super) fn fail(&self, alloc: &mut Alloc) {
        alloc.failed = true;
        self.end_restart_backoffs(alloc);
        let live = self
            .tasks()
            .any(|(ix, kind)| kind != TaskKind::Poststop && alloc.tasks[ix].is_live());
        alloc.runner = if live {
            RunnerPhase::PreKill
        } else {
            RunnerPhase::Killing
        };
    }

    /// A stopping runner starts no task again: a task waiting out its restart delay stays
    /// dead (Nomad: `Run` leaves its loop when the kill context is cancelled).
    pub(super) fn end_restart_backoffs(&self, alloc: &mut Alloc) {
        for task in alloc.tasks.iter_mut() {
            if task.phase == TaskPhase::Restarting {
                task.phase = TaskPhase::Exited;
            }
        }
    }
}
