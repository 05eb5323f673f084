//! The deployments table: each job's rollouts, oldest first, and the writes to them.

use super::{Record, StateStore};
use crate::server::events::Snapshot;
use crate::server::structs::Deployment;
use std::sync::Arc;

impl StateStore {
    pub fn deployment(&self, id: &str) -> Option<&Deployment> {
        self.deployments.get(id)
    }

    /// Every deployment, by ID.
    pub fn deployments(&self) -> impl Iterator<Item = &Deployment> {
        self.deployments.values()
    }

    /// A job's deployments, in the order stored (a restore's order is its table's).
    pub fn deployments_of_job<'a>(&'a self, job_id: &str) -> impl Iterator<Item = &'a Deployment> {
        self.deployments_by_job
            .get(job_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.deployments.get(id))
    }

    /// The job's newest deployment (Nomad's `LatestDeploymentByJobID`): the one created
    /// last, whatever order a restore read them in.
    pub fn latest_deployment(&self, job_id: &str) -> Option<&Deployment> {
        self.deployments_of_job(job_id)
            .max_by_key(|d| (d.create_index, d.id.as_str()))
    }

    /// Stores a deployment as it is (its indexes set by the caller's write).
    pub(in crate::server) fn put_deployment(&mut self, mut deployment: Deployment) {
        self.wrote(Record::Deployment(deployment.id.clone()));
        if let Some(now) = self.now {
            if deployment.create_time == 0 {
                deployment.create_time = now;
            }
            deployment.modify_time = now;
        }
        let ids = Arc::make_mut(&mut self.deployments_by_job)
            .entry(deployment.job_id.clone())
            .or_default();
        if !ids.contains(&deployment.id) {
            ids.push(deployment.id.clone());
        }
        Arc::make_mut(&mut self.deployments).insert(deployment.id.clone(), deployment);
    }

    /// Changes one deployment at `index`; `false` if there is none.
    pub(in crate::server) fn update_deployment(
        &mut self,
        id: &str,
        index: u64,
        change: impl FnOnce(&mut Deployment),
    ) -> bool {
        let Some(mut deployment) = self.deployments.get(id).cloned() else {
            return false;
        };
        change(&mut deployment);
        deployment.modify_index = index;
        self.put_deployment(deployment);
        true
    }

    /// Deletes every deployment of a job (a purge, a collected job); each one's last state
    /// is published.
    pub(in crate::server) fn delete_deployments_of_job(&mut self, job_id: &str) {
        if !self.deployments_by_job.contains_key(job_id) {
            return;
        }
        let ids = Arc::make_mut(&mut self.deployments_by_job).remove(job_id);
        for id in ids.unwrap_or_default() {
            self.deleting(
                || Record::Deployment(id.clone()),
                |store| {
                    let deployment = store.deployments.get(&id)?;
                    Some(Snapshot::Deployment(Box::new(deployment.clone())))
                },
            );
            self.wrote(Record::Deployment(id.clone()));
            Arc::make_mut(&mut self.deployments).remove(&id);
        }
    }
}
