//! `/v1/job/:id/revert` and `/v1/job/:id/scale` (a write, and its status on `GET`), as
//! Nomad answers them: each write registers a version made from a stored one, logged as
//! the registration it is, and answered as a register is.

use super::*;

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

/// `PUT|POST /v1/job/:id/scale` with `{"Count", "Target": {"Group"}, "Message", …}`: the
/// group's count changed. Without a `Count` nothing changes (Nomad records only an event,
/// which this agent does not keep).
pub(super) fn scale_job(shared: &Shared, id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let fields = small_object(body, 64 * 1024, "a scale")?;
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
    if text_of("Job")?.is_some_and(|job| job != id) {
        return Err(error(400, "job ID in payload did not match URL"));
    }
    let group = text_of("Group")?
        .filter(|g| !g.is_empty())
        .ok_or_else(|| error(400, "missing task group name for scaling action"))?;
    let count = match fields.get("Count") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .ok_or_else(|| error(400, "Count is a whole number"))?,
        ),
    };
    let mut core = shared.core();
    let Some(count) = count else {
        if core.server.store.job(id).is_none() {
            return Err(error(404, format!("job {id:?} not found")));
        }
        let index = core.server.store.index();
        return ok(register_json(&core, id, "", index), index);
    };
    let response = core.server.scale_job(id, &group, count)?;
    log_registration(&mut core, id, false);
    commit(shared, &mut core)?;
    let body = register_json(&core, id, &response.eval_id, response.index);
    ok(body, response.index)
}

/// `GET /v1/job/:id/scale`: each group's desired count and its allocations — placed (not
/// terminal), running, healthy and unhealthy in their deployment (Nomad's
/// `JobScaleStatusResponse`).
pub(super) fn scale_status(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_on(shared, query, |core| {
        let store = &core.server.store;
        store.job(id).map_or(store.index(), |job| {
            job.modify_index.max(store.table_indexes().allocs)
        })
    })?;
    let store = &core.server.store;
    let job = store.job(id).ok_or_else(|| error(404, "job not found"))?;
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
                "Events": null,
            }),
        );
    }
    let index = job.modify_index.max(store.table_indexes().allocs);
    ok(
        json!({
            "JobID": job.id, "Namespace": job.namespace, "JobCreateIndex": job.create_index,
            "JobModifyIndex": job.job_modify_index, "JobStopped": job.stop,
            "TaskGroups": groups,
        }),
        index,
    )
}
