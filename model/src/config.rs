//! What a model run contains: the job, the operator, the history mode and the planted fault.
//!
//! A [`ModelCfg`] builds the whole model ([`ModelCfg::into_model`]), so nothing is hidden:
//! counts, bounds, which witnesses are expected and which fault is planted. A named
//! *configuration* (`small`, `standard`, `large`) is a list of such parts.

use std::fmt;

/// The most tasks one task group may have in the model (the state keeps a fixed-size array).
pub const MAX_TASKS: usize = 4;

/// The most allocations a configuration may create; allocation indices are `u8`.
pub const MAX_ALLOCS: usize = 16;

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
}

impl TaskCfg {
    pub fn leader(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Leader,
            shutdown_delay: true,
            service: true,
        }
    }
    pub fn main(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Main,
            shutdown_delay: false,
            service: false,
        }
    }
    pub fn sidecar(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Sidecar,
            shutdown_delay: true,
            service: false,
        }
    }
    pub fn poststop(name: &'static str) -> Self {
        TaskCfg {
            name: name.to_string(),
            kind: TaskKind::Poststop,
            shutdown_delay: false,
            service: false,
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

/// A wrong behaviour a careless implementation could have, planted one at a time so that a
/// test can show the checker catches it. Each names the invariant meant to catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Under the flag, the group and task pre-kill hooks (service deregistration) are skipped.
    PreKillHooksSkippedWhenFlagged,
    /// The flag is implemented by zeroing the delays in the stored job, so `job start`
    /// brings the job back with no delays (the seed's first idea).
    FlagWrittenIntoJob,
    /// The flag skips the group delay only; task delays are still waited.
    FlagHonouredAtGroupLevelOnly,
    /// A flagged `alloc stop` flags every allocation on the same node.
    FlagAppliedToWholeNode,
    /// The client cancels the delays of every runner on the node when one update carries the
    /// flag, instead of that allocation's only.
    CancellationSharedByNode,
    /// A flag arriving during a wait is remembered for later waits but does not end the one
    /// in progress.
    DelayInProgressNotCutShort,
    /// The kill signal is sent as the task's kill begins; its services are deregistered only
    /// after its delay.
    SignalBeforeDeregistration,
    /// Under the flag, poststop tasks are not started.
    PoststopSkippedWhenFlagged,
    /// Under the flag, SIGKILL is sent at once instead of the kill signal (the seed's first
    /// request: bypass the kill timeout).
    FlagBypassesKillTimeout,
    /// Sidecars are killed together with the main tasks (Nomad before 1.3.2).
    SidecarsKilledWithMainTasks,
    /// Nomad ≥ 1.7.3: a purge deletes the allocations in the same write, so the client sees
    /// only their disappearance and never the flag (`reference/nomad-stop-path.md` §1.9).
    NomadPurgeDropsFlag,
    /// Nomad: an unflagged `alloc stop` writes `NoShutdownDelay=false`, erasing a flag the
    /// client has not pulled yet (§1.5 step 3).
    NomadAllocStopResetsFlag,
    /// Nomad: a runner restored after a client restart does not apply the flag its stored
    /// allocation already carries (§2.2).
    NomadRestoreIgnoresFlag,
    /// A stop that reaches the client before the allocation has started is ignored: the
    /// runner starts the tasks anyway.
    StopBeforeStartIgnored,
}

impl Fault {
    pub const ALL: [Fault; 14] = [
        Fault::PreKillHooksSkippedWhenFlagged,
        Fault::FlagWrittenIntoJob,
        Fault::FlagHonouredAtGroupLevelOnly,
        Fault::FlagAppliedToWholeNode,
        Fault::CancellationSharedByNode,
        Fault::DelayInProgressNotCutShort,
        Fault::SignalBeforeDeregistration,
        Fault::PoststopSkippedWhenFlagged,
        Fault::FlagBypassesKillTimeout,
        Fault::SidecarsKilledWithMainTasks,
        Fault::NomadPurgeDropsFlag,
        Fault::NomadAllocStopResetsFlag,
        Fault::NomadRestoreIgnoresFlag,
        Fault::StopBeforeStartIgnored,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::PreKillHooksSkippedWhenFlagged => "prekill-hooks-skipped-when-flagged",
            Fault::FlagWrittenIntoJob => "flag-written-into-job",
            Fault::FlagHonouredAtGroupLevelOnly => "flag-honoured-at-group-level-only",
            Fault::FlagAppliedToWholeNode => "flag-applied-to-whole-node",
            Fault::CancellationSharedByNode => "cancellation-shared-by-node",
            Fault::DelayInProgressNotCutShort => "delay-in-progress-not-cut-short",
            Fault::SignalBeforeDeregistration => "signal-before-deregistration",
            Fault::PoststopSkippedWhenFlagged => "poststop-skipped-when-flagged",
            Fault::FlagBypassesKillTimeout => "flag-bypasses-kill-timeout",
            Fault::SidecarsKilledWithMainTasks => "sidecars-killed-with-main-tasks",
            Fault::NomadPurgeDropsFlag => "nomad-purge-drops-flag",
            Fault::NomadAllocStopResetsFlag => "nomad-alloc-stop-resets-flag",
            Fault::NomadRestoreIgnoresFlag => "nomad-restore-ignores-flag",
            Fault::StopBeforeStartIgnored => "stop-before-start-ignored",
        }
    }

    /// The invariant this fault is planted to break (it may break others too).
    pub fn intended_property(self) -> &'static str {
        use crate::properties::names::*;
        match self {
            Fault::PreKillHooksSkippedWhenFlagged => PRESTOP_HOOKS_ALWAYS_RUN,
            Fault::FlagWrittenIntoJob => JOBSPEC_UNCHANGED,
            Fault::FlagHonouredAtGroupLevelOnly => FLAG_IS_HONOURED,
            Fault::FlagAppliedToWholeNode => FLAG_SCOPED,
            Fault::CancellationSharedByNode => DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
            Fault::DelayInProgressNotCutShort => FLAG_IS_HONOURED,
            Fault::SignalBeforeDeregistration => PRESTOP_HOOKS_ALWAYS_RUN,
            Fault::PoststopSkippedWhenFlagged => KILL_ORDER,
            Fault::FlagBypassesKillTimeout => KILL_TIMEOUT_RESPECTED,
            Fault::SidecarsKilledWithMainTasks => KILL_ORDER,
            Fault::NomadPurgeDropsFlag => FLAG_IS_HONOURED,
            Fault::NomadAllocStopResetsFlag => FLAG_IS_HONOURED,
            Fault::NomadRestoreIgnoresFlag => FLAG_IS_HONOURED,
            Fault::StopBeforeStartIgnored => STOP_COMPLETES,
        }
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        Fault::ALL
            .into_iter()
            .find(|fault| fault.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Fault::ALL.iter().map(|fault| fault.name()).collect();
                format!("unknown fault '{name}'; valid faults: {}", names.join(", "))
            })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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

