//! Mapping between the implementation's terms and the model's.

use quiesce_core::server::structs::AllocId;
use quiesce_core::sim::Simulator;
use quiesce_core::spec::{
    Job, Lifecycle, RestartPolicy, Service, Task, TaskGroup, TaskRole, UpdateStrategy,
};
use quiesce_core::step::{Step, TaskName};
use quiesce_model::config::{GroupCfg, ModelCfg, TaskCfg, TaskKind, MAX_TASKS};
use quiesce_model::Action;

/// The model's abstraction of one task group of a jobspec: each task's kill-order role,
/// whether it sets a `shutdown_delay` and registers a service; the group's delay and
/// service. Durations become "set or not" (the model's timers fire in any order).
pub fn group_cfg(job: &Job, group: &str) -> Result<GroupCfg, String> {
    let spec = job
        .task_groups
        .iter()
        .find(|candidate| candidate.name == group)
        .ok_or_else(|| format!("job {:?} has no task group {group:?}", job.id))?;
    if spec.tasks.len() > MAX_TASKS {
        return Err(format!(
            "task group {group:?} has {} tasks; the model holds at most {MAX_TASKS}",
            spec.tasks.len()
        ));
    }
    let has_services = |services: &Option<Vec<_>>| services.as_ref().is_some_and(|s| !s.is_empty());
    let tasks = spec
        .tasks
        .iter()
        .map(|task| TaskCfg {
            name: task.name.clone(),
            kind: match task.role() {
                TaskRole::Leader => TaskKind::Leader,
                TaskRole::Main => TaskKind::Main,
                TaskRole::Sidecar => TaskKind::Sidecar,
                TaskRole::Poststop => TaskKind::Poststop,
            },
            shutdown_delay: task.shutdown_delay_ns > 0,
            service: has_services(&task.services),
            // A real process may end on its own at any moment it runs, either way.
            may_crash: task.role() != TaskRole::Poststop,
            crash_unrecoverable: false,
        })
        .collect();
    Ok(GroupCfg {
        name: spec.name.clone(),
        shutdown_delay: spec.shutdown_delay_ns.is_some_and(|delay| delay > 0),
        service: has_services(&spec.services),
        tasks,
    })
}

