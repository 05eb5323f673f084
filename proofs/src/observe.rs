//! The observation both sides project to (DESIGN.md, "What conformance compares"): per
//! allocation its desired status and transition, whether and what its client has pulled,
//! the runner's phase, which hooks ran, how each delay ended, and per task the same; per job
//! the stored versions' specs and `Stop`; whether an evaluation is pending. Nothing in it
//! is simulator-only: each field is something a Nomad-API server shows (task states and
//! events, allocations, versions, evaluations, service registrations).

use quiesce_core::client::{
    AllocRunner, DelayOutcome, RestartMark as ImplMark, RunnerPhase as ImplPhase,
    TaskPhase as ImplTaskPhase,
};
use quiesce_core::server::scheduler::DESC_UPDATING;
use quiesce_core::server::structs::{deployment_status, AllocId, DesiredStatus};
use quiesce_core::sim::Simulator;
use quiesce_core::spec::Job;
use quiesce_model::state::{Alloc, Delay, Deployment, RestartMark, RunnerPhase, State, TaskPhase};
use quiesce_model::StopPathModel;
use std::fmt::Write;
use std::sync::{Arc, Weak};

/// A stored job version as far as the stop path is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionObs {
    /// How many registrations changed the spec up to this version (`job run` of an edited
    /// file; a stop or a start changes none).
    pub generation: u8,
    pub group_shutdown_delay: bool,
    pub task_shutdown_delays: Vec<bool>,
    pub stop: bool,
}

/// What the server holds for an allocation (`None` once it is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerObs {
    /// Desired stop, by a stop or a purge.
    pub stop: bool,
    pub migrate: bool,
    pub no_shutdown_delay: bool,
    pub tombstone: bool,
}

