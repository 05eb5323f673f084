//! The step alphabet (DESIGN.md, "The step alphabet"; `ARCHITECTURE.md` keeps the table).
//! Each variant is one model action, one simulator step and one event-log entry.

use std::fmt;

/// An allocation's position in [`crate::State::allocs`].
pub type AllocIx = u8;
/// A task's position in the group's task list.
pub type TaskIx = u8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    // --- operator requests (bounded by the budget or the script) ---
    /// `job stop [-purge] [-no-shutdown-delay]`: one atomic server write and an evaluation.
    StopJob {
        purge: bool,
        no_shutdown_delay: bool,
    },
    /// `alloc stop [-no-shutdown-delay]`: stop and migrate one allocation, and an evaluation.
    StopAlloc {
        alloc: AllocIx,
        no_shutdown_delay: bool,
    },
    /// `job start`: resubmit the latest version with `Stop=false`, and an evaluation.
    StartJob,
    /// `alloc restart [-no-shutdown-delay] ALLOC [TASK]`: in place, straight to the client;
    /// each targeted task (`None`: every running task) has its pre-kill hooks run, then its
    /// delay starts, or is skipped (and the kill signal sent) in the same step.
    RestartAlloc {
        alloc: AllocIx,
        task: Option<TaskIx>,
        no_shutdown_delay: bool,
    },
    /// `job run` of an edited jobspec: a new version of the next generation, the job's
    /// deployment (with an `update` block), and an evaluation.
    UpdateJob,

    // --- server ---
    /// The scheduler reconciles the job (older pending evaluations are superseded).
    ProcessEval,

    // --- client ---
    /// The client pulls one allocation's update; a flag in it cancels the delays at once.
    ClientSync {
        alloc: AllocIx,
    },
    /// Group pre-kill hooks (deregister group services); then the group delay starts, or is
    /// skipped in the same step if the delays are already cancelled.
    GroupPreKill {
        alloc: AllocIx,
    },
    GroupDelayElapsed {
        alloc: AllocIx,
    },
    /// `Killing` event and the task's pre-kill hooks; then its delay starts, or is skipped
    /// (and the kill signal sent) in the same step.
    TaskPreKill {
        alloc: AllocIx,
        task: TaskIx,
    },
    /// The task delay timer fires; the kill signal follows in the same step.
    TaskDelayElapsed {
        alloc: AllocIx,
        task: TaskIx,
    },
    /// The task exits: on its own while it runs (a crash) or during its delay, or after the
    /// kill signal. After a restart's kill, in a runner still running, it runs again at once.
    TaskExit {
        alloc: AllocIx,
        task: TaskIx,
    },
    /// The kill timeout fires: SIGKILL, and the forced exit, in one step.
    KillTimeout {
        alloc: AllocIx,
        task: TaskIx,
    },
    PoststopStart {
        alloc: AllocIx,
        task: TaskIx,
    },
    PoststopExit {
        alloc: AllocIx,
        task: TaskIx,
    },
    /// The client agent restarts; runners are restored from stored state.
    ClientRestart,
    /// The restart policy decides about a crashed task: restart it after the restart delay,
    /// or — attempts used up — fail the allocation, whose other tasks are then killed through
    /// the stop path. In a stopping runner the task stays dead.
    /// `unrecoverable`: the run ended in an error the driver reported (a program that cannot
    /// be started, a process lost): never retried.
    RestartDecision {
        alloc: AllocIx,
        task: TaskIx,
        unrecoverable: bool,
    },
    /// The restart delay timer fires: the task runs again and its services are registered.
    RestartDelayElapsed {
        alloc: AllocIx,
        task: TaskIx,
    },
    /// An allocation of the deployment's version has run its tasks for `min_healthy_time`:
    /// its client reports it healthy, and the deployment's watcher asks for an evaluation.
    AllocHealthy {
        alloc: AllocIx,
    },
}

