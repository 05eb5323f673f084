//! The server's records, in Nomad's JSON shape (`reference/http-api.md` §4.4, §4.5;
//! `reference/nomad-stop-path.md` §1.1, §6.3).

use crate::spec::Job;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use super::task_events::TaskEvents;
pub use super::task_states::TaskStates;
pub use crate::id::Id;

pub type JobId = Id;
pub type AllocId = Id;
pub type EvalId = String;
pub type NodeId = Id;

/// `DesiredTransition`: each member tri-state (`null`, `false`, `true`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DesiredTransition {
    pub migrate: Option<bool>,
    pub reschedule: Option<bool>,
    pub force_reschedule: Option<bool>,
    /// Sticky in quiesce: once true, no later write sets it back (DESIGN.md, "Where quiesce
    /// deliberately differs from Nomad").
    pub no_shutdown_delay: Option<bool>,
    pub migrate_disable_placement: Option<bool>,
}

impl DesiredTransition {
    /// Nomad's `ShouldIgnoreShutdownDelay`.
    pub fn should_ignore_shutdown_delay(&self) -> bool {
        self.no_shutdown_delay == Some(true)
    }

    pub fn should_migrate(&self) -> bool {
        self.migrate == Some(true)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesiredStatus {
    Run,
    Stop,
    Evict,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientStatus {
    Pending,
    Running,
    Complete,
    Failed,
    Lost,
}

impl ClientStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        )
    }
}

/// One task event, with Nomad's exact `Type` strings on the stop path (§6.4) and the ones
/// DESIGN.md adds for the group delay and for a wait cut short. The type, the detail keys
/// and a fixed message are the runner's constants, borrowed rather than copied into every
/// event (a stop records about fifteen per allocation); read back, they are owned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskEvent {
    #[serde(rename = "Type")]
    pub event_type: Cow<'static, str>,
    /// Unix nanoseconds (virtual in the simulator).
    pub time: i64,
    pub message: String,
    pub display_message: Cow<'static, str>,
    pub details: BTreeMap<Cow<'static, str>, String>,
}

/// The `Type` strings.
pub mod event_types {
    pub const RECEIVED: &str = "Received";
    pub const STARTED: &str = "Started";
    pub const KILLING: &str = "Killing";
    pub const WAITING_FOR_SHUTDOWN_DELAY: &str = "Waiting for shutdown delay";
    pub const SKIPPING_SHUTDOWN_DELAY: &str = "Skipping shutdown delay";
    pub const SHUTDOWN_DELAY_CUT_SHORT: &str = "Shutdown delay cut short";
    pub const WAITING_FOR_GROUP_SHUTDOWN_DELAY: &str = "Waiting for group shutdown delay";
    pub const SKIPPING_GROUP_SHUTDOWN_DELAY: &str = "Skipping group shutdown delay";
    pub const GROUP_SHUTDOWN_DELAY_CUT_SHORT: &str = "Group shutdown delay cut short";
    pub const TERMINATED: &str = "Terminated";
    pub const DRIVER_FAILURE: &str = "Driver Failure";
    pub const KILLED: &str = "Killed";
    pub const LEADER_TASK_DEAD: &str = "Leader Task Dead";
    pub const SIBLING_TASK_FAILED: &str = "Sibling Task Failed";
    pub const MAIN_TASKS_DEAD: &str = "Main Tasks Dead";
    pub const RESTART_SIGNALED: &str = "Restart Signaled";
    pub const RESTARTING: &str = "Restarting";
    pub const NOT_RESTARTING: &str = "Not Restarting";
}

