//! `job plan`: what registering a job would do, computed on a copy of the server and
//! thrown away — Nomad's `DesiredTGUpdates` per group.

use super::scheduler::{self, DESC_UPDATING};
use super::*;

/// What a registration would do to one group's allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DesiredUpdates {
    pub ignore: u64,
    pub place: u64,
    pub migrate: u64,
    pub stop: u64,
    pub in_place_update: u64,
    pub destructive_update: u64,
    pub canary: u64,
    pub preemptions: u64,
}

/// A dry run's answer: the job as it would be stored (canonical, validated), the job modify
/// index it would be registered over, and each group's updates.
#[derive(Clone, Debug)]
pub struct PlanOutcome {
    pub job: Job,
    pub job_modify_index: u64,
    pub updates: BTreeMap<String, DesiredUpdates>,
    /// The allocations of each group the scheduler could not place (no ready node meets
    /// the job's constraints, or has its ports free).
    pub failed: BTreeMap<String, u64>,
    /// The evaluations the scheduler would make (a blocked one for what it could not place).
    pub created: Vec<Evaluation>,
}

impl Server {
    /// A server holding only what a plan of `job_id` reads: the job's versions and
    /// allocations, the nodes, and the other jobs' allocations whose tasks may still run
    /// (their load and ports) — not the whole store, which a plan must not copy under the
    /// core's lock.
    fn sandbox(&self, job_id: &str) -> Server {
        let store = &self.store;
        let mut jobs = BTreeMap::new();
        if let Some(versions) = store.job_versions(job_id) {
            jobs.insert(job_id.into(), versions.to_vec());
        }
        let mut allocs: Vec<Allocation> = store.allocs_by_job(job_id).cloned().collect();
        for node in &self.nodes {
            allocs.extend(
                store
                    .allocs_for_node(node)
                    .filter(|a| a.job_id != job_id && !a.client_status.is_terminal())
                    .cloned(),
            );
        }
        let tables = store::Tables {
            jobs,
            allocs,
            evals: Vec::new(),
            services: Vec::new(),
            nodes: store.nodes().cloned().collect(),
            deployments: store.deployments_of_job(job_id).cloned().collect(),
            // A plan records no scaling event.
            scaling_events: Vec::new(),
        };
        let copy = StateStore::restore(store.index(), tables, store.table_indexes());
        Server::restore(copy, self.nodes.clone(), 0)
    }

    /// What registering `job` would do, on a copy of this server: nothing here changes.
    pub fn plan_job(&self, job: Job) -> Result<PlanOutcome, ServerError> {
        let job_modify_index = self.store.job(&job.id).map_or(0, |j| j.job_modify_index);
        let mut sandbox = self.sandbox(&job.id);
        let registered = sandbox.register_job(job.clone())?;
        let stored = sandbox
            .store
            .job(&job.id)
            .cloned()
            .expect("just registered");
        let plan = scheduler::reconcile(&sandbox.store, &job.id);
        let mut updates: BTreeMap<String, DesiredUpdates> = stored
            .task_groups
            .iter()
            .map(|g| (g.name.clone(), DesiredUpdates::default()))
            .collect();
        let group_of = |id: &str| {
            sandbox
                .store
                .alloc_for_client(id)
                .map(|a| a.task_group.to_string())
        };
        let replaced: std::collections::BTreeSet<&AllocId> = plan
            .place
            .iter()
            .filter_map(|p| p.previous.as_ref())
            .collect();
        let mut touched = std::collections::BTreeSet::new();
        for (id, description) in &plan.stop {
            touched.insert(id.clone());
            let Some(group) = group_of(id) else { continue };
            let entry = updates.entry(group).or_default();
            if replaced.contains(id) && *description == DESC_UPDATING {
                entry.destructive_update += 1;
            } else if replaced.contains(id) {
                entry.migrate += 1;
            } else {
                entry.stop += 1;
            }
        }
        for placement in plan.place.iter().filter(|p| p.previous.is_none()) {
            let entry = updates.entry(placement.group.clone()).or_default();
            if placement.canary {
                entry.canary += 1;
            } else {
                entry.place += 1;
            }
        }
        for id in &plan.in_place {
            touched.insert(id.clone());
            if let Some(group) = group_of(id) {
                updates.entry(group).or_default().in_place_update += 1;
            }
        }
        for alloc in sandbox.store.allocs_by_job(&job.id) {
            if !alloc.is_terminal() && !alloc.tombstone && !touched.contains(&alloc.id) {
                updates
                    .entry(alloc.task_group.to_string())
                    .or_default()
                    .ignore += 1;
            }
        }
        // The evaluation, processed in the copy: what it could not place.
        while sandbox.process_next_eval()?.is_some() {}
        let failed = sandbox
            .store
            .eval(&registered.eval_id)
            .map(|eval| eval.queued_allocations.clone())
            .unwrap_or_default();
        let created = sandbox
            .store
            .evals()
            .filter(|e| e.id != registered.eval_id && e.job_id == job.id)
            .cloned()
            .collect();
        Ok(PlanOutcome {
            job: stored,
            job_modify_index,
            updates,
            failed,
            created,
        })
    }
}
