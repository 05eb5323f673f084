//! `/v1/allocation(s)` and `/v1/evaluation(s)`.
//!
//! `PUT`/`POST /v1/client/allocation/:id/restart` restarts in place: Nomad's `TaskName`
//! and `AllTasks` (every running task, as with neither: poststop tasks and ended prestart
//! tasks are not run again, unlike Nomad's `AllTasks`), plus quiesce's `NoShutdownDelay`.
//! The answer is `{}` at once; the restart goes on in the runner. Refused with a 400,
//! nothing changed: a stopping or stopped allocation, a task not running, both `TaskName`
//! and `AllTasks`, an unknown field; an unknown allocation is a 404.

use super::*;
use crate::daemon::DaemonHost;
use quiesce_core::client::alloc_runner::RestartRefused;
use quiesce_core::server::structs::DesiredStatus;

pub(super) fn get_alloc(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = |_: &StateStore, alloc: &Allocation| alloc.modify_index;
    let ip = shared.config.bind.ip().to_string();
    let render = |core: &Core, alloc: &Allocation| alloc_json(alloc, &node_name(core, alloc), &ip);
    read_one(
        shared,
        query,
        Object::of(Table::Allocs, id),
        |s| s.alloc(id),
        index,
        "alloc not found",
        render,
    )
}

/// `/v1/evaluation/:id`; with `related=true`, `RelatedEvals`: the stubs of the evaluations
/// linked to it through `NextEval`, `PreviousEval` and `BlockedEval`, transitively.
pub(super) fn get_eval(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let related = query.bool("related")?;
    let index = |_: &StateStore, eval: &Evaluation| eval.modify_index;
    let render = |core: &Core, eval: &Evaluation| {
        let mut value = eval_json(eval);
        if related {
            value["RelatedEvals"] = json!(related_evals(&core.server.store, eval));
        }
        value
    };
    read_one(
        shared,
        query,
        Object::of(Table::Evals, id),
        |s| s.eval(id),
        index,
        "eval not found",
        render,
    )
}

/// A full allocation as Nomad shows it; `ip` is its node's address (its tasks share the
/// host's network).
pub(super) fn alloc_json(alloc: &Allocation, node_name: &str, ip: &str) -> Value {
    let mut value = serde_json::to_value(alloc).expect("allocations serialize");
    let object = value.as_object_mut().expect("an allocation is an object");
    object.insert("NodeName".into(), json!(node_name));
    // The list stub's, not the full allocation's: its job copy carries its version.
    object.remove("JobVersion");
    // Nomad's string IDs are `""` when unset, never `null`.
    for (key, id) in [
        ("PreviousAllocation", &alloc.previous_allocation),
        ("NextAllocation", &alloc.next_allocation),
    ] {
        object.insert(key.into(), json!(id.as_deref().unwrap_or("")));
    }
    object.remove("AllocatedPorts");
    object.insert("AllocatedResources".into(), allocated_resources(alloc));
    object.insert("Resources".into(), legacy_resources(alloc, ip));
    // Tasks share the host's network (raw_exec): no interface or address of their own.
    object.insert(
        "NetworkStatus".into(),
        json!({"InterfaceName": "", "Address": "", "AddressIPv6": "", "DNS": null}),
    );
    nomad_zeros::alloc(&mut value);
    value
}

/// Nomad's legacy top-level `Resources` of an allocation, which clients still read for its
/// address and ports: the tasks' CPU and memory summed, and one host network with the
/// group's ports on `ip`.
fn legacy_resources(alloc: &Allocation, ip: &str) -> Value {
    let group = alloc
        .job
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group);
    let tasks = group.into_iter().flat_map(|g| &g.tasks);
    let (mut cpu, mut memory) = (0i64, 0i64);
    for task in tasks {
        let r = task.resources.clone().unwrap_or_default();
        cpu += r.cpu.unwrap_or(0);
        memory += r.memory_mb.unwrap_or(0);
    }
    let ports: Vec<Value> = alloc
        .ports
        .iter()
        .map(|p| json!({"Label": p.label, "Value": p.value, "To": p.to, "HostNetwork": "default"}))
        .collect();
    let network = json!({"Mode": "host", "Device": "", "CIDR": "", "IP": ip, "Hostname": "",
                         "MBits": 0, "DNS": null, "CNI": null, "ReservedPorts": null,
                         "DynamicPorts": ports});
    nomad_zeros::legacy_resources(cpu, memory, 0, json!([network]))
}

