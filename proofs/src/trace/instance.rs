//! One model instance of a trace: the model of one task group of one registration of a
//! job, and every state the log can have brought it to.
//!
//! The log names allocations by ID, the model by position. An ID is bound to a position
//! when it first appears; while several positions could take it, every choice is followed
//! (as trace validation of a nondeterministic specification does), and a choice survives
//! while the model allows every step of the log from it, the effects the log records are
//! those the model's step implies, and the model's eleven invariants hold. Choices that
//! differ only in the order of their allocation records are one (the model's symmetry).

use quiesce_core::server::structs::AllocId;
use quiesce_core::spec::Job;
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::{Effect, Step};
use quiesce_model::config::{ModelCfg, Operator, MAX_ALLOCS, MAX_RESTART_ATTEMPTS};
use quiesce_model::properties::INVARIANTS;
use quiesce_model::state::{Alloc, Ghost, Job as ModelJob, JobVersion, TaskPhase};
use quiesce_model::{Action, History, Model, State, StopPathModel};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// The model's bound on a job's updates (`UpdateJob` makes generations 1 to 3).
const MAX_UPDATES: u8 = 3;

/// How far the model could follow an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    /// Every entry so far.
    Full,
    /// Up to (not including) entry `seq`, which the model has no step for.
    Until { seq: u64, why: String },
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Candidate {
    state: State,
    /// The allocation ID bound to each model position, if any yet.
    bound: Vec<Option<AllocId>>,
}

impl Candidate {
    /// The canonical member of the candidate's symmetry class: positions sorted by their
    /// record and binding (nothing else refers to a position).
    fn canonical(mut self) -> Candidate {
        self.bound.resize(self.state.allocs.len(), None);
        let mut pairs: Vec<(Alloc, Option<AllocId>)> = self
            .state
            .allocs
            .iter()
            .copied()
            .zip(self.bound.iter().cloned())
            .collect();
        pairs.sort_by(|(a, x), (b, y)| (a.pack(), x).cmp(&(b.pack(), y)));
        let (allocs, bound): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        self.state.allocs = allocs;
        self.bound = bound;
        self
    }
}

#[derive(Clone)]
pub struct Instance {
    pub job: String,
    pub group: String,
    /// The sequence number of the registration it models.
    pub registered_at: u64,
    /// The job version of that registration (a later one with the same stop path is the same
    /// model).
    version: u64,
    model: Option<StopPathModel>,
    /// What the group runs as registered ([`Job::as_run`]: the model's projection of it may
    /// be equal for two versions that run differently, e.g. in a task's environment; a
    /// change rolls the allocations out, which the model has no step for).
    group_spec: Option<Job>,
    candidates: Vec<Candidate>,
    pub judged: Judged,
    /// Steps replayed against the model.
    pub replayed: usize,
    /// Steps seen after the model could no longer follow.
    pub unjudged: usize,
    /// The allocations routed here, by ID.
    pub allocs: BTreeSet<AllocId>,
    /// The job was purged: a later registration is a new instance.
    pub purged: bool,
    /// The tasks whose restart depends on their exit code (every task of a batch job; a
    /// prestart or poststart task that is not a sidecar): the model does not have it.
    pub exit_decides: BTreeSet<String>,
    /// Each task's restart-policy interval, and when the interval of each allocation's task
    /// began (its first restart decision): the model keeps every crash in one interval.
    pub restart_intervals: BTreeMap<String, i64>,
    pub interval_starts: BTreeMap<(AllocId, String), i64>,
}

/// Why a step failed in one candidate: the model refuses it.
enum Refusal {
    Violation(String),
}

