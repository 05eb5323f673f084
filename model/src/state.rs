//! The model's state: what the invariants talk about, and nothing else.
//!
//! Server side: the stored job versions, allocations with their desired status and
//! `DesiredTransition` (`Migrate`, the sticky `NoShutdownDelay`), purge tombstones, one
//! "an evaluation is pending" bit. Client side, per allocation: the copy of (desired stop,
//! flag, tombstone) last pulled, the runner's phase, the delay cancellation, the group hooks
//! and delay, and per task its phase, hooks, delay outcome, signal and SIGKILL. Ghost
//! variables record what was requested before, where an invariant needs to know it.
//!
//! The symmetry representative sorts the allocation records (their derived order). It stays
//! sound only while nothing outside the records names an allocation by position: if
//! replacement links or node-level state are added, they must be renamed in the same
//! canonicalisation.

use crate::config::{MAX_ALLOCS, MAX_TASKS};

/// What a stored job version says about the stop path. The flag has no field here: it is
/// never stored on a job (invariant `jobspec_unchanged`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpecDigest {
    /// How often the operator registered a changed spec (`job run` of an edited file): 0 for
    /// the spec first registered. A rollout replaces the allocations of older generations.
    pub generation: u8,
    pub group_shutdown_delay: bool,
    pub task_shutdown_delay: [bool; MAX_TASKS],
}

/// One stored job version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobVersion {
    pub spec: SpecDigest,
    pub stop: bool,
}

/// The job in the server's state store. A purge deletes it at once (`GET /v1/job/:id` → 404).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Job {
    /// Every stored version, oldest first; empty once purged.
    pub versions: Vec<JobVersion>,
    pub purged: bool,
}

impl Job {
    pub fn latest(&self) -> Option<&JobVersion> {
        self.versions.last()
    }

    /// The job exists and its latest version is stopped.
    pub fn is_stopped(&self) -> bool {
        self.latest().is_some_and(|version| version.stop)
    }
}

/// How a delay (group or task) ended, or where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Delay {
    /// Not reached, or no delay is configured (then no wait and no event).
    None,
    /// The timer is running.
    Waiting,
    /// The timer fired: the full delay was waited.
    Elapsed,
    /// The runner moved past the delay without starting the wait (the flag was applied).
    Skipped,
    /// A wait in progress ended early because the flag arrived.
    CutShort,
    /// The task exited on its own during its delay (neither skipped nor cut short).
    ExitedDuring,
}

impl Delay {
    pub fn shortened(self) -> bool {
        matches!(self, Delay::Skipped | Delay::CutShort)
    }
}

/// A task's phase on the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskPhase {
    /// Not started: a poststop task before its turn, or any task of an allocation stopped
    /// before it started.
    NotStarted,
    Running,
    /// Its kill has begun and its `shutdown_delay` timer is running.
    Delaying,
    /// The kill signal was sent; the kill-timeout timer is running.
    Signalled,
    /// Dead: `Terminated`, `Killed` and the stop hooks are done.
    Exited,
    /// It exited on its own while it ran (its exited hooks deregistered its services); the
    /// restart policy has not decided yet.
    Crashed,
    /// The restart policy restarts it: the restart delay timer is running.
    Restarting,
}

/// Whether the task's current (or last) kill is a restart's, and whether that restart asked
/// for `-no-shutdown-delay`. One-shot: cleared when the task runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RestartMark {
    None,
    Unflagged,
    Flagged,
}

/// One task's record on the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Task {
    pub phase: TaskPhase,
    /// The `Killing` event was recorded.
    pub killing: bool,
    /// The task's pre-kill hooks ran (its services deregistered).
    pub pre_kill: bool,
    /// Its service is registered.
    pub service_registered: bool,
    pub delay: Delay,
    /// The kill signal was sent.
    pub signalled: bool,
    /// The kill-timeout timer set at the kill signal has fired.
    pub kill_timeout_fired: bool,
    pub sigkilled: bool,
    /// The kill in progress is an in-place restart's (`alloc restart`), not a stop's.
    pub restart: RestartMark,
    /// How often the restart policy restarted it after a crash.
    pub restarts: u8,
    /// Its last run ended on its own (a crash), not by a kill.
    pub ended_on_own: bool,
}

impl Task {
    pub const NOT_STARTED: Task = Task {
        phase: TaskPhase::NotStarted,
        killing: false,
        pre_kill: false,
        service_registered: false,
        delay: Delay::None,
        signalled: false,
        kill_timeout_fired: false,
        sigkilled: false,
        restart: RestartMark::None,
        restarts: 0,
        ended_on_own: false,
    };