/// The task group of `standard`: a group service and a group delay; a leader with a task
/// delay and a service; a prestart sidecar with its own delay; a poststop task.
pub fn web_group() -> GroupCfg {
    GroupCfg {
        name: "web".to_string(),
        shutdown_delay: true,
        service: true,
        tasks: vec![
            TaskCfg::leader("app"),
            TaskCfg::sidecar("proxy"),
            TaskCfg::poststop("flush"),
        ],
    }
}

/// `web_group` plus a plain main task, so that "leader before the other main tasks" is
/// exercised.
pub fn web_group_with_main() -> GroupCfg {
    GroupCfg {
        tasks: vec![
            TaskCfg::leader("app"),
            TaskCfg::main("worker"),
            TaskCfg::sidecar("proxy"),
            TaskCfg::poststop("flush"),
        ],
        ..web_group()
    }
}

fn part(
    name: &str,
    group: GroupCfg,
    count: u8,
    operator: Operator,
    witnesses: &[&'static str],
) -> ModelCfg {
    ModelCfg {
        name: name.to_string(),
        job: "web".to_string(),
        group,
        count,
        nodes: 1,
        operator,
        history: History::Full,
        witnesses: witnesses.to_vec(),
        fault: None,
        budget_restarts: false,
    }
}

/// The names `check --config` accepts.
pub const CONFIGURATIONS: [&str; 3] = ["small", "standard", "large"];

/// A named configuration: the parts it checks, in order.
pub fn configuration(name: &str) -> Result<Vec<ModelCfg>, String> {
    match name {
        "small" => Ok(small()),
        "standard" => Ok(standard()),
        "large" => Ok(large()),
        other => Err(format!(
            "unknown configuration '{other}'; valid configurations: {}",
            CONFIGURATIONS.join(", ")
        )),
    }
}

/// One part of a named configuration, by name, or its first part.
pub fn named_part(config_name: &str, part_name: Option<&str>) -> Result<ModelCfg, String> {
    let parts = configuration(config_name)?;
    let Some(name) = part_name else {
        return Ok(parts
            .into_iter()
            .next()
            .expect("every configuration has a part"));
    };
    let names: Vec<_> = parts.iter().map(|part| part.name.clone()).collect();
    parts
        .into_iter()
        .find(|part| part.name == name)
        .ok_or_else(|| {
            format!(
                "unknown part '{name}' of {config_name}; valid parts: {}",
                names.join(", ")
            )
        })
}

/// `small`: one allocation of the `standard` group under a free budget of two requests. Runs
/// in CI in well under a second and reaches every budget-2 witness.
pub fn small() -> Vec<ModelCfg> {
    use crate::properties::names::*;
    vec![part(
        "count1-budget2",
        web_group(),
        1,
        Operator::Budget(2),
        BUDGET2_WITNESSES,
    )]
}

/// `standard`, the default verification: the free-budget parts and one request script per
/// race (`reference/model-sizing.md` §3).
pub fn standard() -> Vec<ModelCfg> {
    use crate::properties::names::*;
    use Request::*;
    let stop = |purge, flag| StopJob {
        purge,
        no_shutdown_delay: flag,
    };
    let alloc = |flag| StopAlloc {
        no_shutdown_delay: flag,
    };
    let script = |name: &str, requests: Vec<Request>, witnesses: &[&'static str]| {
        part(name, web_group(), 2, Operator::Script(requests), witnesses)
    };
    vec![
        part(
            "count2-budget2",
            web_group(),
            2,
            Operator::Budget(2),
            BUDGET2_WITNESSES,
        ),
        part(
            "count1-main-budget2",
            web_group_with_main(),
            1,
            Operator::Budget(2),
            BUDGET2_WITNESSES,
        ),
        script(
            "second-stop-cuts-wait-short",
            vec![stop(false, false), stop(false, true)],
            &[DELAY_CUT_SHORT, DELAY_SKIPPED, FULL_DELAY_WAITED],
        ),
        script(
            "alloc-stop-then-flagged-job-stop",
            vec![alloc(false), stop(false, true)],
            &[ALLOC_STOP_THEN_JOB_STOP, DELAY_CUT_SHORT, DELAY_SKIPPED],
        ),
        script(
            "purge-with-flag",
            vec![stop(false, false), stop(true, true)],
            &[PURGE_WITH_FLAG_HONOURED, DELAY_CUT_SHORT],
        ),
        script(
            "start-after-flagged-stop",
            vec![stop(false, true), StartJob, stop(false, false)],
            &[
                JOB_STARTED_AFTER_FLAGGED_STOP,
                RESTARTED_JOB_WAITS_FULL_DELAY,
            ],
        ),
        script(
            "flag-scoped-to-one-alloc",
            vec![alloc(true), stop(false, false)],
            &[DELAY_SKIPPED, FULL_DELAY_WAITED, ALLOC_STOP_THEN_JOB_STOP],
        ),
        script(
            "unflagged-alloc-stop-after-flagged",
            vec![alloc(true), alloc(false), stop(false, true)],
            &[DELAY_SKIPPED, DELAY_CUT_SHORT],
        ),
        script(
            "flagged-stop-then-client-restart",
            vec![stop(false, true), ClientRestart],
            &[CLIENT_RESTARTED_WITH_FLAG, DELAY_SKIPPED],
        ),
    ]
}

/// `large` (opt-in): a budget of three requests over two nodes, lean history.
pub fn large() -> Vec<ModelCfg> {
    use crate::properties::names::*;
    let mut witnesses = BUDGET2_WITNESSES.to_vec();
    witnesses.push(RESTARTED_JOB_WAITS_FULL_DELAY);
    let mut cfg = part(
        "count2-nodes2-budget3",
        web_group(),
        2,
        Operator::Budget(3),
        &witnesses,
    );
    cfg.nodes = 2;
    cfg.history = History::Lean;
    vec![cfg]
}