impl Instance {
    /// The model of `group` of the job `spec`, registered at entry `seq`: the job stored,
    /// its evaluation pending, nothing placed.
    pub fn new(spec: &Job, group: &str, seq: u64) -> Instance {
        let mut instance = Instance {
            job: spec.id.clone(),
            group: group.to_string(),
            registered_at: seq,
            version: spec.version,
            model: None,
            group_spec: spec.as_run(group),
            candidates: Vec::new(),
            judged: Judged::Full,
            replayed: 0,
            unjudged: 0,
            allocs: BTreeSet::new(),
            purged: false,
            exit_decides: exit_decides(spec, group),
            restart_intervals: restart_intervals(spec, group),
            interval_starts: BTreeMap::new(),
        };
        match model_of(spec, group) {
            Ok(model) => {
                let state = State {
                    job: ModelJob {
                        versions: vec![JobVersion {
                            spec: model.spec,
                            stop: spec.stop,
                        }],
                        purged: false,
                    },
                    // With an `update` block the registration's placements are a deployment
                    // (the model's `open_deployment`).
                    deployment: if model.cfg.max_parallel > 0 && model.cfg.count > 0 && !spec.stop {
                        quiesce_model::state::Deployment::Running
                    } else {
                        quiesce_model::state::Deployment::None
                    },
                    eval_pending: true,
                    allocs: Vec::new(),
                    requests_made: 0,
                    stable: 0,
                    crashes: 0,
                    ghost: Ghost::default(),
                    violations: 0,
                };
                instance.candidates = vec![Candidate {
                    state,
                    bound: Vec::new(),
                }];
                instance.model = Some(model);
            }
            Err(why) => {
                instance.judged = Judged::Until {
                    seq,
                    why: format!("cannot build its model: {why}"),
                }
            }
        }
        instance
    }

    /// An instance for a job whose registration the log does not hold (a log cut short at
    /// its start): nothing to judge its steps by.
    pub fn unregistered(job: &str, group: &str, seq: u64) -> Instance {
        Instance {
            job: job.to_string(),
            group: group.to_string(),
            registered_at: 0,
            version: 0,
            model: None,
            group_spec: None,
            candidates: Vec::new(),
            judged: Judged::Until {
                seq,
                why: format!("the log does not hold job {job:?}'s registration"),
            },
            replayed: 0,
            unjudged: 0,
            allocs: BTreeSet::new(),
            purged: false,
            exit_decides: BTreeSet::new(),
            restart_intervals: BTreeMap::new(),
            interval_starts: BTreeMap::new(),
        }
    }

    pub fn judging(&self) -> bool {
        self.judged == Judged::Full
    }

    /// Whether an allocation not yet seen may be one of this instance's: some candidate has
    /// a placed allocation no ID is bound to yet. A purged instance places nothing more, so
    /// once every one is bound a new allocation is a later registration's.
    pub fn may_take_new_alloc(&self) -> bool {
        !self.purged
            || !self.judging()
            || self.candidates.iter().any(|candidate| {
                candidate.bound.len() < candidate.state.allocs.len()
                    || candidate.bound.iter().any(Option::is_none)
            })
    }

    fn stop_judging(&mut self, seq: u64, why: String) {
        if self.judging() {
            self.judged = Judged::Until { seq, why };
            self.candidates.clear();
        }
    }

    /// Whether an evaluation of this instance may be pending.
    pub fn eval_pending(&self) -> bool {
        !self.judging() || self.candidates.iter().any(|c| c.state.eval_pending)
    }

