//! Random long runs beyond the model's bounds: more allocations, tasks and requests than any
//! configuration the checker explores. A run is a list of choices; at each step one of the
//! simulator's enabled steps or one operator request is taken. The model's invariants are
//! evaluated on every observation: the observation is turned back into a model state, with
//! the ghost variables (which requests carried the flag for which allocation, and whether
//! the client pulled after them) kept by this harness.

use crate::adapter::extend_ids;
use crate::lockstep::initial_sim;
use crate::observe::{of_sim, AllocObs, Observation};
use quiesce_core::server::structs::AllocId;
use quiesce_core::sim::Simulator;
use quiesce_core::step::Step;
use quiesce_model::config::{ModelCfg, MAX_TASKS};
use quiesce_model::properties::{self, INVARIANTS};
use quiesce_model::state::{
    Alloc, Deployment, Ghost, Job, JobVersion, ServerView, SpecDigest, State, Task,
};
use quiesce_model::StopPathModel;
use std::collections::BTreeSet;

/// What one run did, and every invariant it broke (with the step after which it broke).
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    pub steps: usize,
    pub requests: usize,
    pub max_allocs: usize,
    /// In-place restarts requested, and restart-policy decisions (one per crash).
    pub restarts: usize,
    pub decisions: usize,
    pub violations: Vec<String>,
}

/// Ghost variables the invariants need, kept per allocation ID.
#[derive(Default)]
struct Ghosts {
    flag_requested: BTreeSet<AllocId>,
    flag_due: BTreeSet<AllocId>,
}

/// Runs `choices` on the simulator for `cfg`'s job, at most `max_requests` of them operator
/// requests, until the choices run out or nothing is left to do.
pub fn run(cfg: &ModelCfg, choices: &[u16], max_requests: usize) -> Result<RunReport, String> {
    run_with(cfg, choices, max_requests, true)
}

/// [`run`], optionally without recording which requests carried the flag: then every
/// flagged stop looks unrequested, and the invariants must object (the harness's teeth).
pub fn run_with(
    cfg: &ModelCfg,
    choices: &[u16],
    max_requests: usize,
    track_flags: bool,
) -> Result<RunReport, String> {
    let model = cfg.clone().into_model();
    let (mut sim, mut ids) = initial_sim(cfg)?;
    let mut ghosts = Ghosts::default();
    let mut report = RunReport::default();
    for &choice in choices {
        // Three choices in four take an internal step when there is one, so runs are long
        // and requests land in the middle of stops rather than all at once.
        let internal = sim.enabled_steps();
        let offered = if report.requests < max_requests {
            requests(&sim, cfg, &ids)
        } else {
            Vec::new()
        };
        let mut options = if (choice % 4 == 0 && !offered.is_empty()) || internal.is_empty() {
            offered
        } else {
            internal
        };
        if options.is_empty() {
            break;
        }
        let step = options.swap_remove(usize::from(choice / 4) % options.len());
        if track_flags {
            track_ghosts(&sim, cfg, &step, &mut ghosts);
        }
        let request = step.is_request();
        sim.apply(&step)
            .map_err(|error| format!("the simulator refused {step}, which it offered: {error}"))?;
        report.requests += usize::from(request);
        report.restarts += usize::from(matches!(step, Step::RestartAlloc { .. }));
        report.decisions += usize::from(matches!(step, Step::RestartDecision { .. }));
        report.steps += 1;
        extend_ids(&sim, &cfg.job, &mut ids);
        report.max_allocs = report.max_allocs.max(ids.len());
        let observation = of_sim(&sim, &cfg.job, cfg.group.tasks.len(), &ids);
        let state = state_of(&model, &observation, &ids, &ghosts);
        // stop_completes judges quiet states only; the simulator says which those are.
        let quiet = sim.enabled_steps().is_empty();
        for (name, holds) in INVARIANTS {
            let judged = name != properties::names::STOP_COMPLETES || quiet;
            if judged && !holds(&model, &state) {
                report.violations.push(format!(
                    "{name} broken after step {} ({step})",
                    report.steps
                ));
            }
        }
        if !report.violations.is_empty() {
            break;
        }
    }
    Ok(report)
}

