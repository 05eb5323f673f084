//! Deployments (`reference/nomad-stop-path.md` has none; DESIGN.md invariant 10b): a
//! registration that changes a group with an update strategy while allocations of an older
//! version run opens a deployment, which the reconciler follows (`scheduler.rs`); the
//! clients report each new allocation's health; a stop cancels it, a purge deletes it.
//!
//! Where quiesce differs from Nomad: the deployment is opened in the registration's own
//! write (Nomad's reconciler creates it when it processes the evaluation), and only by a
//! version that replaces allocations (Nomad opens one for a first registration too).

use super::structs::DeploymentState;
use super::structs::{deployment_status as status, AllocDeploymentStatus, Deployment};
use super::{Server, TRIGGER_DEPLOYMENT_WATCHER};
use crate::spec::Job;

impl Server {
    /// After a write stored `job`'s new version at `index`: an active deployment of an older
    /// version is cancelled, and a new one opens for the groups whose running allocations
    /// the version replaces.
    pub(super) fn open_deployment(&mut self, job: &Job, index: u64) {
        if let Some(active) = self
            .store
            .latest_deployment(&job.id)
            .filter(|d| d.is_active() && d.job_version != job.version)
        {
            let id = active.id.clone();
            self.store.update_deployment(&id, index, |d| {
                d.status = status::CANCELLED.into();
                d.status_description = status::DESC_NEWER_JOB.into();
            });
        }
        if job.stop {
            return;
        }
        let mut groups = std::collections::BTreeMap::new();
        for group in &job.task_groups {
            let Some(update) = job.update_of(&group.name) else {
                continue;
            };
            let replaced = self.store.allocs_by_job(&job.id).any(|alloc| {
                !alloc.is_terminal()
                    && alloc.task_group == group.name
                    && alloc.job.as_run(&group.name) != job.as_run(&group.name)
            });
            if replaced {
                groups.insert(
                    group.name.clone(),
                    DeploymentState {
                        auto_revert: update.auto_revert,
                        progress_deadline: update.progress_deadline_ns,
                        desired_total: group.count.map_or(1, |count| count.max(0) as u64),
                        ..DeploymentState::default()
                    },
                );
            }
        }
        if groups.is_empty() {
            return;
        }
        let deployment = Deployment {
            id: self.ids.uuid(),
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            job_version: job.version,
            job_modify_index: job.job_modify_index,
            job_spec_modify_index: job.job_modify_index,
            job_create_index: job.create_index,
            is_multiregion: false,
            task_groups: groups,
            status: status::RUNNING.into(),
            status_description: status::DESC_RUNNING.into(),
            eval_priority: job.priority,
            create_index: index,
            modify_index: index,
            create_time: 0,
            modify_time: 0,
        };
        self.store.put_deployment(deployment);
    }

    /// A stop cancels the job's active deployment in the stop's write; a purge deletes them.
    pub(super) fn stop_deployment(&mut self, job_id: &str, purge: bool, index: u64) {
        if purge {
            self.store.delete_deployments_of_job(job_id);
            return;
        }
        if let Some(id) = self
            .store
            .latest_deployment(job_id)
            .filter(|d| d.is_active())
            .map(|d| d.id.clone())
        {
            self.store.update_deployment(&id, index, |d| {
                d.status = status::CANCELLED.into();
                d.status_description = status::DESC_STOPPED.into();
            });
        }
    }