    /// The job registered again, with `spec`: the same stop path for this group (a new
    /// version or none, and an evaluation either way, which places what is missing), or a
    /// changed one the model has no step for.
    pub fn registered_again(&mut self, spec: &Job, seq: u64) {
        if !self.judging() {
            self.unjudged += 1;
            return;
        }
        let same_path = match (model_of(spec, &self.group), &self.model) {
            (Ok(new), Some(old)) => {
                new.cfg.group == old.cfg.group
                    && new.cfg.count == old.cfg.count
                    && new.cfg.max_parallel == old.cfg.max_parallel
                    && new.cfg.canary == old.cfg.canary
                    && new.cfg.canary_in_place == old.cfg.canary_in_place
                    && new.cfg.restart_attempts == old.cfg.restart_attempts
            }
            _ => false,
        };
        let as_run = spec.as_run(&self.group);
        if same_path && as_run != self.group_spec && !spec.stop {
            self.updated(spec, as_run, seq);
            return;
        }
        if !same_path || as_run != self.group_spec {
            self.stop_judging(
                seq,
                "the job was registered again with a changed task group (the model has no \
                 step for a new job version)"
                    .into(),
            );
            return;
        }
        let new_version = spec.version != self.version;
        self.version = spec.version;
        for candidate in &mut self.candidates {
            let latest = *candidate
                .state
                .job
                .latest()
                .expect("a registered job has a version");
            if latest.stop != spec.stop {
                self.judged = Judged::Until {
                    seq,
                    why: "the job was registered again with another Stop".into(),
                };
                break;
            }
            if new_version {
                candidate.state.job.versions.push(latest);
                // As the implementation's registration: a deployment opens if the version
                // has allocations to place (fewer than count run).
                if let Some(model) = &self.model {
                    if !spec.stop {
                        model.open_deployment(&mut candidate.state);
                    }
                }
            }
            candidate.state.eval_pending = true;
        }
        if !self.judging() {
            self.candidates.clear();
        }
        self.replayed += 1;
    }

    /// The job registered again with a new version of the same stop path that runs
    /// differently (an edited image or environment, say): a rollout, the model's
    /// `UpdateJob`, from every candidate.
    fn updated(&mut self, spec: &Job, as_run: Option<Job>, seq: u64) {
        if exit_decides(spec, &self.group) != self.exit_decides
            || restart_intervals(spec, &self.group) != self.restart_intervals
        {
            return self.stop_judging(
                seq,
                "the update changed a restart interval or how a task's exit decides its \
                 restart, which the model's update keeps"
                    .into(),
            );
        }
        let model = self.model.as_ref().expect("a judging instance has a model");
        let mut next = HashSet::new();
        for candidate in &self.candidates {
            if candidate.state.requests_made == u8::MAX {
                return self.stop_judging(
                    seq,
                    format!(
                        "more than {} requests: past the model's bound on requests",
                        u8::MAX
                    ),
                );
            }
            let latest = *candidate
                .state
                .job
                .latest()
                .expect("a registered job has a version");
            if latest.stop {
                return self.stop_judging(
                    seq,
                    "the job was started again with a changed task group (the model's start \
                     resubmits the stored job)"
                        .into(),
                );
            }
            if latest.spec.generation >= MAX_UPDATES {
                return self.stop_judging(
                    seq,
                    format!("more than {MAX_UPDATES} updates: past the model's bound"),
                );
            }
            let Some(after) = model.next_state(&candidate.state, Action::UpdateJob) else {
                return self.stop_judging(seq, "the model refused the update".into());
            };
            next.insert(
                Candidate {
                    state: after,
                    bound: candidate.bound.clone(),
                }
                .canonical(),
            );
        }
        self.candidates = next.into_iter().collect();
        self.version = spec.version;
        self.group_spec = as_run;
        self.replayed += 1;
    }

    /// The job's deployment turned `status` by a write that is no step: paused, failed or
    /// promoted by an operator, which the model's deployments never are, so the judging
    /// stops there; running again
    /// (a resume) changes nothing the judging could follow from.
    pub fn deployment_changed(&mut self, status: &str, seq: u64) {
        if status != "running" {
            self.stop_judging(
                seq,
                format!(
                    "the job's deployment was {status}; the model has no step for that write \
                     (its deployments are never paused, failed or promoted by an operator)"
                ),
            );
        }
    }