    /// The record in 18 bits, for hashing: a state is fingerprinted at every step, and
    /// hashing field by field cost more than half of the checker's time.
    pub fn pack(&self) -> u32 {
        let bits = [
            self.killing,
            self.pre_kill,
            self.service_registered,
            self.signalled,
            self.kill_timeout_fired,
            self.sigkilled,
            self.ended_on_own,
        ];
        let flags = bits
            .iter()
            .enumerate()
            .fold(0, |acc, (i, &bit)| acc | u32::from(bit) << i);
        debug_assert!(self.restarts < 8, "a restart count fits three bits");
        self.phase as u32
            | (self.delay as u32) << 3
            | flags << 6
            | (self.restart as u32) << 13
            | u32::from(self.restarts) << 15
    }

    /// Running, or under a kill that has begun: a process exists.
    pub fn is_live(&self) -> bool {
        matches!(
            self.phase,
            TaskPhase::Running | TaskPhase::Delaying | TaskPhase::Signalled
        )
    }

    /// Dead or never started: nothing of it holds up the next kill stage.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, TaskPhase::NotStarted | TaskPhase::Exited)
    }
}

/// What the server holds for an allocation that the client cares about; the client keeps the
/// copy it last pulled. (The model compares these three fields instead of modify indexes.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerView {
    pub stop: bool,
    pub no_shutdown_delay: bool,
    pub tombstone: bool,
}

/// The alloc runner's phase on the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunnerPhase {
    /// Placed on the server, not yet pulled by its client.
    Pending,
    Running,
    /// A stop was pulled; the group pre-kill hooks have not run yet.
    PreKill,
    /// The group delay timer is running.
    GroupDelay,
    /// Tasks are being killed in order, then poststop tasks run.
    Killing,
    /// Client-terminal: every task is dead, reported to the server.
    Terminal,
}

/// One allocation: its server record, its client runner, and ghost variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Alloc {
    // --- server ---
    /// The spec of the job version it was placed from (the allocation's embedded job).
    pub spec: SpecDigest,
    pub node: u8,
    pub desired_stop: bool,
    /// `DesiredTransition.Migrate`: stop and replace (written by `alloc stop`).
    pub migrate: bool,
    /// `DesiredTransition.NoShutdownDelay`, sticky in quiesce.
    pub no_shutdown_delay: bool,
    /// The job was purged: this record carries desired stop and the flag to the client and is
    /// removed when the client reports the allocation terminal.
    pub tombstone: bool,
    /// Gone from the server (a tombstone removed). Only full history keeps such a record.
    pub removed: bool,

    // --- client ---
    /// The copy the client last pulled; `None` before the first pull.
    pub pulled: Option<ServerView>,
    pub runner: RunnerPhase,
    /// The runner's delay cancellation (Nomad's `shutdownDelayCtx`) has fired.
    pub cancelled: bool,
    /// The group pre-kill hooks ran (group services deregistered).
    pub group_pre_kill: bool,
    pub group_service_registered: bool,
    pub group_delay: Delay,
    pub tasks: [Task; MAX_TASKS],

    // --- ghost ---
    /// A request carrying the flag targeted this allocation (a flagged job stop of its job
    /// or a flagged alloc stop of it).
    pub flag_requested: bool,
    /// The client has pulled an update after a flagged request was accepted: from now on no
    /// delay timer of this allocation may fire (invariant `flag_is_honoured`).
    pub flag_due: bool,
    /// Placed by a `job start` that followed a flagged stop.
    pub placed_after_flagged_stop: bool,

    // --- client, restarts ---
    /// A task's restart policy was exhausted: the allocation failed and its other tasks are
    /// killed through the stop path (`Sibling Task Failed`, `Leader Task Dead`).
    pub failed: bool,
    /// Ghost: a flagged restart of one of its tasks has completed.
    pub flagged_restart_done: bool,

    // --- deployments ---
    /// A rollout stopped it to replace it with the new version (Nomad's desired description
    /// "alloc is being updated due to job update").
    pub rollout_stop: bool,
    /// Placed by a running deployment (its `DeploymentID`) and not yet reported healthy:
    /// its client watches its health (`min_healthy_time`). Once healthy it is no different,
    /// for what follows, from an allocation placed without a deployment, so no bit tells
    /// them apart (and the symmetry reduction can merge them).
    pub watched: bool,
    /// Watched, and placed by a deployment that failed: its client still watches its
    /// health, but it holds no later rollout (a fix rolled out after a failure replaces it
    /// at once, as Nomad's would).
    pub abandoned: bool,
    /// A canary not yet promoted: placed beside the old allocations by a deployment whose
    /// group has `update { canary }`, not counted toward `count` until its deployment is
    /// promoted (which clears the bit), stopped if that deployment fails or is superseded.
    pub canary: bool,
    /// An older allocation whose name index a canary took (Nomad's `NextCanaries` gives a
    /// canary the name of an allocation it will replace, and a migrating one's replacement
    /// keeps its name, so it inherits the bit). Once the canary is promoted it counts in
    /// this one's place, so this one is stopped first, with nothing placed for it (Nomad's
    /// `computeStop` prefers "the same name as the canaries"), and, failed or migrated, it
    /// is not replaced. Cleared when its deployment ends or is superseded.
    pub beside_canary: bool,
    /// Placed by the running deployment beside its waiting canaries at the stable version
    /// (Nomad's `downgradeNonCanary`): until healthy, its failure fails that deployment, as
    /// one of the deployment's own version does (the implementation files it under the
    /// running deployment). Cleared when it turns healthy or the deployment ends.
    pub downgraded: bool,
}

