//! Nomad's checks of an `update` block (`structs.UpdateStrategy.Validate`), on the job's and
//! each group's, and on the strategy each group ends up with.

use super::{Job, UpdateStrategy};

/// The longest a rollout's time or deadline may be: a day.
const MAX_UPDATE_DURATION_NS: i64 = 24 * 3600 * 1_000_000_000;

pub(super) fn check(job: &Job, fail: &mut dyn FnMut(String, String)) {
    // Only service and system jobs roll out (Nomad's `TaskGroup.Validate`, which sees the
    // job's block merged into each group's when it is not empty, and any group's own).
    if !matches!(job.job_type.as_str(), "service" | "system") {
        let job_level = job.update.as_ref().filter(|update| !update.is_empty());
        let blocks = std::iter::once(("Update".to_string(), job_level)).chain(
            job.task_groups
                .iter()
                .enumerate()
                .map(|(g, group)| (format!("TaskGroups[{g}].Update"), group.update.as_ref())),
        );
        for (at, _) in blocks.filter(|(_, update)| update.is_some()) {
            fail(
                at,
                format!("Job type {:?} does not allow update block", job.job_type),
            );
        }
        return;
    }
    if let Some(update) = &job.update {
        fields(fail, "Update", update);
    }
    let mut said_of_job = std::collections::BTreeSet::new();
    for (g, group) in job.task_groups.iter().enumerate() {
        let at = format!("TaskGroups[{g}].Update");
        if let Some(update) = &group.update {
            fields(fail, &at, update);
        }
        let Some(effective) =
            UpdateStrategy::effective(&job.job_type, job.update.as_ref(), group.update.as_ref())
        else {
            continue;
        };
        // Named where the offending value was written: the group's block if it sets
        // either field, else the job's (said once, not for each group).
        let sets = |u: Option<&UpdateStrategy>, f: fn(&UpdateStrategy) -> bool| u.is_some_and(f);
        let group_sets = |f: fn(&UpdateStrategy) -> bool| sets(group.update.as_ref(), f);
        let mut place = |field: &str, group_owns: bool| -> Option<String> {
            if group_owns {
                Some(format!("{at}.{field}"))
            } else {
                let name = format!("Update.{field}");
                said_of_job.insert(name.clone()).then_some(name)
            }
        };
        if effective.auto_promote && effective.canary == 0 {
            let owns = group_sets(|u| u.auto_promote.is_some());
            if let Some(name) = place("AutoPromote", owns) {
                fail(
                    name,
                    "Auto Promote requires a Canary count greater than zero".into(),
                );
            }
        }
        if effective.min_healthy_time_ns >= effective.healthy_deadline_ns {
            let owns = group_sets(|u| u.min_healthy_time_ns.is_some())
                || group_sets(|u| u.healthy_deadline_ns.is_some());
            if let Some(name) = place("MinHealthyTime", owns) {
                fail(
                    name,
                    format!(
                        "Minimum healthy time must be less than healthy deadline: {} > {}",
                        crate::gotime::go_duration(effective.min_healthy_time_ns),
                        crate::gotime::go_duration(effective.healthy_deadline_ns)
                    ),
                );
            }
        }
        if effective.progress_deadline_ns != 0
            && effective.healthy_deadline_ns >= effective.progress_deadline_ns
        {
            let owns = group_sets(|u| u.healthy_deadline_ns.is_some())
                || group_sets(|u| u.progress_deadline_ns.is_some());
            if let Some(name) = place("HealthyDeadline", owns) {
                fail(
                    name,
                    format!(
                        "Healthy deadline must be less than progress deadline: {} > {}",
                        crate::gotime::go_duration(effective.healthy_deadline_ns),
                        crate::gotime::go_duration(effective.progress_deadline_ns)
                    ),
                );
            }
        }
    }
}