    /// Replays one step of the log. `Ok` if the model follows it (or cannot judge it, which
    /// [`Instance::judged`] then says); the error names the rule the log breaks.
    pub fn replay(&mut self, entry: &LogEntry, step: &Step) -> Result<(), String> {
        if !self.judging() {
            self.unjudged += 1;
            return Ok(());
        }
        let model = self.model.as_ref().expect("a judging instance has a model");
        let out_of_requests = step.is_request()
            && self
                .candidates
                .iter()
                .any(|c| c.state.requests_made == u8::MAX);
        if out_of_requests {
            self.stop_judging(
                entry.seq,
                format!(
                    "more than {} requests: past the model's bound on requests",
                    u8::MAX
                ),
            );
            self.unjudged += 1;
            return Ok(());
        }
        if let Step::AllocUnhealthy { alloc } = step {
            self.stop_judging(
                entry.seq,
                format!(
                    "allocation {alloc} passed its healthy_deadline before it was healthy; the \
                     model has no health deadline (its deployments never fail)"
                ),
            );
            self.unjudged += 1;
            return Ok(());
        }
        if let Step::RestartDecision { alloc, task, .. } = step {
            // The implementation starts a new count when the interval is over (the model
            // never does): judged while every decision falls within a second of the first's
            // interval, no further.
            let interval = self
                .restart_intervals
                .get(&**task)
                .copied()
                .unwrap_or(i64::MAX);
            let start = *self
                .interval_starts
                .entry((alloc.clone(), task.to_string()))
                .or_insert(entry.time_ns);
            if entry.time_ns.saturating_sub(start) >= interval.saturating_sub(1_000_000_000) {
                self.stop_judging(
                    entry.seq,
                    format!(
                        "task {task:?} of allocation {alloc} crashed again after its restart \
                         interval; the model keeps every crash in one interval"
                    ),
                );
                self.unjudged += 1;
                return Ok(());
            }
            if self.exit_decides.contains(&**task) {
                self.stop_judging(
                    entry.seq,
                    format!(
                        "task {task:?}'s restart is decided by its exit code (a batch job's \
                         task, or a prestart or poststart task), which the model does not have"
                    ),
                );
                self.unjudged += 1;
                return Ok(());
            }
        }
        let task = match step.task() {
            None => None,
            Some(name) => match model.cfg.group.tasks.iter().position(|t| *t.name == **name) {
                Some(ix) => Some(ix as u8),
                None => return Err(format!("the job's group has no task {name:?}")),
            },
        };
        let mut next = HashSet::new();
        let mut refusals = Vec::new();
        for candidate in &self.candidates {
            match successors(model, candidate, entry, step, task) {
                Ok(found) => next.extend(found),
                Err(refusal) => refusals.push(refusal),
            }
        }
        if !next.is_empty() {
            self.candidates = next.into_iter().collect();
            self.replayed += 1;
            if let Some(alloc) = step.alloc() {
                self.allocs.insert(alloc.clone());
            }
            return Ok(());
        }
        let why = refusals
            .into_iter()
            .map(|Refusal::Violation(why)| why)
            .next()
            .unwrap_or_else(|| format!("{} is not enabled", step.name()));
        Err(why)
    }

    /// Notes that `alloc` is this instance's, though the model no longer follows it.
    pub fn route(&mut self, alloc: &AllocId) {
        self.allocs.insert(alloc.clone());
    }
}

/// The tasks of `group` whose exit decides their restart (a batch job's, a prestart or
/// poststart task's), which the model does not have.
fn exit_decides(spec: &Job, group: &str) -> BTreeSet<String> {
    spec.task_groups
        .iter()
        .filter(|g| g.name == group)
        .flat_map(|g| &g.tasks)
        .filter(|t| {
            spec.job_type == "batch" || quiesce_core::client::task_runner::ends_when_done(t)
        })
        .map(|t| t.name.clone())
        .collect()
}

/// Each task of `group`'s restart interval, by its effective policy.
fn restart_intervals(spec: &Job, group: &str) -> BTreeMap<String, i64> {
    spec.task_groups
        .iter()
        .filter(|g| g.name == group)
        .flat_map(|g| {
            g.tasks.iter().map(move |t| {
                let policy = quiesce_core::spec::RestartPolicy::effective(
                    &spec.job_type,
                    g.restart_policy.as_ref(),
                    t.restart_policy.as_ref(),
                );
                (t.name.clone(), policy.interval_ns)
            })
        })
        .collect()
}

