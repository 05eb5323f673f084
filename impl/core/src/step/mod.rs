//! The step alphabet (DESIGN.md, "The step alphabet"; `ARCHITECTURE.md` keeps the table), in
//! the implementation's terms: every model action is one [`Step`], with allocation IDs and
//! task names where the model has positions, and every effect on the world that a step
//! implies — a launch, a service (de)registration, a kill signal, a SIGKILL — is one
//! [`Effect`]. The simulator and the daemon both build their event-log entries ([`log`])
//! from these types, so the compiler keeps one alphabet for both.

pub mod log;

use crate::client::{AllocRunner, Command};
use crate::server::structs::{AllocId, JobId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A task's name in a step: shared with its runner, not copied, as a step names one after
/// nearly every other.
pub type TaskName = std::sync::Arc<str>;

/// One step of the step alphabet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    StopJob {
        job: JobId,
        purge: bool,
        no_shutdown_delay: bool,
    },
    StopAlloc {
        alloc: AllocId,
        no_shutdown_delay: bool,
    },
    StartJob {
        job: JobId,
    },
    /// The scheduler processes the pending evaluation of `job`.
    ProcessEval {
        job: JobId,
    },
    ClientSync {
        alloc: AllocId,
    },
    GroupPreKill {
        alloc: AllocId,
    },
    GroupDelayElapsed {
        alloc: AllocId,
    },
    TaskPreKill {
        alloc: AllocId,
        task: TaskName,
    },
    TaskDelayElapsed {
        alloc: AllocId,
        task: TaskName,
    },
    TaskExit {
        alloc: AllocId,
        task: TaskName,
    },
    KillTimeout {
        alloc: AllocId,
        task: TaskName,
    },
    PoststopStart {
        alloc: AllocId,
        task: TaskName,
    },
    PoststopExit {
        alloc: AllocId,
        task: TaskName,
    },
    ClientRestart,
    /// `alloc restart`, in place: `task`, or (`None`) every running task.
    RestartAlloc {
        alloc: AllocId,
        task: Option<TaskName>,
        no_shutdown_delay: bool,
    },
    /// The restart policy decides about a task that ended on its own; `unrecoverable`: its
    /// run ended in an error the driver reported, which is never retried.
    RestartDecision {
        alloc: AllocId,
        task: TaskName,
        unrecoverable: bool,
    },
    /// The restart delay timer fires: the task runs again.
    RestartDelayElapsed {
        alloc: AllocId,
        task: TaskName,
    },
    /// `job run` of an edited jobspec. The simulator's stand-in for the edit: the latest
    /// version with each group's `Meta["generation"]` counted up (a destructive change that
    /// leaves the stop path's fields alone). Logged as the registration it is.
    UpdateJob {
        job: JobId,
    },
    /// The `min_healthy_time` timer of an allocation placed by a deployment fires with every
    /// task running: its client reports it healthy.
    AllocHealthy {
        alloc: AllocId,
    },
    /// The `healthy_deadline` timer of an allocation placed by a deployment fires before it
    /// was healthy: its client reports it unhealthy (and the deployment fails). The model
    /// has no health deadline: trace validation stops judging here.
    AllocUnhealthy {
        alloc: AllocId,
    },
}