/// The operator requests on offer: every kind of job stop, an alloc stop of every
/// allocation the server answers for, a job start, a client restart, and an in-place
/// restart (flagged or not) of every running task of every allocation the client runs, and
/// of all its running tasks at once.
fn requests(sim: &Simulator, cfg: &ModelCfg, ids: &[AllocId]) -> Vec<Step> {
    let job = quiesce_core::server::structs::JobId::from(cfg.job.as_str());
    let mut out = Vec::new();
    if sim.server.store.job(&job).is_some() {
        for (purge, flag) in [(false, false), (false, true), (true, false), (true, true)] {
            out.push(Step::StopJob {
                job: job.clone(),
                purge,
                no_shutdown_delay: flag,
            });
        }
    }
    if sim.server.store.job(&job).is_some_and(|job| job.stop) {
        out.push(Step::StartJob { job: job.clone() });
    }
    for id in ids
        .iter()
        .filter(|id| sim.server.store.alloc(*id).is_some())
    {
        out.push(Step::StopAlloc {
            alloc: id.clone(),
            no_shutdown_delay: false,
        });
        out.push(Step::StopAlloc {
            alloc: id.clone(),
            no_shutdown_delay: true,
        });
    }
    out.push(Step::ClientRestart);
    for id in ids {
        let Some(runner) = sim.runner(id) else {
            continue;
        };
        // A restart goes to the client, but the server's word comes first: an allocation
        // it has stopped is not restarted (the model offers no such restart).
        let stopped = sim.server.store.alloc(id).is_none_or(|record| {
            record.desired_status != quiesce_core::server::structs::DesiredStatus::Run
                || record.tombstone
        });
        if stopped || runner.phase != quiesce_core::client::RunnerPhase::Running {
            continue;
        }
        let running = runner
            .tasks
            .iter()
            .filter(|task| {
                task.phase == quiesce_core::client::TaskPhase::Running
                    && task.role != quiesce_core::spec::TaskRole::Poststop
            })
            .map(|task| Some(task.name.clone()))
            .collect::<Vec<_>>();
        if running.is_empty() {
            continue;
        }
        for task in std::iter::once(None).chain(running) {
            for flag in [false, true] {
                out.push(Step::RestartAlloc {
                    alloc: id.clone(),
                    task: task.clone(),
                    no_shutdown_delay: flag,
                });
            }
        }
    }
    out
}

/// The model's ghost variables, from the requests and pulls the run makes.
fn track_ghosts(sim: &Simulator, cfg: &ModelCfg, step: &Step, ghosts: &mut Ghosts) {
    match step {
        Step::StopJob {
            no_shutdown_delay: true,
            ..
        } if sim.server.store.job(&cfg.job).is_some() => {
            for alloc in sim.server.store.allocs_by_job(&cfg.job) {
                ghosts.flag_requested.insert(alloc.id.clone());
            }
        }
        Step::StopAlloc {
            alloc,
            no_shutdown_delay: true,
        } if sim.server.store.alloc(alloc).is_some() => {
            ghosts.flag_requested.insert(alloc.clone());
        }
        Step::ClientSync { alloc } if ghosts.flag_requested.contains(alloc) => {
            ghosts.flag_due.insert(alloc.clone());
        }
        _ => {}
    }
}

/// The observation as a model state, so that the model's own invariant functions judge it.
fn state_of(
    model: &StopPathModel,
    observation: &Observation,
    ids: &[AllocId],
    ghosts: &Ghosts,
) -> State {
    let digest = |generation: u8, group: bool, tasks: &[bool]| {
        let mut task_shutdown_delay = [false; MAX_TASKS];
        task_shutdown_delay[..tasks.len()].copy_from_slice(tasks);
        SpecDigest {
            generation,
            group_shutdown_delay: group,
            task_shutdown_delay,
        }
    };
    State {
        job: Job {
            versions: observation
                .versions
                .iter()
                .map(|v| JobVersion {
                    spec: digest(
                        v.generation,
                        v.group_shutdown_delay,
                        &v.task_shutdown_delays,
                    ),
                    stop: v.stop,
                })
                .collect(),
            purged: observation.versions.is_empty(),
        },
        deployment: match observation.deployment {
            None => Deployment::None,
            Some("running") => Deployment::Running,
            Some(crate::observe::AWAITING_PROMOTION) => Deployment::Canaries,
            Some("successful") => Deployment::Successful,
            Some("failed") => Deployment::Failed,
            Some(_) => Deployment::Cancelled,
        },
        eval_pending: observation.eval_pending,
        allocs: observation
            .allocs
            .iter()
            .zip(ids)
            .map(|(alloc, id)| alloc_of(model.spec, alloc, id, ghosts))
            .collect(),
        requests_made: 0,
        stable: 0,
        crashes: 0,
        ghost: Ghost::default(),
        violations: 0,
    }
}

