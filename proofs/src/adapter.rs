//! Mapping between the implementation's terms and the model's.

use quiesce::spec::{Job, TaskRole};
use quiesce_model::config::{GroupCfg, TaskCfg, TaskKind, MAX_TASKS};

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
        })
        .collect();
    Ok(GroupCfg {
        name: spec.name.clone(),
        shutdown_delay: spec.shutdown_delay_ns.is_some_and(|delay| delay > 0),
        service: has_services(&spec.services),
        tasks,
    })
}
