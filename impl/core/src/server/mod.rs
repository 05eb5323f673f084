//! The server: a state store written one atomic apply at a time, an evaluation broker, and
//! a scheduler that reconciles jobs (`reference/nomad-stop-path.md` §1).

mod broker;
mod deployments;
pub use deployments::DeploymentUpdate;
mod evals;
pub mod events;
pub mod gc;
pub mod placement;
mod plan;
pub mod scaling;
pub mod scheduler;
pub mod store;
pub mod structs;
mod task_events;
mod task_states;
mod versions;

use crate::ids::IdGen;
use crate::spec::{Job, SpecErrors};
pub use broker::EvalBroker;
use events::WriteType;
pub use plan::{DesiredUpdates, PlanOutcome};
use std::collections::BTreeMap;
use std::fmt;
use store::StateStore;
use structs::*;

/// The options of `DELETE /v1/job/:id` (`job stop`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StopJobOptions {
    pub purge: bool,
    pub no_shutdown_delay: bool,
    /// 1..=100; `None` uses the job's priority.
    pub eval_priority: Option<i64>,
}

/// The options of `POST /v1/jobs` beside the job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegisterOptions {
    /// 1..=100; `None` uses the job's priority.
    pub eval_priority: Option<i64>,
    /// `EnforceIndex` with its `JobModifyIndex`: register only if the stored job's
    /// `JobModifyIndex` is this (0: only if there is no such job).
    pub enforce_index: Option<u64>,
}

/// The options of `PUT /v1/allocation/:id/stop`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StopAllocOptions {
    pub no_shutdown_delay: bool,
    /// Marks the allocation for rescheduling (`DesiredTransition.Reschedule`) as well.
    pub reschedule: bool,
}

/// `TriggeredBy` of a blocked evaluation.
const TRIGGER_QUEUED: &str = "queued-allocs";
/// A healthy allocation of a running deployment asks for the next batch.
const TRIGGER_DEPLOYMENT_WATCHER: &str = "deployment-watcher";

/// What the scheduler did with one evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processed {
    pub eval: EvalId,
    pub job: JobId,
    /// No node could take its placements: it left a blocked evaluation, to be processed
    /// again once a node is ready, and placed nothing (the model's evaluation is still
    /// pending).
    pub blocked: bool,
}

/// The answer to a write: the evaluation it created (empty when none) and the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteResponse {
    pub eval_id: EvalId,
    pub index: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerError {
    InvalidJob(SpecErrors),
    JobNotFound(JobId),
    AllocNotFound(AllocId),
    EvalPriorityOutOfRange(i64),
    JobNotStopped(JobId),
    /// `EnforceIndex` refused the registration: Nomad's text after "Enforcing job modify
    /// index N: ".
    EnforceIndex(u64, String),
    /// A request about something that is not there, in Nomad's words (`deployment not
    /// found`, `job "web" in namespace "default" at version 3 not found`).
    NotFound(String),
    /// A request the object's state refuses, in Nomad's words (`can't fail terminal
    /// deployment`, `can't revert to current version`).
    Refused(String),
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::InvalidJob(errors) => write!(f, "{errors}"),
            ServerError::JobNotFound(id) => write!(f, "job not found: {id}"),
            ServerError::AllocNotFound(id) => write!(f, "allocation not found: {id}"),
            ServerError::EvalPriorityOutOfRange(priority) => {
                write!(
                    f,
                    "Eval priority must be between 1 and 100 inclusively (got {priority})"
                )
            }
            ServerError::JobNotStopped(id) => write!(f, "job {id} is not stopped"),
            ServerError::EnforceIndex(index, why) => {
                write!(f, "Enforcing job modify index {index}: {why}")
            }
            ServerError::NotFound(what) | ServerError::Refused(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for ServerError {}

/// A client's report about one of its allocations.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientReport {
    pub client_status: ClientStatus,
    pub client_description: String,
    pub task_states: TaskStates,
    /// The allocation's health within its deployment, once its client decided.
    pub deployment_status: Option<AllocDeploymentStatus>,
}

#[derive(Clone, Debug)]
pub struct Server {
    pub store: StateStore,
    broker: EvalBroker,
    ids: IdGen,
    /// The client nodes allocations are placed on (the ready ones).
    nodes: Vec<NodeId>,
    /// Each job's blocked evaluation, if it has one (out of the broker until a node is
    /// ready), and whether ports were what it lacked (then an allocation's end frees them).
    blocked: BTreeMap<JobId, (EvalId, bool)>,
    /// What writes that are no step did since the last take, for the event log
    /// ([`Server::take_note_entries`]).
    notes: Vec<Note>,
}

/// What a write that is no step of the alphabet did, which the event log must still record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// The job's deployment turned a status the model has not (paused, failed), or running
    /// again.
    Deployment { job: JobId, status: String },
    /// A new version of the job was stored (a failed deployment's auto-revert).
    Registered { job: JobId },
}

