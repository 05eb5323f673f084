//! Deployments (`reference/nomad-stop-path.md` has none; DESIGN.md invariant 10b): a new
//! version of a group with an update strategy that has allocations to replace (of an older
//! version, still running) or to place (a first registration, a start) opens a deployment,
//! which the reconciler follows (`scheduler.rs`); the clients report each new allocation's
//! health; a stop cancels it, a purge deletes it. Its success makes the version stable.
//!
//! Where quiesce differs from Nomad: the deployment is opened in the registration's own
//! write (Nomad's reconciler creates it when it processes the evaluation).

use super::events::WriteType;
use super::structs::DeploymentState;
use super::structs::{
    deployment_status as status, AllocDeploymentStatus, AllocId, Allocation, Deployment,
};
use super::{Note, Server, ServerError, TRIGGER_DEPLOYMENT_WATCHER};
use crate::spec::Job;

/// What a deployment write answers (Nomad's `DeploymentUpdateResponse`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentUpdate {
    /// The evaluation it asked for, if any (a pause asks for none).
    pub eval_id: Option<String>,
    pub index: u64,
    /// The version an auto-revert went back to.
    pub reverted_job_version: Option<u64>,
}

impl Server {
    /// After a write stored `job`'s new version at `index`: an active deployment of an older
    /// version is cancelled, and a new one opens for the groups whose running allocations
    /// the version replaces, or that have fewer than `count` allocations to keep (the model's
    /// `open_deployment`).
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
            // A system job's group that no node can run has nothing to deploy (Nomad's
            // system scheduler leaves it out: no candidate node).
            let runnable = || {
                self.nodes
                    .iter()
                    .any(|node| super::placement::feasible(&self.store, node, job, group))
            };
            if job.job_type == "system" && !runnable() {
                continue;
            }
            let live = || {
                self.store
                    .allocs_by_job(&job.id)
                    .filter(|alloc| !alloc.is_terminal() && alloc.task_group == group.name)
            };
            // Another deployment's canaries are stopped, not replaced; a system job's stand
            // in their allocation's place, and are.
            let destructive = live()
                .filter(|alloc| {
                    (update.canary_in_place || !super::scheduler::is_canary(alloc))
                        && alloc.job.as_run(&group.name) != job.as_run(&group.name)
                })
                .count() as u64;
            let replaced = destructive > 0;
            let desired = group.count.map_or(1, |count| count.max(0) as usize);
            let to_place = live().count() < desired;
            if replaced || to_place {
                // Without a clock (the simulator) there is no deadline: its states stay
                // comparable, and the model has none.
                let now = self.store.now();
                let require_progress_by = if now > 0 && update.progress_deadline_ns > 0 {
                    now.saturating_add(update.progress_deadline_ns)
                } else {
                    0
                };
                // Canaries for an update of running allocations only (Nomad's
                // `requiresCanaries`: destructive updates to make).
                let desired_canaries = if replaced {
                    update.canaries_for(destructive)
                } else {
                    0
                };
                groups.insert(
                    group.name.clone(),
                    DeploymentState {
                        auto_revert: update.auto_revert,
                        auto_promote: update.auto_promote,
                        desired_canaries,
                        progress_deadline: update.progress_deadline_ns,
                        require_progress_by,
                        desired_total: group.count.map_or(1, |count| count.max(0) as u64),
                        ..DeploymentState::default()
                    },
                );
            }
        }
        if groups.is_empty() {
            return;
        }
        let mut deployment = Deployment {
            id: self.ids.uuid(),
            namespace: job.namespace.clone(),
            job_id: job.id.as_str().into(),
            job_version: job.version,
            job_modify_index: job.job_modify_index,
            job_spec_modify_index: job.job_modify_index,
            job_create_index: job.create_index,
            is_multiregion: false,
            task_groups: groups,
            status: status::RUNNING.into(),
            status_description: String::new(),
            eval_priority: job.priority,
            create_index: index,
            modify_index: index,
            create_time: 0,
            modify_time: 0,
        };
        deployment.status_description = deployment.running_description().into();
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
    /// A client reported an allocation's health, in the report's write at `index`. Healthy:
    /// recorded (not client-visible) and counted, and while the job's deployment runs the
    /// watcher asks for an evaluation, which may start the next batch. Unhealthy (its
    /// `healthy_deadline` passed first): the deployment fails, as a failed replacement
    /// fails it ([`Server::replacement_failed`]).
    pub(super) fn alloc_healthy(
        &mut self,
        alloc_id: &AllocId,
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
        if !healthy {
            self.fail_for(alloc_id, health, index);
            return;
        }
        self.store.update_alloc(alloc_id, index, false, |alloc| {
            record_health(alloc, &health, index);
        });
        let now = self.store.now();
        self.store.update_deployment(&deployment_id, index, |d| {
            if let Some(state) = d.task_groups.get_mut(group.as_str()) {
                state.healthy_allocs += 1;
                // Progress: the deadline moves to now plus `progress_deadline`.
                if state.require_progress_by > 0 && now > 0 {
                    state.require_progress_by = state
                        .require_progress_by
                        .max(now.saturating_add(state.progress_deadline));
                }
            }
        });
        self.auto_promote(&deployment_id, index);
        // The job's running deployment, whichever placed this allocation: a newer one may
        // wait for an older one's replacement.
        self.wake_running_deployment(&job_id, index);
    }

    /// A replacement a running deployment placed ended before it was healthy (its task
    /// failed past its restart policy), in the report's write at `index`: it is unhealthy,
    /// and the deployment fails, as Nomad's watcher fails it, instead of waiting for ever;
    /// with `auto_revert`, the newest stable version is registered again. (Otherwise the
    /// older allocations not yet replaced keep running.)
    pub(super) fn replacement_failed(&mut self, alloc_id: &AllocId, index: u64) {
        let unhealthy = AllocDeploymentStatus {
            healthy: Some(false),
            ..AllocDeploymentStatus::default()
        };
        self.fail_for(alloc_id, unhealthy, index);
    }

    /// The allocation is unhealthy (`health`), in the write at `index`: recorded (once: a
    /// verdict stands), and its deployment, if still active, counts it and fails,
    /// auto-reverting if it should.
    fn fail_for(&mut self, alloc_id: &AllocId, health: AllocDeploymentStatus, index: u64) {
        let Some(alloc) = self.store.alloc_for_client(alloc_id) else {
            return;
        };
        let decided = alloc
            .deployment_status
            .as_ref()
            .is_some_and(|s| s.healthy.is_some());
        if decided || alloc.deployment_id.is_empty() {
            return;
        }
        let (group, job_id) = (alloc.task_group.clone(), alloc.job_id.clone());
        let deployment = self
            .store
            .deployment(&alloc.deployment_id)
            .filter(|d| d.is_active())
            .cloned();
        self.store.update_alloc(alloc_id, index, false, |alloc| {
            record_health(alloc, &health, index);
        });
        let Some(deployment) = deployment else {
            return;
        };
        // Canaries not promoted are stopped by the evaluation this asks for (Nomad's
        // `cancelUnneededCanaries`), as is a revert rolled out.
        let canarying = deployment.requires_promotion();
        let id = deployment.id.clone();
        self.notes.push(Note::Deployment {
            job: job_id.clone(),
            status: status::FAILED.into(),
        });
        let (suffix, reverted) = self.revert_for(&deployment, index);
        self.store.update_deployment(&id, index, |d| {
            if let Some(state) = d.task_groups.get_mut(group.as_str()) {
                state.unhealthy_allocs += 1;
            }
            d.status = status::FAILED.into();
            d.status_description = format!("{}{suffix}", status::DESC_FAILED_ALLOCATIONS);
        });
        if reverted.is_some() || canarying {
            self.watcher_eval(&job_id, index);
        }
    }

    // invariant: rollout_bounded
    /// Something the next batch may wait for alone happened in the write at `index` (an
    /// allocation a rollout stopped is client-terminal, or a replacement turned healthy):
    /// while the job's deployment runs, the watcher asks for an evaluation.
    pub(super) fn wake_running_deployment(&mut self, job_id: &str, index: u64) {
        let running = self
            .store
            .latest_deployment(job_id)
            .is_some_and(|d| d.is_running());
        if running {
            self.watcher_eval(job_id, index);
        }
    }

    /// The deployment watcher's evaluation of `job_id`, in the write at `index`.
    fn watcher_eval(&mut self, job_id: &str, index: u64) -> Option<String> {
        let job = self.store.job(job_id).cloned()?;
        let eval = self.new_eval(
            &job,
            TRIGGER_DEPLOYMENT_WATCHER,
            &job.job_type,
            job.priority,
            index,
        );
        Some(self.enqueue(eval, index))
    }

    /// The reconciler found nothing left to roll out: the deployment succeeded, and the
    /// version it rolled out is stable (Nomad's `UpdateJobStability`, in the same write).
    pub(super) fn deployment_done(&mut self, id: &str, index: u64) {
        let Some(deployment) = self.store.deployment(id).cloned() else {
            return;
        };
        self.store.update_deployment(id, index, |d| {
            d.status = status::SUCCESSFUL.into();
            d.status_description = status::DESC_SUCCESSFUL.into();
        });
        self.store
            .mark_stable(&deployment.job_id, deployment.job_version, index);
    }

    /// The deployment `id` if it has not ended; else Nomad's refusal for `verb`.
    fn active_deployment(&self, id: &str, verb: &str) -> Result<Deployment, ServerError> {
        let deployment = self
            .store
            .deployment(id)
            .ok_or_else(|| ServerError::NotFound("deployment not found".into()))?;
        if !deployment.is_active() {
            return Err(ServerError::Refused(format!(
                "can't {verb} terminal deployment"
            )));
        }
        Ok(deployment.clone())
    }

    /// `deployment pause` (`pause`) or `resume`: a paused deployment replaces nothing more
    /// until it is resumed; resuming asks for an evaluation. Pausing twice, or resuming a
    /// running deployment, is no error (Nomad's).
    pub fn pause_deployment(
        &mut self,
        id: &str,
        pause: bool,
    ) -> Result<DeploymentUpdate, ServerError> {
        let deployment = self.active_deployment(id, if pause { "pause" } else { "resume" })?;
        if !pause && deployment.is_running() {
            // Resuming what runs changes nothing, and asks for nothing.
            return Ok(DeploymentUpdate {
                eval_id: None,
                index: self.store.index(),
                reverted_job_version: None,
            });
        }
        let index = self.store.next_index(WriteType::DeploymentStatusUpdate);
        let now = self.store.now();
        self.store.update_deployment(id, index, |d| {
            if pause {
                d.status = status::PAUSED.into();
                d.status_description = status::DESC_PAUSED.into();
            } else {
                d.status = status::RUNNING.into();
                d.status_description = d.running_description().into();
                // The time paused is no lack of progress: each deadline starts again.
                for state in d.task_groups.values_mut() {
                    if state.require_progress_by > 0 && now > 0 {
                        state.require_progress_by = now.saturating_add(state.progress_deadline);
                    }
                }
            }
        });
        let status = if pause {
            status::PAUSED
        } else {
            status::RUNNING
        };
        self.notes.push(Note::Deployment {
            job: deployment.job_id.clone(),
            status: status.into(),
        });
        if !pause {
            // Canaries that turned healthy while it was paused promote it now.
            self.auto_promote(id, index);
        }
        let eval_id = (!pause)
            .then(|| self.watcher_eval(&deployment.job_id, index))
            .flatten();
        Ok(DeploymentUpdate {
            eval_id,
            index,
            reverted_job_version: None,
        })
    }

    /// `deployment fail`: the deployment fails; with `auto_revert`, the job goes back to its
    /// newest stable version (a new version with that version's spec). An evaluation
    /// follows either way.
    pub fn fail_deployment(&mut self, id: &str) -> Result<DeploymentUpdate, ServerError> {
        let deployment = self.active_deployment(id, "fail")?;
        let index = self.store.next_index(WriteType::DeploymentStatusUpdate);
        Ok(self.failed(&deployment, status::DESC_FAILED_BY_USER, index))
    }

    /// Fails `deployment` in the write at `index`, described by `why` (and what its
    /// auto-revert did); an evaluation follows.
    fn failed(&mut self, deployment: &Deployment, why: &str, index: u64) -> DeploymentUpdate {
        self.notes.push(Note::Deployment {
            job: deployment.job_id.clone(),
            status: status::FAILED.into(),
        });
        let (suffix, reverted) = self.revert_for(deployment, index);
        self.store.update_deployment(&deployment.id, index, |d| {
            d.status = status::FAILED.into();
            d.status_description = format!("{why}{suffix}");
        });
        let eval_id = self.watcher_eval(&deployment.job_id, index);
        DeploymentUpdate {
            eval_id,
            index,
            reverted_job_version: reverted,
        }
    }

    /// The earliest `RequireProgressBy` of a running deployment (Unix nanoseconds): when
    /// the host should call [`Server::progress_deadlines`] next.
    pub fn next_progress_deadline(&self) -> Option<i64> {
        self.store
            .deployments()
            .filter(|d| d.is_running())
            .flat_map(|d| d.task_groups.values())
            .map(|group| group.require_progress_by)
            .filter(|by| *by > 0)
            .min()
    }

    /// Fails, each in a write of its own, every running deployment with a group that has
    /// made no progress by its `RequireProgressBy` (`now`, Unix nanoseconds), as Nomad's
    /// deployment watcher does; returns how many. Progress is a placement's start (the
    /// deadline set when the deployment opens) and each allocation turning healthy (it
    /// moves to then plus `progress_deadline`). A paused deployment is not failed.
    pub fn progress_deadlines(&mut self, now: i64) -> usize {
        let late: Vec<Deployment> = self
            .store
            .deployments()
            .filter(|d| {
                d.is_running()
                    && d.task_groups
                        .values()
                        .any(|g| g.require_progress_by > 0 && g.require_progress_by < now)
            })
            .cloned()
            .collect();
        for deployment in &late {
            let index = self.store.next_index(WriteType::DeploymentStatusUpdate);
            self.failed(deployment, status::DESC_PROGRESS_DEADLINE, index);
        }
        late.len()
    }

    /// `deployment promote`: the groups named (or all) are promoted once each has as many
    /// healthy canaries as it wants (Nomad's refusal names the first that has not), and an
    /// evaluation follows, which replaces the older allocations.
    pub fn promote_deployment(
        &mut self,
        id: &str,
        all: bool,
        groups: &[String],
    ) -> Result<DeploymentUpdate, ServerError> {
        let deployment = self.active_deployment(id, "promote")?;
        if let Some(unknown) = groups
            .iter()
            .find(|g| !deployment.task_groups.contains_key(g.as_str()))
        {
            return Err(ServerError::Refused(format!(
                "Deployment does not include task group {unknown:?}"
            )));
        }
        let chosen = |name: &str| all || groups.iter().any(|g| g == name);
        for (name, state) in &deployment.task_groups {
            let have = self.healthy_canaries(&deployment, name);
            if chosen(name) && have < state.desired_canaries {
                return Err(ServerError::Refused(format!(
                    "Task group {name:?} has {have}/{} healthy allocations",
                    state.desired_canaries
                )));
            }
        }
        let index = self.store.next_index(WriteType::DeploymentStatusUpdate);
        self.promote(&deployment, &chosen, index);
        // The model promotes only by itself, in the health report that makes the last
        // canary healthy: an operator's promotion is past what it judges.
        self.notes.push(Note::Deployment {
            job: deployment.job_id.clone(),
            status: "promoted".into(),
        });
        let eval_id = self.watcher_eval(&deployment.job_id, index);
        Ok(DeploymentUpdate {
            eval_id,
            index,
            reverted_job_version: None,
        })
    }

    /// How many of `group`'s canaries in `deployment` are healthy and not terminal.
    fn healthy_canaries(&self, deployment: &Deployment, group: &str) -> u64 {
        let placed = deployment
            .task_groups
            .get(group)
            .and_then(|state| state.placed_canaries.as_deref())
            .unwrap_or(&[]);
        placed
            .iter()
            .filter_map(|id| self.store.alloc_for_client(id))
            .filter(|alloc| {
                // Promoted or not: a group promoted already counts its canaries still.
                !alloc.is_terminal()
                    && alloc
                        .deployment_status
                        .as_ref()
                        .is_some_and(|s| s.healthy == Some(true))
            })
            .count() as u64
    }

    /// Promotes the groups of `deployment` that `chosen` names, in the write at `index`
    /// (Nomad's `UpdateDeploymentPromotion`): each is marked promoted and its progress
    /// deadline restarts; its healthy canaries are canaries no more (they count toward
    /// `count` from now on); the deployment is described as running once no group waits.
    fn promote(&mut self, deployment: &Deployment, chosen: &dyn Fn(&str) -> bool, index: u64) {
        let now = self.store.now();
        let mut promotable = Vec::new();
        for (name, state) in &deployment.task_groups {
            if !chosen(name) {
                continue;
            }
            for id in state.placed_canaries.iter().flatten() {
                let healthy = self.store.alloc_for_client(id).is_some_and(|alloc| {
                    !alloc.is_terminal()
                        && alloc
                            .deployment_status
                            .as_ref()
                            .is_some_and(|s| s.healthy == Some(true))
                });
                if healthy {
                    promotable.push(id.clone());
                }
            }
        }
        self.store.update_deployment(&deployment.id, index, |d| {
            for (name, state) in d.task_groups.iter_mut() {
                if !chosen(name) {
                    continue;
                }
                state.promoted = true;
                if state.progress_deadline > 0 && state.require_progress_by > 0 && now > 0 {
                    state.require_progress_by = now.saturating_add(state.progress_deadline);
                }
            }
            if d.status == status::RUNNING {
                d.status_description = d.running_description().into();
            }
        });
        for id in promotable {
            self.store.update_alloc(&id, index, false, |alloc| {
                if let Some(health) = alloc.deployment_status.as_mut() {
                    health.canary = false;
                    health.modify_index = index;
                }
            });
        }
    }

    /// After a canary turned healthy, or its deployment was resumed, in the write at
    /// `index`: the deployment promotes itself if every group that wants canaries has
    /// `auto_promote` and all of them healthy (Nomad's `autoPromoteDeployment`). A paused
    /// one waits for its resume.
    fn auto_promote(&mut self, deployment_id: &str, index: u64) {
        let Some(deployment) = self
            .store
            .deployment(deployment_id)
            .filter(|d| d.is_running() && d.requires_promotion())
            .cloned()
        else {
            return;
        };
        let ready = deployment
            .task_groups
            .iter()
            .filter(|(_, state)| state.desired_canaries > 0)
            .all(|(name, state)| {
                state.auto_promote
                    && self.healthy_canaries(&deployment, name) >= state.desired_canaries
            });
        if ready {
            self.promote(&deployment, &|_| true, index);
        }
    }

    /// A failing deployment with `auto_revert`, in the write at `index`: the job's newest
    /// stable version, if its spec differs from the current one, is registered again.
    /// Returns the description's suffix (Nomad's words) and the version gone back to.
    fn revert_for(&mut self, deployment: &Deployment, index: u64) -> (String, Option<u64>) {
        if !deployment.auto_reverts() {
            return (String::new(), None);
        }
        let versions = self.store.job_versions(&deployment.job_id).unwrap_or(&[]);
        let (Some(current), Some(stable)) = (
            versions.last().cloned(),
            versions.iter().rev().find(|v| v.stable).cloned(),
        ) else {
            return (" - no stable job version to auto revert to".into(), None);
        };
        if stable.spec_only() == current.spec_only() {
            return (
                format!(
                    " - not rolling back to stable job version {} as current job has same \
                     specification",
                    stable.version
                ),
                None,
            );
        }
        self.register_version(&current, &stable, index);
        (
            format!(" - rolling back to job version {}", stable.version),
            Some(stable.version),
        )
    }

    /// Stores `old`'s spec as `current`'s next version in the write at `index`, as a
    /// registration would (`job revert`, an auto-revert), opening the deployment its
    /// rollout needs.
    fn register_version(&mut self, current: &Job, old: &Job, index: u64) -> Job {
        let mut job = old.resubmitted();
        job.version = current.version + 1;
        job.create_index = current.create_index;
        job.modify_index = index;
        job.job_modify_index = index;
        job.submit_time = self.store.now();
        self.store.put_job_version(job.clone());
        self.notes.push(Note::Registered {
            job: job.id.as_str().into(),
        });
        self.open_deployment(&job, index);
        job
    }

    /// A placement of the running deployment `id` in `group`; `canary`, its id if it is
    /// one of the group's canaries (Nomad's `PlacedCanaries`).
    pub(super) fn deployment_placed(
        &mut self,
        id: &str,
        group: &str,
        canary: Option<&str>,
        index: u64,
    ) {
        self.store.update_deployment(id, index, |d| {
            if let Some(state) = d.task_groups.get_mut(group) {
                state.placed_allocs += 1;
                if let Some(canary) = canary {
                    state
                        .placed_canaries
                        .get_or_insert_with(Vec::new)
                        .push(canary.into());
                }
            }
        });
    }
}

/// The client's verdict on `alloc`'s health, recorded at `index`: whether it is a canary is
/// the server's to say, not the report's.
fn record_health(alloc: &mut Allocation, health: &AllocDeploymentStatus, index: u64) {
    let canary = alloc
        .deployment_status
        .as_ref()
        .is_some_and(|status| status.canary);
    alloc.deployment_status = Some(AllocDeploymentStatus {
        modify_index: index,
        canary,
        ..health.clone()
    });
}