    // invariant: rollout_bounded
    /// A client reported an allocation healthy, in the report's write at `index`: the
    /// health is recorded (not client-visible) and counted, and while the job's deployment
    /// runs the watcher asks for an evaluation, which may start the next batch.
    pub(super) fn alloc_healthy(
        &mut self,
        alloc_id: &str,
        health: AllocDeploymentStatus,
        index: u64,
    ) {
        let Some(alloc) = self.store.alloc_for_client(alloc_id) else {
            return;
        };
        if alloc.deployment_id.is_empty()
            || alloc
                .deployment_status
                .as_ref()
                .is_some_and(|s| s.healthy.is_some())
        {
            return;
        }
        let (deployment_id, group, job_id) = (
            alloc.deployment_id.clone(),
            alloc.task_group.clone(),
            alloc.job_id.clone(),
        );
        let healthy = health.healthy == Some(true);
        self.store.update_alloc(alloc_id, index, false, |alloc| {
            alloc.deployment_status = Some(AllocDeploymentStatus {
                modify_index: index,
                ..health
            });
        });
        self.store.update_deployment(&deployment_id, index, |d| {
            if let Some(state) = d.task_groups.get_mut(&group) {
                if healthy {
                    state.healthy_allocs += 1;
                } else {
                    state.unhealthy_allocs += 1;
                }
            }
        });
        // The job's running deployment, whichever placed this allocation: a newer one may
        // wait for an older one's replacement.
        self.wake_running_deployment(&job_id, index);
    }

    /// A replacement a running deployment placed ended before it was healthy (its task
    /// failed past its restart policy), in the report's write at `index`: it is unhealthy,
    /// and the deployment fails, as Nomad's watcher fails it, instead of waiting for ever.
    /// (The older allocations not yet replaced keep running.)
    pub(super) fn replacement_failed(&mut self, alloc_id: &str, index: u64) {
        let Some(alloc) = self.store.alloc_for_client(alloc_id) else {
            return;
        };
        let decided = alloc
            .deployment_status
            .as_ref()
            .is_some_and(|s| s.healthy.is_some());
        let Some(deployment) = self
            .store
            .deployment(&alloc.deployment_id)
            .filter(|d| d.is_active() && !decided)
        else {
            return;
        };
        let (id, group) = (deployment.id.clone(), alloc.task_group.clone());
        self.store.update_alloc(alloc_id, index, false, |alloc| {
            alloc.deployment_status = Some(AllocDeploymentStatus {
                healthy: Some(false),
                modify_index: index,
                ..AllocDeploymentStatus::default()
            });
        });
        self.store.update_deployment(&id, index, |d| {
            if let Some(state) = d.task_groups.get_mut(&group) {
                state.unhealthy_allocs += 1;
            }
            d.status = status::FAILED.into();
            d.status_description = status::DESC_FAILED_ALLOCATIONS.into();
        });
    }

    // invariant: rollout_bounded
    /// Something the next batch may wait for alone happened in the write at `index` (an
    /// allocation a rollout stopped is client-terminal, or a replacement turned healthy):
    /// while the job's deployment runs, the watcher asks for an evaluation.
    pub(super) fn wake_running_deployment(&mut self, job_id: &str, index: u64) {
        let active = self
            .store
            .latest_deployment(job_id)
            .is_some_and(|d| d.is_active());
        if active {
            self.watcher_eval(job_id, index);
        }
    }

    /// The deployment watcher's evaluation of `job_id`, in the write at `index`.
    fn watcher_eval(&mut self, job_id: &str, index: u64) {
        if let Some(job) = self.store.job(job_id).cloned() {
            let eval = self.new_eval(
                &job,
                TRIGGER_DEPLOYMENT_WATCHER,
                &job.job_type,
                job.priority,
                index,
            );
            self.enqueue(eval, index);
        }
    }

    /// The reconciler found nothing left to roll out: the deployment succeeded.
    pub(super) fn deployment_done(&mut self, id: &str, index: u64) {
        self.store.update_deployment(id, index, |d| {
            d.status = status::SUCCESSFUL.into();
            d.status_description = status::DESC_SUCCESSFUL.into();
        });
    }

    /// A placement of the running deployment `id` in `group`.
    pub(super) fn deployment_placed(&mut self, id: &str, group: &str, index: u64) {
        self.store.update_deployment(id, index, |d| {
            if let Some(state) = d.task_groups.get_mut(group) {
                state.placed_allocs += 1;
            }
        });
    }
}
