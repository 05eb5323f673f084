//! Every field of Nomad's jobspec, and what this agent does with it: honours it, accepts it
//! with a warning (the register response's `Warnings`, which the CLI prints) because it
//! does not act on it, or refuses it with a 400 naming it because acting as if it did would
//! mislead (a job that needs Vault, a periodic job). Nothing is dropped silently. An unset
//! field — `null`, `false`, `0`, `""`, `[]`, `{}`, as Nomad's Go client sends every field it
//! has — is absent, whatever its name; an unknown field that is set is refused.
//!
//! Nomad 2.0.1's warnings for services with no `shutdown_delay` are returned too. HCL's
//! blocks are read into the same fields (`hcl_jobspec/blocks.rs`), so the same rules apply.
//!
//! | | honoured | warned (accepted, not acted on) | refused |
//! |---|---|---|---|
//! | job | `ID`, `Name`, `Type`, `Priority`, `Namespace` (`default`), `Region`, `Datacenters` (globs, judged against the node), `NodePool` (`default`), `TaskGroups`, `Meta`, `Constraints`, `Update` (as the group's) | `AllAtOnce`, `Update`'s warned fields (as the group's), `Reschedule`, `Migrate`, `Affinities`, `Spreads`, `UI`, `ConsulToken`, `ConsulNamespace`, `VersionTag` | `Periodic`, `ParameterizedJob`, `Dispatched`, `Payload`, `ParentID`, `Multiregion`, `VaultToken`, `VaultNamespace` |
//! | group | `Name`, `Count`, `ShutdownDelay`, `Services`, `Tasks`, `Meta`, `Networks` (host mode; ports), `Constraints`, `RestartPolicy` (`Attempts`, `Interval`, `Delay`, `Mode`), `Update` (`MaxParallel`, `HealthCheck`, `MinHealthyTime`, `HealthyDeadline`, `ProgressDeadline`, `AutoRevert`, `Canary`, `AutoPromote`) | `RestartPolicy.RenderTemplates`, `ReschedulePolicy`, `EphemeralDisk`, `Update`'s `Stagger`, `Migrate`, `Affinities`, `Spreads`, `Scaling`, `Disconnect` and its older fields, `Consul` | `Volumes` |
//! | task | `Name`, `Driver`, `User`, `Lifecycle`, `Config`, `Env`, `Services`, `KillTimeout`, `KillSignal`, `Leader`, `ShutdownDelay`, `Meta`, `Resources` (recorded: `CPU`, `Cores`, `MemoryMB`, `MemoryMaxMB`), `Constraints`, `Templates` (inline data), `RestartPolicy` (over the group's) | `LogConfig`, `Affinities`, `Kind`, `Identity`/`Identities`, `Consul`, `ScalingPolicies` | `Artifacts`, `Vault`, `VolumeMounts`, `DispatchPayload`, `CSIPluginConfig`, `Actions`, `Schedule` |
//! | service | `Name`, `Provider`, `Tags`, `PortLabel`, `TaskName`, `Meta`, `Checks` (`http`, `tcp`: `Name`, `Type`, `Path`, `Method`, `Protocol`, `PortLabel`, `Interval`, `Timeout`, `OnUpdate`; the rest warned) | `CheckRestart`, `CanaryTags`, `CanaryMeta`, `EnableTagOverride`, `AddressMode`, `Address`, `TaggedAddresses`, `OnUpdate`, `Identity`, `Cluster`, `Kind`, `Weights` | `Connect` |
//! | inside | ports: `Label`, `Value` (static), `To`, `HostNetwork` (`default`); constraints: `LTarget` (`${attr.*}`, `${node.*}`, `${meta.*}`), `Operand` (`=`, `==`, `is`, `!=`, `not`, `is_set`, `is_not_set`), `RTarget`; templates: `EmbeddedTmpl` (no `{{ }}` directives), `DestPath` (inside the task directory), `Perms` | resources `DiskMB`, `IOPS`, `SecretsMB`; network `MBits`, `IP`, `CIDR`, `Device`; template `ChangeMode`, `ChangeSignal`, `Splay`, `Wait`, delimiters | resources `Networks`, `Devices`, `NUMA`; network modes but host, `Hostname`, `DNS`, `CNI`; template `SourcePath`, `Envvars`, `Uid`, `Gid`; other constraint operands |
//!
//! What honoured means for a task: its environment has `NOMAD_META_<key>` (job, then
//! group, then task), `NOMAD_DC`, `NOMAD_REGION`, `NOMAD_CPU_LIMIT` and
//! `NOMAD_MEMORY_LIMIT` (Nomad's defaults for what `resources` leaves out: 300 MB, and
//! 100 MHz unless it asks for `cores`), and per port `NOMAD_PORT_<label>`,
//! `NOMAD_ADDR_<label>`, `NOMAD_IP_<label>`, `NOMAD_HOST_PORT_<label>`: a static port as
//! given, a dynamic one free in 20000–32000 on the node (searched from a point hashed from
//! the node, job, group and label, as Nomad picks at random), shown under
//! `AllocatedResources.Shared.Ports`. Templates are written into the task directory before
//! the task starts, following no symlink (`raw_exec/beneath.rs`).