/// Nomad's `AllocatedResources`: each task's resources as its spec records them, and the
/// group's ports on the host.
pub(super) fn allocated_resources(alloc: &Allocation) -> Value {
    let group = alloc
        .job
        .task_groups
        .iter()
        .find(|group| group.name == alloc.task_group);
    let tasks: Map<String, Value> = group
        .into_iter()
        .flat_map(|group| &group.tasks)
        .map(|task| {
            let r = task.resources.clone().unwrap_or_default();
            let resources = json!({
                "Cpu": {"CpuShares": r.cpu.unwrap_or(0), "ReservedCores": null},
                "Memory": {"MemoryMB": r.memory_mb.unwrap_or(0),
                           "MemoryMaxMB": r.memory_max_mb.unwrap_or(0)},
                "Networks": null, "Devices": null,
            });
            (task.name.clone(), resources)
        })
        .collect();
    let ports: Vec<Value> = alloc
        .ports
        .iter()
        .map(|p| json!({"Label": p.label, "Value": p.value, "To": p.to, "HostIP": ""}))
        .collect();
    json!({"Tasks": tasks, "TaskLifecycles": null,
           "Shared": {"Ports": ports, "Networks": null, "DiskMB": 0}})
}

/// The name of the node an allocation is placed on (its ID if the node is not known).
pub(super) fn node_name(core: &Core, alloc: &Allocation) -> String {
    core.server
        .store
        .node(&alloc.node_id)
        .map_or_else(|| alloc.node_id.to_string(), |node| node.name.clone())
}

/// AllocListStub: the allocation without its job (lists are read often, by blocking
/// queries; serializing every allocation's job copy would dominate them).
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct AllocStub<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    namespace: &'a str,
    #[serde(rename = "EvalID")]
    eval_id: &'a str,
    name: &'a str,
    #[serde(rename = "NodeID")]
    node_id: &'a str,
    node_name: &'a str,
    #[serde(rename = "JobID")]
    job_id: &'a str,
    job_type: &'a str,
    job_version: u64,
    task_group: &'a str,
    desired_status: quiesce_core::server::structs::DesiredStatus,
    desired_description: &'a str,
    desired_transition: &'a quiesce_core::server::structs::DesiredTransition,
    client_status: ClientStatus,
    client_description: &'a str,
    task_states: &'a quiesce_core::server::structs::TaskStates,
    next_allocation: &'a str,
    deployment_status: &'a Option<quiesce_core::server::structs::AllocDeploymentStatus>,
    create_index: u64,
    modify_index: u64,
    create_time: i64,
    modify_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    allocated_resources: Option<Value>,
}

pub(super) fn alloc_stub(alloc: &Allocation, node_name: &str, resources: bool) -> Value {
    serde_json::to_value(AllocStub {
        id: &alloc.id,
        namespace: &alloc.namespace,
        eval_id: &alloc.eval_id,
        name: &alloc.name,
        node_id: &alloc.node_id,
        node_name,
        job_id: &alloc.job_id,
        job_type: &alloc.job.job_type,
        job_version: alloc.job_version,
        task_group: &alloc.task_group,
        desired_status: alloc.desired_status,
        desired_description: &alloc.desired_description,
        desired_transition: &alloc.desired_transition,
        client_status: alloc.client_status,
        client_description: &alloc.client_description,
        task_states: &alloc.task_states,
        next_allocation: alloc.next_allocation.as_deref().unwrap_or(""),
        deployment_status: &alloc.deployment_status,
        create_index: alloc.create_index,
        modify_index: alloc.modify_index,
        create_time: alloc.create_time,
        modify_time: alloc.modify_time,
        allocated_resources: resources.then(|| allocated_resources(alloc)),
    })
    .map(|mut stub| {
        nomad_zeros::alloc_stub(&mut stub);
        stub
    })
    .expect("allocations serialize")
}

/// Allocation stubs, serialized after the core's lock is released.
pub(super) fn stubs<'a>(core: &'a Core, chosen: impl Iterator<Item = &'a Allocation>) -> Stubs {
    let chosen: Vec<(Allocation, String)> = chosen
        .map(|alloc| (alloc.clone(), node_name(core, alloc)))
        .collect();
    (chosen, core.server.store.table_indexes().allocs)
}

/// Allocations chosen for a list, each with its node's name, and the list's index.
pub(super) type Stubs = (Vec<(Allocation, String)>, u64);

pub(super) fn stub_reply((chosen, index): Stubs, resources: bool) -> Result<Reply, ApiError> {
    ok(
        json!(chosen
            .iter()
            .map(|(alloc, node)| alloc_stub(alloc, node, resources))
            .collect::<Vec<_>>()),
        index,
    )
}

pub(super) fn list_allocs(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let resources = query.bool("resources")?;
    let core = blocking_table(shared, query, &[Table::Allocs])?;
    let prefix = query.get("prefix").unwrap_or("");
    let chosen = stubs(
        &core,
        core.server
            .store
            .allocs()
            .filter(|a| a.id.starts_with(prefix)),
    );
    drop(core);
    stub_reply(chosen, resources)
}

