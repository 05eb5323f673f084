//! What a model run contains: the job, the operator, the history mode and the planted fault.
//!
//! A [`ModelCfg`] builds the whole model ([`ModelCfg::into_model`]), so nothing is hidden:
//! counts, bounds, which witnesses are expected and which fault is planted. A named
//! *configuration* (`small`, `standard`, `large`) is a list of such parts.

use std::fmt;

mod fault;
mod parts;

pub use fault::Fault;
pub use parts::*;

/// The most tasks one task group may have in the model (the state keeps a fixed-size array).
pub const MAX_TASKS: usize = 4;

/// The most allocations a configuration may create; allocation indices are `u8`.
pub const MAX_ALLOCS: usize = 16;

/// The most restart attempts a part may give its policy (a task's restart count is packed in
/// three bits, and a planted fault may go one past the attempts).
pub const MAX_RESTART_ATTEMPTS: u8 = 6;

/// A task's lifecycle role, which decides when it is killed (`reference/nomad-stop-path.md`
/// §2.3, §2.5): the leader first, then the other main tasks, then sidecars; poststop tasks
/// are never killed, they start once every other task is dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskKind {
    Leader,
    Main,
    Sidecar,
    Poststop,
}

impl TaskKind {
    /// The kill stage: a task's kill may begin only when every task of a lower stage is dead.
    pub fn kill_stage(self) -> u8 {
        match self {
            TaskKind::Leader => 0,
            TaskKind::Main => 1,
            TaskKind::Sidecar => 2,
            TaskKind::Poststop => 3,
        }
    }
}

/// One task of the group. Durations are abstracted to "set or not": the model's timers fire
/// in any order, so only whether a wait exists matters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskCfg {
    pub name: String,
    pub kind: TaskKind,
    /// The task sets a non-zero `shutdown_delay`.
    pub shutdown_delay: bool,
    /// The task registers a service, deregistered by its pre-kill hook.
    pub service: bool,
    /// The task may exit on its own while it runs (a crash), and its group's `restart`
    /// policy decides what follows. Off in most parts: every crash multiplies the states.
    pub may_crash: bool,
    /// Its crashes are errors the driver reports (a lost process): never retried.
    pub crash_unrecoverable: bool,
}

impl TaskCfg {
    pub fn leader(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Leader,
            shutdown_delay: true,
            service: true,
            may_crash: false,
            crash_unrecoverable: false,
        }
    }
    pub fn main(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Main,
            shutdown_delay: false,
            service: false,
            may_crash: false,
            crash_unrecoverable: false,
        }
    }
    pub fn sidecar(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Sidecar,
            shutdown_delay: true,
            service: false,
            may_crash: false,
            crash_unrecoverable: false,
        }
    }
    pub fn poststop(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Poststop,
            shutdown_delay: false,
            service: false,
            may_crash: false,
            crash_unrecoverable: false,
        }
    }

    /// The same task, which may also exit on its own while it runs.
    pub fn crashing(self) -> Self {
        TaskCfg {
            may_crash: self.kind != TaskKind::Poststop,
            ..self
        }
    }

    /// The same task, whose every crash is an error the driver reports.
    pub fn lost_when_crashing(self) -> Self {
        TaskCfg {
            crash_unrecoverable: true,
            ..self.crashing()
        }
    }
}

/// The job's single task group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupCfg {
    pub name: String,
    /// The group sets a non-zero `shutdown_delay`, waited after its services are deregistered.
    pub shutdown_delay: bool,
    /// The group registers a service, deregistered by the group pre-kill hook.
    pub service: bool,
    pub tasks: Vec<TaskCfg>,
}

/// One operator request, as a script names it. `StopAlloc`'s target is chosen freely among
/// the allocations it may target; the timing of every request is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    StopJob {
        purge: bool,
        no_shutdown_delay: bool,
    },
    StopAlloc {
        no_shutdown_delay: bool,
    },
    StartJob,
    /// Not an operator request but an environment event the script places: the client agent
    /// restarts and restores its runners from stored state.
    ClientRestart,
    /// `alloc restart [-no-shutdown-delay] ALLOC [TASK]`: the allocation and the task (or
    /// every running task) are chosen freely among those a restart may target.
    RestartAlloc {
        no_shutdown_delay: bool,
    },
    /// `job run` of an edited jobspec (a new image, say; the stop path's fields unchanged):
    /// a new version of the next generation, a deployment if the group has an `update`
    /// block, and an evaluation. Offered while the job runs.
    UpdateJob,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = |on: bool| if on { " -no-shutdown-delay" } else { "" };
        match *self {
            Request::StopJob {
                purge,
                no_shutdown_delay,
            } => write!(
                f,
                "job stop{}{}",
                if purge { " -purge" } else { "" },
                flag(no_shutdown_delay)
            ),
            Request::StopAlloc { no_shutdown_delay } => {
                write!(f, "alloc stop{}", flag(no_shutdown_delay))
            }
            Request::StartJob => write!(f, "job start"),
            Request::ClientRestart => write!(f, "client restart"),
            Request::RestartAlloc { no_shutdown_delay } => {
                write!(f, "alloc restart{}", flag(no_shutdown_delay))
            }
            Request::UpdateJob => write!(f, "job run (changed spec)"),
        }
    }
}

