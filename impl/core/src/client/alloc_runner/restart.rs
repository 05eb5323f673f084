//! The restart path of a runner: in-place restarts (`alloc restart`), the restart policy's
//! decisions about tasks that ended on its own, and restart delays that a stop ends.

use super::{AllocRunner, RunnerPhase};
use crate::client::task_runner::{Decision, TaskPhase, TaskRunner};
use crate::client::Command;
use crate::spec::TaskRole;

/// Why a restart was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartRefused {
    /// The allocation is stopping, stopped, or has ended.
    Stopping,
    /// The task (or, for all tasks, every task) is not running.
    TaskNotRunning,
    NoSuchTask,
}
impl std::fmt::Display for RestartRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestartRefused::Stopping => "Allocation is stopping or has stopped: not restarted",
            RestartRefused::TaskNotRunning => "Task not running",
            RestartRefused::NoSuchTask => "Task not found",
        })
    }
}

impl AllocRunner {
    /// A stopping runner starts no task again: one waiting out its restart delay stays dead.
    pub(super) fn end_restart_delays(&mut self, out: &mut Vec<Command>) {
        for (ix, task) in self.tasks.iter_mut().enumerate() {
            if task.phase == TaskPhase::Restarting {
                task.end_without_restart(ix, out);
            }
        }
    }

    /// `alloc restart`: restarts `task` (by position), or every running task, in place. The
    /// group's services and delay are untouched. Refused, changing nothing, for a runner
    /// that is stopping or whose allocation the server has stopped, and for a task that is
    /// not running.
    pub fn restart(
        &mut self,
        task: Option<usize>,
        no_shutdown_delay: bool,
        now: i64,
        out: &mut Vec<Command>,
    ) -> Result<Vec<usize>, RestartRefused> {
        let targets = self.restart_targets(task)?;
        for &ix in &targets {
            self.tasks[ix].begin_restart(ix, no_shutdown_delay, self.cancelled, now, out);
        }
        // A task under a restart's kill does not run: the `min_healthy_time` wait stops, and
        // begins anew once every task runs again (Nomad's tracker resets it at the task's new
        // start), as the model's `AllocHealthy` waits for every task to run. Left running, it
        // once fired in the kill's few milliseconds (CI, an end-to-end test's 72 restarts),
        // and the log's `AllocHealthy` was one the model could not take. With checks, their
        // services went too: the wait for checks begins again once they pass anew.
        self.watch_health(out);
        out.push(Command::Report);
        Ok(targets)
    }

    /// The tasks a restart of `task` (or of every running task) would restart, or why it is
    /// refused; changes nothing.
    pub fn restart_targets(&self, task: Option<usize>) -> Result<Vec<usize>, RestartRefused> {
        if self.phase != RunnerPhase::Running || self.stop_requested() {
            return Err(RestartRefused::Stopping);
        }
        let running =
            |task: &TaskRunner| task.role != TaskRole::Poststop && task.phase == TaskPhase::Running;
        let targets: Vec<usize> = match task {
            Some(ix) => match self.tasks.get(ix) {
                Some(runner) if running(runner) => vec![ix],
                Some(_) => return Err(RestartRefused::TaskNotRunning),
                None => return Err(RestartRefused::NoSuchTask),
            },
            None => (0..self.tasks.len())
                .filter(|&ix| running(&self.tasks[ix]))
                .collect(),
        };
        if targets.is_empty() {
            return Err(RestartRefused::TaskNotRunning);
        }
        Ok(targets)
    }

    // invariant: restart_policy_respected
    /// The restart policy decides about a task that ended on its own. In a stopping runner it
    /// stays dead; otherwise it is restarted after the policy's delay, or — the policy
    /// exhausted, or nothing to retry — it stays dead and, as in Nomad, the leader's death or
    /// a failure kills the rest through the stop path.
    pub(super) fn restart_decision(&mut self, ix: usize, now: i64, out: &mut Vec<Command>) {
        if self.phase != RunnerPhase::Running {
            self.tasks[ix].end_without_restart(ix, out);
            return;
        }
        match self.tasks[ix].decide(now) {
            Decision::Restart { delay_ns, reason } => {
                self.tasks[ix].restart_after(ix, delay_ns, reason, now, out)
            }
            Decision::Stop { failed, reason } => {
                self.failed |= failed;
                self.tasks[ix].stay_dead(failed, reason, now);
                self.task_died_while_running(ix, now, out);
            }
        }
    }
}