use super::SpecError;
use serde_json::Value;

/// What the agent does with a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Acted on (or, for user data, kept and shown).
    Honoured(Child),
    /// Set by the server; ignored on input, as Nomad ignores it.
    Server,
    /// Accepted, not acted on: a warning says so.
    Warned(&'static str),
    /// Refused: a 400 names it.
    Refused(&'static str),
}

/// What an honoured field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    /// A value checked by the decoder and `validate`.
    Value,
    /// The user's own map or free-form object (`Config`, `Env`, `Meta`).
    Free,
    Object(&'static [Field]),
    List(&'static [Field]),
}

pub type Field = (&'static str, Treatment);

use Child::{Free, List, Object, Value as V};
use Treatment::{Honoured as H, Refused as R, Server as S, Warned as W};

/// The `update` block: a rollout replaces `max_parallel` allocations at a time, each batch
/// once the last is healthy (its tasks ran for `min_healthy_time`) and stopped.
const UPDATE: &[Field] = &[
    ("MaxParallel", H(V)),
    ("HealthCheck", H(V)),
    ("MinHealthyTime", H(V)),
    (
        "Stagger",
        W("accepted, not honoured: deprecated by Nomad; min_healthy_time paces a rollout"),
    ),
    ("HealthyDeadline", H(V)),
    ("ProgressDeadline", H(V)),
    ("AutoRevert", H(V)),
    ("AutoPromote", H(V)),
    ("Canary", H(V)),
];
const NO_RESCHEDULE: &str = "accepted, not honoured: a failed allocation is not rescheduled";
const NO_SCORING: &str = "accepted, not honoured: the agent has one node, so there is nothing \
                          to prefer or spread over";
const NO_CONSUL: &str = "accepted, not honoured: the agent has no Consul integration";
const NO_DISCONNECT: &str = "accepted, not honoured: the client runs in the agent's process";
const NO_VAULT: &str = "this agent has no Vault integration; a task that needs Vault secrets \
                        would start without them";

pub const JOB: &[Field] = &[
    ("ID", H(V)),
    ("Name", H(V)),
    ("Type", H(V)),
    ("Priority", H(V)),
    ("Namespace", H(V)),
    ("Region", H(V)),
    ("Datacenters", H(V)),
    ("NodePool", H(V)),
    ("TaskGroups", H(List(GROUP))),
    ("Stop", H(V)),
    ("Meta", H(Free)),
    ("Constraints", H(List(CONSTRAINT))),
    ("Version", S),
    ("CreateIndex", S),
    ("ModifyIndex", S),
    ("JobModifyIndex", S),
    ("SubmitTime", S),
    ("Status", S),
    ("StatusDescription", S),
    ("Stable", S),
    ("NomadTokenID", S),
    (
        "AllAtOnce",
        W("accepted, not honoured: evaluations are processed one at a time anyway"),
    ),
    ("Update", H(Object(UPDATE))),
    ("Reschedule", W(NO_RESCHEDULE)),
    (
        "Migrate",
        W("accepted, not honoured: there is no node to drain to"),
    ),
    ("Affinities", W(NO_SCORING)),
    ("Spreads", W(NO_SCORING)),
    ("UI", W("accepted, not honoured: the agent has no web UI")),
    ("ConsulToken", W(NO_CONSUL)),
    ("ConsulNamespace", W(NO_CONSUL)),
    (
        "VersionTag",
        W("accepted, not kept: job versions have no tags here"),
    ),
    (
        "Periodic",
        R("periodic jobs are not supported by this agent"),
    ),
    (
        "ParameterizedJob",
        R("parameterized jobs are not supported by this agent"),
    ),
    (
        "Dispatched",
        R("dispatched jobs are not supported by this agent"),
    ),
    (
        "DispatchIdempotencyToken",
        R("dispatched jobs are not supported by this agent"),
    ),
    (
        "Payload",
        R("dispatched jobs are not supported by this agent"),
    ),
    ("ParentID", R("child jobs are not supported by this agent")),
    (
        "Multiregion",
        R("multiregion jobs are not supported by this agent"),
    ),
    ("VaultToken", R(NO_VAULT)),
    ("VaultNamespace", R(NO_VAULT)),
];

pub const GROUP: &[Field] = &[
    ("Name", H(V)),
    ("Count", H(V)),
    ("ShutdownDelay", H(V)),
    ("Services", H(List(SERVICE))),
    ("Tasks", H(List(TASK))),
    ("Meta", H(Free)),
    ("Networks", H(List(NETWORK))),
    ("Constraints", H(List(CONSTRAINT))),
    ("RestartPolicy", H(Object(RESTART_POLICY))),
    ("ReschedulePolicy", W(NO_RESCHEDULE)),
    (
        "EphemeralDisk",
        W("accepted, not honoured: the task directories are not size-limited"),
    ),
    ("Update", H(Object(UPDATE))),
    (
        "Migrate",
        W("accepted, not honoured: there is no node to drain to"),
    ),
    ("Affinities", W(NO_SCORING)),
    ("Spreads", W(NO_SCORING)),
    (
        "Scaling",
        W("accepted, not honoured: the agent has no autoscaler endpoints"),
    ),
    ("Disconnect", W(NO_DISCONNECT)),
    ("StopAfterClientDisconnect", W(NO_DISCONNECT)),
    ("MaxClientDisconnect", W(NO_DISCONNECT)),
    ("PreventRescheduleOnLost", W(NO_DISCONNECT)),
    ("Consul", W(NO_CONSUL)),
    ("Volumes", R("volumes are not supported by this agent")),
];

pub const TASK: &[Field] = &[
    ("Name", H(V)),
    ("Driver", H(V)),
    ("User", H(V)),
    ("Lifecycle", H(Object(LIFECYCLE))),
    ("Config", H(Free)),
    ("Env", H(Free)),
    ("Services", H(List(SERVICE))),
    ("KillTimeout", H(V)),
    ("KillSignal", H(V)),
    ("Leader", H(V)),
    ("ShutdownDelay", H(V)),
    ("Meta", H(Free)),
    ("Resources", H(Object(RESOURCES))),
    ("Constraints", H(List(CONSTRAINT))),
    ("Templates", H(List(TEMPLATE))),
    ("RestartPolicy", H(Object(RESTART_POLICY))),
    (
        "LogConfig",
        W("accepted, not honoured: task logs are not rotated"),
    ),
    ("Affinities", W(NO_SCORING)),
    ("Kind", W("accepted, not honoured: no Consul Connect")),
    (
        "Identity",
        W("accepted, not honoured: the agent issues no workload identities"),
    ),
    (
        "Identities",
        W("accepted, not honoured: the agent issues no workload identities"),
    ),
    ("Consul", W(NO_CONSUL)),
    (
        "ScalingPolicies",
        W("accepted, not honoured: the agent has no autoscaler endpoints"),
    ),
    (
        "Artifacts",
        R("artifacts are not supported by this agent: the task would start without its files"),
    ),
    ("Vault", R(NO_VAULT)),
    ("VolumeMounts", R("volumes are not supported by this agent")),
    (
        "DispatchPayload",
        R("dispatched jobs are not supported by this agent"),
    ),
    (
        "CSIPluginConfig",
        R("CSI plugins are not supported by this agent"),
    ),
    ("Actions", R("task actions are not supported by this agent")),
    (
        "Schedule",
        R("task schedules are not supported by this agent"),
    ),
];

pub const SERVICE: &[Field] = &[
    ("Name", H(V)),
    ("Provider", H(V)),
    ("Tags", H(V)),
    ("PortLabel", H(V)),
    ("TaskName", H(V)),
    ("Meta", H(Free)),
    ("Checks", H(List(CHECK))),
    (
        "CheckRestart",
        W("accepted, not honoured: a failing check restarts nothing"),
    ),
    (
        "CanaryTags",
        W("accepted, not honoured: a canary registers the service's own tags"),
    ),
    (
        "CanaryMeta",
        W("accepted, not honoured: a canary registers the service's own meta"),
    ),
    ("EnableTagOverride", W(NO_CONSUL)),
    (
        "AddressMode",
        W("accepted, not honoured: services have the host's address"),
    ),
    (
        "Address",
        W("accepted, not honoured: services have the host's address"),
    ),
    ("TaggedAddresses", W(NO_CONSUL)),
    (
        "OnUpdate",
        W("accepted, not honoured: a check's own on_update decides"),
    ),
    (
        "Identity",
        W("accepted, not honoured: the agent issues no workload identities"),
    ),
    ("Cluster", W(NO_CONSUL)),
    ("Kind", W(NO_CONSUL)),
    ("Weights", W(NO_CONSUL)),
    (
        "Connect",
        R("Consul Connect is not supported by this agent"),
    ),
];

/// A service's `check`: the agent runs `http` and `tcp` checks against the allocation's
/// port while the service is registered, and `health_check = "checks"` waits for them
/// (`client/alloc_runner/health.rs`, the agent's `daemon/checks/`).
pub const CHECK: &[Field] = &[
    ("Name", H(V)),
    ("Type", H(V)),
    ("Path", H(V)),
    ("Method", H(V)),
    ("Protocol", H(V)),
    ("PortLabel", H(V)),
    ("Interval", H(V)),
    ("Timeout", H(V)),
    ("OnUpdate", H(V)),
    (
        "Command",
        W("accepted, not honoured: script checks are refused by their type"),
    ),
    (
        "Args",
        W("accepted, not honoured: script checks are refused by their type"),
    ),
    ("Expose", W(NO_CONSUL)),
    (
        "AddressMode",
        W("accepted, not honoured: checks go to the agent's address"),
    ),
    ("Advertise", W(NO_CONSUL)),
    ("InitialStatus", W(NO_CONSUL)),
    ("Notes", W(NO_CONSUL)),
    (
        "TLSServerName",
        W("accepted, not honoured: https checks are refused"),
    ),
    (
        "TLSSkipVerify",
        W("accepted, not honoured: https checks are refused"),
    ),
    (
        "Header",
        W("accepted, not honoured: an http check sends no extra headers"),
    ),
    (
        "Body",
        W("accepted, not honoured: an http check sends no body"),
    ),
    (
        "CheckRestart",
        W("accepted, not honoured: a failing check restarts nothing"),
    ),
    (
        "GRPCService",
        W("accepted, not honoured: grpc checks are refused by their type"),
    ),
    (
        "GRPCUseTLS",
        W("accepted, not honoured: grpc checks are refused by their type"),
    ),
    (
        "TaskName",
        W("accepted, not honoured: a check belongs to its service's task"),
    ),
    ("SuccessBeforePassing", W(NO_CONSUL)),
    ("FailuresBeforeCritical", W(NO_CONSUL)),
    ("FailuresBeforeWarning", W(NO_CONSUL)),
];

pub const LIFECYCLE: &[Field] = &[("Hook", H(V)), ("Sidecar", H(V))];

pub const RESTART_POLICY: &[Field] = &[
    ("Attempts", H(V)),
    ("Interval", H(V)),
    ("Delay", H(V)),
    ("Mode", H(V)),
    (
        "RenderTemplates",
        W("accepted, not honoured: templates render once, before the task first starts"),
    ),
];

pub const RESOURCES: &[Field] = &[
    ("CPU", H(V)),
    ("Cores", H(V)),
    ("MemoryMB", H(V)),
    ("MemoryMaxMB", H(V)),
    (
        "DiskMB",
        W("accepted, not honoured: the task directories are not size-limited"),
    ),
    ("IOPS", W("accepted, not honoured: I/O is not limited")),
    (
        "SecretsMB",
        W("accepted, not honoured: there is no secrets directory"),
    ),
    (
        "Networks",
        R("task networks are not supported (Nomad deprecated them): put the network in the group"),
    ),
    ("Devices", R("devices are not supported by this agent")),
    ("NUMA", R("NUMA placement is not supported by this agent")),
];

pub const NETWORK: &[Field] = &[
    ("Mode", H(V)),
    ("DynamicPorts", H(List(PORT))),
    ("ReservedPorts", H(List(PORT))),
    (
        "MBits",
        W("accepted, not honoured: bandwidth is not reserved"),
    ),
    (
        "Hostname",
        R("network hostnames need a network namespace: only host mode is supported"),
    ),
    (
        "DNS",
        R("network DNS settings need a network namespace: only host mode is supported"),
    ),
    (
        "IP",
        W("accepted, not honoured: ports are on the host's address"),
    ),
    (
        "CIDR",
        W("accepted, not honoured: ports are on the host's address"),
    ),
    (
        "Device",
        W("accepted, not honoured: ports are on the host's address"),
    ),
    ("CNI", R("CNI networks are not supported by this agent")),
];

pub const PORT: &[Field] = &[
    ("Label", H(V)),
    ("Value", H(V)),
    ("To", H(V)),
    ("HostNetwork", H(V)),
    ("IgnoreCollision", R("ports always collide here")),
];

pub const CONSTRAINT: &[Field] = &[("LTarget", H(V)), ("RTarget", H(V)), ("Operand", H(V))];

pub const TEMPLATE: &[Field] = &[
    ("EmbeddedTmpl", H(V)),
    ("DestPath", H(V)),
    ("Perms", H(V)),
    (
        "ChangeMode",
        W("accepted, not honoured: a template is rendered once, before its task starts"),
    ),
    (
        "ChangeSignal",
        W("accepted, not honoured: a template is rendered once"),
    ),
    (
        "ChangeScript",
        W("accepted, not honoured: a template is rendered once"),
    ),
    (
        "Splay",
        W("accepted, not honoured: a template is rendered once"),
    ),
    (
        "LeftDelim",
        W("accepted, not honoured: templates are plain text here"),
    ),
    (
        "RightDelim",
        W("accepted, not honoured: templates are plain text here"),
    ),
    (
        "Envvars",
        R("environment templates are not supported by this agent"),
    ),
    (
        "SourcePath",
        R("template files are not supported: give the template's data inline"),
    ),
    (
        "Uid",
        R("template ownership is not supported by this agent"),
    ),
    (
        "Gid",
        R("template ownership is not supported by this agent"),
    ),
    (
        "Wait",
        W("accepted, not honoured: a template is rendered once"),
    ),
    (
        "ErrMissingKey",
        W("accepted, not honoured: templates are plain text here"),
    ),
    (
        "Once",
        W("accepted, not honoured: a template is rendered once anyway"),
    ),
];

/// What a jobspec asks for beyond what the agent honours.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Classified {
    pub refused: Vec<SpecError>,
    /// `field: why`, in field order.
    pub warnings: Vec<String>,
}

/// A field the client left unset.
fn unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(members) => members.is_empty(),
    }
}

