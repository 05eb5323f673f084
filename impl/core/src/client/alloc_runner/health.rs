//! The health watch of an allocation placed by a deployment (Nomad's health hook with
//! `health_check = "task_states"`): once every task runs, a `min_healthy_time` timer; if it
//! fires with every task still running, the allocation is healthy, and the report says so.
//! A task that stops running in the meantime (a crash, a restart, a stop) cancels the timer,
//! and the watch begins again when every task runs again. A health check is judged the same
//! way: the agent runs no checks.

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
}

impl Health {
    /// The status a report carries: `None` until the watch decided.
    pub fn status(&self) -> Option<AllocDeploymentStatus> {
        self.healthy_at.map(|at| AllocDeploymentStatus {
            healthy: Some(true),
            timestamp: at,
            canary: false,
            modify_index: 0,
        })
    }
}

impl AllocRunner {
    /// The watch's `min_healthy_time`, if this allocation's health is watched.
    fn min_healthy_time(&self) -> Option<i64> {
        if self.alloc.deployment_id.is_empty() {
            return None;
        }
        self.alloc
            .job
            .update_of(&self.alloc.task_group)
            .map(|update| update.min_healthy_time_ns)
    }

    // invariant: rollout_bounded
    /// After every event: the timer runs exactly while the allocation is watched, not yet
    /// healthy, its runner running and every task that counts running (a poststop task does
    /// not count, nor a prestart task that finished cleanly).
    pub(super) fn watch_health(&mut self, out: &mut Vec<Command>) {
        let counted_running = self.tasks.iter().all(|task| match task.phase {
            _ if task.role == TaskRole::Poststop => true,
            TaskPhase::Running => true,
            TaskPhase::Dead => !task.state.failed && task.kills == 0,
            _ => false,
        });
        let watching = self.health.healthy_at.is_none()
            && self.phase == RunnerPhase::Running
            && !self.failed
            && counted_running;
        match (
            self.min_healthy_time().filter(|_| watching),
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
    }

    /// The `min_healthy_time` timer fired while watched: healthy.
    pub(super) fn turn_healthy(&mut self, now: i64) {
        self.health.timer = false;
        self.health.healthy_at = Some(now);
    }
}