pub(super) fn stop_alloc(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let no_shutdown_delay = query.bool("no_shutdown_delay")?;
    let reschedule = query.bool("reschedule")?;
    let mut core = shared.core();
    let context = core
        .server
        .store
        .alloc(id)
        .map(|a| (a.id.clone(), a.job_id.clone(), a.task_group.clone()));
    let response = core.server.stop_alloc_with(
        id,
        quiesce_core::server::StopAllocOptions {
            no_shutdown_delay,
            reschedule,
        },
    )?;
    if let Some((alloc, job, group)) = context {
        let step = Step::StopAlloc {
            alloc,
            no_shutdown_delay,
        };
        core.log(LogEntry::step(step, Some(job), Some(group)));
    }
    commit(shared, &mut core)?;
    ok(
        json!({"EvalID": response.eval_id, "Index": response.index}),
        response.index,
    )
}

pub(super) fn eval_json(eval: &Evaluation) -> Value {
    let mut value = serde_json::to_value(eval).expect("evaluations serialize");
    nomad_zeros::eval(&mut value);
    value
}

/// Nomad's `EvaluationStub`s of the evaluations linked to `eval`, in creation order.
fn related_evals(store: &StateStore, eval: &Evaluation) -> Vec<Value> {
    let mut seen = std::collections::BTreeSet::from([eval.id.clone()]);
    let mut todo = vec![eval];
    let mut found = Vec::new();
    while let Some(next) = todo.pop() {
        for link in [&next.next_eval, &next.previous_eval, &next.blocked_eval] {
            if link.is_empty() || !seen.insert(link.clone()) {
                continue;
            }
            if let Some(linked) = store.eval(link) {
                found.push(linked);
                todo.push(linked);
            }
        }
    }
    found.sort_by_key(|e| (e.create_index, e.id.clone()));
    found
        .into_iter()
        .map(|e| {
            json!({
                "ID": e.id, "Namespace": e.namespace, "Priority": e.priority, "Type": e.eval_type,
                "TriggeredBy": e.triggered_by, "JobID": e.job_id, "NodeID": "", "DeploymentID": "",
                "Status": eval_json(e)["Status"], "StatusDescription": e.status_description,
                "WaitUntil": null, "NextEval": e.next_eval, "PreviousEval": e.previous_eval,
                "BlockedEval": e.blocked_eval, "CreateIndex": e.create_index,
                "ModifyIndex": e.modify_index, "CreateTime": e.create_time, "ModifyTime": e.modify_time,
            })
        })
        .collect()
}

/// `/v1/evaluations`: in the order they were created (`reverse=true`: newest first),
/// filtered by `prefix`, `job` and `status`, a page of `per_page` at a time from
/// `next_token`, as Nomad's paginated list: the token is `<CreateIndex>.<ID>` of the first
/// evaluation of the next page, sent as `X-Nomad-NextToken` only when there is one.
pub(super) fn list_evals(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let per_page = match query.int("per_page")? {
        None | Some(0) => None,
        Some(n) if n > 0 => Some(n as usize),
        Some(n) => {
            return Err(error(
                400,
                format!("Invalid per_page {n}: must be positive"),
            ))
        }
    };
    let reverse = query.bool("reverse")?;
    if query.get("filter").is_some_and(|f| !f.is_empty()) {
        return Err(error(
            400,
            "filter expressions are not supported by this agent (use prefix, job or status)",
        ));
    }
    let start = match query.get("next_token").filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(
            token
                .split_once('.')
                .and_then(|(index, id)| Some((index.parse::<u64>().ok()?, id.to_string())))
                .ok_or_else(|| error(400, format!("Invalid next_token {token:?}")))?,
        ),
    };
    let core = blocking_table(shared, query, &[Table::Evals])?;
    let prefix = query.get("prefix").unwrap_or("");
    let job = query.get("job");
    let status = query.get("status");
    let mut evals: Vec<&Evaluation> = core
        .server
        .store
        .evals()
        .filter(|e| e.id.starts_with(prefix))
        .filter(|e| job.is_none_or(|job| e.job_id == job))
        .filter(|e| status.is_none_or(|s| eval_json(e)["Status"] == s))
        .collect();
    let key = |e: &Evaluation| (e.create_index, e.id.clone());
    evals.sort_by_key(|e| key(e));
    if reverse {
        evals.reverse();
    }
    if let Some(start) = &start {
        evals.retain(|e| {
            if reverse {
                key(e) <= *start
            } else {
                key(e) >= *start
            }
        });
    }
    let mut next_token = None;
    if let Some(per_page) = per_page {
        if let Some(next) = evals.get(per_page) {
            next_token = Some(format!("{}.{}", next.create_index, next.id));
            evals.truncate(per_page);
        }
    }
    let body = json!(evals.into_iter().map(eval_json).collect::<Vec<_>>());
    Ok(Reply {
        status: 200,
        body,
        index: Some(core.server.store.table_indexes().evals),
        next_token,
        raw: None,
        encoded: None,
        gzipped: false,
        json: None,
    })
}