/// The model of one task group of a jobspec, or why it has none.
fn model_of(spec: &Job, group: &str) -> Result<StopPathModel, String> {
    let group_cfg = crate::adapter::group_cfg(spec, group)?;
    let count = spec
        .task_groups
        .iter()
        .find(|g| g.name == group)
        .and_then(|g| g.count)
        .unwrap_or(1);
    if !(1..=MAX_ALLOCS as i64).contains(&count) {
        return Err(format!(
            "count {count} is past the model's bounds (1 to {MAX_ALLOCS} allocations)"
        ));
    }
    let restart_attempts = restart_attempts(spec, group)?;
    let canary = canary_of(spec, group, count as u64)?;
    let cfg = ModelCfg {
        name: format!("{}/{group}", spec.id),
        job: spec.id.clone(),
        group: group_cfg,
        count: count as u8,
        // The daemon is one node; where a log has several, the model's placement (least
        // loaded) still stands for one, as positions are bound freely.
        nodes: 1,
        operator: Operator::Budget(u8::MAX),
        history: History::Full,
        witnesses: Vec::new(),
        fault: None,
        budget_restarts: true,
        restart_requests: true,
        restart_attempts,
        unrecoverable_crashes: true,
        max_parallel: spec.update_of(group).map_or(0, |update| {
            u8::try_from(update.max_parallel).unwrap_or(u8::MAX)
        }),
        canary,
        canary_in_place: spec
            .update_of(group)
            .is_some_and(|update| update.canary_in_place),
        // A real program crashes as often as it does.
        crash_budget: 0,
    };
    Ok(cfg.into_model())
}

/// The group's canaries, as the model has them: promoted by the deployment itself once all
/// are healthy (`auto_promote`), in the job's only group with canaries (the implementation
/// promotes a job's groups together; the model follows one group).
fn canary_of(spec: &Job, group: &str, count: u64) -> Result<u8, String> {
    let Some(update) = spec.update_of(group).filter(|update| update.canary > 0) else {
        return Ok(0);
    };
    if !update.auto_promote {
        return Err(
            "canaries promoted by hand (auto_promote = false): the model's \
                    deployments promote themselves"
                .into(),
        );
    }
    let with_canaries = spec
        .task_groups
        .iter()
        .filter(|g| spec.update_of(&g.name).is_some_and(|u| u.canary > 0))
        .count();
    if with_canaries > 1 {
        return Err(format!(
            "{with_canaries} groups with canaries, promoted together: the model follows one \
             group"
        ));
    }
    // A system job's is a percentage of the allocations an update replaces: of every one.
    let canaries = update.canaries_for(count);
    u8::try_from(canaries)
        .ok()
        .filter(|canary| usize::from(*canary) < MAX_ALLOCS)
        .ok_or_else(|| format!("canary {canaries} is past the model's bounds"))
}

/// The group's restart attempts, one for every task, as the model has them: `mode = "fail"`
/// (a `delay` policy restarts for ever), and at most the model's bound.
fn restart_attempts(spec: &Job, group: &str) -> Result<u8, String> {
    use quiesce_core::spec::{RestartMode, RestartPolicy};
    let Some(group_spec) = spec.task_groups.iter().find(|g| g.name == group) else {
        return Ok(0);
    };
    let policies: BTreeSet<_> = group_spec
        .tasks
        .iter()
        .map(|task| {
            let policy = RestartPolicy::effective(
                &spec.job_type,
                group_spec.restart_policy.as_ref(),
                task.restart_policy.as_ref(),
            );
            (policy.attempts, policy.mode == RestartMode::Delay)
        })
        .collect();
    let mut policies = policies.into_iter();
    let (attempts, delay_mode) = policies.next().unwrap_or((0, false));
    if policies.next().is_some() {
        return Err("its tasks' restart policies differ; the model has one per group".into());
    }
    if delay_mode {
        return Err("its restart policy's mode is \"delay\"; the model has \"fail\"".into());
    }
    u8::try_from(attempts)
        .ok()
        .filter(|&attempts| attempts <= MAX_RESTART_ATTEMPTS)
        .ok_or_else(|| {
            format!(
                "{attempts} restart attempts are past the model's bound of {MAX_RESTART_ATTEMPTS}"
            )
        })
}