impl Alloc {
    /// The record in 116 bits, injective, so that hashing it is one write (see
    /// [`Task::pack`]) and sorting by it is a canonical order: the server and runner fields
    /// from bit 72 (19 flags from bit 95, the generation from bit 114), then the tasks'
    /// packs (18 bits each, the first task lowest) with their low 64 bits above their high
    /// 8. (That order of the tasks' bits is the order of the three words this once was,
    /// compared in turn; rollouts pick an allocation by it, so it stays.)
    pub fn pack(&self) -> u128 {
        let spec = self.spec.task_shutdown_delay.iter().enumerate().fold(
            u64::from(self.spec.group_shutdown_delay),
            |acc, (i, &delay)| acc | u64::from(delay) << (i + 1),
        );
        let pulled = self.pulled.map_or(0, |view| {
            1 | u64::from(view.stop) << 1
                | u64::from(view.no_shutdown_delay) << 2
                | u64::from(view.tombstone) << 3
        });
        let bits = [
            self.desired_stop,
            self.migrate,
            self.no_shutdown_delay,
            self.tombstone,
            self.removed,
            self.cancelled,
            self.group_pre_kill,
            self.group_service_registered,
            self.flag_requested,
            self.flag_due,
            self.placed_after_flagged_stop,
            self.failed,
            self.flagged_restart_done,
            self.rollout_stop,
            self.watched,
            self.abandoned,
            self.canary,
            self.beside_canary,
            self.downgraded,
        ];
        let flags = bits
            .iter()
            .enumerate()
            .fold(0, |acc, (i, &bit)| acc | u64::from(bit) << i);
        let record = spec
            | u64::from(self.node) << 5
            | pulled << 13
            | (self.runner as u64) << 17
            | (self.group_delay as u64) << 20
            | flags << 23
            | u64::from(self.spec.generation) << 42;
        debug_assert!(self.spec.generation < 4, "a generation fits two bits");
        debug_assert!(record >> 44 == 0, "the record fits 44 bits");
        let tasks = self.tasks.iter().enumerate().fold(0u128, |acc, (i, task)| {
            acc | u128::from(task.pack()) << (18 * i)
        });
        const _: () = assert!(18 * MAX_TASKS <= 72, "the tasks fit 72 bits");
        u128::from(record) << 72 | (tasks & u128::from(u64::MAX)) << 8 | tasks >> 64
    }

    /// The record the server holds now, as the client would pull it; `None` once removed.
    pub fn server_view(&self) -> Option<ServerView> {
        (!self.removed).then_some(ServerView {
            stop: self.desired_stop || self.tombstone,
            no_shutdown_delay: self.no_shutdown_delay,
            tombstone: self.tombstone,
        })
    }

    /// The client has an update to pull.
    pub fn sync_pending(&self) -> bool {
        self.server_view().is_some() && self.server_view() != self.pulled
    }

    /// Server-terminal or client-terminal, in Nomad's sense.
    pub fn is_terminal(&self) -> bool {
        self.desired_stop || self.tombstone || self.removed || self.runner == RunnerPhase::Terminal
    }