/// The jobspec the implementation runs for a model configuration: the inverse of
/// [`group_cfg`] (a delay the model has becomes a real duration; every task runs on the
/// mock driver until it is killed and exits promptly on the signal; poststop tasks run a
/// second).
pub fn jobspec(cfg: &ModelCfg) -> Job {
    const SECOND: i64 = 1_000_000_000;
    let services = |name: &str, on: bool| {
        on.then(|| {
            vec![Service {
                name: name.to_string(),
                provider: "nomad".to_string(),
                ..Service::default()
            }]
        })
    };
    let tasks = cfg
        .group
        .tasks
        .iter()
        .map(|task| Task {
            name: task.name.clone(),
            driver: "mock_driver".to_string(),
            leader: task.kind == TaskKind::Leader,
            lifecycle: match task.kind {
                TaskKind::Sidecar => Some(Lifecycle {
                    hook: "prestart".into(),
                    sidecar: true,
                }),
                TaskKind::Poststop => Some(Lifecycle {
                    hook: "poststop".into(),
                    sidecar: false,
                }),
                TaskKind::Leader | TaskKind::Main => None,
            },
            shutdown_delay_ns: if task.shutdown_delay { 20 * SECOND } else { 0 },
            services: services(&task.name, task.service),
            // A task that may crash ends on its own, failing, after a minute of running.
            config: if task.kind == TaskKind::Poststop {
                Some([("run_for".to_string(), serde_json::json!(SECOND))].into())
            } else if task.may_crash {
                Some(
                    [
                        ("run_for".to_string(), serde_json::json!(60 * SECOND)),
                        ("exit_code".to_string(), serde_json::json!(1)),
                        (
                            "lost".to_string(),
                            serde_json::json!(task.crash_unrecoverable),
                        ),
                    ]
                    .into(),
                )
            } else {
                None
            },
            ..Task::default()
        })
        .collect();
    let restart_policy = RestartPolicy {
        attempts: Some(i64::from(cfg.restart_attempts)),
        interval_ns: Some(24 * 3600 * SECOND),
        delay_ns: Some(15 * SECOND),
        mode: Some("fail".to_string()),
        render_templates: None,
    };
    // A system job's canary is a percentage of the allocations an update replaces: the
    // least that gives the part's count of them.
    let canary = if cfg.canary_in_place {
        (u16::from(cfg.canary) * 100).div_ceil(u16::from(cfg.count.max(1)))
    } else {
        u16::from(cfg.canary)
    };
    Job {
        id: cfg.job.to_string(),
        job_type: if cfg.canary_in_place {
            "system"
        } else {
            "service"
        }
        .into(),
        task_groups: vec![TaskGroup {
            name: cfg.group.name.clone(),
            count: Some(i64::from(cfg.count)),
            shutdown_delay_ns: cfg.group.shutdown_delay.then_some(30 * SECOND),
            services: services(&cfg.group.name, cfg.group.service),
            tasks,
            restart_policy: Some(restart_policy),
            // Rolled out `max_parallel` at a time, each replacement healthy after 10 s,
            // after its canaries, promoted by the deployment itself.
            update: Some(UpdateStrategy {
                max_parallel: Some(i64::from(cfg.max_parallel)),
                health_check: Some("task_states".into()),
                min_healthy_time_ns: Some(10 * SECOND),
                canary: (cfg.canary > 0).then_some(i64::from(canary)),
                auto_promote: (cfg.canary > 0).then_some(true),
                ..UpdateStrategy::default()
            }),
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

/// The simulator step for a model action. `ids` are the simulator's allocations in
/// placement order, the model's positions.
pub fn step_of(cfg: &ModelCfg, ids: &[AllocId], action: Action) -> Step {
    let alloc = |ix: u8| ids[usize::from(ix)].clone();
    let task = |ix: u8| TaskName::from(cfg.group.tasks[usize::from(ix)].name.as_str());
    let job = quiesce_core::server::structs::JobId::from(cfg.job.as_str());
    match action {
        Action::StopJob {
            purge,
            no_shutdown_delay,
        } => Step::StopJob {
            job,
            purge,
            no_shutdown_delay,
        },
        Action::StopAlloc {
            alloc: a,
            no_shutdown_delay,
        } => Step::StopAlloc {
            alloc: alloc(a),
            no_shutdown_delay,
        },
        Action::StartJob => Step::StartJob { job },
        Action::ProcessEval => Step::ProcessEval { job },
        Action::ClientSync { alloc: a } => Step::ClientSync { alloc: alloc(a) },
        Action::GroupPreKill { alloc: a } => Step::GroupPreKill { alloc: alloc(a) },
        Action::GroupDelayElapsed { alloc: a } => Step::GroupDelayElapsed { alloc: alloc(a) },
        Action::TaskPreKill { alloc: a, task: t } => Step::TaskPreKill {
            alloc: alloc(a),
            task: task(t),
        },
        Action::TaskDelayElapsed { alloc: a, task: t } => Step::TaskDelayElapsed {
            alloc: alloc(a),
            task: task(t),
        },
        Action::TaskExit { alloc: a, task: t } => Step::TaskExit {
            alloc: alloc(a),
            task: task(t),
        },
        Action::KillTimeout { alloc: a, task: t } => Step::KillTimeout {
            alloc: alloc(a),
            task: task(t),
        },
        Action::PoststopStart { alloc: a, task: t } => Step::PoststopStart {
            alloc: alloc(a),
            task: task(t),
        },
        Action::PoststopExit { alloc: a, task: t } => Step::PoststopExit {
            alloc: alloc(a),
            task: task(t),
        },
        Action::ClientRestart => Step::ClientRestart,
        Action::RestartAlloc {
            alloc: a,
            task: t,
            no_shutdown_delay,
        } => Step::RestartAlloc {
            alloc: alloc(a),
            task: t.map(task),
            no_shutdown_delay,
        },
        Action::RestartDecision {
            alloc: a,
            task: t,
            unrecoverable,
        } => Step::RestartDecision {
            alloc: alloc(a),
            task: task(t),
            unrecoverable,
        },
        Action::RestartDelayElapsed { alloc: a, task: t } => Step::RestartDelayElapsed {
            alloc: alloc(a),
            task: task(t),
        },
        Action::UpdateJob => Step::UpdateJob { job },
        Action::AllocHealthy { alloc: a } => Step::AllocHealthy { alloc: alloc(a) },
    }
}

/// The model action for a simulator step (the other direction), or `None` when the step
/// names an allocation or task the model does not have.
pub fn action_of(cfg: &ModelCfg, ids: &[AllocId], step: &Step) -> Option<Action> {
    let alloc = match step.alloc() {
        None => None,
        Some(id) => Some(
            ids.iter()
                .position(|known| known == id)
                .and_then(|ix| u8::try_from(ix).ok())?,
        ),
    };
    let task = match step.task() {
        None => None,
        Some(name) => Some(
            cfg.group
                .tasks
                .iter()
                .position(|t| *t.name == **name)
                .and_then(|ix| u8::try_from(ix).ok())?,
        ),
    };
    action_at(step, alloc, task)
}

/// The model action for a step whose allocation is at position `alloc` and whose task is
/// at position `task`; `None` if the step needs one the caller does not give, or the model
/// has no such step (`AllocUnhealthy`: it has no health deadline).
pub fn action_at(step: &Step, alloc: Option<u8>, task: Option<u8>) -> Option<Action> {
    Some(match step {
        Step::StopJob {
            purge,
            no_shutdown_delay,
            ..
        } => Action::StopJob {
            purge: *purge,
            no_shutdown_delay: *no_shutdown_delay,
        },
        Step::StopAlloc {
            no_shutdown_delay, ..
        } => Action::StopAlloc {
            alloc: alloc?,
            no_shutdown_delay: *no_shutdown_delay,
        },
        Step::StartJob { .. } => Action::StartJob,
        Step::ProcessEval { .. } => Action::ProcessEval,
        Step::ClientSync { .. } => Action::ClientSync { alloc: alloc? },
        Step::GroupPreKill { .. } => Action::GroupPreKill { alloc: alloc? },
        Step::GroupDelayElapsed { .. } => Action::GroupDelayElapsed { alloc: alloc? },
        Step::TaskPreKill { .. } => Action::TaskPreKill {
            alloc: alloc?,
            task: task?,
        },
        Step::TaskDelayElapsed { .. } => Action::TaskDelayElapsed {
            alloc: alloc?,
            task: task?,
        },
        Step::TaskExit { .. } => Action::TaskExit {
            alloc: alloc?,
            task: task?,
        },
        Step::KillTimeout { .. } => Action::KillTimeout {
            alloc: alloc?,
            task: task?,
        },
        Step::PoststopStart { .. } => Action::PoststopStart {
            alloc: alloc?,
            task: task?,
        },
        Step::PoststopExit { .. } => Action::PoststopExit {
            alloc: alloc?,
            task: task?,
        },
        Step::ClientRestart => Action::ClientRestart,
        // A restart of every running task names none; `task` is then `None` too.
        Step::RestartAlloc {
            no_shutdown_delay, ..
        } => Action::RestartAlloc {
            alloc: alloc?,
            task,
            no_shutdown_delay: *no_shutdown_delay,
        },
        Step::RestartDecision { unrecoverable, .. } => Action::RestartDecision {
            alloc: alloc?,
            task: task?,
            unrecoverable: *unrecoverable,
        },
        Step::RestartDelayElapsed { .. } => Action::RestartDelayElapsed {
            alloc: alloc?,
            task: task?,
        },
        Step::UpdateJob { .. } => Action::UpdateJob,
        Step::AllocHealthy { .. } => Action::AllocHealthy { alloc: alloc? },
        Step::AllocUnhealthy { .. } => return None,
    })
}

/// The simulator's allocations of `job` in placement order: `ids` extended with the ones
/// placed since (a removed tombstone keeps its position).
pub fn extend_ids(sim: &Simulator, job: &str, ids: &mut Vec<AllocId>) {
    let mut new: Vec<_> = sim
        .server
        .store
        .allocs_by_job(job)
        .filter(|alloc| !ids.contains(&alloc.id))
        .collect();
    new.sort_by(|a, b| (a.create_index, &a.name).cmp(&(b.create_index, &b.name)));
    ids.extend(new.into_iter().map(|alloc| alloc.id.clone()));
}