fn alloc_of(spec: SpecDigest, obs: &AllocObs, id: &AllocId, ghosts: &Ghosts) -> Alloc {
    let mut tasks = [Task::NOT_STARTED; MAX_TASKS];
    for (slot, task) in tasks.iter_mut().zip(&obs.tasks) {
        *slot = Task {
            phase: task.phase,
            killing: task.killing,
            pre_kill: task.pre_kill,
            service_registered: task.service_registered,
            delay: task.delay,
            signalled: task.signalled,
            kill_timeout_fired: task.sigkilled,
            sigkilled: task.sigkilled,
            restart: task.restart,
            restarts: task.restarts,
            ended_on_own: task.ended_on_own,
        };
    }
    let server = obs.server;
    Alloc {
        spec: SpecDigest {
            generation: obs.generation,
            ..spec
        },
        node: 0,
        desired_stop: server.is_some_and(|s| s.stop && !s.tombstone),
        migrate: server.is_some_and(|s| s.migrate),
        no_shutdown_delay: server.is_some_and(|s| s.no_shutdown_delay),
        tombstone: server.is_some_and(|s| s.tombstone),
        removed: server.is_none(),
        pulled: obs.pulled.map(|p| ServerView {
            stop: p.stop,
            no_shutdown_delay: p.no_shutdown_delay,
            tombstone: p.tombstone,
        }),
        runner: obs.runner,
        cancelled: obs.cancelled,
        group_pre_kill: obs.group_pre_kill,
        group_service_registered: obs.group_service_registered,
        group_delay: obs.group_delay,
        tasks,
        flag_requested: ghosts.flag_requested.contains(id),
        flag_due: ghosts.flag_due.contains(id),
        placed_after_flagged_stop: false,
        failed: obs.failed,
        flagged_restart_done: false,
        rollout_stop: obs.rollout_stop,
        watched: obs.watched,
        abandoned: obs.abandoned,
        canary: obs.canary,
        // Random runs use no canaries (`large_cfg`): no allocation is beside one.
        beside_canary: false,
        downgraded: false,
    }
}

/// The larger configuration random runs use: four allocations of a group with a leader, a
/// plain main task with its own delay, a sidecar and a poststop task, over two nodes; every
/// task but the poststop one may crash, and the restart policy allows two restarts.
pub fn large_cfg() -> ModelCfg {
    let mut cfg = quiesce_model::config::standard().remove(1);
    cfg.name = "random".to_string();
    cfg.count = 4;
    cfg.nodes = 2;
    cfg.group.tasks[1].shutdown_delay = true;
    cfg.group.tasks[1].service = true;
    cfg.group.tasks = cfg
        .group
        .tasks
        .into_iter()
        .map(quiesce_model::config::TaskCfg::crashing)
        .collect();
    cfg.restart_requests = true;
    cfg.restart_attempts = 2;
    cfg
}

/// Totals over many random runs.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub runs: u32,
    pub steps: usize,
    pub requests: usize,
    pub max_allocs: usize,
    pub restarts: usize,
    pub decisions: usize,
}

/// `cases` random runs of 300 to 600 choices each, seeded, with at most `max_requests`
/// requests each. On a violation, proptest shrinks the choices to a smaller run that still
/// breaks an invariant, and the error says which and how many choices remain.
pub fn runs(cfg: &ModelCfg, cases: u32, seed: u64, max_requests: usize) -> Result<Summary, String> {
    use proptest::test_runner::{
        Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner,
    };
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let summary = std::cell::RefCell::new(Summary::default());
    let strategy = proptest::collection::vec(proptest::num::u16::ANY, 300..=600);
    let result = runner.run(&strategy, |choices| {
        let report = run(cfg, &choices, max_requests).map_err(TestCaseError::fail)?;
        let mut total = summary.borrow_mut();
        total.runs += 1;
        total.steps += report.steps;
        total.requests += report.requests;
        total.max_allocs = total.max_allocs.max(report.max_allocs);
        total.restarts += report.restarts;
        total.decisions += report.decisions;
        match report.violations.first() {
            Some(violation) => Err(TestCaseError::fail(violation.clone())),
            None => Ok(()),
        }
    });
    match result {
        Ok(()) => Ok(summary.into_inner()),
        Err(TestError::Fail(reason, choices)) => Err(format!(
            "{reason} (shrunk to {} choices: {choices:?})",
            choices.len()
        )),
        Err(TestError::Abort(reason)) => Err(format!("random runs aborted: {reason}")),
    }
}