/// Classifies every field of a job (the value under `Job`).
pub fn classify(job: &Value) -> Classified {
    let mut out = Classified::default();
    walk(job, JOB, "", &mut out);
    out
}

fn walk(value: &Value, fields: &[Field], at: &str, out: &mut Classified) {
    let Value::Object(members) = value else {
        return; // the decoder names a wrong type
    };
    for (key, member) in members {
        if unset(member) {
            continue;
        }
        // An unknown key is shown as sent, quoted if it is not a plain name (`""`, say).
        let shown = if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            key.clone()
        } else {
            format!("{key:?}")
        };
        let path = if at.is_empty() {
            shown
        } else {
            format!("{at}.{shown}")
        };
        let Some((name, treatment)) = fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(key))
        else {
            out.refused.push(SpecError {
                field: path,
                problem: "unknown field".into(),
            });
            continue;
        };
        let path = if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}.{name}")
        };
        match treatment {
            Treatment::Server | Treatment::Honoured(V) | Treatment::Honoured(Free) => {}
            Treatment::Honoured(Object(child)) => walk(member, child, &path, out),
            Treatment::Honoured(List(child)) => {
                if let Value::Array(items) = member {
                    for (i, item) in items.iter().enumerate() {
                        walk(item, child, &format!("{path}[{i}]"), out);
                    }
                }
            }
            Treatment::Warned(why) => out.warnings.push(format!("{path}: {why}")),
            Treatment::Refused(why) => out.refused.push(SpecError {
                field: path,
                problem: (*why).into(),
            }),
        }
    }
}