    /// The runner started its tasks at some point.
    pub fn started(&self) -> bool {
        self.tasks
            .iter()
            .any(|task| task.phase != TaskPhase::NotStarted)
    }

    /// Every delay record of the allocation: the group's, then each task's.
    pub fn delays(&self) -> impl Iterator<Item = Delay> + '_ {
        std::iter::once(self.group_delay).chain(self.tasks.iter().map(|task| task.delay))
    }
}

impl std::hash::Hash for Alloc {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(self.pack());
    }
}

/// Global ghost bits, each set once by the request that makes it true. They record facts the
/// `sometimes` properties need, never counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ghost {
    pub alloc_stop_seen: bool,
    pub alloc_stop_then_job_stop: bool,
    pub flagged_stop_seen: bool,
    pub started_after_flagged_stop: bool,
    pub restarted_with_flag: bool,
    /// A rollout stopped an old allocation while a replacement it had placed was not yet
    /// healthy, or while an allocation it stopped before was still stopping (invariant
    /// `rollout_bounded`). Never set in a correct model.
    pub rollout_ran_ahead: bool,
    /// A deployment's canaries were all healthy and it promoted itself.
    pub canaries_promoted: bool,
}

/// The job's latest deployment (Nomad's `Deployment.Status`), created by a registration that
/// changed the spec when the group has an `update` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Deployment {
    /// No deployment yet.
    None,
    /// Replacing the older generations' allocations, `max_parallel` at a time.
    Running,
    /// Running, its canaries placed beside the older allocations and not yet promoted:
    /// nothing older is replaced until every canary is healthy and the deployment promotes
    /// itself (`auto_promote`).
    Canaries,
    /// Every allocation is of the new version and healthy.
    Successful,
    /// The job was stopped (or purged) during the deployment, or a newer version
    /// superseded it.
    Cancelled,
    /// An allocation it placed failed before it was healthy (its restart policy gave up):
    /// nothing more is rolled out.
    Failed,
}

impl Deployment {
    /// Still deploying (Nomad's status `running`), promoted or not.
    pub fn is_running(self) -> bool {
        matches!(self, Deployment::Running | Deployment::Canaries)
    }
}

/// A job's status as the API shows it (Nomad's `Status`), derived from its allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// Registered, nothing placed yet.
    Pending,
    /// An allocation is not terminal on its client.
    Running,
    /// Stopped, or done, with no allocation left running on its client.
    Dead,
}

impl JobStatus {
    /// As the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Dead => "dead",
        }
    }
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub job: Job,
    pub deployment: Deployment,
    /// One bit: older pending evaluations of the job are superseded by a newer one.
    pub eval_pending: bool,
    pub allocs: Vec<Alloc>,
    /// Requests made so far: the budget used, or the position in the script.
    pub requests_made: u8,
    /// The generation an allocation placed beside waiting canaries takes (Nomad's
    /// `downgradedJobForPlacement`): that of the newest deployment promoted or placed
    /// without canaries — the registration's at first.
    pub stable: u8,
    /// Crashes so far, counted only under a part's [`ModelCfg::crash_budget`].
    ///
    /// [`ModelCfg::crash_budget`]: crate::config::ModelCfg::crash_budget
    pub crashes: u8,
    pub ghost: Ghost,
    /// Lean history: end-of-life checks that failed on erased records, one bit per invariant
    /// (see [`crate::properties::Violation`]). Always zero in a correct model.
    pub violations: u16,
}

// A job version is hashed in eight bits: two of generation, the group's delay, each task's.
const _: () = assert!(MAX_TASKS <= 4, "a job version is hashed in eight bits");

/// Hashed in a few words, as [`Alloc`] is: the checker fingerprints every state it generates,
/// and the derived hash wrote some thirty small fields one by one. Destructured so that a
/// new field cannot be left out of the hash.
impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, hasher: &mut H) {
        self.hash_all_but_allocs(hasher);
        hasher.write_usize(self.allocs.len());
        for alloc in &self.allocs {
            alloc.hash(hasher);
        }
    }
}

