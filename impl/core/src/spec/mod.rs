//! Jobspecs in Nomad's JSON API shape (`{"Job": {...}}`, PascalCase keys, durations as
//! integer nanoseconds; `reference/http-api.md` §4), Nomad's defaults, and a validation pass
//! whose errors name the field and the problem (`validate.rs`).

pub mod fields;
mod same_spec;
mod validate;
pub mod validate_checks;
pub mod validate_extra;
mod validate_update;

pub use validate::{
    JOB_ENDPOINT_SUFFIXES, MAX_ALLOCS_PER_JOB, MAX_GROUPS_PER_JOB, MAX_NAME_BYTES,
    MAX_TASKS_PER_GROUP,
};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Nomad's default task `kill_timeout`: 5 s.
pub const DEFAULT_KILL_TIMEOUT_NS: i64 = 5_000_000_000;
/// Nomad's default job priority.
pub const DEFAULT_PRIORITY: i64 = 50;
/// The kill signal when a task sets none (the driver default; `raw_exec` sends SIGINT).
pub const DEFAULT_KILL_SIGNAL: &str = "SIGINT";

/// The body of `POST /v1/jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRegisterRequest {
    #[serde(rename = "Job")]
    pub job: Job,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Job {
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    /// `service` (default), `batch`, `system` or `sysbatch`.
    #[serde(rename = "Type")]
    pub job_type: String,
    pub priority: i64,
    pub namespace: String,
    pub region: String,
    pub datacenters: Vec<String>,
    /// `default` (the agent's one node pool) or unset.
    pub node_pool: String,
    pub task_groups: Vec<TaskGroup>,
    /// The user's own keys and values, kept; tasks see them as `NOMAD_META_<key>`.
    pub meta: Option<BTreeMap<String, String>>,
    /// Judged against the node's attributes at placement.
    pub constraints: Option<Vec<Constraint>>,
    /// The job's `update` block: each group's own overrides it field by field.
    pub update: Option<UpdateStrategy>,
    /// Set by the server (`job stop` writes a new version with `Stop=true`).
    pub stop: bool,
    // Bookkeeping, set by the server: the only fields besides `Stop` in which two stored
    // versions of a job may differ (DESIGN.md invariant `jobspec_unchanged`).
    pub version: u64,
    pub create_index: u64,
    pub modify_index: u64,
    pub job_modify_index: u64,
    /// Unix nanoseconds of the register that wrote this version's specification (a stop's
    /// version keeps it).
    pub submit_time: i64,
    /// This version was rolled out by a deployment that succeeded (Nomad's `Stable`): what
    /// `job revert`'s default and a failed deployment's `auto_revert` go back to.
    pub stable: bool,
    /// The source this version's specification was submitted as, if its register sent it
    /// (`/v1/job/:id/submission`, `job inspect -hcl`); a stop's version keeps it. Not a field
    /// of Nomad's Job: stored beside it (`daemon::persist`), never served in it.
    #[serde(skip)]
    pub submission: Option<std::sync::Arc<Submission>>,
}

/// A job's source as its register sent it (Nomad's `JobSubmission`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Submission {
    pub source: String,
    /// `hcl2` or `json` (Nomad's CLI also knows `hcl1`, which it no longer parses).
    pub format: String,
    /// The CLI's `-var` flags, as sent (HCL2 only); `None` when there were none.
    pub variable_flags: Option<BTreeMap<String, String>>,
    /// A var-file's contents, opaque (HCL2 only).
    pub variables: String,
}

impl Submission {
    /// Its size as it counts against [`MAX_SUBMISSION_BYTES`].
    pub fn size(&self) -> usize {
        let flags = self.variable_flags.iter().flatten();
        self.source.len()
            + self.format.len()
            + self.variables.len()
            + flags.map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }
}

/// The largest submission kept (Nomad's `max_job_source_size` default, `1M`: 10^6 bytes): a
/// larger one is discarded with a warning, and the job is registered without it, as Nomad
/// does. Stored with each version kept (at most `job_max_versions`), so a job holds at most
/// that many sources; its JSON may be several times its bytes (escapes), within the 8 MiB
/// request body.
pub const MAX_SUBMISSION_BYTES: usize = 1_000_000;