impl Step {
    /// The step's name in the step-alphabet table and the event log.
    pub fn name(&self) -> &'static str {
        match self {
            Step::StopJob { .. } => "StopJob",
            Step::StopAlloc { .. } => "StopAlloc",
            Step::StartJob { .. } => "StartJob",
            Step::ProcessEval { .. } => "ProcessEval",
            Step::ClientSync { .. } => "ClientSync",
            Step::GroupPreKill { .. } => "GroupPreKill",
            Step::GroupDelayElapsed { .. } => "GroupDelayElapsed",
            Step::TaskPreKill { .. } => "TaskPreKill",
            Step::TaskDelayElapsed { .. } => "TaskDelayElapsed",
            Step::TaskExit { .. } => "TaskExit",
            Step::KillTimeout { .. } => "KillTimeout",
            Step::PoststopStart { .. } => "PoststopStart",
            Step::PoststopExit { .. } => "PoststopExit",
            Step::ClientRestart => "ClientRestart",
            Step::RestartAlloc { .. } => "RestartAlloc",
            Step::RestartDecision { .. } => "RestartDecision",
            Step::RestartDelayElapsed { .. } => "RestartDelayElapsed",
            Step::UpdateJob { .. } => "UpdateJob",
            Step::AllocHealthy { .. } => "AllocHealthy",
            Step::AllocUnhealthy { .. } => "AllocUnhealthy",
        }
    }

    /// An operator request or environment event (offered by the budget or the script in the
    /// model), as opposed to a step the cluster takes on its own.
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Step::StopJob { .. }
                | Step::StopAlloc { .. }
                | Step::StartJob { .. }
                | Step::ClientRestart
                | Step::RestartAlloc { .. }
                | Step::UpdateJob { .. }
        )
    }

    /// The allocation the step is about, if any.
    pub fn alloc(&self) -> Option<&AllocId> {
        match self {
            Step::StopAlloc { alloc, .. }
            | Step::ClientSync { alloc }
            | Step::GroupPreKill { alloc }
            | Step::GroupDelayElapsed { alloc }
            | Step::TaskPreKill { alloc, .. }
            | Step::TaskDelayElapsed { alloc, .. }
            | Step::TaskExit { alloc, .. }
            | Step::KillTimeout { alloc, .. }
            | Step::PoststopStart { alloc, .. }
            | Step::PoststopExit { alloc, .. }
            | Step::RestartAlloc { alloc, .. }
            | Step::RestartDecision { alloc, .. }
            | Step::RestartDelayElapsed { alloc, .. }
            | Step::AllocHealthy { alloc }
            | Step::AllocUnhealthy { alloc } => Some(alloc),
            Step::StopJob { .. }
            | Step::StartJob { .. }
            | Step::UpdateJob { .. }
            | Step::ProcessEval { .. }
            | Step::ClientRestart => None,
        }
    }

    /// The task the step is about, if any.
    pub fn task(&self) -> Option<&TaskName> {
        match self {
            Step::TaskPreKill { task, .. }
            | Step::TaskDelayElapsed { task, .. }
            | Step::TaskExit { task, .. }
            | Step::KillTimeout { task, .. }
            | Step::PoststopStart { task, .. }
            | Step::PoststopExit { task, .. }
            | Step::RestartDecision { task, .. }
            | Step::RestartDelayElapsed { task, .. } => Some(task),
            Step::RestartAlloc { task, .. } => task.as_ref(),
            _ => None,
        }
    }

    /// The job the step names itself (the requests and the scheduler's step).
    pub fn job(&self) -> Option<&JobId> {
        match self {
            Step::StopJob { job, .. }
            | Step::StartJob { job }
            | Step::ProcessEval { job }
            | Step::UpdateJob { job } => Some(job),
            _ => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        match self {
            Step::StopJob {
                job,
                purge,
                no_shutdown_delay,
            } => write!(
                f,
                "{{job: {job}, purge: {purge}, no_shutdown_delay: {no_shutdown_delay}}}"
            ),
            Step::StopAlloc {
                alloc,
                no_shutdown_delay,
            } => write!(
                f,
                "{{alloc: {alloc}, no_shutdown_delay: {no_shutdown_delay}}}"
            ),
            Step::StartJob { job } | Step::ProcessEval { job } | Step::UpdateJob { job } => {
                write!(f, "{{job: {job}}}")
            }
            Step::RestartAlloc {
                alloc,
                task,
                no_shutdown_delay,
            } => write!(
                f,
                "{{alloc: {alloc}, task: {}, no_shutdown_delay: {no_shutdown_delay}}}",
                task.as_deref().unwrap_or("all")
            ),
            _ => match (self.alloc(), self.task()) {
                (Some(alloc), Some(task)) => write!(f, "{{alloc: {alloc}, task: {task}}}"),
                (Some(alloc), None) => write!(f, "{{alloc: {alloc}}}"),
                _ => Ok(()),
            },
        }
    }
}

/// An effect on the world outside the runner that a step implies, as the event log records
/// it with the step that did it (DESIGN.md, "Judged by what processes experience"). The
/// trace validator checks them against the model: one kill signal per kill, only once the
/// task's and its group's services are gone; SIGKILL only when the kill timeout fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect")]
pub enum Effect {
    /// The task was started (or, for a step taken again after a crash, found started).
    Launch { task: String },
    /// Native services registered, by the group (`task` absent) or a task.
    Register {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        services: std::sync::Arc<[String]>,
    },
    /// Native services deregistered (idempotent: the stop hooks deregister again).
    Deregister {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        services: std::sync::Arc<[String]>,
    },
    /// The kill signal of the task's kill number `kill`. `already_delivered`: the step was
    /// taken again by a runner restored after a crash, and the task's supervisor had
    /// delivered this kill's signal before it (so it was not sent again).
    /// `kill_timeout_ns`: the kill timeout that runs from this signal (the task's, capped by
    /// the client's `max_kill_timeout`), and `timeout_from_ns` when it began (Unix ns) where
    /// the host says (the agent: it may precede the entry's own time, taken when the step is
    /// stored), so that a log shows whether its SIGKILL came too soon; both absent in logs
    /// written before they were recorded.
    Signal {
        task: String,
        signal: String,
        kill: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        already_delivered: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kill_timeout_ns: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_from_ns: Option<i64>,
    },
    /// SIGKILL to the task's process group: kill number `kill`'s timeout fired.
    SigKill { task: String, kill: u32 },
}

impl Effect {
    /// The effect a runner's command has, if it has one (timers and reports have none).
    pub fn of(command: &Command, runner: &AllocRunner) -> Option<Effect> {
        let name = |ix: usize| {
            runner
                .tasks
                .get(ix)
                .map_or_else(|| format!("#{ix}"), |task| String::from(&*task.name))
        };
        Some(match command {
            Command::StartTask { task } => Effect::Launch { task: name(*task) },
            Command::RegisterServices { task, names } if !names.is_empty() => Effect::Register {
                task: task.map(name),
                services: names.clone(),
            },
            Command::DeregisterServices { task, names } if !names.is_empty() => {
                Effect::Deregister {
                    task: task.map(name),
                    services: names.clone(),
                }
            }
            Command::Signal { task, signal, kill } => Effect::Signal {
                task: name(*task),
                signal: signal.clone(),
                kill: *kill,
                already_delivered: false,
                kill_timeout_ns: runner.tasks.get(*task).map(|t| t.kill_timeout_ns),
                timeout_from_ns: None,
            },
            Command::ForceKill { task, kill } => Effect::SigKill {
                task: name(*task),
                kill: *kill,
            },
            Command::RegisterServices { .. }
            | Command::DeregisterServices { .. }
            | Command::StartTimer { .. }
            | Command::CancelTimer { .. }
            | Command::Report => return None,
        })
    }
}