/// Nomad keeps the last 10 events per task.
pub const MAX_TASK_EVENTS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStateName {
    Pending,
    Running,
    Dead,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskState {
    pub state: TaskStateName,
    pub failed: bool,
    pub restarts: u64,
    /// When it last became `running`, when it became `dead` (set once), when a
    /// `Restarting` event was last recorded: Unix nanoseconds, written as Go's `time.Time`
    /// (its zero time while unset), as Nomad's task runner keeps them.
    #[serde(default, with = "crate::gotime::serde_time")]
    pub last_restart: i64,
    #[serde(default, with = "crate::gotime::serde_time")]
    pub started_at: i64,
    #[serde(default, with = "crate::gotime::serde_time")]
    pub finished_at: i64,
    /// The last ten, oldest first; shared between copies (the runner's, the server's last
    /// report of it, a cloned simulator's), recording one puts it in front of them.
    pub events: TaskEvents,
}

impl TaskState {
    /// It is dead from `now` (Nomad: `FinishedAt` is set the first time only).
    /// Not before its last event, which may be a nanosecond or so on from `now` (events
    /// recorded at one instant are a nanosecond apart).
    pub fn finish(&mut self, now: i64) {
        self.state = TaskStateName::Dead;
        if self.finished_at == 0 {
            self.finished_at = self.events.last().map_or(now, |e| e.time.max(now));
        }
    }
}

impl Default for TaskState {
    fn default() -> Self {
        TaskState {
            state: TaskStateName::Pending,
            failed: false,
            restarts: 0,
            last_restart: 0,
            started_at: 0,
            finished_at: 0,
            events: TaskEvents::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Allocation {
    #[serde(rename = "ID")]
    pub id: AllocId,
    pub namespace: String,
    #[serde(rename = "EvalID")]
    pub eval_id: EvalId,
    /// `job.group[index]`.
    pub name: String,
    #[serde(rename = "NodeID")]
    pub node_id: NodeId,
    #[serde(rename = "JobID")]
    pub job_id: JobId,
    /// The job version it was placed from (not updated by a stop, §6.3); shared, since
    /// every allocation of a version holds the same one (and written once per version, see
    /// `shared_job`).
    #[serde(serialize_with = "shared_job::serialize")]
    pub job: Arc<Job>,
    pub job_version: u64,
    pub task_group: Id,
    pub desired_status: DesiredStatus,
    pub desired_description: String,
    pub desired_transition: DesiredTransition,
    pub client_status: ClientStatus,
    pub client_description: String,
    pub task_states: TaskStates,
    #[serde(rename = "PreviousAllocation")]
    pub previous_allocation: Option<AllocId>,
    #[serde(rename = "NextAllocation")]
    pub next_allocation: Option<AllocId>,
    pub create_index: u64,
    pub modify_index: u64,
    /// Unix nanoseconds of the write that placed it and of its last write (0 where the
    /// store has no clock: the simulator's).
    #[serde(default)]
    pub create_time: i64,
    #[serde(default)]
    pub modify_time: i64,
    /// Bumped by every change the client must act on: desired status, the flag, a purge.
    pub alloc_modify_index: u64,
    /// The ports of its group's network, given at placement (the API shows them under
    /// `AllocatedResources.Shared.Ports`).
    #[serde(default, rename = "AllocatedPorts")]
    pub ports: Vec<AllocatedPort>,
    /// The job was purged: the record carries desired stop and the flag to the client and is
    /// removed once the client reports it terminal. The API answers 404 for it.
    #[serde(skip)]
    pub tombstone: bool,
    /// The deployment that placed it (`""`: none); its client then watches its health.
    #[serde(default, rename = "DeploymentID")]
    pub deployment_id: String,
    /// Its health as its client reported it, within its deployment.
    #[serde(default)]
    pub deployment_status: Option<AllocDeploymentStatus>,
}

/// An allocation's health within its deployment (Nomad's `AllocDeploymentStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocDeploymentStatus {
    /// `None` until the client decides.
    pub healthy: Option<bool>,
    /// When the client decided (Unix nanoseconds; Go's `time.Time` on the wire).
    #[serde(with = "crate::gotime::serde_time")]
    pub timestamp: i64,
    pub canary: bool,
    pub modify_index: u64,
}

/// Nomad's deployment statuses and their descriptions (`structs/deployment.go`).
pub mod deployment_status {
    pub const RUNNING: &str = "running";
    pub const SUCCESSFUL: &str = "successful";
    pub const CANCELLED: &str = "cancelled";
    pub const FAILED: &str = "failed";
    pub const PAUSED: &str = "paused";
    pub const DESC_RUNNING: &str = "Deployment is running";
    pub const DESC_NEEDS_PROMOTION: &str = "Deployment is running but requires manual promotion";
    pub const DESC_AUTO_PROMOTION: &str = "Deployment is running pending automatic promotion";
    pub const DESC_SUCCESSFUL: &str = "Deployment completed successfully";
    pub const DESC_STOPPED: &str = "Cancelled because job is stopped";
    pub const DESC_NEWER_JOB: &str = "Cancelled due to newer version of job";
    pub const DESC_FAILED_ALLOCATIONS: &str = "Failed due to unhealthy allocations";
    pub const DESC_FAILED_BY_USER: &str = "Deployment marked as failed";
    pub const DESC_PAUSED: &str = "Deployment is paused";
    pub const DESC_PROGRESS_DEADLINE: &str = "Failed due to progress deadline";
}

/// A rollout of one job version: created by a registration that changes a group with an
/// update strategy while allocations of an older version run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Deployment {
    #[serde(rename = "ID")]
    pub id: String,
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: JobId,
    pub job_version: u64,
    pub job_modify_index: u64,
    pub job_spec_modify_index: u64,
    pub job_create_index: u64,
    pub is_multiregion: bool,
    pub task_groups: BTreeMap<String, DeploymentState>,
    pub status: String,
    pub status_description: String,
    pub eval_priority: i64,
    pub create_index: u64,
    pub modify_index: u64,
    #[serde(default)]
    pub create_time: i64,
    #[serde(default)]
    pub modify_time: i64,
}

impl Deployment {
    /// Running or paused (Nomad's active statuses that this agent has): not yet ended.
    pub fn is_active(&self) -> bool {
        self.is_running() || self.status == deployment_status::PAUSED
    }

    /// Rolling out: not paused, not ended.
    pub fn is_running(&self) -> bool {
        self.status == deployment_status::RUNNING
    }

    /// Some group's canaries wait for a promotion (Nomad's `RequiresPromotion`).
    pub fn requires_promotion(&self) -> bool {
        self.task_groups
            .values()
            .any(|group| group.desired_canaries > 0 && !group.promoted)
    }

    /// Nomad's `HasAutoPromote`: a running deployment whose every group that wants canaries
    /// promotes them itself (true when none wants any; false once it is not running).
    pub fn all_auto_promote(&self) -> bool {
        self.is_running()
            && !self.task_groups.is_empty()
            && self
                .task_groups
                .values()
                .all(|group| group.desired_canaries == 0 || group.auto_promote)
    }

    /// How a running deployment is described: waiting for a promotion, automatic if every
    /// group that wants canaries has `auto_promote`, or simply running.
    pub fn running_description(&self) -> &'static str {
        let mut waiting = self
            .task_groups
            .values()
            .filter(|group| group.desired_canaries > 0 && !group.promoted)
            .peekable();
        if waiting.peek().is_none() {
            deployment_status::DESC_RUNNING
        } else if waiting.all(|group| group.auto_promote) {
            deployment_status::DESC_AUTO_PROMOTION
        } else {
            deployment_status::DESC_NEEDS_PROMOTION
        }
    }

    /// Some group rolls back to the last stable version when this deployment fails.
    pub fn auto_reverts(&self) -> bool {
        self.task_groups.values().any(|group| group.auto_revert)
    }
}

/// One group's progress in a deployment (Nomad's `DeploymentState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeploymentState {
    pub auto_revert: bool,
    pub auto_promote: bool,
    /// Nanoseconds.
    pub progress_deadline: i64,
    #[serde(with = "crate::gotime::serde_time")]
    pub require_progress_by: i64,
    pub promoted: bool,
    pub placed_canaries: Option<Vec<AllocId>>,
    pub desired_canaries: u64,
    pub desired_total: u64,
    pub placed_allocs: u64,
    pub healthy_allocs: u64,
    pub unhealthy_allocs: u64,
}