/// Nomad 2.0.1's register-time warnings for services whose deregistration nothing waits
/// after (`nomad/structs` `Job.Warnings`, #27782; the texts in
/// `reference/nomad-tests-and-clients.md` §1.4).
pub fn shutdown_delay_warnings(job: &super::Job) -> Vec<String> {
    let mut warnings = Vec::new();
    for group in &job.task_groups {
        let g = &group.name;
        for task in &group.tasks {
            if task.services.as_ref().is_some_and(|s| !s.is_empty()) && task.shutdown_delay_ns == 0
            {
                warnings.push(format!(
                    "task {:?} in group {g:?} defines services, but has no shutdown_delay set",
                    task.name
                ));
            }
        }
        let group_services = group.services.as_deref().unwrap_or_default();
        if group_services.is_empty() {
            continue;
        }
        let group_delay = group.shutdown_delay_ns.is_some_and(|d| d > 0);
        if !group_delay && group.tasks.iter().all(|t| t.shutdown_delay_ns == 0) {
            warnings.push(format!(
                "group {g:?} defines services, but neither the group nor any of its tasks have \
                 shutdown_delay set"
            ));
        }
        for service in group_services.iter().filter(|s| !s.task_name.is_empty()) {
            let named = group.tasks.iter().find(|t| t.name == service.task_name);
            if named.is_some_and(|t| t.shutdown_delay_ns == 0) {
                warnings.push(format!(
                    "group {g:?} references task {:?} in a service definition, but the task has \
                     no shutdown_delay set",
                    service.task_name
                ));
            }
        }
    }
    warnings
}

