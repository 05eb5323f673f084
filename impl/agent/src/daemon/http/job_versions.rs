//! `/v1/job/:id/revert` and `/v1/job/:id/scale` (a write, and its status on `GET`), as
//! Nomad answers them: a revert, and a scale with a count, registers a version made from a
//! stored one, logged as the registration it is, and is answered as a register is; every
//! scale records a scaling event, which the status shows.

use super::*;
use quiesce_core::server::scaling::ScaleRequest;

/// Nomad's `JobRegisterResponse` for the write at `response`.
fn register_json(core: &Core, id: &str, eval_id: &str, index: u64) -> Value {
    let job_modify_index = core.server.store.job(id).map_or(0, |j| j.job_modify_index);
    json!({"EvalID": eval_id, "EvalCreateIndex": if eval_id.is_empty() { 0 } else { index },
           "JobModifyIndex": job_modify_index, "Warnings": "", "Index": index,
           "LastContact": 0, "KnownLeader": true, "NextToken": ""})
}

/// A whole number field that is absent, null, or a non-negative integer.
fn count_field(fields: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| error(400, format!("{name} is a whole number, 0 or more"))),
    }
}

/// The `JobID` of a body, which must name the job of the path (Nomad's words).
fn check_job_id(fields: &Map<String, Value>, id: &str) -> Result<(), ApiError> {
    match fields.get("JobID") {
        None | Some(Value::Null) => Err(error(400, "JobID must be specified")),
        Some(Value::String(given)) if given.is_empty() => {
            Err(error(400, "JobID must be specified"))
        }
        Some(Value::String(given)) if given == id => Ok(()),
        Some(_) => Err(error(400, "Job ID does not match")),
    }
}

/// `PUT|POST /v1/job/:id/revert` with `{"JobID", "JobVersion", "EnforcePriorVersion"}`.
pub(super) fn revert_job(shared: &Shared, id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let fields = small_object(body, 64 * 1024, "a revert")?;
    check_job_id(&fields, id)?;
    let version = count_field(&fields, "JobVersion")?.unwrap_or(0);
    let enforce = count_field(&fields, "EnforcePriorVersion")?;
    let mut core = shared.core();
    let target = core
        .server
        .store
        .job_versions(id)
        .and_then(|versions| versions.iter().find(|v| v.version == version))
        .map(Job::resubmitted);
    let starts = target.as_ref().is_some_and(|job| is_start(&core, job));
    let response = core.server.revert_job(id, version, enforce)?;
    log_registration(&mut core, id, starts);
    commit(shared, &mut core)?;
    let body = register_json(&core, id, &response.eval_id, response.index);
    ok(body, response.index)
}

/// `PUT|POST /v1/job/:id/scale` with `{"Count", "Target": {"Group"}, "Message", "Error",
/// "Meta", "JobModifyIndex"}` (Nomad's `api.ScalingRequest`): a scaling event recorded
/// for the group, and with a `Count` the group's count changed (`server/scaling.rs`).
pub(super) fn scale_job(shared: &Shared, id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let fields = small_object(body, 64 * 1024, "a scale")?;
    let request = scale_request(&fields, id)?;
    let changes_count = request.count.is_some();
    let mut core = shared.core();
    let response = core.server.scale_job(id, request)?;
    if changes_count {
        log_registration(&mut core, id, false);
    }
    commit(shared, &mut core)?;
    let body = json!({
        "EvalID": response.eval_id, "EvalCreateIndex": response.eval_create_index,
        "JobModifyIndex": response.job_modify_index, "Warnings": "", "Index": response.index,
        "LastContact": 0, "KnownLeader": true, "NextToken": "",
    });
    ok(body, response.index)
}

