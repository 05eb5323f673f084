//! The keys Nomad's objects always carry and quiesce has nothing to say in, each with the
//! zero value Nomad's server encodes for it (`null` for its pointers, slices and maps, `""`,
//! `false`, `0`, Go's zero time), so that a client decoding a field finds it (issue 25,
//! build 2). `proofs/go-api/e2e/fields_test.go` holds every served object against the
//! structs of `github.com/hashicorp/nomad/api`; what it may still find is listed, with its
//! reason, in ARCHITECTURE.md ("Deliberate differences in the API's objects").

use serde_json::{json, Map, Value};

/// A zero as Nomad's server encodes it.
#[derive(Clone, Copy)]
pub(super) enum Zero {
    Null,
    Str,
    False,
    Int,
    /// Go's zero `time.Time`.
    Time,
}

impl Zero {
    fn value(self) -> Value {
        match self {
            Zero::Null => Value::Null,
            Zero::Str => json!(""),
            Zero::False => json!(false),
            Zero::Int => json!(0),
            Zero::Time => json!(quiesce_core::gotime::ZERO),
        }
    }
}

use Zero::*;

const JOB: &[(&str, Zero)] = &[
    ("Affinities", Null),
    ("AllAtOnce", False),
    ("ConsulNamespace", Str),
    ("DispatchIdempotencyToken", Str),
    ("Dispatched", False),
    ("Migrate", Null),
    ("Multiregion", Null),
    ("NomadTokenID", Str),
    ("ParameterizedJob", Null),
    ("ParentID", Str),
    ("Payload", Null),
    ("Periodic", Null),
    ("Reschedule", Null),
    ("Spreads", Null),
    ("Stable", False),
    ("Status", Str),
    ("StatusDescription", Str),
    ("UI", Null),
    ("Update", Null),
    ("VaultNamespace", Str),
    ("VersionTag", Null),
];

const TASK_GROUP: &[(&str, Zero)] = &[
    ("Affinities", Null),
    ("Consul", Null),
    ("Disconnect", Null),
    ("EphemeralDisk", Null),
    ("MaxClientDisconnect", Null),
    ("MaxRunDuration", Null),
    ("Migrate", Null),
    ("PreventRescheduleOnLost", False),
    ("ReschedulePolicy", Null),
    ("Scaling", Null),
    ("Spreads", Null),
    ("StopAfterClientDisconnect", Null),
    ("Update", Null),
    ("Volumes", Null),
];

const TASK: &[(&str, Zero)] = &[
    ("Actions", Null),
    ("Affinities", Null),
    ("Artifacts", Null),
    ("CSIPluginConfig", Null),
    ("Consul", Null),
    ("DispatchPayload", Null),
    ("Identities", Null),
    ("Identity", Null),
    ("Kind", Str),
    ("LogConfig", Null),
    ("ScalingPolicies", Null),
    ("Schedule", Null),
    ("Secrets", Null),
    ("Vault", Null),
    ("VolumeMounts", Null),
];

/// A task's `Resources` (what it asks for): the parts this agent records are its own.
const TASK_RESOURCES: &[(&str, Zero)] = &[
    ("Devices", Null),
    ("DiskMB", Int),
    ("IOPS", Int),
    ("NUMA", Null),
    ("Networks", Null),
    ("SecretsMB", Int),
];

const SERVICE: &[(&str, Zero)] = &[
    ("Address", Str),
    ("AddressMode", Str),
    ("CanaryMeta", Null),
    ("CanaryTags", Null),
    ("CheckRestart", Null),
    ("Checks", Null),
    ("Cluster", Str),
    ("Connect", Null),
    ("EnableTagOverride", False),
    ("Identity", Null),
    ("Kind", Str),
    ("OnUpdate", Str),
    ("TaggedAddresses", Null),
    ("Weights", Null),
];

/// A task event's legacy flat fields, each with the `Details` key Nomad fills it with too.
const TASK_EVENT: &[(&str, Zero, &str)] = &[
    ("DiskLimit", Int, "disk_limit"),
    ("DiskSize", Int, "disk_size"),
    ("DownloadError", Str, "download_error"),
    ("DriverError", Str, "driver_error"),
    ("DriverMessage", Str, "driver_message"),
    ("ExitCode", Int, "exit_code"),
    ("FailedSibling", Str, "failed_sibling"),
    ("FailsTask", False, "fails_task"),
    ("GenericSource", Str, ""),
    ("KillError", Str, "kill_error"),
    ("KillReason", Str, "kill_reason"),
    ("KillTimeout", Int, "kill_timeout"),
    ("RestartReason", Str, "restart_reason"),
    ("SetupError", Str, "setup_error"),
    ("Signal", Int, "signal"),
    ("StartDelay", Int, "start_delay"),
    ("TaskSignal", Str, "task_signal"),
    ("TaskSignalReason", Str, "task_signal_reason"),
    ("ValidationError", Str, "validation_error"),
    ("VaultError", Str, "vault_renewal_error"),
];

const ALLOC: &[(&str, Zero)] = &[
    ("DeploymentID", Str),
    ("DeploymentStatus", Null),
    ("FollowupEvalID", Str),
    ("Metrics", Null),
    ("PreemptedAllocations", Null),
    ("PreemptedByAllocation", Str),
    ("RescheduleTracker", Null),
    ("Services", Null),
    ("TaskResources", Null),
];