pub(super) fn eval_allocs(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, &[Table::Allocs])?;
    let chosen = stubs(
        &core,
        core.server.store.allocs().filter(|a| a.eval_id == id),
    );
    drop(core);
    stub_reply(chosen, false)
}

/// `GET /v1/deployment/allocations/:id`: the allocations a deployment placed (none for an
/// unknown one, as Nomad answers).
pub(super) fn deployment_allocs(
    shared: &Shared,
    id: &str,
    query: &Query,
) -> Result<Reply, ApiError> {
    if id.is_empty() {
        return Err(error(400, "missing deployment ID"));
    }
    let core = blocking_table(shared, query, &[Table::Allocs])?;
    let chosen = stubs(
        &core,
        core.server
            .store
            .allocs()
            .filter(|a| a.deployment_id == id && !a.tombstone),
    );
    drop(core);
    stub_reply(chosen, false)
}

/// The most bytes a restart request's body may have (it holds two names and three flags).
const MAX_RESTART_BODY: usize = 4096;

/// `PUT`/`POST /v1/client/allocation/:id/restart`: Nomad's `AllocRestartRequest` —
/// `TaskName` (one task), `AllTasks`, neither (every running task) — plus quiesce's
/// `NoShutdownDelay` (also `?no_shutdown_delay=true`): the restart skips its tasks' delays,
/// that once. In place, straight to the runner: no server write and no evaluation.
pub(super) fn restart_alloc(
    shared: &Shared,
    id: &str,
    query: &Query,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let fields = small_object(body, MAX_RESTART_BODY, "a restart")?;
    let (mut task_name, mut all_tasks, mut flag) = (String::new(), false, false);
    for (key, value) in fields {
        let wrong = |kind: &str| error(400, format!("{key} must be {kind} (got {value})"));
        match key.to_ascii_lowercase().as_str() {
            "taskname" => match value {
                Value::String(name) => task_name = name.clone(),
                Value::Null => {}
                _ => return Err(wrong("a string")),
            },
            "alltasks" => all_tasks = value.as_bool().ok_or_else(|| wrong("a boolean"))?,
            "noshutdowndelay" => flag = value.as_bool().ok_or_else(|| wrong("a boolean"))?,
            // Nomad's request carries the allocation and the query options too.
            "allocid" | "region" | "namespace" | "authtoken" => {}
            _ => {
                return Err(error(
                    400,
                    format!(
                        "unknown field {key:?} in the restart request (TaskName, AllTasks, \
                         NoShutdownDelay)"
                    ),
                ))
            }
        }
    }
    let flag = flag || query.bool("no_shutdown_delay")?;
    if all_tasks && !task_name.is_empty() {
        return Err(error(
            400,
            "TaskName and AllTasks cannot both be set: restart one task or all of them",
        ));
    }
    let index = {
        let core = shared.core();
        if core.server.store.alloc(id).is_none() {
            return Err(error(404, format!("Unknown allocation {id:?}")));
        }
        core.server.store.index()
    };
    // The server's word, read under the runner's lock when the restart is applied: an
    // allocation it has stopped is not restarted, pulled or not yet (the model's rule).
    let admit = |host: &mut DaemonHost| {
        let mut core = shared.core();
        let stopped = core
            .server
            .store
            .alloc(id)
            .is_none_or(|alloc| alloc.desired_status != DesiredStatus::Run || alloc.tombstone);
        if stopped {
            return Err(RestartRefused::Stopping);
        }
        let (seq, time_ns) = core.reserve_log_seq();
        host.note_restart(seq, time_ns);
        Ok(())
    };
    let Some(shell) = shared.runner(id) else {
        return Err(error(
            400,
            format!("allocation {id:?} is not running on this client"),
        ));
    };
    let task = if task_name.is_empty() {
        None
    } else {
        let position = shell.inspect(|runner, _| {
            runner
                .tasks
                .iter()
                .position(|task| *task.name == *task_name)
        });
        Some(position.ok_or_else(|| {
            error(
                404,
                format!("Could not find task runner for task: {task_name:?}"),
            )
        })?)
    };
    shell
        .restart(task, flag, admit)
        .map_err(|refused| error(400, refused.to_string()))?;
    ok(json!({}), index)
}