/// A scale request's fields, each of its type or refused naming it; what they hold is
/// the server's to judge (`ScaleRequest::validate`).
fn scale_request(fields: &Map<String, Value>, id: &str) -> Result<ScaleRequest, ApiError> {
    // `/v1/job//scale`: Nomad's router cleans the path and answers what it then names;
    // no job has an empty ID, so this is the request's fault, said so.
    if id.is_empty() {
        return Err(error(400, "missing job ID for scaling action"));
    }
    let target = match fields.get("Target") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(target)) => target.clone(),
        Some(_) => return Err(error(400, "Target is an object")),
    };
    let text_of = |name: &str| match target.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value.clone())),
        Some(_) => Err(error(400, format!("Target.{name} is a string"))),
    };
    if text_of("Job")?.is_some_and(|job| !job.is_empty() && job != id) {
        return Err(error(400, "job ID in payload did not match URL"));
    }
    if text_of("Namespace")?
        .is_some_and(|namespace| !namespace.is_empty() && namespace != "default")
    {
        return Err(error(400, "namespace in payload did not match header"));
    }
    let count = match fields.get("Count") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .ok_or_else(|| error(400, "Count is a whole number"))?,
        ),
    };
    let message = match fields.get("Message") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(message)) => message.clone(),
        Some(_) => return Err(error(400, "Message is a string")),
    };
    let flag = match fields.get("Error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => return Err(error(400, "Error is a boolean")),
    };
    let meta = match fields.get("Meta") {
        None | Some(Value::Null) => None,
        Some(Value::Object(meta)) => Some(meta.clone()),
        Some(_) => return Err(error(400, "Meta is an object")),
    };
    Ok(ScaleRequest {
        group: text_of("Group")?.unwrap_or_default(),
        count,
        message,
        error: flag,
        meta,
        job_modify_index: count_field(fields, "JobModifyIndex")?.unwrap_or(0),
    })
}

/// The index `GET /v1/job/:id/scale` answers and blocks on: the job's, its allocations'
/// table's and its scaling events' (the store's, while there is no such job, as Nomad's
/// `LatestIndex`; it is woken then by the jobs table). Woken by the job's allocations, not
/// the table's: those of other jobs change nothing it shows.
fn scale_status_index(core: &Core, id: &str) -> u64 {
    let store = &core.server.store;
    store.job(id).map_or(store.index(), |job| {
        let events = store.scaling_events(id).map_or(0, |e| e.modify_index);
        job.modify_index
            .max(store.table_indexes().allocs)
            .max(events)
    })
}

/// `GET /v1/job/:id/scale`: each group's desired count, its allocations — placed (not
/// terminal), running, healthy and unhealthy in their deployment — and its scaling events,
/// newest first (Nomad's `JobScaleStatusResponse`).
pub(super) fn scale_status(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let watch = |core: &Core| match core.server.store.job(id) {
        None => vec![Key::Table(Table::Jobs)],
        Some(_) => vec![
            Key::Object(Table::Jobs, id.to_string()),
            Key::JobAllocs(id.to_string()),
            Key::Object(Table::ScalingEvents, id.to_string()),
        ],
    };
    let core = blocking_on(shared, query, |core| scale_status_index(core, id), watch)?;
    let store = &core.server.store;
    let job = store.job(id).ok_or_else(|| error(404, "job not found"))?;
    let events = store.scaling_events(id).map(|job| &job.scaling_events);
    let mut groups = Map::new();
    for group in &job.task_groups {
        let live: Vec<&Allocation> = store
            .allocs_by_job(id)
            .filter(|a| a.task_group == group.name && !a.is_terminal())
            .collect();
        let health = |want: bool| {
            live.iter()
                .filter(|a| {
                    a.deployment_status
                        .as_ref()
                        .is_some_and(|s| s.healthy == Some(want))
                })
                .count()
        };
        groups.insert(
            group.name.clone(),
            json!({
                "Desired": group.count.unwrap_or(1),
                "Placed": live.len(),
                "Running": live.iter().filter(|a| a.client_status == ClientStatus::Running).count(),
                "Healthy": health(true),
                "Unhealthy": health(false),
                // Nomad's `null` for a group with none.
                "Events": events.and_then(|events| events.get(&group.name)),
            }),
        );
    }
    let index = scale_status_index(&core, id);
    ok(
        json!({
            "JobID": job.id, "Namespace": job.namespace, "JobCreateIndex": job.create_index,
            "JobModifyIndex": job.job_modify_index, "JobStopped": job.stop,
            "TaskGroups": groups,
        }),
        index,
    )
}