impl Action {
    /// The step's name in the step-alphabet table and the event log.
    pub fn name(&self) -> &'static str {
        match self {
            Action::StopJob { .. } => "StopJob",
            Action::StopAlloc { .. } => "StopAlloc",
            Action::StartJob => "StartJob",
            Action::ProcessEval => "ProcessEval",
            Action::ClientSync { .. } => "ClientSync",
            Action::GroupPreKill { .. } => "GroupPreKill",
            Action::GroupDelayElapsed { .. } => "GroupDelayElapsed",
            Action::TaskPreKill { .. } => "TaskPreKill",
            Action::TaskDelayElapsed { .. } => "TaskDelayElapsed",
            Action::TaskExit { .. } => "TaskExit",
            Action::KillTimeout { .. } => "KillTimeout",
            Action::PoststopStart { .. } => "PoststopStart",
            Action::PoststopExit { .. } => "PoststopExit",
            Action::ClientRestart => "ClientRestart",
            Action::RestartAlloc { .. } => "RestartAlloc",
            Action::RestartDecision { .. } => "RestartDecision",
            Action::RestartDelayElapsed { .. } => "RestartDelayElapsed",
            Action::UpdateJob => "UpdateJob",
            Action::AllocHealthy { .. } => "AllocHealthy",
        }
    }

    /// An operator request or environment event: offered from the budget or the script, not
    /// compared for enabledness by the conformance suite.
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Action::StopJob { .. }
                | Action::StopAlloc { .. }
                | Action::StartJob
                | Action::ClientRestart
                | Action::RestartAlloc { .. }
                | Action::UpdateJob
        )
    }

    /// The allocation the step is about, if any.
    pub fn alloc(&self) -> Option<AllocIx> {
        match *self {
            Action::StopAlloc { alloc, .. }
            | Action::ClientSync { alloc }
            | Action::GroupPreKill { alloc }
            | Action::GroupDelayElapsed { alloc }
            | Action::TaskPreKill { alloc, .. }
            | Action::TaskDelayElapsed { alloc, .. }
            | Action::TaskExit { alloc, .. }
            | Action::KillTimeout { alloc, .. }
            | Action::PoststopStart { alloc, .. }
            | Action::PoststopExit { alloc, .. }
            | Action::RestartAlloc { alloc, .. }
            | Action::RestartDecision { alloc, .. }
            | Action::RestartDelayElapsed { alloc, .. }
            | Action::AllocHealthy { alloc } => Some(alloc),
            Action::StopJob { .. }
            | Action::StartJob
            | Action::UpdateJob
            | Action::ProcessEval
            | Action::ClientRestart => None,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::StopJob {
                purge,
                no_shutdown_delay,
            } => {
                write!(
                    f,
                    "StopJob{{purge: {purge}, no_shutdown_delay: {no_shutdown_delay}}}"
                )
            }
            Action::StopAlloc {
                alloc,
                no_shutdown_delay,
            } => {
                write!(
                    f,
                    "StopAlloc{{alloc: {alloc}, no_shutdown_delay: {no_shutdown_delay}}}"
                )
            }
            Action::RestartAlloc {
                alloc,
                task,
                no_shutdown_delay,
            } => {
                let task = task.map_or("all".to_string(), |task| task.to_string());
                write!(
                    f,
                    "RestartAlloc{{alloc: {alloc}, task: {task}, no_shutdown_delay: {no_shutdown_delay}}}"
                )
            }
            Action::RestartDecision {
                alloc,
                task,
                unrecoverable,
            } => write!(
                f,
                "RestartDecision{{alloc: {alloc}, task: {task}, unrecoverable: {unrecoverable}}}"
            ),
            Action::TaskPreKill { alloc, task }
            | Action::RestartDelayElapsed { alloc, task }
            | Action::TaskDelayElapsed { alloc, task }
            | Action::TaskExit { alloc, task }
            | Action::KillTimeout { alloc, task }
            | Action::PoststopStart { alloc, task }
            | Action::PoststopExit { alloc, task } => {
                write!(f, "{}{{alloc: {alloc}, task: {task}}}", self.name())
            }
            Action::ClientSync { alloc }
            | Action::GroupPreKill { alloc }
            | Action::GroupDelayElapsed { alloc }
            | Action::AllocHealthy { alloc } => write!(f, "{}{{alloc: {alloc}}}", self.name()),
            Action::StartJob | Action::UpdateJob | Action::ProcessEval | Action::ClientRestart => {
                f.write_str(self.name())
            }
        }
    }
}