/// Every way `step` can be a step of the model from `candidate`, with the effects the entry
/// records and the invariants holding after it.
fn successors(
    model: &StopPathModel,
    candidate: &Candidate,
    entry: &LogEntry,
    step: &Step,
    task: Option<u8>,
) -> Result<Vec<Candidate>, Refusal> {
    let mut bound = candidate.bound.clone();
    bound.resize(candidate.state.allocs.len(), None);
    // The positions the step's allocation may be: the one bound to it, or any unbound one.
    let positions: Vec<Option<usize>> = match step.alloc() {
        None => vec![None],
        Some(id) => match bound.iter().position(|b| b.as_deref() == Some(id.as_str())) {
            Some(ix) => vec![Some(ix)],
            None => (0..bound.len())
                .filter(|&ix| bound[ix].is_none())
                .map(Some)
                .collect(),
        },
    };
    if positions.is_empty() {
        return Err(Refusal::Violation(format!(
            "{} names an allocation the model has not placed",
            step.name()
        )));
    }
    let mut enabled = Vec::new();
    model.actions(&candidate.state, &mut enabled);
    let mut out = Vec::new();
    let mut refusal = None;
    for position in positions {
        let bind = |state: State| {
            let mut bound = bound.clone();
            if let (Some(id), Some(ix)) = (step.alloc(), position) {
                bound[ix] = Some(id.clone());
            }
            Candidate { state, bound }.canonical()
        };
        let action = action_for(step, position, task).filter(|action| enabled.contains(action));
        let Some(action) = action else {
            if stutters(&candidate.state, step, position) {
                // An update the model does not see (one that changes only `Migrate`, say):
                // the runner does nothing with it, and the entry must record nothing.
                if entry.effects.is_empty() {
                    out.push(bind(candidate.state.clone()));
                } else {
                    refusal = Some(Refusal::Violation(format!(
                        "a pull that changes nothing the model sees has effects {:?}",
                        entry.effects
                    )));
                }
            }
            continue;
        };
        let Some(after) = model.next_state(&candidate.state, action) else {
            continue;
        };
        if let Err(why) = implied_effects(model, &candidate.state, &after, position, entry) {
            refusal = Some(Refusal::Violation(why));
            continue;
        }
        for after in rollout_choices(&candidate.state, after) {
            if let Some((name, _)) = INVARIANTS.iter().find(|(_, holds)| !holds(model, &after)) {
                refusal = Some(Refusal::Violation(format!(
                    "after {action} the model's invariant {name} does not hold"
                )));
                continue;
            }
            out.push(bind(after));
        }
    }
    if out.is_empty() {
        return Err(refusal.unwrap_or_else(|| {
            Refusal::Violation(format!(
                "{} is not enabled in any state the log can be in",
                step.name()
            ))
        }));
    }
    Ok(out)
}