impl Server {
    /// The notes of the writes since the last take, oldest first, as the event log's
    /// entries (their sequence numbers and times are the log's to set): a `Deployment` with
    /// its status, or the version a `RegisterJob` stored.
    pub fn take_note_entries(&mut self) -> Vec<crate::step::log::LogEntry> {
        use crate::step::log::LogEntry;
        std::mem::take(&mut self.notes)
            .into_iter()
            .filter_map(|note| match note {
                Note::Deployment { job, status } => Some(LogEntry::deployment(&job, &status)),
                Note::Registered { job } => self.store.job(&job).map(LogEntry::register_job),
            })
            .collect()
    }

    pub fn new(nodes: Vec<NodeId>, seed: u64) -> Self {
        Server {
            store: StateStore::default(),
            broker: EvalBroker::default(),
            ids: IdGen::new(seed),
            nodes,
            blocked: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    /// A server over a restored store (the daemon's restart): pending evaluations go back to
    /// the broker in the order they were created, at most one per job, as before.
    pub fn restore(store: StateStore, nodes: Vec<NodeId>, seed: u64) -> Self {
        let mut pending: Vec<&Evaluation> = store
            .evals()
            .filter(|eval| eval.status == EvalStatus::Pending)
            .collect();
        pending.sort_by_key(|eval| (eval.create_index, eval.id.clone()));
        let mut broker = EvalBroker::default();
        for eval in pending {
            broker.enqueue(&eval.job_id, &eval.id);
        }
        // Whatever a restored blocked evaluation lacked, it is tried again on either cause.
        let blocked = store
            .evals()
            .filter(|eval| eval.status == EvalStatus::Blocked)
            .map(|eval| (eval.job_id.clone(), (eval.id.clone(), true)))
            .collect();
        let mut nodes = nodes;
        nodes.extend(
            store
                .nodes()
                .filter(|node| node.is_ready() && !nodes.contains(&node.id))
                .map(|node| node.id.clone())
                .collect::<Vec<_>>(),
        );
        Server {
            store,
            broker,
            ids: IdGen::new(seed),
            nodes,
            blocked,
            notes: Vec::new(),
        }
    }

    /// A new UUID from the server's generator (the daemon's node ID, its keys).
    pub fn uuid(&mut self) -> String {
        self.ids.uuid()
    }

    /// An evaluation is waiting for the scheduler.
    pub fn eval_pending(&self) -> bool {
        self.broker.has_pending()
    }

    /// The job whose evaluation the scheduler processes next.
    pub fn next_eval_job(&self) -> Option<&JobId> {
        self.broker.next_job()
    }

    fn new_eval(
        &mut self,
        job: &Job,
        triggered_by: &str,
        eval_type: &str,
        priority: i64,
        index: u64,
    ) -> Evaluation {
        Evaluation {
            id: self.ids.uuid(),
            namespace: job.namespace.clone(),
            priority,
            eval_type: eval_type.to_string(),
            triggered_by: triggered_by.to_string(),
            job_id: job.id.as_str().into(),
            job_modify_index: job.job_modify_index,
            status: EvalStatus::Pending,
            status_description: String::new(),
            blocked_eval: String::new(),
            previous_eval: String::new(),
            next_eval: String::new(),
            queued_allocations: BTreeMap::new(),
            create_index: index,
            modify_index: index,
            create_time: 0,
            modify_time: 0,
        }
    }

    /// Stores the evaluation and hands it to the broker, which cancels an older pending
    /// evaluation of the same job (Nomad's broker supersedes them), and a blocked one.
    fn enqueue(&mut self, eval: Evaluation, index: u64) -> EvalId {
        let id = eval.id.clone();
        let superseded = self.broker.enqueue(&eval.job_id, &id);
        let blocked = self.blocked.remove(&eval.job_id).map(|(id, _)| id);
        for superseded in superseded.into_iter().chain(blocked) {
            if let Some(old) = self.store.eval_mut(&superseded) {
                old.status = EvalStatus::Canceled;
                old.status_description = format!("superseded by evaluation {id}");
                old.modify_index = index;
            }
        }
        self.store.put_eval(eval);
        id
    }

    /// `POST /v1/jobs`: a new version only when the spec (or `Stop`) changed; an evaluation
    /// every time.
    pub fn register_job(&mut self, job: Job) -> Result<WriteResponse, ServerError> {
        self.register_job_with(job, RegisterOptions::default())
    }

    // invariant: jobspec_unchanged
    /// `POST /v1/jobs` with its options.
    pub fn register_job_with(
        &mut self,
        mut job: Job,
        options: RegisterOptions,
    ) -> Result<WriteResponse, ServerError> {
        job.canonicalize();
        job.validate().map_err(ServerError::InvalidJob)?;
        if let Some(priority) = options.eval_priority {
            if !(1..=100).contains(&priority) {
                return Err(ServerError::EvalPriorityOutOfRange(priority));
            }
        }
        let previous = self.store.job(&job.id).cloned();
        if let Some(expected) = options.enforce_index {
            // Nomad's texts (`nomad/job_endpoint.go`, read for facts).
            match (&previous, expected) {
                (Some(_), 0) => {
                    return Err(ServerError::EnforceIndex(0, "job already exists".into()))
                }
                (None, 0) => {}
                (None, expected) => {
                    return Err(ServerError::EnforceIndex(
                        expected,
                        "job does not exist".into(),
                    ))
                }
                (Some(stored), expected) if stored.job_modify_index != expected => {
                    return Err(ServerError::EnforceIndex(
                        expected,
                        format!(
                            "job exists with conflicting job modify index: {}",
                            stored.job_modify_index
                        ),
                    ))
                }
                (Some(_), _) => {}
            }
        }
        if let Some(previous) = &previous {
            if previous.spec_only() == job.spec_only() && previous.stop == job.stop {
                // As Nomad: no new version, but an evaluation all the same (it places what
                // is missing, e.g. an allocation that ended on its own).
                let index = self.store.next_index(WriteType::JobRegister);
                let eval = self.new_eval(
                    previous,
                    "job-register",
                    &previous.job_type.clone(),
                    options.eval_priority.unwrap_or(previous.priority),
                    index,
                );
                let eval_id = self.enqueue(eval, index);
                return Ok(WriteResponse { eval_id, index });
            }
        }
        let index = self.store.next_index(WriteType::JobRegister);
        job.version = previous.as_ref().map_or(0, |p| p.version + 1);
        // Only a deployment's success makes a version stable, never a client.
        job.stable = false;
        job.create_index = previous.as_ref().map_or(index, |p| p.create_index);
        job.modify_index = index;
        job.job_modify_index = index;
        job.submit_time = self.store.now();
        let eval = self.new_eval(
            &job,
            "job-register",
            &job.job_type.clone(),
            options.eval_priority.unwrap_or(job.priority),
            index,
        );
        let stored = job.clone();
        self.store.put_job_version(job);
        self.open_deployment(&stored, index);
        let eval_id = self.enqueue(eval, index);
        Ok(WriteResponse { eval_id, index })
    }

    // invariant: jobspec_unchanged
    /// `job stop` (`reference/nomad-stop-path.md` §1.3, §1.4, and DESIGN.md's purge). One
    /// write: the flag on every allocation of the job (terminal or not), never on the job;
    /// a new version with `Stop=true`, or the purge; one evaluation. Stopping an unknown job
    /// is a documented no-op (empty evaluation ID). Stopping a stopped job is a normal
    /// request: the operator's way to rescue an allocation stuck in a delay.
    pub fn stop_job(
        &mut self,
        job_id: &str,
        options: StopJobOptions,
    ) -> Result<WriteResponse, ServerError> {
        if let Some(priority) = options.eval_priority {
            if !(1..=100).contains(&priority) {
                return Err(ServerError::EvalPriorityOutOfRange(priority));
            }
        }
        let Some(job) = self.store.job(job_id).cloned() else {
            return Ok(WriteResponse {
                eval_id: String::new(),
                index: self.store.index(),
            });
        };
        let index = self.store.next_index(WriteType::JobDeregister);
        let alloc_ids: Vec<AllocId> = self
            .store
            .allocs_by_job(job_id)
            .map(|a| a.id.clone())
            .collect();
        if options.no_shutdown_delay {
            // flag_scoped / flag_is_honoured: every allocation this stop targets, sticky.
            for id in &alloc_ids {
                let flagged = self
                    .store
                    .alloc_for_client(id)
                    .is_some_and(|a| a.desired_transition.should_ignore_shutdown_delay());
                if !flagged {
                    self.store.update_alloc(id, index, true, |alloc| {
                        alloc.desired_transition.no_shutdown_delay = Some(true);
                    });
                }
            }
        }
        self.stop_deployment(job_id, options.purge, index);
        if options.purge {
            self.purge(job_id, &alloc_ids, index);
        } else {
            // jobspec_unchanged: the new version differs in `Stop` and bookkeeping only.
            let mut stopped = job.clone();
            stopped.stop = true;
            stopped.version = job.version + 1;
            stopped.modify_index = index;
            stopped.job_modify_index = index;
            self.store.put_job_version(stopped);
            debug_assert!(
                self.store
                    .job(job_id)
                    .is_some_and(|s| s.stop && s.spec_only() == job.spec_only()),
                "jobspec_unchanged: the stop of {job_id} stored a changed spec"
            );
        }
        debug_assert!(
            !options.no_shutdown_delay
                || alloc_ids.iter().all(|id| {
                    self.store
                        .alloc_for_client(id)
                        .is_none_or(|a| a.desired_transition.should_ignore_shutdown_delay())
                }),
            "flag_is_honoured: a flagged stop of {job_id} left an allocation unflagged"
        );
        let priority = options.eval_priority.unwrap_or(job.priority);
        let eval_type = job.job_type.clone();
        let mut eval = self.new_eval(&job, "job-deregister", &eval_type, priority, index);
        eval.job_modify_index = index;
        let eval_id = self.enqueue(eval, index);
        Ok(WriteResponse { eval_id, index })
    }

    // invariant: flag_is_honoured
    /// DESIGN.md: the job is gone at once; each allocation the client still runs becomes a
    /// tombstone carrying desired stop and the flag, removed when the client reports it
    /// terminal; client-terminal ones are deleted now.
    fn purge(&mut self, job_id: &str, alloc_ids: &[AllocId], index: u64) {
        self.store.delete_job(job_id);
        for id in alloc_ids {
            let client_terminal = self
                .store
                .alloc_for_client(id)
                .is_some_and(|a| a.client_status.is_terminal());
            if client_terminal {
                self.store.delete_alloc(id);
            } else {
                self.store.update_alloc(id, index, true, |alloc| {
                    alloc.tombstone = true;
                    alloc.desired_status = DesiredStatus::Stop;
                    alloc.desired_description = "job purged".to_string();
                });
            }
        }
    }

    /// `alloc stop` (§1.5): stop and migrate one allocation. The flag is sticky: an unflagged
    /// stop leaves a flag set earlier (DESIGN.md; Nomad resets it). No terminal check.
    pub fn stop_alloc(
        &mut self,
        alloc_id: &str,
        no_shutdown_delay: bool,
    ) -> Result<WriteResponse, ServerError> {
        let options = StopAllocOptions {
            no_shutdown_delay,
            reschedule: false,
        };
        self.stop_alloc_with(alloc_id, options)
    }

    // invariant: flag_scoped
    /// `alloc stop` with its options.
    pub fn stop_alloc_with(
        &mut self,
        alloc_id: &str,
        options: StopAllocOptions,
    ) -> Result<WriteResponse, ServerError> {
        let no_shutdown_delay = options.no_shutdown_delay;
        let alloc = self
            .store
            .alloc(alloc_id)
            .cloned()
            .ok_or_else(|| ServerError::AllocNotFound(alloc_id.into()))?;
        let index = self.store.next_index(WriteType::AllocStop);
        let newly_flagged =
            no_shutdown_delay && !alloc.desired_transition.should_ignore_shutdown_delay();
        self.store
            .update_alloc(alloc_id, index, newly_flagged, |alloc| {
                alloc.desired_transition.migrate = Some(true);
                if options.reschedule {
                    alloc.desired_transition.reschedule = Some(true);
                }
                if newly_flagged {
                    alloc.desired_transition.no_shutdown_delay = Some(true);
                }
            });
        debug_assert!(
            !no_shutdown_delay
                || self
                    .store
                    .alloc(alloc_id)
                    .is_some_and(|a| a.desired_transition.should_ignore_shutdown_delay()),
            "flag_scoped: alloc stop -no-shutdown-delay left {alloc_id} unflagged"
        );
        let job = &alloc.job;
        let mut eval = self.new_eval(
            job,
            "alloc-stop",
            &job.job_type.clone(),
            job.priority,
            index,
        );
        eval.job_modify_index = alloc.job.modify_index;
        let eval_id = self.enqueue(eval, index);
        Ok(WriteResponse { eval_id, index })
    }

    // invariant: jobspec_unchanged
    /// `job start`: resubmit the latest version with `Stop=false`, as a new version.
    pub fn start_job(&mut self, job_id: &str) -> Result<WriteResponse, ServerError> {
        let job = self
            .store
            .job(job_id)
            .cloned()
            .ok_or_else(|| ServerError::JobNotFound(job_id.into()))?;
        if !job.stop {
            return Err(ServerError::JobNotStopped(job_id.into()));
        }
        let spec = job.spec_only();
        let mut started = job;
        started.stop = false;
        let response = self.register_job(started)?;
        debug_assert!(
            self.store
                .job(job_id)
                .is_some_and(|now| !now.stop && now.spec_only() == spec),
            "jobspec_unchanged: job start of {job_id} stored another spec"
        );
        Ok(response)
    }

    // invariant: stop_completes
    /// A client's report: task states and client status. Reports do not bump
    /// `AllocModifyIndex` (the client does not pull its own writes). A tombstone that is now
    /// client-terminal is removed.
    pub fn client_report<Q>(&mut self, alloc_id: &Q, report: ClientReport)
    where
        AllocId: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let index = self.store.next_index(WriteType::AllocClientUpdate);
        let terminal = report.client_status.is_terminal();
        let Some(alloc) = self.store.alloc_for_client(alloc_id) else {
            return;
        };
        // Looked up by the stored ID from here on, compared by its first bytes.
        let alloc_id = &alloc.id.clone();
        let tombstone = alloc.tombstone;
        let rollout_stop_ended = terminal
            && !alloc.client_status.is_terminal()
            && alloc.desired_description == scheduler::DESC_UPDATING;
        let job_id = rollout_stop_ended.then(|| alloc.job_id.clone());
        let failed_in_deployment = report.client_status == ClientStatus::Failed
            && alloc.desired_status == DesiredStatus::Run
            && !alloc.deployment_id.is_empty();
        // A client reports the health it decided with every report after; once recorded
        // (or outside a deployment) there is nothing for the deployment to learn, as
        // `alloc_healthy` would find. The write below does not change either.
        let health_news = !alloc.deployment_id.is_empty()
            && alloc
                .deployment_status
                .as_ref()
                .is_none_or(|s| s.healthy.is_none());
        debug_assert!(
            terminal || !alloc.client_status.is_terminal(),
            "stop_completes: client-terminal alloc {alloc_id} reported {:?}",
            report.client_status
        );
        // Named: with this function's own `Q` in scope, rustc would take it for the store's.
        self.store
            .update_alloc::<AllocId>(alloc_id, index, false, |alloc| {
                alloc.client_status = report.client_status;
                alloc.client_description = report.client_description;
                alloc.task_states = report.task_states;
            });
        if let Some(health) = report.deployment_status.filter(|_| health_news) {
            self.alloc_healthy(alloc_id, health, index);
        }
        if let Some(job_id) = job_id {
            self.wake_running_deployment(&job_id, index);
        }
        if failed_in_deployment {
            self.replacement_failed(alloc_id, index);
        }
        if tombstone && terminal {
            self.store.delete_alloc(alloc_id);
        }
        // What it held (its ports) is free: a placement that could not have them may now.
        if terminal && self.blocked.values().any(|(_, for_ports)| *for_ports) {
            self.unblock(index, true);
        }
    }

    /// Registers the native services of a group (`task` empty) or a task.
    pub fn register_services(&mut self, alloc_id: &str, task: &str, names: &[String]) {
        let Some(alloc) = self.store.alloc_for_client(alloc_id) else {
            return;
        };
        let (job_id, stored_id) = (alloc.job_id.clone(), alloc.id.clone());
        let index = self.store.next_index(WriteType::ServiceRegister);
        for name in names {
            self.store.put_service(ServiceRegistration {
                id: service_id(alloc_id, task, name),
                service_name: name.clone(),
                job_id: job_id.clone(),
                alloc_id: stored_id.clone(),
                task: task.to_string(),
                create_index: index,
            });
        }
    }

    /// Deregisters them; idempotent (hooks may deregister twice: pre-kill and exited).
    pub fn deregister_services(&mut self, alloc_id: &str, task: &str, names: &[String]) -> usize {
        let ids: Vec<String> = names
            .iter()
            .map(|name| service_id(alloc_id, task, name))
            .collect();
        if !ids.iter().any(|id| self.store.has_service(id)) {
            return 0;
        }
        self.store.next_index(WriteType::ServiceDeregister);
        ids.into_iter()
            .map(|id| self.store.delete_service(id))
            .filter(|&deleted| deleted)
            .count()
    }
}

/// `_nomad-task-{alloc}-{owner}-{name}`: every deregistration makes one per service, most
/// of them to find it already gone.
fn service_id(alloc_id: &str, task: &str, name: &str) -> String {
    let owner = if task.is_empty() { "group" } else { task };
    crate::text::joined(&["_nomad-task-", alloc_id, "-", owner, "-", name])
}