const ALLOC_STUB: &[(&str, Zero)] = &[
    ("DeploymentStatus", Null),
    ("FollowupEvalID", Str),
    ("PreemptedAllocations", Null),
    ("PreemptedByAllocation", Str),
    ("RescheduleTracker", Null),
];

const EVAL: &[(&str, Zero)] = &[
    ("AnnotatePlan", False),
    ("ClassEligibility", Null),
    ("DeploymentID", Str),
    ("EscapedComputedClass", False),
    ("FailedTGAllocs", Null),
    ("MissingNonNodeResources", Null),
    ("NodeID", Str),
    ("NodeModifyIndex", Int),
    ("PlanAnnotations", Null),
    ("QuotaLimitReached", Str),
    ("RelatedEvals", Null),
    ("SnapshotIndex", Int),
    ("Wait", Int),
    ("WaitUntil", Time),
];

const NODE: &[(&str, Zero)] = &[
    ("CgroupParent", Str),
    ("GCVolumesOnNodeGC", False),
    ("HostNetworks", Null),
    ("LastDrain", Null),
    ("NodeMaxAllocs", Int),
];

/// Inserts each key `object` lacks, with its zero.
fn fill(object: &mut Value, zeros: &[(&str, Zero)]) {
    if let Some(object) = object.as_object_mut() {
        for (key, zero) in zeros {
            if !object.contains_key(*key) {
                object.insert((*key).to_string(), zero.value());
            }
        }
    }
}

/// Each element of the array at `key` of `object`.
fn each<'a>(object: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    object
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// A job (its groups, tasks and services too).
pub(super) fn job(value: &mut Value) {
    fill(value, JOB);
    for group in each(value, "TaskGroups") {
        fill(group, TASK_GROUP);
        for service in each(group, "Services") {
            fill(service, SERVICE);
        }
        for task in each(group, "Tasks") {
            fill(task, TASK);
            if let Some(resources) = task.get_mut("Resources").filter(|r| r.is_object()) {
                fill(resources, TASK_RESOURCES);
            }
            for service in each(task, "Services") {
                fill(service, SERVICE);
            }
        }
    }
}

/// The task states of an allocation or its stub: each event's flat fields, from its
/// `Details` where they say it.
fn task_states(value: &mut Value) {
    let Some(states) = value.get_mut("TaskStates").and_then(Value::as_object_mut) else {
        return;
    };
    for state in states.values_mut() {
        for event in each(state, "Events") {
            let Some(event) = event.as_object_mut() else {
                continue;
            };
            let details = event
                .get("Details")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (key, zero, detail) in TASK_EVENT {
                if event.contains_key(*key) {
                    continue;
                }
                let said = details.get(*detail).and_then(Value::as_str);
                let value = match (zero, said) {
                    // Durations are Go's text in the details (`5s`), nanoseconds here.
                    (Int, Some(text)) => text
                        .parse::<i64>()
                        .ok()
                        .or_else(|| quiesce_core::gotime::parse_go_duration(text))
                        .map_or(zero.value(), |n| json!(n)),
                    (False, Some(text)) => json!(text == "true"),
                    (Str, Some(text)) => json!(text),
                    _ => zero.value(),
                };
                event.insert((*key).to_string(), value);
            }
        }
    }
}

/// A full allocation (and its job copy, if it carries one).
pub(super) fn alloc(value: &mut Value) {
    fill(value, ALLOC);
    if let Some(job_copy) = value.get_mut("Job").filter(|j| j.is_object()) {
        job(job_copy);
    }
    task_states(value);
}

/// An allocation's list stub.
pub(super) fn alloc_stub(value: &mut Value) {
    fill(value, ALLOC_STUB);
    task_states(value);
}

/// An evaluation.
pub(super) fn eval(value: &mut Value) {
    fill(value, EVAL);
}

/// A node, and each of its drivers' and events' fields.
pub(super) fn node(value: &mut Value) {
    fill(value, NODE);
    if let Some(drivers) = value.get_mut("Drivers").and_then(Value::as_object_mut) {
        for driver in drivers.values_mut() {
            fill(driver, &[("Attributes", Null)]);
        }
    }
    for event in each(value, "Events") {
        fill(event, &[("Details", Null)]);
    }
}

/// A node's list stub: its drivers' fields.
pub(super) fn node_stub(value: &mut Value) {
    if let Some(drivers) = value.get_mut("Drivers").and_then(Value::as_object_mut) {
        for driver in drivers.values_mut() {
            fill(driver, &[("Attributes", Null)]);
        }
    }
}

/// Nomad's legacy `Resources` (CPU MHz, memory and disk MB, networks) from their parts.
pub(super) fn legacy_resources(cpu: i64, memory_mb: i64, disk_mb: i64, networks: Value) -> Value {
    let mut resources = Map::new();
    resources.insert("CPU".into(), json!(cpu));
    resources.insert("Cores".into(), json!(0));
    resources.insert("MemoryMB".into(), json!(memory_mb));
    resources.insert("MemoryMaxMB".into(), json!(0));
    resources.insert("DiskMB".into(), json!(disk_mb));
    resources.insert("IOPS".into(), json!(0));
    resources.insert("Networks".into(), networks);
    resources.insert("Devices".into(), Value::Null);
    resources.insert("NUMA".into(), Value::Null);
    resources.insert("SecretsMB".into(), json!(0));
    Value::Object(resources)
}