/// The client's copy, as last pulled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PulledObs {
    pub stop: bool,
    pub no_shutdown_delay: bool,
    pub tombstone: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskObs {
    pub phase: TaskPhase,
    pub killing: bool,
    pub pre_kill: bool,
    pub service_registered: bool,
    pub delay: Delay,
    pub signalled: bool,
    pub sigkilled: bool,
    pub restart: RestartMark,
    /// Restarts by the restart policy.
    pub restarts: u8,
    pub ended_on_own: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocObs {
    pub server: Option<ServerObs>,
    pub pulled: Option<PulledObs>,
    pub runner: RunnerPhase,
    pub cancelled: bool,
    pub group_pre_kill: bool,
    pub group_service_registered: bool,
    pub group_delay: Delay,
    pub tasks: Vec<TaskObs>,
    pub failed: bool,
    /// The generation of the version it runs.
    pub generation: u8,
    /// Placed by a deployment (`DeploymentID` set) whose health is not yet decided.
    pub watched: bool,
    /// Watched, and its deployment failed.
    pub abandoned: bool,
    /// Stopped to be replaced by a new version (`alloc is being updated due to job update`).
    pub rollout_stop: bool,
    /// A canary not yet promoted (`DeploymentStatus.Canary`).
    pub canary: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Every stored version, oldest first; empty once purged.
    pub versions: Vec<VersionObs>,
    pub eval_pending: bool,
    /// In placement order.
    pub allocs: Vec<AllocObs>,
    /// The job's status as the API shows it (`None` once purged): the model's derivation
    /// (`State::job_status`) against the store's (`StateStore::job_status`), after every
    /// step.
    pub status: Option<&'static str>,
    /// The job's latest deployment's status (`None`: none, or purged).
    pub deployment: Option<&'static str>,
}

/// A running deployment whose canaries wait for their promotion (the model's
/// `Deployment::Canaries`).
pub const AWAITING_PROMOTION: &str = "running, awaiting promotion";

// ------------------------------------------------------------------ the model's side

pub fn of_model(model: &StopPathModel, state: &State) -> Observation {
    let tasks = model.cfg.group.tasks.len();
    Observation {
        versions: state
            .job
            .versions
            .iter()
            .map(|version| VersionObs {
                generation: version.spec.generation,
                group_shutdown_delay: version.spec.group_shutdown_delay,
                task_shutdown_delays: version.spec.task_shutdown_delay[..tasks].to_vec(),
                stop: version.stop,
            })
            .collect(),
        eval_pending: state.eval_pending,
        allocs: state
            .allocs
            .iter()
            .map(|alloc| alloc_of_model(alloc, tasks))
            .collect(),
        status: model
            .job_status(state)
            .map(quiesce_model::state::JobStatus::name),
        deployment: match state.deployment {
            Deployment::None => None,
            Deployment::Running => Some(deployment_status::RUNNING),
            Deployment::Canaries => Some(AWAITING_PROMOTION),
            Deployment::Successful => Some(deployment_status::SUCCESSFUL),
            Deployment::Cancelled => Some(deployment_status::CANCELLED),
            Deployment::Failed => Some(deployment_status::FAILED),
        },
    }
}

fn alloc_of_model(alloc: &Alloc, tasks: usize) -> AllocObs {
    AllocObs {
        server: (!alloc.removed).then_some(ServerObs {
            stop: alloc.desired_stop || alloc.tombstone,
            migrate: alloc.migrate,
            no_shutdown_delay: alloc.no_shutdown_delay,
            tombstone: alloc.tombstone,
        }),
        pulled: alloc.pulled.map(|view| PulledObs {
            stop: view.stop,
            no_shutdown_delay: view.no_shutdown_delay,
            tombstone: view.tombstone,
        }),
        runner: alloc.runner,
        cancelled: alloc.cancelled,
        group_pre_kill: alloc.group_pre_kill,
        group_service_registered: alloc.group_service_registered,
        group_delay: alloc.group_delay,
        tasks: alloc.tasks[..tasks]
            .iter()
            .map(|task| TaskObs {
                phase: task.phase,
                killing: task.killing,
                pre_kill: task.pre_kill,
                service_registered: task.service_registered,
                delay: task.delay,
                signalled: task.signalled,
                sigkilled: task.sigkilled && task.kill_timeout_fired,
                restart: task.restart,
                restarts: task.restarts,
                ended_on_own: task.ended_on_own,
            })
            .collect(),
        failed: alloc.failed,
        generation: alloc.spec.generation,
        watched: alloc.watched,
        abandoned: alloc.abandoned,
        rollout_stop: alloc.rollout_stop,
        canary: alloc.canary,
    }
}

// ------------------------------------------------------------------ the implementation's side

/// The simulator's observation; `ids` are its allocations in placement order.
pub fn of_sim(sim: &Simulator, job_id: &str, tasks: usize, ids: &[AllocId]) -> Observation {
    of_sim_cached(sim, job_id, tasks, ids, &mut GenerationCache::default())
}

/// Each stored version's number and generation (see [`generations`]).
type Generations = Vec<(u64, u8)>;

/// Each stored version's generation, remembered for the last few lists of versions seen.
/// Simulator clones share a job's versions (`StateStore::job_versions_shared`) until one
/// is written, so most steps of a walk find them here instead of comparing every version's
/// spec with the one before it again.
#[derive(Debug, Default)]
pub struct GenerationCache {
    /// A `Weak` keeps its allocation's address from being reused; while an `Arc` to the
    /// same address lives its versions are unchanged (a write to shared versions copies
    /// them, and `Arc::make_mut` moves them away from a `Weak`).
    entries: Vec<(Weak<Vec<Job>>, Generations)>,
    next: usize,
}

impl GenerationCache {
    const SIZE: usize = 16;

    fn of(&mut self, versions: &Arc<Vec<Job>>) -> &[(u64, u8)] {
        let found = self
            .entries
            .iter()
            .position(|(weak, _)| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(versions)));
        let ix = match found {
            Some(ix) => ix,
            None => {
                let entry = (Arc::downgrade(versions), generations(versions));
                if self.entries.len() < Self::SIZE {
                    self.entries.push(entry);
                    self.entries.len() - 1
                } else {
                    let ix = self.next;
                    self.next = (self.next + 1) % Self::SIZE;
                    self.entries[ix] = entry;
                    ix
                }
            }
        };
        &self.entries[ix].1
    }
}

/// [`of_sim`], the versions' generations looked up in `cache` first.
pub fn of_sim_cached(
    sim: &Simulator,
    job_id: &str,
    tasks: usize,
    ids: &[AllocId],
    cache: &mut GenerationCache,
) -> Observation {
    let store = &sim.server.store;
    let shared = store.job_versions_shared(job_id);
    let versions: &[Job] = shared.map_or(&[], |versions| versions.as_slice());
    let generations = shared.map_or(&[][..], |versions| cache.of(versions));
    Observation {
        versions: versions
            .iter()
            .zip(generations)
            .map(|(job, &(_, generation))| version_of_job(job, generation))
            .collect(),
        eval_pending: sim.server.eval_pending(),
        allocs: ids
            .iter()
            .map(|id| alloc_of_sim(sim, id, tasks, generations))
            .collect(),
        status: store.job(job_id).map(|job| store.job_status(job)),
        deployment: store
            .latest_deployment(job_id)
            .map(|d| match d.status.as_str() {
                deployment_status::RUNNING if d.requires_promotion() => AWAITING_PROMOTION,
                deployment_status::RUNNING => deployment_status::RUNNING,
                deployment_status::SUCCESSFUL => deployment_status::SUCCESSFUL,
                deployment_status::CANCELLED => deployment_status::CANCELLED,
                deployment_status::FAILED => deployment_status::FAILED,
                _ => "other",
            }),
    }
}

