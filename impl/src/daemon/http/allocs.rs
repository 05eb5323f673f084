//! `/v1/allocation(s)` and `/v1/evaluation(s)`.

use super::*;

pub(super) fn get_alloc(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = |_: &StateStore, alloc: &Allocation| alloc.modify_index;
    let render = |_: &Core, alloc: &Allocation| alloc_json(alloc);
    read_one(
        shared,
        query,
        |s| s.alloc(id),
        index,
        "alloc not found",
        render,
    )
}

pub(super) fn get_eval(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = |_: &StateStore, eval: &Evaluation| eval.modify_index;
    let render = |_: &Core, eval: &Evaluation| eval_json(eval);
    read_one(
        shared,
        query,
        |s| s.eval(id),
        index,
        "eval not found",
        render,
    )
}

pub(super) fn alloc_json(alloc: &Allocation) -> Value {
    let mut value = serde_json::to_value(alloc).expect("allocations serialize");
    let object = value.as_object_mut().expect("an allocation is an object");
    object.insert("NodeName".into(), json!(alloc.node_id));
    object.insert("JobType".into(), json!(alloc.job.job_type));
    value
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
    desired_status: crate::server::structs::DesiredStatus,
    desired_description: &'a str,
    desired_transition: &'a crate::server::structs::DesiredTransition,
    client_status: ClientStatus,
    client_description: &'a str,
    task_states: &'a BTreeMap<String, crate::server::structs::TaskState>,
    previous_allocation: &'a Option<String>,
    next_allocation: &'a Option<String>,
    create_index: u64,
    modify_index: u64,
    alloc_modify_index: u64,
}

pub(super) fn alloc_stub(alloc: &Allocation) -> Value {
    serde_json::to_value(AllocStub {
        id: &alloc.id,
        namespace: &alloc.namespace,
        eval_id: &alloc.eval_id,
        name: &alloc.name,
        node_id: &alloc.node_id,
        node_name: &alloc.node_id,
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
        previous_allocation: &alloc.previous_allocation,
        next_allocation: &alloc.next_allocation,
        create_index: alloc.create_index,
        modify_index: alloc.modify_index,
        alloc_modify_index: alloc.alloc_modify_index,
    })
    .expect("allocations serialize")
}

/// Allocation stubs, serialized after the core's lock is released.
pub(super) fn stubs<'a>(
    core: &'a Core,
    chosen: impl Iterator<Item = &'a Allocation>,
) -> (Vec<Allocation>, u64) {
    (chosen.cloned().collect(), core.server.store.index())
}

pub(super) fn stub_reply((chosen, index): (Vec<Allocation>, u64)) -> Result<Reply, ApiError> {
    ok(
        json!(chosen.iter().map(alloc_stub).collect::<Vec<_>>()),
        index,
    )
}

pub(super) fn list_allocs(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    query.bool("resources")?;
    let core = blocking(shared, query)?;
    let prefix = query.get("prefix").unwrap_or("");
    let chosen = stubs(
        &core,
        core.server
            .store
            .allocs()
            .filter(|a| a.id.starts_with(prefix)),
    );
    drop(core);
    stub_reply(chosen)
}

pub(super) fn stop_alloc(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let no_shutdown_delay = query.bool("no_shutdown_delay")?;
    query.bool("reschedule")?;
    let mut core = shared.core();
    let context = core
        .server
        .store
        .alloc(id)
        .map(|a| (a.id.clone(), a.job_id.clone(), a.task_group.clone()));
    let response = core
        .server
        .stop_alloc(id, no_shutdown_delay)
        .map_err(|e| match e {
            ServerError::AllocNotFound(_) => error(404, "allocation not found"),
            other => error(500, other.to_string()),
        })?;
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
    serde_json::to_value(eval).expect("evaluations serialize")
}

pub(super) fn list_evals(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let prefix = query.get("prefix").unwrap_or("");
    let job = query.get("job");
    let status = query.get("status");
    let evals: Vec<Value> = core
        .server
        .store
        .evals()
        .filter(|e| e.id.starts_with(prefix))
        .filter(|e| job.is_none_or(|job| e.job_id == job))
        .filter(|e| status.is_none_or(|s| eval_json(e)["Status"] == s))
        .map(eval_json)
        .collect();
    ok(json!(evals), core.server.store.index())
}

pub(super) fn eval_allocs(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let chosen = stubs(
        &core,
        core.server.store.allocs().filter(|a| a.eval_id == id),
    );
    drop(core);
    stub_reply(chosen)
}