/// `after`, and — where the step was an evaluation that stopped older allocations for a
/// rollout — the same evaluation with each of those stops on another older allocation of
/// the same kind (started or not) instead. The model takes the least by its record, the
/// implementation the oldest (a position in the log's order that the model does not
/// keep); both are rollouts `rollout_bounded` allows, and the log's next pulls tell which.
fn rollout_choices(before: &State, after: State) -> Vec<State> {
    let victims: Vec<usize> = (0..before.allocs.len())
        .filter(|&ix| after.allocs[ix].rollout_stop && !before.allocs[ix].rollout_stop)
        .collect();
    let Some(generation) = after.job.latest().map(|latest| latest.spec.generation) else {
        return vec![after];
    };
    if victims.is_empty() || victims.iter().any(|&ix| !after.allocs[ix].desired_stop) {
        return vec![after];
    }
    let started = |alloc: &Alloc| alloc.runner != quiesce_model::state::RunnerPhase::Pending;
    // Per kind (started or not), every set of as many eligible allocations as the model
    // stopped of that kind: older, not yet stopped, untouched by the step but for the stop.
    let mut choices: Vec<Vec<usize>> = vec![Vec::new()];
    for kind in [false, true] {
        let stopped = victims
            .iter()
            .filter(|&&ix| started(&before.allocs[ix]) == kind)
            .count();
        let eligible: Vec<usize> = (0..before.allocs.len())
            .filter(|&ix| {
                let alloc = &before.allocs[ix];
                !alloc.is_terminal()
                    && alloc.spec.generation < generation
                    && started(alloc) == kind
                    && (victims.contains(&ix) || after.allocs[ix] == *alloc)
            })
            .collect();
        let subsets = subsets_of(&eligible, stopped);
        choices = choices
            .iter()
            .flat_map(|chosen| {
                subsets.iter().map(move |subset| {
                    let mut all = chosen.clone();
                    all.extend(subset);
                    all
                })
            })
            .collect();
    }
    // Whether the step flagged what it stopped (the planted `rollout-skips-delay` does).
    let flagged =
        after.allocs[victims[0]].no_shutdown_delay && !before.allocs[victims[0]].no_shutdown_delay;
    choices
        .into_iter()
        .map(|chosen| {
            let mut state = after.clone();
            for &ix in &victims {
                state.allocs[ix] = before.allocs[ix];
            }
            for ix in chosen {
                let alloc = &mut state.allocs[ix];
                alloc.desired_stop = true;
                alloc.rollout_stop = true;
                alloc.no_shutdown_delay |= flagged;
            }
            state
        })
        .collect()
}