impl State {
    /// Hashes this state's symmetry class: the state with its allocation records in the order
    /// of their packs ([`Alloc::pack`], injective), without building that state. Two
    /// states hash alike exactly when [`State::representative`] makes them equal: both orders
    /// are total on the records, so each names one member per class.
    pub fn hash_class<H: std::hash::Hasher>(&self, hasher: &mut H) {
        self.hash_all_but_allocs(hasher);
        assert!(
            self.allocs.len() <= MAX_ALLOCS,
            "at most {MAX_ALLOCS} allocation records"
        );
        let mut packs = [0u128; MAX_ALLOCS];
        let packs = &mut packs[..self.allocs.len()];
        for (pack, alloc) in packs.iter_mut().zip(&self.allocs) {
            *pack = alloc.pack();
        }
        packs.sort_unstable();
        hasher.write_usize(packs.len());
        for &pack in packs.iter() {
            hasher.write_u128(pack);
        }
    }

    fn hash_all_but_allocs<H: std::hash::Hasher>(&self, hasher: &mut H) {
        let State {
            job: Job { versions, purged },
            deployment,
            eval_pending,
            allocs: _,
            requests_made,
            stable,
            crashes,
            ghost:
                Ghost {
                    alloc_stop_seen,
                    alloc_stop_then_job_stop,
                    flagged_stop_seen,
                    started_after_flagged_stop,
                    restarted_with_flag,
                    rollout_ran_ahead,
                    canaries_promoted,
                },
            violations,
        } = self;
        hasher.write_usize(versions.len());
        for chunk in versions.chunks(8) {
            let word = chunk.iter().enumerate().fold(0u64, |acc, (i, version)| {
                let JobVersion { spec, stop } = version;
                debug_assert!(spec.generation < 4, "a generation fits two bits");
                let bits = spec.task_shutdown_delay.iter().enumerate().fold(
                    u64::from(spec.generation) | u64::from(spec.group_shutdown_delay) << 2,
                    |acc, (task, &delay)| acc | u64::from(delay) << (3 + task),
                ) | u64::from(*stop) << 7;
                acc | bits << (8 * i)
            });
            hasher.write_u64(word);
        }
        let ghost = [
            *alloc_stop_seen,
            *alloc_stop_then_job_stop,
            *flagged_stop_seen,
            *started_after_flagged_stop,
            *restarted_with_flag,
            *rollout_ran_ahead,
            *canaries_promoted,
        ]
        .iter()
        .enumerate()
        .fold(0u64, |acc, (i, &bit)| acc | u64::from(bit) << i);
        debug_assert!(*stable < 4, "a generation fits two bits");
        hasher.write_u64(
            u64::from(*purged)
                | (*deployment as u64) << 1
                | u64::from(*eval_pending) << 4
                | u64::from(*requests_made) << 5
                | u64::from(*violations) << 13
                | ghost << 29
                | u64::from(*stable) << 36
                | u64::from(*crashes) << 38,
        );
    }
}

impl State {
    /// The job's status, as the implementation's store derives it
    /// (`StateStore::job_status`): `running` while an allocation (a purge's tombstones
    /// aside) has a runner that is not terminal — its client has not reported every task
    /// dead —, else `dead` if the job is stopped or ever had one placed (`placed`: the
    /// model places its allocations at the start, so a record erased by lean history was
    /// placed), else `pending`. `None` once purged (the API answers 404).
    /// `desired_stop_terminal` counts an allocation the server told to stop as terminal, as
    /// Nomad does (the fault `nomad-job-dead-at-desired-stop`).
    pub fn job_status(&self, placed: bool, desired_stop_terminal: bool) -> Option<JobStatus> {
        if self.job.purged || self.job.versions.is_empty() {
            return None;
        }
        let counted = || self.allocs.iter().filter(|a| !a.tombstone && !a.removed);
        let live = |a: &Alloc| {
            a.runner != RunnerPhase::Terminal && !(desired_stop_terminal && a.desired_stop)
        };
        Some(if counted().any(live) {
            JobStatus::Running
        } else if self.job.is_stopped() || placed || counted().next().is_some() {
            JobStatus::Dead
        } else {
            JobStatus::Pending
        })
    }

    /// The canonical member of this state's symmetry class: allocation records sorted.
    /// Sound because nothing outside the records refers to an allocation by position (one
    /// evaluation bit, one deployment status, no replacement links, nodes stored inside the
    /// records and chosen by load, not by position, and a rollout's next allocation to stop
    /// chosen by its packed record).
    pub fn representative(&self) -> State {
        let mut canonical = self.clone();
        // Sorted by the derived order, which most comparisons settle in the first field or
        // two (sorting by `Alloc::pack`, which packs every field twice per comparison, was a
        // fifth of the checker's time). Any total order on the records gives one member per
        // class; the counts are the same.
        canonical.allocs.sort_unstable();
        canonical
    }
}