fn fields(fail: &mut dyn FnMut(String, String), at: &str, update: &UpdateStrategy) {
    if let Some(max_parallel) = update.max_parallel {
        if !(0..=1000).contains(&max_parallel) {
            fail(
                format!("{at}.MaxParallel"),
                format!("must be between 0 and 1000 (got {max_parallel})"),
            );
        }
    }
    if let Some(canary) = update.canary.filter(|canary| !(0..=1000).contains(canary)) {
        fail(
            format!("{at}.Canary"),
            format!("must be between 0 and 1000 (got {canary})"),
        );
    }
    match update.health_check.as_deref() {
        None | Some("" | "checks" | "task_states") => {}
        Some("manual") => fail(
            format!("{at}.HealthCheck"),
            "\"manual\" is not supported by this agent (it has no allocation-health \
             endpoint); use \"task_states\""
                .into(),
        ),
        Some(other) => fail(
            format!("{at}.HealthCheck"),
            format!("Invalid health check given: {other:?} (valid: checks, task_states, manual)"),
        ),
    }
    for (field, value) in [
        ("Stagger", update.stagger_ns),
        ("MinHealthyTime", update.min_healthy_time_ns),
        ("HealthyDeadline", update.healthy_deadline_ns),
        ("ProgressDeadline", update.progress_deadline_ns),
    ] {
        match value {
            Some(ns) if ns < 0 => fail(
                format!("{at}.{field}"),
                format!("must not be negative (got {ns} ns)"),
            ),
            Some(ns) if ns > MAX_UPDATE_DURATION_NS => fail(
                format!("{at}.{field}"),
                format!("at most a day, {MAX_UPDATE_DURATION_NS} ns (got {ns} ns)"),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TaskGroup;

    fn problems(job: &Job) -> Vec<String> {
        let mut found = Vec::new();
        check(job, &mut |field, why| found.push(format!("{field}: {why}")));
        found
    }

    #[test]
    fn a_group_inherits_the_jobs_update_and_overrides_it_field_by_field() {
        let job = Job {
            job_type: "service".into(),
            update: Some(UpdateStrategy {
                max_parallel: Some(3),
                min_healthy_time_ns: Some(1_000_000_000),
                ..UpdateStrategy::default()
            }),
            task_groups: vec![TaskGroup {
                name: "web".into(),
                update: Some(UpdateStrategy {
                    max_parallel: Some(2),
                    ..UpdateStrategy::default()
                }),
                ..TaskGroup::default()
            }],
            ..Job::default()
        };
        let effective = job.update_of("web").expect("a service job rolls out");
        assert_eq!(effective.max_parallel, 2);
        assert_eq!(effective.min_healthy_time_ns, 1_000_000_000);
        assert_eq!(
            effective.healthy_deadline_ns,
            UpdateStrategy::DEFAULT_HEALTHY_DEADLINE_NS
        );
        assert!(problems(&job).is_empty());
    }

    #[test]
    fn a_service_job_without_an_update_block_rolls_out_one_at_a_time_as_in_nomad() {
        let job = Job {
            job_type: "service".into(),
            task_groups: vec![TaskGroup {
                name: "web".into(),
                ..TaskGroup::default()
            }],
            ..Job::default()
        };
        let effective = job.update_of("web").expect("Nomad's default strategy");
        assert_eq!(effective.max_parallel, 1);
        assert_eq!(effective.min_healthy_time_ns, 10_000_000_000);
        let batch = Job {
            job_type: "batch".into(),
            ..job.clone()
        };
        assert_eq!(batch.update_of("web"), None, "a batch job has no rollout");
        let mut all_at_once = job;
        all_at_once.task_groups[0].update = Some(UpdateStrategy {
            max_parallel: Some(0),
            ..UpdateStrategy::default()
        });
        assert_eq!(all_at_once.update_of("web"), None, "max_parallel = 0");
    }

    #[test]
    fn bad_update_fields_are_refused_by_name() {
        let job = Job {
            job_type: "service".into(),
            task_groups: vec![TaskGroup {
                name: "web".into(),
                update: Some(UpdateStrategy {
                    max_parallel: Some(-1),
                    health_check: Some("manual".into()),
                    min_healthy_time_ns: Some(-5),
                    ..UpdateStrategy::default()
                }),
                ..TaskGroup::default()
            }],
            ..Job::default()
        };
        let found = problems(&job);
        assert!(found
            .iter()
            .any(|p| p.starts_with("TaskGroups[0].Update.MaxParallel: must be between")));
        assert!(found.iter().any(
            |p| p.starts_with("TaskGroups[0].Update.HealthCheck: \"manual\" is not supported")
        ));
        assert!(found
            .iter()
            .any(|p| p.starts_with("TaskGroups[0].Update.MinHealthyTime: must not be negative")));
        let mut slow = job.clone();
        slow.task_groups[0].update = Some(UpdateStrategy {
            min_healthy_time_ns: Some(600_000_000_000),
            ..UpdateStrategy::default()
        });
        assert_eq!(
            problems(&slow),
            [
                "TaskGroups[0].Update.MinHealthyTime: Minimum healthy time must be less than \
              healthy deadline: 10m0s > 5m0s"
            ]
        );
    }

    #[test]
    fn a_bad_pair_set_on_the_job_is_named_once_where_it_was_written() {
        let group = |name: &str| TaskGroup {
            name: name.into(),
            ..TaskGroup::default()
        };
        let job = Job {
            job_type: "service".into(),
            update: Some(UpdateStrategy {
                healthy_deadline_ns: Some(900_000_000_000),
                ..UpdateStrategy::default()
            }),
            task_groups: vec![group("web"), group("api")],
            ..Job::default()
        };
        assert_eq!(
            problems(&job),
            ["Update.HealthyDeadline: Healthy deadline must be less than progress deadline: 15m0s > 10m0s"]
        );
        // A group that sets its own deadline owns the problem.
        let mut own = job.clone();
        own.update = None;
        own.task_groups[1].update = job.update.clone();
        assert_eq!(
            problems(&own),
            ["TaskGroups[1].Update.HealthyDeadline: Healthy deadline must be less than progress deadline: 15m0s > 10m0s"]
        );
    }
}
