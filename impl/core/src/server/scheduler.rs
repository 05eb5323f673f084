//! The reconciler (`reference/nomad-stop-path.md` §1.6): stop every non-terminal allocation
//! of a stopped or purged job; stop and replace migrating ones; place up to `count` (a
//! batch allocation that completed counts as placed). A new version of the job rolls out:
//! an allocation whose group changed (anything but its count) is stopped through the stop
//! path and replaced at the new version (a destructive update, all at once: no `update`
//! strategy); one whose group is unchanged moves to the new version in place; a group that
//! is gone has its allocations stopped.

use super::store::StateStore;
use super::structs::{AllocId, ClientStatus, DesiredStatus};
use crate::spec::Job;
use std::collections::BTreeSet;
use std::sync::Arc;

pub const DESC_JOB_UPDATE: &str = "alloc not needed due to job update";
pub const DESC_MIGRATING: &str = "alloc is being migrated";
pub const DESC_NOT_NEEDED: &str = "alloc not needed as task group was scaled down";

/// One allocation to place.
#[derive(Clone, Debug)]
pub struct Placement {
    pub job: Arc<Job>,
    pub group: String,
    /// The index in its name, `job.group[index]`.
    pub index: u64,
    /// The allocation it replaces.
    pub previous: Option<AllocId>,
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub stop: Vec<(AllocId, &'static str)>,
    pub place: Vec<Placement>,
    /// Allocations updated in place to the job's version (their group is unchanged).
    pub in_place: Vec<AllocId>,
}

/// What the scheduler would do for `job_id` given the store as it is.
pub fn reconcile(store: &StateStore, job_id: &str) -> Plan {
    let mut plan = Plan::default();
    let live: Vec<_> = store
        .allocs_by_job(job_id)
        .filter(|a| !a.is_terminal())
        .collect();
    let job = match store.job(job_id) {
        Some(job) if !job.stop => job,
        // Stopped or purged: stop everything still running; the flag stays on each.
        _ => {
            plan.stop = live
                .iter()
                .map(|a| (a.id.clone(), DESC_JOB_UPDATE))
                .collect();
            return plan;
        }
    };
    let shared = Arc::new(job.clone());
    // A batch allocation that completed is done, not missing: it is not placed again.
    let completed: BTreeSet<(String, u64)> = if job.job_type == "batch" {
        store
            .allocs_by_job(job_id)
            .filter(|a| {
                a.desired_status == DesiredStatus::Run && a.client_status == ClientStatus::Complete
            })
            .map(|a| (a.task_group.clone(), index_of(&a.name)))
            .collect()
    } else {
        BTreeSet::new()
    };
    for alloc in &live {
        if !job.task_groups.iter().any(|g| g.name == alloc.task_group) {
            plan.stop.push((alloc.id.clone(), DESC_JOB_UPDATE));
        }
    }
    for group in &job.task_groups {
        let in_group: Vec<_> = live.iter().filter(|a| a.task_group == group.name).collect();
        let mut kept: BTreeSet<u64> = completed
            .iter()
            .filter(|(g, _)| g == &group.name)
            .map(|(_, index)| *index)
            .collect();
        for alloc in &in_group {
            let index = index_of(&alloc.name);
            if alloc.desired_transition.should_migrate() {
                plan.stop.push((alloc.id.clone(), DESC_MIGRATING));
                // A replacement in the same plan, never carrying the flag.
                plan.place.push(Placement {
                    job: Arc::clone(&shared),
                    group: group.name.clone(),
                    index,
                    previous: Some(alloc.id.clone()),
                });
                kept.insert(index);
            } else if !kept.insert(index) || index >= count_of(group.count) {
                plan.stop.push((alloc.id.clone(), DESC_NOT_NEEDED));
            } else if alloc.job_version != job.version
                && alloc.job.as_run(&group.name) != job.as_run(&group.name)
            {
                plan.stop.push((alloc.id.clone(), DESC_JOB_UPDATE));
                plan.place.push(Placement {
                    job: Arc::clone(&shared),
                    group: group.name.clone(),
                    index,
                    previous: Some(alloc.id.clone()),
                });
            } else if alloc.job_version != job.version {
                plan.in_place.push(alloc.id.clone());
            }
        }
        for index in (0..count_of(group.count)).filter(|index| !kept.contains(index)) {
            plan.place.push(Placement {
                job: Arc::clone(&shared),
                group: group.name.clone(),
                index,
                previous: None,
            });
        }
    }
    plan
}

/// The index in an allocation's name, `job.group[index]`.
fn index_of(name: &str) -> u64 {
    name.rsplit_once('[')
        .and_then(|(_, rest)| rest.trim_end_matches(']').parse().ok())
        .unwrap_or(0)
}

fn count_of(count: Option<i64>) -> u64 {
    count.map_or(1, |count| count.max(0) as u64)
}
