//! The health watch of an allocation placed by a deployment (Nomad's health hook with
//! `health_check = "task_states"`): once every task runs, a `min_healthy_time` timer; if it
//! fires with every task still running, the allocation is healthy, and the report says so.
//! A task that stops running in the meantime (a crash, a restart, a stop) cancels the timer,
//! and the watch begins again when every task runs again.
//!
//! With `health_check = "checks"` (Nomad's default) and at least one check that holds up a
//! deployment (a healthiness check: `on_update` not `ignore`) among the group's and its
//! tasks' services, the timer runs only while, besides, every such check passed at its
//! latest run (Nomad's `watchNomadEvents`): the host runs the checks and says, after each
//! result, whether they all pass ([`AllocRunner::checks_changed`]). A failing check cancels
//! the timer, and the wait begins again in full once they all pass again. Until the host
//! has said so, and whenever a task is not running (its services, and their checks, are
//! registered anew when it runs again), they are taken to fail. Where nothing runs checks
//! (the simulator, the model), no job has them, and nothing changes.
//!
//! Beside it, from the moment the allocation runs, its `healthy_deadline` (Nomad's
//! default 5 minutes): if that passes before the allocation is healthy — a task that keeps
//! restarting, say — the allocation is unhealthy, and the report fails its deployment. The
//! deadline runs once; a stop, a failure or a verdict cancels it.

use super::{AllocRunner, RunnerPhase};
use crate::client::task_runner::TaskPhase;
use crate::client::{Command, Timer};
use crate::server::structs::AllocDeploymentStatus;
use crate::spec::TaskRole;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The `min_healthy_time` timer is running.
    pub timer: bool,
    /// Decided healthy, and when (Unix nanoseconds; 0 in the simulator).
    pub healthy_at: Option<i64>,
    /// The `healthy_deadline` timer is running.
    #[serde(default)]
    pub deadline: bool,
    /// The deadline was armed once (it is never armed again).
    #[serde(default)]
    pub deadline_armed: bool,
    /// Decided unhealthy (the deadline passed first), and when.
    #[serde(default)]
    pub unhealthy_at: Option<i64>,
    /// Every healthiness check of the allocation passed at its latest run, as the host last
    /// said (only read when the watch waits for checks).
    #[serde(default)]
    pub checks_passing: bool,
}

impl Health {
    /// The status a report carries: `None` until the watch decided.
    pub fn status(&self) -> Option<AllocDeploymentStatus> {
        let (healthy, at) = match (self.healthy_at, self.unhealthy_at) {
            (Some(at), _) => (true, at),
            (None, Some(at)) => (false, at),
            (None, None) => return None,
        };
        Some(AllocDeploymentStatus {
            healthy: Some(healthy),
            timestamp: at,
            canary: false,
            modify_index: 0,
        })
    }

    fn decided(&self) -> bool {
        self.healthy_at.is_some() || self.unhealthy_at.is_some()
    }
}

impl AllocRunner {
    /// The watch's `min_healthy_time` and `healthy_deadline`, if this allocation's health is
    /// watched.
    fn health_times(&self) -> Option<(i64, i64)> {
        if self.alloc.deployment_id.is_empty() {
            return None;
        }
        self.alloc
            .job
            .update_of(&self.alloc.task_group)
            .map(|update| (update.min_healthy_time_ns, update.healthy_deadline_ns))
    }

    /// The watch waits for checks: `health_check = "checks"` and a healthiness check
    /// among the allocation's services.
    pub fn waits_for_checks(&self) -> bool {
        !self.alloc.deployment_id.is_empty()
            && self.alloc.job.health_checks_of(&self.alloc.task_group) > 0
    }

    /// The host ran a check: whether every healthiness check of the allocation now passes
    /// (none pending). `false` if that changes nothing the watch reads.
    pub fn checks_changed(&mut self, passing: bool, out: &mut Vec<Command>) -> bool {
        if !self.waits_for_checks() || self.health.decided() || self.phase == RunnerPhase::Terminal
        {
            return false;
        }
        if self.health.checks_passing == passing {
            return false;
        }
        self.health.checks_passing = passing;
        self.watch_health(out);
        true
    }

    // invariant: rollout_bounded
    /// After every event: the timer runs exactly while the allocation is watched, not yet
    /// healthy, its runner running, every task that counts running (a poststop task does
    /// not count, nor a prestart task that finished cleanly) and, if the watch waits for
    /// checks, every healthiness check passing.
    pub(super) fn watch_health(&mut self, out: &mut Vec<Command>) {
        let counted_running = self.tasks.iter().all(|task| match task.phase {
            _ if task.role == TaskRole::Poststop => true,
            TaskPhase::Running => true,
            TaskPhase::Dead => !task.state.failed && task.kills == 0,
            _ => false,
        });
        if !counted_running {
            // Its services go with it, and their checks are run anew when it runs again.
            self.health.checks_passing = false;
        }
        let undecided =
            !self.health.decided() && self.phase == RunnerPhase::Running && !self.failed;
        // The checks are counted (the job's services read) only for a watch that could run.
        let watching = undecided
            && counted_running
            && (self.health.checks_passing || !self.waits_for_checks());
        let times = self.health_times();
        match (
            times
                .map(|(min_healthy, _)| min_healthy)
                .filter(|_| watching),
            self.health.timer,
        ) {
            (Some(after_ns), false) => {
                self.health.timer = true;
                out.push(Command::StartTimer {
                    timer: Timer::Healthy,
                    after_ns,
                });
            }
            (None, true) => {
                self.health.timer = false;
                out.push(Command::CancelTimer {
                    timer: Timer::Healthy,
                });
            }
            _ => {}
        }
        match (times.filter(|_| undecided), self.health.deadline) {
            (Some((_, after_ns)), false) if !self.health.deadline_armed => {
                self.health.deadline = true;
                self.health.deadline_armed = true;
                out.push(Command::StartTimer {
                    timer: Timer::HealthyDeadline,
                    after_ns,
                });
            }
            (None, true) => {
                self.health.deadline = false;
                out.push(Command::CancelTimer {
                    timer: Timer::HealthyDeadline,
                });
            }
            _ => {}
        }
    }

    /// A restored runner's health watch: the `min_healthy_time` timer starts again (the
    /// tasks' running is watched anew; the agent's host does not resume its stored due
    /// time), the `healthy_deadline` goes on where it was (the host keeps its stored due
    /// time: one passed while the agent was down fires at once).
    pub(super) fn rearm_health(&mut self, out: &mut Vec<Command>) {
        self.health.timer = false;
        // The checks run anew in the restarted agent: until they say so, they fail.
        self.health.checks_passing = false;
        if self.health.deadline {
            if let Some((_, after_ns)) = self.health_times() {
                out.push(Command::StartTimer {
                    timer: Timer::HealthyDeadline,
                    after_ns,
                });
            }
        }
        self.watch_health(out);
    }

    /// The `min_healthy_time` timer fired while watched: healthy.
    pub(super) fn turn_healthy(&mut self, now: i64) {
        self.health.timer = false;
        self.health.healthy_at = Some(now);
    }

    /// The `healthy_deadline` timer fired before a verdict: unhealthy.
    pub(super) fn turn_unhealthy(&mut self, now: i64) {
        self.health.deadline = false;
        self.health.unhealthy_at = Some(now);
    }
}
