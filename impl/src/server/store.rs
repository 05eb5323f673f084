//! The state store: tables for jobs (every version kept), allocations, evaluations and
//! service registrations, and one monotonically increasing index. Every server write is one
//! call that takes the next index once and changes the tables together, as Nomad's FSM
//! applies one raft entry.

use super::structs::{AllocId, Allocation, EvalId, Evaluation, JobId, NodeId, ServiceRegistration};
use crate::spec::Job;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
pub struct StateStore {
    index: u64,
    /// Every stored version of each job, oldest first. A purged job is gone.
    jobs: BTreeMap<JobId, Vec<Job>>,
    allocs: BTreeMap<AllocId, Allocation>,
    /// Allocation IDs by job, so a job's allocations are found without a scan.
    allocs_by_job: BTreeMap<JobId, BTreeSet<AllocId>>,
    evals: BTreeMap<EvalId, Evaluation>,
    services: BTreeMap<String, ServiceRegistration>,
    /// Allocations whose `AllocModifyIndex` changed since the last drain: what clients will
    /// pull. Hosts drain it to learn which pulls became possible without scanning.
    client_changes: Vec<AllocId>,
}

impl StateStore {
    /// The index of the last write.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Starts a write: the index every record it changes is stamped with.
    pub(super) fn next_index(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id).and_then(|versions| versions.last())
    }

    pub fn job_versions(&self, id: &str) -> Option<&[Job]> {
        self.jobs.get(id).map(Vec::as_slice)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter_map(|versions| versions.last())
    }

    /// An allocation as the API shows it: tombstones are not found (Nomad answers 404 once a
    /// job is purged).
    pub fn alloc(&self, id: &str) -> Option<&Allocation> {
        self.allocs.get(id).filter(|alloc| !alloc.tombstone)
    }

    /// An allocation as its client pulls it, tombstones included.
    pub fn alloc_for_client(&self, id: &str) -> Option<&Allocation> {
        self.allocs.get(id)
    }

    /// Every allocation of a job, tombstones included, in ID order.
    pub fn allocs_by_job(&self, job_id: &str) -> impl Iterator<Item = &Allocation> {
        self.allocs_by_job
            .get(job_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.allocs.get(id))
    }

    pub fn allocs(&self) -> impl Iterator<Item = &Allocation> {
        self.allocs.values().filter(|alloc| !alloc.tombstone)
    }

    /// Allocations placed on a node and not terminal: its load, for placement.
    pub fn live_allocs_on_node(&self, node: &str) -> usize {
        self.allocs
            .values()
            .filter(|a| a.node_id == node && !a.is_terminal())
            .count()
    }

    pub fn eval(&self, id: &str) -> Option<&Evaluation> {
        self.evals.get(id)
    }

    pub fn evals(&self) -> impl Iterator<Item = &Evaluation> {
        self.evals.values()
    }

    pub fn services(&self) -> impl Iterator<Item = &ServiceRegistration> {
        self.services.values()
    }

    pub fn has_service(&self, id: &str) -> bool {
        self.services.contains_key(id)
    }

    pub fn services_of_alloc<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> impl Iterator<Item = &'a ServiceRegistration> + 'a {
        self.services
            .values()
            .filter(move |service| service.alloc_id == alloc_id)
    }

    /// The allocations whose client-visible part changed since the last call.
    pub fn drain_client_changes(&mut self) -> Vec<AllocId> {
        std::mem::take(&mut self.client_changes)
    }

    // --- writes: only the server's operations call these, inside one indexed write ---

    pub(super) fn put_job_version(&mut self, job: Job) {
        self.jobs.entry(job.id.clone()).or_default().push(job);
    }

    pub(super) fn delete_job(&mut self, id: &str) {
        self.jobs.remove(id);
    }

    pub(super) fn put_alloc(&mut self, alloc: Allocation) {
        self.allocs_by_job
            .entry(alloc.job_id.clone())
            .or_default()
            .insert(alloc.id.clone());
        self.allocs.insert(alloc.id.clone(), alloc);
    }

    /// Changes one allocation at `index`. `client_visible` bumps `AllocModifyIndex` too, so
    /// its client will pull it.
    pub(super) fn update_alloc(
        &mut self,
        id: &str,
        index: u64,
        client_visible: bool,
        change: impl FnOnce(&mut Allocation),
    ) -> bool {
        let Some(alloc) = self.allocs.get_mut(id) else {
            return false;
        };
        change(alloc);
        alloc.modify_index = index;
        if client_visible {
            alloc.alloc_modify_index = index;
            self.client_changes.push(alloc.id.clone());
        }
        true
    }

    /// Deletes an allocation; journalled, since its client will no longer find it.
    pub(super) fn delete_alloc(&mut self, id: &str) {
        if let Some(alloc) = self.allocs.remove(id) {
            self.client_changes.push(alloc.id.clone());
            if let Some(ids) = self.allocs_by_job.get_mut(&alloc.job_id) {
                ids.remove(id);
            }
        }
    }

    pub(super) fn put_eval(&mut self, eval: Evaluation) {
        self.evals.insert(eval.id.clone(), eval);
    }

    pub(super) fn eval_mut(&mut self, id: &str) -> Option<&mut Evaluation> {
        self.evals.get_mut(id)
    }

    pub(super) fn put_service(&mut self, service: ServiceRegistration) {
        self.services.insert(service.id.clone(), service);
    }

    pub(super) fn delete_service(&mut self, id: &str) -> bool {
        self.services.remove(id).is_some()
    }

    /// The node an allocation runs on, for hosts that route pulls.
    pub fn node_of(&self, alloc_id: &str) -> Option<&NodeId> {
        self.allocs.get(alloc_id).map(|alloc| &alloc.node_id)
    }
}