impl Job {
    /// The update strategy of `group`'s rollout, if it has one ([`UpdateStrategy::effective`]).
    pub fn update_of(&self, group: &str) -> Option<EffectiveUpdate> {
        let group = self.task_groups.iter().find(|g| g.name == group)?;
        UpdateStrategy::effective(&self.job_type, self.update.as_ref(), group.update.as_ref())
    }

    /// How many checks hold up a deployment of `group`: its `health_check` is `checks`
    /// (Nomad's default; the group's over the job's) and its services' and tasks' services'
    /// checks whose `on_update` is not `ignore`.
    pub fn health_checks_of(&self, group: &str) -> usize {
        let Some(group) = self.task_groups.iter().find(|g| g.name == group) else {
            return 0;
        };
        let mode = [group.update.as_ref(), self.update.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|update| update.health_check.as_deref().filter(|m| !m.is_empty()));
        if !matches!(mode, None | Some("checks")) {
            return 0;
        }
        // A task that is not running while the allocation runs (a poststop task, a prestart
        // or poststart one that is no sidecar) never registers its checks: they count not.
        let runs_throughout = |task: &str| {
            task.is_empty()
                || group.tasks.iter().find(|t| t.name == task).is_none_or(|t| {
                    t.lifecycle
                        .as_ref()
                        .is_none_or(|l| l.sidecar && l.hook != "poststop")
                })
        };
        group
            .all_services()
            .filter(|(task, _)| runs_throughout(task))
            .flat_map(|(_, service)| service.checks.iter().flatten())
            .filter(|check| check.healthiness())
            .count()
    }

    /// What an allocation of `group` runs: the group but for its count, and the job's fields
    /// that reach its tasks or decide where it may run (name, region, meta, constraints,
    /// datacenters, node pool). Two versions whose `as_run` differ replace the allocation.
    pub fn as_run(&self, group: &str) -> Option<Job> {
        let group = self.task_groups.iter().find(|g| g.name == group)?;
        Some(Job {
            id: self.id.clone(),
            name: self.name.clone(),
            region: self.region.clone(),
            namespace: self.namespace.clone(),
            meta: self.meta.clone(),
            constraints: self.constraints.clone(),
            datacenters: self.datacenters.clone(),
            node_pool: self.node_pool.clone(),
            // A changed count or update strategy alone replaces nothing.
            task_groups: vec![TaskGroup {
                count: None,
                update: None,
                ..group.clone()
            }],
            ..Job::default()
        })
    }

    /// The job with its bookkeeping cleared: what must stay equal across versions, `Stop`
    /// aside.
    /// This version as a registration would send it again (`job revert`, an auto-revert):
    /// its spec and its `Stop`, and the source it was submitted as.
    pub fn resubmitted(&self) -> Job {
        Job {
            stop: self.stop,
            submission: self.submission.clone(),
            ..self.spec_only()
        }
    }