/// Every `k`-element subset of `items`, in order.
fn subsets_of(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        for mut rest in subsets_of(&items[i + 1..], k - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

/// A pull of a record whose (desired stop, flag, tombstone) the client has already: the
/// model has no step for it.
fn stutters(state: &State, step: &Step, position: Option<usize>) -> bool {
    match (step, position) {
        (Step::ClientSync { .. }, Some(ix)) => {
            let alloc = &state.allocs[ix];
            alloc.pulled.is_some() && alloc.server_view() == alloc.pulled
        }
        _ => false,
    }
}

fn action_for(step: &Step, position: Option<usize>, task: Option<u8>) -> Option<Action> {
    let alloc = position.and_then(|p| u8::try_from(p).ok());
    crate::adapter::action_at(step, alloc, task)
}

/// The effects the model's step implies for the allocation at `position` are those the
/// entry records: a launch, a kill signal and a SIGKILL exactly when the model's task
/// starts, is signalled, is SIGKILLed; a registration exactly when a service becomes
/// registered; a deregistration at least when one stops being (the stop hooks deregister
/// again, idempotently). A step of no allocation (a request, the scheduler, a restart)
/// records none and the model's implies none.
fn implied_effects(
    model: &StopPathModel,
    before: &State,
    after: &State,
    position: Option<usize>,
    entry: &LogEntry,
) -> Result<(), String> {
    let Some(ix) = position else {
        if let Some(effect) = entry.effects.first() {
            return Err(format!("{} has an effect: {effect:?}", entry.name()));
        }
        // A request changes no runner, but a restart may cut a wait short.
        for (ix, (b, a)) in before.allocs.iter().zip(&after.allocs).enumerate() {
            let implied = expected(model, Some(b), a);
            if let Some(effect) = implied.first() {
                return Err(format!(
                    "{} implies {effect:?} for the allocation at position {ix}, and the log \
                     records none",
                    entry.name()
                ));
            }
        }
        return Ok(());
    };
    let before = before.allocs.get(ix);
    let after = &after.allocs[ix];
    let implied = expected(model, before, after);
    let recorded = &entry.effects;
    let count = |list: &[Expected], what: &Expected| list.iter().filter(|e| *e == what).count();
    for what in implied.iter().collect::<BTreeSet<_>>() {
        let logged = recorded.iter().filter(|e| what.matches(e)).count();
        let wanted = count(&implied, what);
        let ok = if what.kind == Kind::Deregister {
            logged >= 1
        } else {
            logged == wanted
        };
        if !ok {
            return Err(format!(
                "{} implies {what} and the log records {logged} of it (effects: {recorded:?})",
                entry.name()
            ));
        }
    }
    for effect in recorded {
        let kind = Kind::of(effect);
        if kind != Kind::Deregister && !implied.iter().any(|what| what.matches(effect)) {
            return Err(format!(
                "{} records {effect:?}, which the model's step does not imply",
                entry.name()
            ));
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Launch,
    Register,
    Deregister,
    Signal,
    SigKill,
}

impl Kind {
    fn of(effect: &Effect) -> Kind {
        match effect {
            Effect::Launch { .. } => Kind::Launch,
            Effect::Register { .. } => Kind::Register,
            Effect::Deregister { .. } => Kind::Deregister,
            Effect::Signal { .. } => Kind::Signal,
            Effect::SigKill { .. } => Kind::SigKill,
        }
    }
}

/// An effect the model implies: its kind and owner (a task's name, or `None` for the group).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Expected {
    kind: Kind,
    task: Option<String>,
}

impl Expected {
    fn matches(&self, effect: &Effect) -> bool {
        let task = match effect {
            Effect::Launch { task }
            | Effect::Signal { task, .. }
            | Effect::SigKill { task, .. } => Some(task),
            Effect::Register { task, .. } | Effect::Deregister { task, .. } => task.as_ref(),
        };
        Kind::of(effect) == self.kind && task == self.task.as_ref()
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.task {
            Some(task) => write!(f, "{:?} of task {task:?}", self.kind),
            None => write!(f, "{:?} of the group's services", self.kind),
        }
    }
}

/// What the model's step did to one allocation's world, as effects.
fn expected(model: &StopPathModel, before: Option<&Alloc>, after: &Alloc) -> Vec<Expected> {
    let mut implied = Vec::new();
    let group_before = before.is_some_and(|b| b.group_service_registered);
    if group_before != after.group_service_registered {
        implied.push(Expected {
            kind: if after.group_service_registered {
                Kind::Register
            } else {
                Kind::Deregister
            },
            task: None,
        });
    }
    for (ix, task_cfg) in model.cfg.group.tasks.iter().enumerate() {
        let task = Some(task_cfg.name.clone());
        let b = before.map(|b| b.tasks[ix]);
        let a = after.tasks[ix];
        let was = |f: fn(&quiesce_model::state::Task) -> bool| b.as_ref().is_some_and(f);
        // Started, or running again after a restart's kill or a restart delay.
        let runs_again = b.is_some_and(|b| {
            matches!(
                b.phase,
                TaskPhase::Delaying | TaskPhase::Signalled | TaskPhase::Restarting
            )
        }) && a.phase == TaskPhase::Running;
        if runs_again
            || (b.is_none_or(|b| b.phase == TaskPhase::NotStarted)
                && a.phase != TaskPhase::NotStarted)
        {
            implied.push(Expected {
                kind: Kind::Launch,
                task: task.clone(),
            });
        }
        if was(|t| t.service_registered) != a.service_registered {
            implied.push(Expected {
                kind: if a.service_registered {
                    Kind::Register
                } else {
                    Kind::Deregister
                },
                task: task.clone(),
            });
        }
        if !was(|t| t.signalled) && a.signalled {
            implied.push(Expected {
                kind: Kind::Signal,
                task: task.clone(),
            });
        }
        if !was(|t| t.sigkilled) && a.sigkilled {
            implied.push(Expected {
                kind: Kind::SigKill,
                task,
            });
        }
    }
    implied
}