/// One port of an allocation: its label, the host's port, and where the task listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocatedPort {
    pub label: String,
    pub value: u16,
    pub to: i64,
}

impl Allocation {
    /// Server-terminal (desired stop or evict) or client-terminal.
    pub fn is_terminal(&self) -> bool {
        self.desired_status != DesiredStatus::Run || self.client_status.is_terminal()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalStatus {
    Pending,
    /// Waiting for a node to place on (Nomad's blocked evaluation): out of the broker until
    /// a node turns ready.
    Blocked,
    Complete,
    Canceled,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Evaluation {
    #[serde(rename = "ID")]
    pub id: EvalId,
    pub namespace: String,
    pub priority: i64,
    #[serde(rename = "Type")]
    pub eval_type: String,
    pub triggered_by: String,
    #[serde(rename = "JobID")]
    pub job_id: JobId,
    pub job_modify_index: u64,
    pub status: EvalStatus,
    pub status_description: String,
    /// The blocked evaluation this one left (Nomad's link fields; `""` when none).
    #[serde(default)]
    pub blocked_eval: EvalId,
    /// For a blocked evaluation: the one that left it.
    #[serde(default)]
    pub previous_eval: EvalId,
    #[serde(default)]
    pub next_eval: EvalId,
    /// Allocations of each group still to place when the scheduler processed it.
    #[serde(default)]
    pub queued_allocations: BTreeMap<String, u64>,
    pub create_index: u64,
    pub modify_index: u64,
    /// Unix nanoseconds, as the allocation's.
    #[serde(default)]
    pub create_time: i64,
    #[serde(default)]
    pub modify_time: i64,
}

/// A client node (`/v1/node/:id`): the daemon's one node, as Nomad's API shows it. The
/// simulator's nodes are names only and have no record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Node {
    #[serde(rename = "ID")]
    pub id: NodeId,
    pub name: String,
    pub datacenter: String,
    pub node_pool: String,
    /// `initializing` until its first heartbeat, then `ready`.
    pub status: String,
    /// Unix seconds of the last status change.
    pub status_updated_at: i64,
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
    /// What the client fingerprinted: the drivers, the host.
    pub attributes: BTreeMap<String, String>,
    /// `raw_exec` (and any other driver), detected and healthy, and when.
    pub drivers: BTreeMap<String, DriverInfo>,
    pub events: Vec<NodeEvent>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Node {
    pub fn is_ready(&self) -> bool {
        self.status == NODE_READY
    }
}

pub const NODE_INITIALIZING: &str = "initializing";
pub const NODE_READY: &str = "ready";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DriverInfo {
    pub detected: bool,
    pub healthy: bool,
    pub health_description: String,
    /// RFC 3339.
    pub update_time: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NodeEvent {
    pub message: String,
    pub subsystem: String,
    /// RFC 3339.
    pub timestamp: String,
    pub create_index: u64,
}

/// A native service registration (`/v1/service/:name`), so deregistration is visible.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceRegistration {
    #[serde(rename = "ID")]
    pub id: String,
    pub service_name: String,
    #[serde(rename = "JobID")]
    pub job_id: JobId,
    #[serde(rename = "AllocID")]
    pub alloc_id: AllocId,
    /// Empty for a group service.
    pub task: String,
    pub create_index: u64,
}

/// Writes an allocation's job, which every allocation of a job version shares, once per
/// version and thread: the JSON of the last few jobs written is kept, by the `Arc` they
/// share, and copied in as a raw value. A stop of many allocations writes every record
/// several times (to the store, the runner's state, the API); the job is most of each.
mod shared_job {
    use super::Job;
    use serde::Serializer;
    use serde_json::value::RawValue;
    use std::cell::RefCell;
    use std::sync::{Arc, Weak};

    /// How many jobs' JSON each thread keeps.
    const KEPT: usize = 8;

    thread_local! {
        static WRITTEN: RefCell<Vec<(Weak<Job>, Box<RawValue>)>> = const { RefCell::new(Vec::new()) };
    }

    pub fn serialize<S: Serializer>(job: &Arc<Job>, serializer: S) -> Result<S::Ok, S::Error> {
        let raw = WRITTEN.with_borrow_mut(|written| {
            // The same `Arc` (a `Weak` keeps its allocation, so no other job can take the
            // address while the entry lives).
            if let Some((_, raw)) = written
                .iter()
                .find(|(kept, _)| std::ptr::eq(kept.as_ptr(), Arc::as_ptr(job)))
            {
                return Some(raw.clone());
            }
            let raw = serde_json::value::to_raw_value(&**job).ok()?;
            if written.len() == KEPT {
                written.remove(0);
            }
            written.push((Arc::downgrade(job), raw.clone()));
            Some(raw)
        });
        match raw {
            Some(raw) => serde::Serialize::serialize(&raw, serializer),
            None => serde::Serialize::serialize(&**job, serializer),
        }
    }
}