    pub fn spec_only(&self) -> Job {
        Job {
            stop: false,
            version: 0,
            create_index: 0,
            modify_index: 0,
            job_modify_index: 0,
            submit_time: 0,
            stable: false,
            submission: None,
            ..self.clone()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroup {
    pub name: String,
    pub count: Option<i64>,
    /// Nullable: `null` means unset. Waited after the group services are deregistered.
    #[serde(rename = "ShutdownDelay")]
    pub shutdown_delay_ns: Option<i64>,
    pub services: Option<Vec<Service>>,
    pub tasks: Vec<Task>,
    pub meta: Option<BTreeMap<String, String>>,
    /// Host-mode networks: their ports are given to each allocation at placement.
    pub networks: Option<Vec<Network>>,
    pub constraints: Option<Vec<Constraint>>,
    /// What follows a task ending on its own; unset fields take Nomad's defaults for the
    /// job's type ([`RestartPolicy::effective`]).
    pub restart_policy: Option<RestartPolicy>,
    /// How a changed version replaces the group's allocations ([`UpdateStrategy::effective`]).
    pub update: Option<UpdateStrategy>,
}

impl TaskGroup {
    /// Its services and its tasks', each with its owner (the task's name; `""` for the
    /// group's).
    pub fn all_services(&self) -> impl Iterator<Item = (&str, &Service)> {
        let group = self.services.iter().flatten().map(|service| ("", service));
        let tasks = self.tasks.iter().flat_map(|task| {
            task.services
                .iter()
                .flatten()
                .map(move |service| (task.name.as_str(), service))
        });
        group.chain(tasks)
    }
}

/// The `update` block as the API carries it (durations in nanoseconds).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct UpdateStrategy {
    #[serde(rename = "Stagger")]
    pub stagger_ns: Option<i64>,
    pub max_parallel: Option<i64>,
    pub health_check: Option<String>,
    #[serde(rename = "MinHealthyTime")]
    pub min_healthy_time_ns: Option<i64>,
    #[serde(rename = "HealthyDeadline")]
    pub healthy_deadline_ns: Option<i64>,
    #[serde(rename = "ProgressDeadline")]
    pub progress_deadline_ns: Option<i64>,
    pub auto_revert: Option<bool>,
    pub auto_promote: Option<bool>,
    pub canary: Option<i64>,
}

/// A group's update strategy with every field decided: what a rollout follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveUpdate {
    /// Allocations of an older version replaced at a time; at least 1.
    pub max_parallel: u64,
    pub min_healthy_time_ns: i64,
    pub healthy_deadline_ns: i64,
    pub progress_deadline_ns: i64,
    pub auto_revert: bool,
    /// Canaries an update of running allocations places first (0: none).
    #[serde(default)]
    pub canary: u64,
    /// The deployment promotes itself once every canary is healthy.
    #[serde(default)]
    pub auto_promote: bool,
    /// A system job's (Nomad 1.11's system deployments): `canary` is a percentage of the
    /// allocations an update replaces, and each canary takes the place of the allocation it
    /// updates, on its node, instead of standing beside the group's `count`.
    #[serde(default)]
    pub canary_in_place: bool,
}

impl EffectiveUpdate {
    /// The canaries an update of `destructive` running allocations places (Nomad's
    /// `DesiredCanaries`): a service job's `canary`; a system job's percentage of them,
    /// rounded up, at most `max_parallel` (and at most them: one node holds one each).
    pub fn canaries_for(&self, destructive: u64) -> u64 {
        if self.canary_in_place {
            let wanted = (self.canary.saturating_mul(destructive)).div_ceil(100);
            wanted.min(self.max_parallel).min(destructive)
        } else {
            self.canary
        }
    }
}

impl UpdateStrategy {
    /// Nomad's API's `Empty`: nothing set to other than its zero. (`nomad job inspect`
    /// shows such a block on every batch job: the server's job-level strategy is a value.)
    pub fn is_empty(&self) -> bool {
        let zero = |value: Option<i64>| value.is_none_or(|v| v == 0);
        zero(self.stagger_ns)
            && zero(self.max_parallel)
            && self.health_check.as_deref().is_none_or(str::is_empty)
            && zero(self.min_healthy_time_ns)
            && zero(self.healthy_deadline_ns)
            && zero(self.progress_deadline_ns)
            && self.auto_revert != Some(true)
            && self.auto_promote != Some(true)
            && zero(self.canary)
    }

    /// Nomad's defaults (`api.DefaultUpdateStrategy`): one at a time, healthy after 10 s,
    /// unhealthy after 5 m, the deployment failed after 10 m without progress.
    pub const DEFAULT_MAX_PARALLEL: i64 = 1;
    pub const DEFAULT_MIN_HEALTHY_TIME_NS: i64 = 10_000_000_000;
    pub const DEFAULT_HEALTHY_DEADLINE_NS: i64 = 300_000_000_000;
    pub const DEFAULT_PROGRESS_DEADLINE_NS: i64 = 600_000_000_000;