/// Each stored version's number and generation: the count of versions before it whose spec
/// differs from the next one's (a stop or a start changes none).
fn generations(versions: &[Job]) -> Vec<(u64, u8)> {
    let mut generation = 0u8;
    versions
        .iter()
        .enumerate()
        .map(|(ix, job)| {
            if ix > 0 && !versions[ix - 1].same_spec(job) {
                generation = generation.saturating_add(1);
            }
            (job.version, generation)
        })
        .collect()
}

fn version_of_job(job: &Job, generation: u8) -> VersionObs {
    let group = &job.task_groups[0];
    VersionObs {
        generation,
        group_shutdown_delay: group.shutdown_delay_ns.is_some_and(|delay| delay > 0),
        task_shutdown_delays: group
            .tasks
            .iter()
            .map(|task| task.shutdown_delay_ns > 0)
            .collect(),
        stop: job.stop,
    }
}

fn alloc_of_sim(
    sim: &Simulator,
    id: &AllocId,
    tasks: usize,
    generations: &[(u64, u8)],
) -> AllocObs {
    let store = &sim.server.store;
    // Each looked up once: an observation is built per model transition.
    let server_record = store.alloc_for_client(id);
    let runner = sim.runner(id);
    // The server's record, or the client's copy once the server removed it.
    let record = server_record.or_else(|| runner.map(|runner| runner.alloc.as_ref()));
    let generation = record
        .and_then(|alloc| {
            generations
                .iter()
                .find(|(version, _)| *version == alloc.job_version)
                .map(|(_, generation)| *generation)
        })
        .unwrap_or(0);
    // Placed by a deployment, its health not yet decided: as the server has it, or, once
    // the record is gone (a purge), as its client does.
    let watched = match server_record {
        Some(alloc) => {
            !alloc.deployment_id.is_empty()
                && alloc
                    .deployment_status
                    .as_ref()
                    .is_none_or(|status| status.healthy.is_none())
        }
        // A runner that failed while wanted to run was reported unhealthy by the server
        // (its record gone now).
        None => runner.is_some_and(|runner| {
            !runner.alloc.deployment_id.is_empty()
                && runner.health.status().is_none()
                && !(runner.failed
                    && runner.alloc.desired_status == DesiredStatus::Run
                    && !runner.alloc.tombstone)
        }),
    };
    let abandoned = watched
        && record.is_some_and(|alloc| {
            store
                .deployment(&alloc.deployment_id)
                .is_some_and(|d| d.status == deployment_status::FAILED)
        });
    let rollout_stop = record.is_some_and(|alloc| alloc.desired_description == DESC_UPDATING);
    let canary = record.is_some_and(|alloc| {
        alloc
            .deployment_status
            .as_ref()
            .is_some_and(|status| status.canary)
    });
    let server = server_record.map(|alloc| ServerObs {
        stop: alloc.desired_status != DesiredStatus::Run || alloc.tombstone,
        migrate: alloc.desired_transition.should_migrate(),
        no_shutdown_delay: alloc.desired_transition.should_ignore_shutdown_delay(),
        tombstone: alloc.tombstone,
    });
    let registered = registered_services(sim, id, runner);
    let Some(runner) = runner else {
        let not_started = TaskObs {
            phase: TaskPhase::NotStarted,
            killing: false,
            pre_kill: false,
            service_registered: false,
            delay: Delay::None,
            signalled: false,
            sigkilled: false,
            restart: RestartMark::None,
            restarts: 0,
            ended_on_own: false,
        };
        return AllocObs {
            server,
            pulled: None,
            runner: RunnerPhase::Pending,
            cancelled: false,
            group_pre_kill: false,
            group_service_registered: registered.group,
            group_delay: Delay::None,
            tasks: vec![not_started; tasks],
            failed: false,
            generation,
            watched,
            abandoned,
            rollout_stop,
            canary,
        };
    };
    AllocObs {
        server,
        pulled: Some(pulled_of(runner)),
        runner: match runner.phase {
            ImplPhase::Running => RunnerPhase::Running,
            ImplPhase::PreKill => RunnerPhase::PreKill,
            ImplPhase::GroupDelay => RunnerPhase::GroupDelay,
            ImplPhase::Killing => RunnerPhase::Killing,
            ImplPhase::Terminal => RunnerPhase::Terminal,
        },
        cancelled: runner.cancelled,
        group_pre_kill: runner.group_pre_kill_done,
        group_service_registered: registered.group,
        group_delay: delay_of(runner.group_delay),
        tasks: runner
            .tasks
            .iter()
            .enumerate()
            .map(|(ix, task)| TaskObs {
                phase: match task.phase {
                    ImplTaskPhase::NotStarted => TaskPhase::NotStarted,
                    ImplTaskPhase::Running => TaskPhase::Running,
                    ImplTaskPhase::Delaying => TaskPhase::Delaying,
                    ImplTaskPhase::Signalled => TaskPhase::Signalled,
                    ImplTaskPhase::Dead => TaskPhase::Exited,
                    ImplTaskPhase::Crashed => TaskPhase::Crashed,
                    ImplTaskPhase::Restarting => TaskPhase::Restarting,
                },
                killing: task.state.events.iter().any(|e| e.event_type == "Killing"),
                pre_kill: task.pre_kill_done,
                service_registered: registered.tasks & (1 << ix) != 0,
                delay: delay_of(task.delay),
                signalled: task.signalled,
                sigkilled: task.sigkilled,
                restart: match task.restart {
                    ImplMark::None => RestartMark::None,
                    ImplMark::Unflagged => RestartMark::Unflagged,
                    ImplMark::Flagged => RestartMark::Flagged,
                },
                restarts: u8::try_from(task.policy_restarts).unwrap_or(u8::MAX),
                ended_on_own: task.last_exit.is_some(),
            })
            .collect(),
        failed: runner.failed,
        generation,
        watched,
        abandoned,
        rollout_stop,
        canary,
    }
}