/// How the operator's requests are bounded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// Any request, any order, at most this many in all.
    Budget(u8),
    /// These requests in this order, each at any moment after the one before.
    Script(Vec<Request>),
}

/// How much of a finished allocation's record the state keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum History {
    /// Every allocation's record is kept to the end: the mode the conformance suite walks.
    Full,
    /// A finished record is erased in the step that finishes it, after its end-of-life checks
    /// have been evaluated into sticky violation bits (`reference/model-sizing.md` §1).
    Lean,
}

impl History {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "full" => Ok(History::Full),
            "lean" => Ok(History::Lean),
            other => Err(format!(
                "unknown history mode '{other}'; valid modes: full, lean"
            )),
        }
    }
}

/// One model to check: a job, its allocations and nodes, the operator, the history mode, the
/// `sometimes` properties this part is expected to reach, and at most one planted fault.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelCfg {
    /// The part's name, as `check` prints it.
    pub name: String,
    pub job: String,
    pub group: GroupCfg,
    /// The group's `count`: allocations placed when the job runs.
    pub count: u8,
    /// Client nodes; the scheduler places each new allocation on the least loaded one.
    pub nodes: u8,
    pub operator: Operator,
    pub history: History,
    /// The `sometimes` properties this part must find examples of (see
    /// [`crate::properties::WITNESSES`]); a part is not expected to reach what its requests
    /// cannot produce.
    pub witnesses: Vec<&'static str>,
    pub fault: Option<Fault>,
    /// Under a budget, client restarts are offered too (each uses one request). Off in the
    /// named configurations, which place restarts by script; on for trace validation.
    pub budget_restarts: bool,
    /// Under a budget, `alloc restart` requests are offered too (each uses one request).
    pub restart_requests: bool,
    /// The group's `restart { attempts }` under `mode = "fail"`: how often a crashed task is
    /// restarted before its allocation fails. The interval is abstracted away (every crash
    /// falls in one interval: the strictest reading).
    pub restart_attempts: u8,
    /// Any crash may also be an error the driver reports (the program cannot be started,
    /// the process was lost), which the policy never retries: both outcomes offered for
    /// every crash. On for trace validation (a part fixes a task's kind of crash instead,
    /// with [`TaskCfg::crash_unrecoverable`], so that the simulator can be walked).
    pub unrecoverable_crashes: bool,
    /// The group's `update { max_parallel }`: how many allocations of an older version a
    /// rollout replaces at a time. 0: no `update` block, so an update replaces every
    /// allocation at once, with no deployment (Nomad's behaviour too).
    pub max_parallel: u8,
    /// The group's `update { canary, auto_promote = true }`: how many canaries an update of
    /// running allocations places beside them before replacing any (0: none). The model
    /// promotes a deployment once all its canaries are healthy; an operator's `deployment
    /// promote` is not modelled.
    pub canary: u8,
    /// A system job's canaries (Nomad 1.11's system deployments): each takes the place of
    /// the allocation it updates, which is stopped for it through the stop path as the
    /// deployment's first batch, instead of standing beside the `count`. `canary` is then
    /// at most `max_parallel`.
    pub canary_in_place: bool,
    /// How many tasks may crash in a run (0: no bound). A part whose crashes are
    /// replaced by a running deployment bounds them, or each replacement could crash in
    /// turn without end.
    pub crash_budget: u8,
}

impl ModelCfg {
    pub fn into_model(self) -> crate::StopPathModel {
        crate::StopPathModel::new(self)
    }

    pub fn with_history(mut self, history: History) -> Self {
        self.history = history;
        self
    }

    pub fn with_fault(mut self, fault: Option<Fault>) -> Self {
        self.fault = fault;
        self
    }
}