    /// The strategy a group's rollout follows: the group's fields over the job's over
    /// Nomad's defaults, as Nomad's API canonicalises a service or system job (one without
    /// any `update` block gets the defaults). `None` — every allocation replaced at once, no
    /// deployment — for batch and sysbatch jobs, and for `max_parallel = 0`. A system job's
    /// `max_parallel` is per group, as Nomad 1.11's system scheduler has it: on this agent's
    /// one node each group holds one allocation, so its groups are replaced together, each
    /// watched by the deployment.
    pub fn effective(
        job_type: &str,
        job: Option<&UpdateStrategy>,
        group: Option<&UpdateStrategy>,
    ) -> Option<EffectiveUpdate> {
        if !matches!(job_type, "service" | "system") {
            return None;
        }
        let pick = |field: fn(&UpdateStrategy) -> Option<i64>, default: i64| {
            group
                .and_then(field)
                .or_else(|| job.and_then(field))
                .unwrap_or(default)
        };
        let max_parallel = pick(|u| u.max_parallel, Self::DEFAULT_MAX_PARALLEL);
        if max_parallel <= 0 {
            return None;
        }
        Some(EffectiveUpdate {
            max_parallel: max_parallel as u64,
            min_healthy_time_ns: pick(|u| u.min_healthy_time_ns, Self::DEFAULT_MIN_HEALTHY_TIME_NS),
            healthy_deadline_ns: pick(|u| u.healthy_deadline_ns, Self::DEFAULT_HEALTHY_DEADLINE_NS),
            progress_deadline_ns: pick(
                |u| u.progress_deadline_ns,
                Self::DEFAULT_PROGRESS_DEADLINE_NS,
            ),
            auto_revert: group
                .and_then(|u| u.auto_revert)
                .or_else(|| job.and_then(|u| u.auto_revert))
                .unwrap_or(false),
            canary: pick(|u| u.canary, 0).max(0) as u64,
            auto_promote: group
                .and_then(|u| u.auto_promote)
                .or_else(|| job.and_then(|u| u.auto_promote))
                .unwrap_or(false),
            canary_in_place: job_type == "system",
        })
    }
}

/// The `restart` block as the API carries it (durations in nanoseconds).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RestartPolicy {
    pub attempts: Option<i64>,
    #[serde(rename = "Interval")]
    pub interval_ns: Option<i64>,
    #[serde(rename = "Delay")]
    pub delay_ns: Option<i64>,
    pub mode: Option<String>,
    pub render_templates: Option<bool>,
}

/// What the restart policy does once its attempts in the interval are used up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartMode {
    /// The task is not restarted: it fails, and with it the allocation.
    Fail,
    /// The task is restarted when the interval is over, with a fresh count.
    Delay,
}

/// A task's restart policy with every field decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveRestartPolicy {
    pub attempts: u32,
    pub interval_ns: i64,
    pub delay_ns: i64,
    pub mode: RestartMode,
}

impl Default for EffectiveRestartPolicy {
    fn default() -> Self {
        RestartPolicy::effective("service", None, None)
    }
}

