//! The reconciler (`reference/nomad-stop-path.md` §1.6): stop every non-terminal allocation
//! of a stopped or purged job; stop and replace migrating ones; place up to `count` (a
//! batch allocation that completed counts as placed). A new version of the job rolls out:
//! an allocation whose group changed (anything but its count and update strategy) is
//! stopped through the stop path and replaced at the new version (a destructive update);
//! one whose group is unchanged moves to the new version in place; a group that is gone has
//! its allocations stopped.
//!
//! With an update strategy, the job's running deployment paces the destructive updates
//! (DESIGN.md invariant 10b, stricter than Nomad): `max_parallel` at a time, the next batch
//! only once every replacement of the deployment is healthy and every allocation it stopped
//! has finished stopping; the oldest allocations first. Nomad keeps a window of
//! `max_parallel` unhealthy replacements instead, so two batches' delays may overlap there.
//! Without a running deployment nothing is replaced; without a strategy (`max_parallel =
//! 0`, a batch job), everything at once.
//!
//! With `canary`, the deployment first places that many canaries of the new version beside
//! the group's `count` (on the indexes of allocations they would replace) and replaces
//! nothing until they are promoted; a promoted canary holds its index, so the older
//! allocation on it is stopped in its turn with no placement. Canaries of another
//! deployment, or of a failed one, are stopped (Nomad's `cancelUnneededCanaries`).

use super::store::StateStore;
use super::structs::{AllocId, Allocation, ClientStatus, Deployment, DesiredStatus};
use crate::spec::Job;
use std::collections::BTreeSet;
use std::sync::Arc;

pub const DESC_JOB_UPDATE: &str = "alloc not needed due to job update";
/// A destructive update's stop (Nomad's `allocUpdating`).
pub const DESC_UPDATING: &str = "alloc is being updated due to job update";
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
    /// The deployment placing it, if one is running for the job's version.
    pub deployment: Option<String>,
    /// One of that deployment's canaries: placed beside the group's `count` until promoted.
    pub canary: bool,
}