/// Warnings as Nomad's `Warnings` string (a multierror's text), `""` when none.
pub fn warnings_text(warnings: &[String]) -> String {
    match warnings.len() {
        0 => String::new(),
        n => format!(
            "{n} warning{}:\n\n{}",
            if n == 1 { "" } else { "s" },
            warnings
                .iter()
                .map(|w| format!("* {w}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unset_fields_are_absent_and_set_ones_are_classified_by_name() {
        let job = json!({
            "ID": "web", "Periodic": null, "Update": {"MaxParallel": 1, "Stagger": 1},
            "Dispatched": false,
            "VaultToken": "", "Meta": {}, "Frobnicate": null,
            "TaskGroups": [{"Name": "g", "EphemeralDisk": {"SizeMB": 300},
                "Tasks": [{"Name": "t", "Artifacts": [{"GetterSource": "x"}],
                           "resources": {"CPU": 100, "Devices": []}, "LogConfig": null}]}],
        });
        let found = classify(&job);
        assert_eq!(
            found.warnings,
            [
                format!(
                    "TaskGroups[0].EphemeralDisk: {}",
                    "accepted, not honoured: the task directories are not size-limited"
                ),
                "Update.Stagger: accepted, not honoured: deprecated by Nomad; min_healthy_time \
                 paces a rollout"
                    .to_string(),
            ]
        );
        assert_eq!(found.refused.len(), 1);
        assert_eq!(found.refused[0].field, "TaskGroups[0].Tasks[0].Artifacts");
    }

    #[test]
    fn an_unknown_field_that_is_set_is_refused_by_its_path() {
        let job = json!({"": 70, "TaskGroups": [{"Tasks": [{"Frobnicate": 1}]}],
                         "periodic": {"Spec": "x"}});
        let found = classify(&job);
        let fields: Vec<_> = found.refused.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["\"\"", "TaskGroups[0].Tasks[0].Frobnicate", "Periodic"]
        );
        assert_eq!(found.refused[1].problem, "unknown field");
    }

    #[test]
    fn warnings_read_as_nomads() {
        assert_eq!(warnings_text(&[]), "");
        assert_eq!(warnings_text(&["a".into()]), "1 warning:\n\n* a");
        assert_eq!(
            warnings_text(&["a".into(), "b".into()]),
            "2 warnings:\n\n* a\n* b"
        );
    }
}