impl RestartPolicy {
    // invariant: restart_policy_respected
    /// Nomad's defaults (`structs.NewRestartPolicy`): service and system jobs 2 attempts in
    /// 30 m, batch jobs 3 in 24 h; a 15 s delay; mode `fail`. The task's block overrides the
    /// group's field by field, the group's overrides the defaults.
    pub fn effective(
        job_type: &str,
        group: Option<&RestartPolicy>,
        task: Option<&RestartPolicy>,
    ) -> EffectiveRestartPolicy {
        const SECOND: i64 = 1_000_000_000;
        let (attempts, interval_ns) = if job_type == "batch" {
            (3, 24 * 3600 * SECOND)
        } else {
            (2, 30 * 60 * SECOND)
        };
        let pick = |field: fn(&RestartPolicy) -> Option<i64>, default: i64| {
            task.and_then(field)
                .or_else(|| group.and_then(field))
                .unwrap_or(default)
        };
        let mode = task
            .and_then(|p| p.mode.as_deref())
            .or_else(|| group.and_then(|p| p.mode.as_deref()))
            .unwrap_or("fail");
        EffectiveRestartPolicy {
            attempts: u32::try_from(pick(|p| p.attempts, attempts)).unwrap_or(0),
            interval_ns: pick(|p| p.interval_ns, interval_ns),
            delay_ns: pick(|p| p.delay_ns, 15 * SECOND),
            mode: if mode == "delay" {
                RestartMode::Delay
            } else {
                RestartMode::Fail
            },
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Task {
    pub name: String,
    pub driver: String,
    pub config: Option<BTreeMap<String, serde_json::Value>>,
    pub env: Option<BTreeMap<String, String>>,
    #[serde(rename = "KillTimeout")]
    pub kill_timeout_ns: Option<i64>,
    /// `""` means the driver default.
    pub kill_signal: String,
    /// 0 means none.
    #[serde(rename = "ShutdownDelay")]
    pub shutdown_delay_ns: i64,
    pub lifecycle: Option<Lifecycle>,
    pub leader: bool,
    pub services: Option<Vec<Service>>,
    /// The user the task runs as; `""` means the agent's own. raw_exec honours it as Nomad's
    /// does when the agent runs as root (the supervisor takes on the user's uid, gid and
    /// groups before it executes the task).
    pub user: String,
    pub meta: Option<BTreeMap<String, String>>,
    /// Recorded, and given to the task as `NOMAD_CPU_LIMIT` and `NOMAD_MEMORY_LIMIT`; not
    /// enforced.
    pub resources: Option<Resources>,
    pub constraints: Option<Vec<Constraint>>,
    /// Files written into the task's directory before it starts (inline data only).
    pub templates: Option<Vec<Template>>,
    /// Overrides the group's restart policy field by field.
    pub restart_policy: Option<RestartPolicy>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resources {
    #[serde(rename = "CPU")]
    pub cpu: Option<i64>,
    #[serde(rename = "Cores")]
    pub cores: Option<i64>,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: Option<i64>,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: Option<i64>,
}

impl Resources {
    /// Nomad's defaults (its api's `Resources.Canonicalize`): 100 MHz and 300 MB, but no
    /// CPU where cores are asked for.
    fn canonicalize(&mut self) {
        if self.cores.is_none() {
            self.cores = Some(0);
            self.cpu.get_or_insert(DEFAULT_CPU_MHZ);
        }
        self.cpu.get_or_insert(0);
        self.memory_mb.get_or_insert(DEFAULT_MEMORY_MB);
    }
}

/// A task's CPU and memory when its spec gives none (Nomad's `DefaultResources`).
pub const DEFAULT_CPU_MHZ: i64 = 100;
pub const DEFAULT_MEMORY_MB: i64 = 300;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Constraint {
    #[serde(rename = "LTarget")]
    pub l_target: String,
    #[serde(rename = "RTarget")]
    pub r_target: String,
    #[serde(rename = "Operand")]
    pub operand: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Network {
    /// `host` (or unset): the only mode.
    pub mode: String,
    pub dynamic_ports: Option<Vec<Port>>,
    pub reserved_ports: Option<Vec<Port>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Port {
    pub label: String,
    /// A reserved (static) port's number; 0 for a dynamic one.
    pub value: i64,
    /// Where the task listens when it maps the port (kept; host mode does not map).
    pub to: i64,
    pub host_network: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Template {
    /// The file's contents, as given: no template directives are rendered.
    pub embedded_tmpl: String,
    /// Relative to the task's directory.
    pub dest_path: String,
    /// Octal, e.g. `"0644"` (the default).
    pub perms: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Lifecycle {
    /// `prestart`, `poststart` or `poststop`.
    pub hook: String,
    pub sidecar: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Service {
    pub name: String,
    pub provider: String,
    pub tags: Option<Vec<String>>,
    /// The port (a group network's label) the registration carries.
    pub port_label: String,
    /// For a group service: the task it belongs to (kept).
    pub task_name: String,
    pub meta: Option<BTreeMap<String, String>>,
    /// Nomad-native checks, run by the agent while the service is registered.
    pub checks: Option<Vec<ServiceCheck>>,
}

/// A service's `check` block as the API carries it (Nomad's `api.ServiceCheck`; durations
/// in nanoseconds). The agent runs `http` and `tcp` checks against the service's port
/// (`client/checks`); the fields it does not act on are warned of (`fields.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServiceCheck {
    pub name: String,
    /// `http` or `tcp`.
    #[serde(rename = "Type")]
    pub check_type: String,
    /// An http check's path, relative (`/health`).
    pub path: String,
    /// An http check's method; `GET` when empty.
    pub method: String,
    /// `http` (the default); `https` is refused.
    pub protocol: String,
    /// The port checked (a group network's label); the service's own when empty.
    pub port_label: String,
    #[serde(rename = "Interval")]
    pub interval_ns: i64,
    #[serde(rename = "Timeout")]
    pub timeout_ns: i64,
    /// `ignore`: the check does not hold up a deployment (Nomad's readiness mode).
    pub on_update: String,
}

impl ServiceCheck {
    /// Nomad's `GetCheckMode`: a check with `on_update = "ignore"` only tells readiness.
    pub fn healthiness(&self) -> bool {
        self.on_update != "ignore"
    }
}

/// A task's role in the kill order (`reference/nomad-stop-path.md` §2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskRole {
    Leader,
    Main,
    Sidecar,
    Poststop,
}

impl Task {
    pub fn role(&self) -> TaskRole {
        match &self.lifecycle {
            Some(lifecycle) if lifecycle.hook == "poststop" => TaskRole::Poststop,
            Some(lifecycle) if lifecycle.sidecar => TaskRole::Sidecar,
            _ if self.leader => TaskRole::Leader,
            _ => TaskRole::Main,
        }
    }
}

/// One thing wrong with a jobspec: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The field's path, e.g. `TaskGroups[0].Tasks[1].KillTimeout`.
    pub field: String,
    pub problem: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// Every problem found in a jobspec, in field order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<_> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "invalid job: {}", lines.join("; "))
    }
}

impl std::error::Error for SpecErrors {}

/// Decode a register body, apply Nomad's defaults and validate it. A body that does not
/// decode (wrong JSON type, a duration given as a string) is an error naming the position.
pub fn parse_register_body(body: &[u8]) -> Result<Job, SpecErrors> {
    parse_register_body_warned(body).map(|(job, _)| job)
}

/// [`parse_register_body`], with the warnings for fields accepted and not honoured
/// ([`fields`]).
pub fn parse_register_body_warned(body: &[u8]) -> Result<(Job, Vec<String>), SpecErrors> {
    let (job, warnings) = decode_register_body_warned(body)?;
    job.validate()?;
    Ok((job, warnings))
}

/// Decode a register body and apply Nomad's defaults, without validating it (what
/// `/v1/jobs/parse` with `Canonicalize` answers, and what `/v1/validate/job` validates).
pub fn decode_register_body(body: &[u8]) -> Result<Job, SpecErrors> {
    decode_register_body_warned(body).map(|(job, _)| job)
}

/// [`decode_register_body`], with the warnings. A field this agent refuses, or an unknown
/// one that is set, is an error naming it ([`fields::classify`]).
pub fn decode_register_body_warned(body: &[u8]) -> Result<(Job, Vec<String>), SpecErrors> {
    let decode_error = |error: serde_json::Error| {
        SpecErrors(vec![SpecError {
            field: "Job".to_string(),
            problem: error.to_string(),
        }])
    };
    let mut value: serde_json::Value = serde_json::from_slice(body).map_err(decode_error)?;
    let jobs: Vec<&serde_json::Value> = value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.eq_ignore_ascii_case("job"))
        .map(|(_, v)| v)
        .collect();
    if jobs.len() > 1 {
        // Which one a decoder takes is its own business; the agent takes neither.
        return Err(SpecErrors(vec![SpecError {
            field: "Job".into(),
            problem: format!("given {} times (in different cases)", jobs.len()),
        }]));
    }
    let job_value = jobs.first().copied();
    let classified = job_value.map(fields::classify).unwrap_or_default();
    if !classified.refused.is_empty() {
        return Err(SpecErrors(classified.refused));
    }
    normalize_keys(&mut value);
    let request: JobRegisterRequest = serde_json::from_value(value).map_err(decode_error)?;
    let mut job = request.job;
    job.canonicalize();
    Ok((job, classified.warnings))
}

/// Every field name of the jobspec types, as Nomad spells it.
const FIELDS: [&str; 62] = [
    "NodePool",
    "Checks",
    "Path",
    "Method",
    "Protocol",
    "Interval",
    "Timeout",
    "OnUpdate",
    "Meta",
    "Constraints",
    "LTarget",
    "RTarget",
    "Operand",
    "Networks",
    "Mode",
    "DynamicPorts",
    "ReservedPorts",
    "Label",
    "Value",
    "To",
    "HostNetwork",
    "Resources",
    "CPU",
    "Cores",
    "MemoryMB",
    "MemoryMaxMB",
    "Templates",
    "EmbeddedTmpl",
    "DestPath",
    "Perms",
    "Tags",
    "PortLabel",
    "TaskName",
    "Job",
    "ID",
    "Name",
    "Type",
    "Priority",
    "Namespace",
    "Region",
    "Datacenters",
    "TaskGroups",
    "Stop",
    "Version",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "Count",
    "ShutdownDelay",
    "Services",
    "Tasks",
    "Driver",
    "Config",
    "Env",
    "KillTimeout",
    "KillSignal",
    "Lifecycle",
    "Leader",
    "Hook",
    "Sidecar",
    "Provider",
    "User",
];

/// Fields whose values are the user's own maps: their keys are data, never renamed.
const USER_MAPS: [&str; 3] = ["Config", "Env", "Meta"];

/// Go's JSON decoding, which Nomad's API clients rely on (`reference/http-api.md` §4.1): a
/// key matches a field whatever its case, and `null` stands for an absent value. Keys are
/// renamed to Nomad's spelling and `null` members dropped, so that serde's defaults apply.
fn normalize_keys(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            let members = std::mem::take(map);
            for (key, mut member) in members {
                if member.is_null() {
                    continue;
                }
                let key = FIELDS
                    .iter()
                    .find(|field| field.eq_ignore_ascii_case(&key))
                    .map_or(key, |field| field.to_string());
                if !USER_MAPS.contains(&key.as_str()) {
                    normalize_keys(&mut member);
                }
                map.insert(key, member);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(normalize_keys),
        _ => {}
    }
}

impl Job {
    /// Nomad's defaults (`reference/http-api.md` §4.2). Idempotent.
    pub fn canonicalize(&mut self) {
        if self.name.is_empty() {
            self.name = self.id.clone();
        }
        if self.job_type.is_empty() {
            self.job_type = "service".to_string();
        }
        if self.priority == 0 {
            self.priority = DEFAULT_PRIORITY;
        }
        if self.namespace.is_empty() {
            self.namespace = "default".to_string();
        }
        if self.region.is_empty() {
            self.region = "global".to_string();
        }
        if self.datacenters.is_empty() {
            self.datacenters = vec!["*".to_string()];
        }
        for group in &mut self.task_groups {
            group.count.get_or_insert(1);
            for task in &mut group.tasks {
                task.kill_timeout_ns.get_or_insert(DEFAULT_KILL_TIMEOUT_NS);
                task.resources
                    .get_or_insert_with(Resources::default)
                    .canonicalize();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_with_two_jobs_is_refused() {
        let body = br#"{"Job": {"ID": "a"}, "job": {"ID": "a", "Periodic": {"Spec": "x"}}}"#;
        let errors = parse_register_body(body).unwrap_err();
        assert_eq!(errors.0[0].field, "Job");
        assert!(errors.0[0].problem.contains("2 times"), "{errors}");
    }

    const MINIMAL: &str = r#"{"Job": {"ID": "web", "TaskGroups": [{"Name": "g",
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/sleep"}}]}]}}"#;

    #[test]
    fn a_system_job_rolls_out_per_group_with_canaries_in_place_and_a_sysbatch_one_not_at_all() {
        let body = |job_type: &str, update: &str| {
            format!(
                r#"{{"Job": {{"ID": "web", "Type": "{job_type}", "Update": {update},
                "TaskGroups": [{{"Name": "g", "Tasks": [{{"Name": "t", "Driver": "raw_exec",
                "Config": {{"command": "/bin/sleep"}}}}]}}]}}}}"#
            )
        };
        let (job, warnings) = parse_register_body_warned(
            body(
                "system",
                r#"{"MaxParallel": 2, "Canary": 50, "AutoRevert": true}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        assert!(
            !warnings.iter().any(|w| w.contains("not honoured")),
            "{warnings:?}"
        );
        let update = job.update_of("g").expect("a system job rolls out");
        assert_eq!(
            (update.max_parallel, update.canary, update.auto_revert),
            (2, 50, true)
        );
        assert!(update.canary_in_place);
        // 50 % of the one allocation an update replaces, rounded up; none of none.
        assert_eq!((update.canaries_for(1), update.canaries_for(0)), (1, 0));
        let service = parse_register_body(body("service", r#"{"Canary": 3}"#).as_bytes()).unwrap();
        let service = service.update_of("g").unwrap();
        assert_eq!(
            (service.canaries_for(1), service.canary_in_place),
            (3, false)
        );

        // What `nomad job inspect` shows of any batch job: an empty block, accepted.
        let zeros = r#"{"Stagger": 0, "MaxParallel": 0, "HealthCheck": "", "MinHealthyTime": 0,
            "HealthyDeadline": 0, "ProgressDeadline": 0, "AutoRevert": false,
            "AutoPromote": false, "Canary": 0}"#;
        parse_register_body(body("batch", zeros).as_bytes()).expect("an empty block");
        let errors = parse_register_body(body("sysbatch", r#"{"MaxParallel": 1}"#).as_bytes())
            .expect_err("a sysbatch job has no rollout");
        assert!(
            errors
                .to_string()
                .contains(r#"Job type "sysbatch" does not allow update block"#),
            "{errors}"
        );
    }

    #[test]
    fn minimal_body_gets_nomads_defaults() {
        let job = parse_register_body(MINIMAL.as_bytes()).unwrap();
        assert_eq!(
            (job.name.as_str(), job.job_type.as_str(), job.priority),
            ("web", "service", 50)
        );
        assert_eq!(
            (job.namespace.as_str(), job.region.as_str()),
            ("default", "global")
        );
        assert_eq!(job.datacenters, ["*"]);
        let group = &job.task_groups[0];
        assert_eq!((group.count, group.shutdown_delay_ns), (Some(1), None));
        let task = &group.tasks[0];
        assert_eq!(task.kill_timeout_ns, Some(DEFAULT_KILL_TIMEOUT_NS));
        let resources = task.resources.clone().expect("defaulted");
        assert_eq!(
            (resources.cpu, resources.cores, resources.memory_mb),
            (Some(100), Some(0), Some(300))
        );
        assert_eq!((task.shutdown_delay_ns, task.kill_signal.as_str()), (0, ""));
        assert_eq!(task.role(), TaskRole::Main);
    }

    #[test]
    fn roles_follow_lifecycle_and_leader() {
        let task = |leader, hook: Option<(&str, bool)>| Task {
            leader,
            lifecycle: hook.map(|(hook, sidecar)| Lifecycle {
                hook: hook.into(),
                sidecar,
            }),
            ..Task::default()
        };
        assert_eq!(task(true, None).role(), TaskRole::Leader);
        assert_eq!(
            task(false, Some(("prestart", true))).role(),
            TaskRole::Sidecar
        );
        assert_eq!(
            task(false, Some(("prestart", false))).role(),
            TaskRole::Main
        );
        assert_eq!(
            task(false, Some(("poststop", false))).role(),
            TaskRole::Poststop
        );
    }

    #[test]
    fn a_duration_given_as_a_string_is_a_decode_error() {
        let body = MINIMAL.replace(
            r#""Driver": "raw_exec""#,
            r#""Driver": "raw_exec", "KillTimeout": "5s""#,
        );
        let errors = parse_register_body(body.as_bytes()).unwrap_err();
        assert_eq!(errors.0[0].field, "Job");
        assert!(
            errors.0[0].problem.contains("invalid type: string \"5s\""),
            "{errors}"
        );
    }

    /// Nomad's clients send keys in any case and `null` for absent values (Go semantics).
    #[test]
    fn keys_match_whatever_their_case_and_null_is_absent() {
        let body = r#"{"job": {"id": "web", "datacenters": null, "taskgroups": [{"name": "g",
            "shutdowndelay": 5000000000, "Tasks": [{"NAME": "t", "driver": "raw_exec",
            "lifecycle": null, "Config": {"command": "/bin/sleep", "Args": ["1"]}}]}]}}"#;
        let job = parse_register_body(body.as_bytes()).unwrap();
        assert_eq!(job.id, "web");
        assert_eq!(job.datacenters, ["*"], "null took the default");
        let group = &job.task_groups[0];
        assert_eq!(
            (group.name.as_str(), group.shutdown_delay_ns),
            ("g", Some(5_000_000_000))
        );
        let config = group.tasks[0].config.as_ref().unwrap();
        assert!(
            config.contains_key("Args") && config.contains_key("command"),
            "user keys kept: {config:?}"
        );
        assert_eq!(group.tasks[0].name, "t");
    }
}