impl Placement {
    /// A placement of `job`'s `group` at `index` replacing nothing; the deployment is
    /// decided once the plan is (see [`reconcile`]).
    fn new(job: &Arc<Job>, group: &str, index: u64, canary: bool) -> Placement {
        Placement {
            job: Arc::clone(job),
            group: group.to_string(),
            index,
            previous: None,
            deployment: None,
            canary,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub stop: Vec<(AllocId, &'static str)>,
    pub place: Vec<Placement>,
    /// Allocations updated in place to the job's version (their group is unchanged).
    pub in_place: Vec<AllocId>,
    /// The running deployment has nothing left to roll out: it succeeded.
    pub deployment_done: Option<String>,
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
    let deployment = store
        .latest_deployment(job_id)
        .filter(|d| d.is_active() && d.job_version == job.version);
    // A paused deployment places what is missing but replaces nothing, and is not done.
    let mut rolled_out = deployment.is_some_and(|d| d.is_running());
    // A batch allocation that completed is done, not missing: it is not placed again.
    let completed: BTreeSet<(String, u64)> = if job.job_type == "batch" {
        store
            .allocs_by_job(job_id)
            .filter(|a| {
                a.desired_status == DesiredStatus::Run && a.client_status == ClientStatus::Complete
            })
            .map(|a| (a.task_group.to_string(), index_of(&a.name)))
            .collect()
    } else {
        BTreeSet::new()
    };
    for alloc in &live {
        if !job.task_groups.iter().any(|g| g.name == alloc.task_group) {
            plan.stop.push((alloc.id.clone(), DESC_JOB_UPDATE));
        }
    }
    let mut rollouts = Vec::new();
    for group in &job.task_groups {
        let count = count_of(group.count);
        // This deployment's canaries wait for a promotion: they stand beside the group's
        // `count`, and nothing older is replaced meanwhile.
        let canarying = deployment
            .and_then(|d| d.task_groups.get(&group.name))
            .is_some_and(|state| state.desired_canaries > 0 && !state.promoted);
        let in_group: Vec<_> = live.iter().filter(|a| a.task_group == group.name).collect();
        // A system job's canaries take the place of the allocations they update (Nomad's
        // system scheduler): their indexes are held, one no longer waited for is an
        // allocation like any other, and until the promotion a free index is a canary's
        // (one whose placement failed, or that migrated, leaves nothing older behind).
        let in_place = job
            .update_of(&group.name)
            .is_some_and(|update| update.canary_in_place);
        // Nothing to replace and no canary of its own waiting: no canary is needed (Nomad
        // wants canaries only for destructive updates).
        let canarying = canarying
            && (in_place
                || in_group.iter().any(|alloc| {
                    (is_canary(alloc) && deployment.is_some_and(|d| d.id == alloc.deployment_id))
                        || (alloc.job_version != job.version
                            && alloc.job.as_run(&group.name) != job.as_run(&group.name))
                }));
        let mut canaries = BTreeSet::new();
        let mut migrated = Vec::new();
        // Indexes an older allocation's replacement at the stable version holds.
        let mut held = Vec::new();
        let mut others = Vec::new();
        for alloc in in_group {
            if !is_canary(alloc) {
                others.push(alloc);
                continue;
            }
            let waiting = canarying && deployment.is_some_and(|d| d.id == alloc.deployment_id);
            if !waiting && in_place {
                others.push(alloc);
            } else if !waiting {
                // Another deployment's, or a failed one's (Nomad's `cancelUnneededCanaries`).
                plan.stop.push((alloc.id.clone(), DESC_JOB_UPDATE));
            } else if alloc.desired_transition.should_migrate() {
                // Stopped; a new canary takes its place below, under its name.
                plan.stop.push((alloc.id.clone(), DESC_MIGRATING));
                migrated.push(index_of(&alloc.name));
            } else {
                canaries.insert(index_of(&alloc.name));
            }
        }
        // The job's version first, so that a promoted canary keeps its index and the older
        // allocation beside it is the one replaced.
        others.sort_by_key(|alloc| alloc.job_version != job.version);
        // Older allocations to replace, and whether each needs a new one placed.
        let mut replaced = Vec::new();
        let mut kept = Indexes::for_count(count);
        for (_, index) in completed.iter().filter(|(g, _)| g == &group.name) {
            kept.insert(*index);
        }
        if in_place {
            for &index in &canaries {
                kept.insert(index);
            }
        }
        for alloc in others {
            let index = index_of(&alloc.name);
            let destructive = alloc.job_version != job.version
                && alloc.job.as_run(&group.name) != job.as_run(&group.name);
            if alloc.desired_transition.should_migrate() {
                plan.stop.push((alloc.id.clone(), DESC_MIGRATING));
                // Its index held already (a promoted canary stands for it): it is not
                // replaced (Nomad's `computeStop` stops it as not needed). Else its
                // replacement belongs to the deployment, which is not done until it is
                // healthy (Nomad's `isDeploymentComplete`: nothing left to migrate).
                if canarying && in_place && alloc.job_version != job.version {
                    // A system job's: a canary takes its place below.
                    rolled_out = false;
                } else if kept.insert(index) {
                    rolled_out = false;
                    // A replacement in the same plan, never carrying the flag; while
                    // canaries wait, at the stable version (Nomad's `downgradeNonCanary`).
                    let version = if canarying && alloc.job_version != job.version {
                        held.push(index);
                        stable_version(store, &shared, &group.name, alloc.job_version)
                    } else {
                        Arc::clone(&shared)
                    };
                    plan.place.push(Placement {
                        job: version,
                        group: group.name.clone(),
                        index,
                        previous: Some(alloc.id.clone()),
                        deployment: None,
                        canary: false,
                    });
                }
            } else if index >= count {
                plan.stop.push((alloc.id.clone(), DESC_NOT_NEEDED));
            } else if !kept.insert(index) {
                // A promoted canary holds its index: it is this one's replacement already.
                if destructive {
                    replaced.push((alloc, false));
                } else {
                    plan.stop.push((alloc.id.clone(), DESC_NOT_NEEDED));
                }
            } else if destructive {
                replaced.push((alloc, true));
            } else if alloc.job_version != job.version {
                plan.in_place.push(alloc.id.clone());
            }
        }
        // An index with no allocation (a replacement that could not be placed): the batch
        // before is not done, so nothing more is stopped until it is placed and healthy.
        let unplaced = (0..count).any(|index| !kept.contains(index));
        let room = if canarying
            || (unplaced && deployment.is_some() && job.update_of(&group.name).is_some())
        {
            0
        } else {
            rollout_room(store, job, &group.name, deployment)
        };
        // One a promoted canary replaces already first (it needs no placement), then one
        // its client has not started (it serves nothing), then the oldest.
        replaced.sort_by_key(|(alloc, place)| {
            let started = alloc.client_status != ClientStatus::Pending;
            (*place, started, alloc.create_index, index_of(&alloc.name))
        });
        if !replaced.is_empty() || room == 0 {
            rolled_out = false;
        }
        for (alloc, place) in replaced.iter().take(room) {
            plan.stop.push((alloc.id.clone(), DESC_UPDATING));
            if *place {
                rollouts.push((group.name.clone(), index_of(&alloc.name), alloc.id.clone()));
            }
        }
        // The canaries still missing, while the deployment runs (not paused), on the
        // indexes of the allocations they would replace first (Nomad's `NextCanaries`).
        let wanted = deployment
            .filter(|d| canarying && d.is_running())
            .and_then(|d| d.task_groups.get(&group.name))
            .map_or(0, |state| state.desired_canaries);
        let missing = usize::try_from(wanted)
            .unwrap_or(usize::MAX)
            .saturating_sub(canaries.len());
        // A system job's, paused or not: what is missing is a canary.
        let missing_in_place = deployment
            .filter(|_| canarying && in_place)
            .and_then(|d| d.task_groups.get(&group.name))
            .map_or(0, |state| {
                usize::try_from(state.desired_canaries)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(canaries.len())
            });
        if missing_in_place > 0 {
            let missing = missing_in_place;
            let room = rollout_room(store, job, &group.name, deployment);
            let mut placed = Vec::new();
            // Each in the place of an older allocation, stopped for it as a rollout stops
            // one, once the last batch is done (DESIGN.md 10b): the deployment's first batch.
            for (alloc, _) in replaced.iter().take(missing).filter(|_| room > 0) {
                plan.stop.push((alloc.id.clone(), DESC_UPDATING));
                placed.push((index_of(&alloc.name), Some(alloc.id.clone())));
            }
            // Nothing older left to stand for: on the index a canary that migrated left, or
            // that a canary whose placement failed never took.
            if replaced.is_empty() {
                let free = (0..count).filter(|&index| !kept.contains(index));
                placed.extend(free.take(missing).map(|index| (index, None)));
            }
            for (index, previous) in placed {
                kept.insert(index);
                plan.place.push(Placement {
                    previous,
                    ..Placement::new(&shared, &group.name, index, true)
                });
            }
        }
        // While canaries wait, what is placed beside them (for an older allocation that
        // failed) takes the stable version too.
        let free: Vec<u64> = (0..count).filter(|&index| !kept.contains(index)).collect();
        let version = if canarying && !in_place && !free.is_empty() {
            stable_version(store, &shared, &group.name, 0)
        } else {
            Arc::clone(&shared)
        };
        for index in free {
            plan.place
                .push(Placement::new(&version, &group.name, index, false));
        }
        if missing > 0 && !in_place && !replaced.is_empty() {
            let mut older: Vec<u64> = replaced.iter().map(|(a, _)| index_of(&a.name)).collect();
            older.sort_unstable();
            // A migrating canary's replacement keeps its name (Nomad's `computeMigrations`)
            // while an older allocation on it (or its replacement at the stable version) is
            // there to stand beside (the model's `beside_canary`); then the indexes of the older ones, lowest first; more
            // canaries than `count` on the indexes past it (Nomad's).
            let mut indexes: Vec<u64> = migrated
                .into_iter()
                .filter(|index| older.contains(index) || held.contains(index))
                .collect();
            indexes.extend(older);
            indexes.extend(0..count.saturating_add(wanted));
            let free = indexes.into_iter().filter(|index| canaries.insert(*index));
            for index in free.take(missing) {
                plan.place
                    .push(Placement::new(&shared, &group.name, index, true));
            }
        }
    }
    // Nothing replaced, nothing left to replace, every replacement healthy and every stop
    // done: the deployment succeeded (decided before this plan's placements, which then
    // belong to no deployment).
    let running = deployment.filter(|_| !rolled_out).map(|d| d.id.clone());
    if rolled_out {
        plan.deployment_done = deployment.map(|d| d.id.clone());
    }
    for (group, index, previous) in rollouts {
        plan.place.push(Placement {
            previous: Some(previous),
            ..Placement::new(&shared, &group, index, false)
        });
    }
    for placement in &mut plan.place {
        placement.deployment = running.clone();
    }
    plan
}

/// The version an allocation placed beside waiting canaries takes (Nomad's
/// `downgradedJobForPlacement`): that of the job's newest deployment whose `group` was
/// promoted or placed without canaries; failing one, version `at_least` if it has no update
/// strategy. Either only if not older than `at_least`, still stored and with the group (a
/// version without it could not be placed); else `job` itself.
fn stable_version(store: &StateStore, job: &Arc<Job>, group: &str, at_least: u64) -> Arc<Job> {
    let versions = store.job_versions(&job.id).unwrap_or_default();
    let stored = |version: u64| versions.iter().find(|v| v.version == version);
    let deployed = store
        .deployments_of_job(&job.id)
        .filter(|d| {
            d.task_groups
                .get(group)
                .is_some_and(|state| state.promoted || state.desired_canaries == 0)
        })
        .max_by_key(|d| (d.job_version, d.create_index))
        .map(|d| d.job_version);
    let stable = match deployed {
        Some(version) => stored(version),
        None => stored(at_least).filter(|v| v.update_of(group).is_none()),
    };
    let has_group = |v: &Job| v.task_groups.iter().any(|g| g.name == group);
    match stable {
        Some(stable)
            if stable.version >= at_least && stable.version < job.version && has_group(stable) =>
        {
            Arc::new(stable.clone())
        }
        _ => Arc::clone(job),
    }
}

// invariant: rollout_bounded
/// How many of `group`'s allocations of an older version this evaluation may replace:
/// every one without an update strategy; none without a running deployment (a paused one
/// included); else
/// `max_parallel` once the last batch is done — every replacement healthy (of this
/// deployment or an earlier one), every allocation a rollout stopped client-terminal — and
/// none before.
fn rollout_room(
    store: &StateStore,
    job: &Job,
    group: &str,
    deployment: Option<&Deployment>,
) -> usize {
    let Some(update) = job.update_of(group) else {
        return usize::MAX;
    };
    if !deployment.is_some_and(Deployment::is_running) {
        return 0;
    }
    // One allocation of the group that a rollout stopped and that has not ended, or any
    // deployment's replacement whose health is not yet decided, and there is no room: one
    // pass over the group (an evaluation of a large group reads every allocation). A
    // replacement placed by a deployment that a newer version cancelled still serves nothing
    // until it is healthy (the model's `watched`). One decided unhealthy, or placed by a
    // deployment that failed (the model's `abandoned`), holds nothing: a fix rolled out
    // after a failure replaces it.
    let busy = store
        .allocs_by_job(&job.id)
        .filter(|a| a.task_group == group)
        .any(|alloc| {
            let stopping =
                alloc.desired_description == DESC_UPDATING && !alloc.client_status.is_terminal();
            let undecided = || {
                alloc
                    .deployment_status
                    .as_ref()
                    .is_none_or(|status| status.healthy.is_none())
            };
            // Looked up last, for the few allocations that get this far.
            let failed = || {
                store
                    .deployment(&alloc.deployment_id)
                    .is_some_and(|d| d.status == crate::server::structs::deployment_status::FAILED)
            };
            stopping
                || (!alloc.is_terminal()
                    && !alloc.deployment_id.is_empty()
                    && undecided()
                    && !failed())
        });
    if busy {
        0
    } else {
        usize::try_from(update.max_parallel).unwrap_or(usize::MAX)
    }
}

/// The indexes (`job.group[index]`) of a group an evaluation has accounted for: a bitmap
/// below the group's count (an evaluation marks each of them and looks each up again, two
/// or three times; in a `BTreeSet` that was a fifth of placing a large job), a set for any
/// past it.
struct Indexes {
    below: Vec<bool>,
    past: BTreeSet<u64>,
}

impl Indexes {
    /// Bitmap room for `count` indexes, at most a job's allocations (the counts of a job's
    /// groups together are validated against that; past it, the set serves).
    fn for_count(count: u64) -> Indexes {
        let room = count.min(crate::spec::MAX_ALLOCS_PER_JOB.unsigned_abs());
        Indexes {
            below: vec![false; usize::try_from(room).unwrap_or(0)],
            past: BTreeSet::new(),
        }
    }

    /// Marks `index`; false if it was marked already.
    fn insert(&mut self, index: u64) -> bool {
        match self.slot(index) {
            Some(slot) => !std::mem::replace(&mut self.below[slot], true),
            None => self.past.insert(index),
        }
    }

    fn contains(&self, index: u64) -> bool {
        match self.slot(index) {
            Some(slot) => self.below[slot],
            None => self.past.contains(&index),
        }
    }

    fn slot(&self, index: u64) -> Option<usize> {
        usize::try_from(index)
            .ok()
            .filter(|&slot| slot < self.below.len())
    }
}

/// A canary not yet promoted (Nomad clears the mark at the promotion).
pub(super) fn is_canary(alloc: &Allocation) -> bool {
    alloc
        .deployment_status
        .as_ref()
        .is_some_and(|status| status.canary)
}

/// The index in an allocation's name, `job.group[index]`: what follows the last `[`, its
/// trailing `]`s dropped, as `u64` reads it; 0 if that is no number. Read byte by byte
/// (`[` and `]` are ASCII): an evaluation reads every allocation's, and `str`'s pattern
/// searches cost more than the parse.
fn index_of(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let Some(open) = bytes.iter().rposition(|&byte| byte == b'[') else {
        return 0;
    };
    let mut end = bytes.len();
    while end > open + 1 && bytes[end - 1] == b']' {
        end -= 1;
    }
    name[open + 1..end].parse().unwrap_or(0)
}

fn count_of(count: Option<i64>) -> u64 {
    count.map_or(1, |count| count.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_read_from_a_name_as_it_always_was() {
        let before = |name: &str| -> u64 {
            name.rsplit_once('[')
                .and_then(|(_, rest)| rest.trim_end_matches(']').parse().ok())
                .unwrap_or(0)
        };
        for name in [
            "web.web[0]",
            "web.web[9999]",
            "a[b[3]",
            "a[3]]]",
            "a[3",
            "a[]",
            "a[",
            "a]",
            "a",
            "",
            "[7]",
            "a[+5]",
            "a[-5]",
            "a[18446744073709551615]",
            "a[18446744073709551616]",
            "a[1]x",
            "é[2]",
            "a[٣]",
        ] {
            assert_eq!(index_of(name), before(name), "{name:?}");
        }
    }

    #[test]
    fn indexes_are_marked_once_below_the_count_and_past_it() {
        let mut kept = Indexes::for_count(3);
        assert!(!kept.contains(0) && !kept.contains(7));
        assert!(kept.insert(2));
        assert!(!kept.insert(2), "marked already");
        assert!(kept.insert(7), "past the count: the set");
        assert!(!kept.insert(7));
        assert!(kept.contains(2) && kept.contains(7));
        assert!(!kept.contains(1) && !kept.contains(u64::MAX));
        assert!(kept.insert(u64::MAX) && kept.contains(u64::MAX));
        // A count past a job's limit gets a bitmap of the limit, and the set beyond.
        let mut huge = Indexes::for_count(u64::MAX);
        assert_eq!(huge.below.len(), 10_000);
        assert!(huge.insert(9_999) && huge.insert(10_000) && huge.insert(1 << 40));
        assert!(huge.contains(9_999) && huge.contains(10_000) && huge.contains(1 << 40));
        assert!(!huge.contains(10_001));
        assert!(Indexes::for_count(0).insert(0));
    }
}