/// Which of an allocation's native services the server holds: its group's, and each task's.
struct Registered {
    group: bool,
    /// Bit `ix`: task `ix` of the runner's.
    tasks: u64,
}

/// One pass over the allocation's services, not one per task.
fn registered_services(sim: &Simulator, id: &str, runner: Option<&AllocRunner>) -> Registered {
    let mut registered = Registered {
        group: false,
        tasks: 0,
    };
    for service in sim.server.store.services_of_alloc(id) {
        if service.task.is_empty() {
            registered.group = true;
            continue;
        }
        let position = runner.and_then(|runner| {
            runner
                .tasks
                .iter()
                .position(|task| *task.name == *service.task)
        });
        if let Some(ix) = position {
            debug_assert!(ix < 64, "a task's bit in Registered::tasks");
            registered.tasks |= 1 << ix;
        }
    }
    registered
}

fn pulled_of(runner: &AllocRunner) -> PulledObs {
    let alloc = &runner.alloc;
    PulledObs {
        stop: alloc.desired_status != DesiredStatus::Run || alloc.tombstone,
        no_shutdown_delay: alloc.desired_transition.should_ignore_shutdown_delay(),
        tombstone: alloc.tombstone,
    }
}

fn delay_of(outcome: DelayOutcome) -> Delay {
    match outcome {
        DelayOutcome::None => Delay::None,
        DelayOutcome::Waiting => Delay::Waiting,
        DelayOutcome::Elapsed => Delay::Elapsed,
        DelayOutcome::Skipped => Delay::Skipped,
        DelayOutcome::CutShort => Delay::CutShort,
        DelayOutcome::ExitedDuring => Delay::ExitedDuring,
    }
}

/// The differences between two observations, one line each (model first).
pub fn diff(model: &Observation, sim: &Observation) -> String {
    let mut out = String::new();
    if model.versions != sim.versions {
        let _ = writeln!(
            out,
            "  versions: model {:?}\n            impl  {:?}",
            model.versions, sim.versions
        );
    }
    if model.eval_pending != sim.eval_pending {
        let _ = writeln!(
            out,
            "  eval pending: model {} impl {}",
            model.eval_pending, sim.eval_pending
        );
    }
    if model.deployment != sim.deployment {
        let _ = writeln!(
            out,
            "  deployment: model {:?} impl {:?}",
            model.deployment, sim.deployment
        );
    }
    if model.status != sim.status {
        let _ = writeln!(
            out,
            "  job status: model {:?} impl {:?}",
            model.status, sim.status
        );
    }
    if model.allocs.len() != sim.allocs.len() {
        let _ = writeln!(
            out,
            "  allocations: model {} impl {}",
            model.allocs.len(),
            sim.allocs.len()
        );
    }
    for (ix, (m, s)) in model.allocs.iter().zip(&sim.allocs).enumerate() {
        if m != s {
            let _ = writeln!(out, "  alloc {ix}: model {m:?}\n           impl  {s:?}");
        }
    }
    out
}
