//! The reads around a job that clients make on every screen: its source as submitted
//! (`/v1/job/:id/submission`), its service registrations (`/v1/job/:id/services`) (its
//! deployments are `deployments.rs`'s); and `/v1/job/:id/evaluate`, a new evaluation of the job as it is stored.

use super::*;
use quiesce_core::spec::{Submission, MAX_SUBMISSION_BYTES};

/// The most `-var` flags a submission may carry.
const MAX_VARIABLE_FLAGS: usize = 1024;

/// A register request's `Submission`, checked: `None` when absent or `null`. A submission
/// larger than [`MAX_SUBMISSION_BYTES`] is discarded with a warning (Nomad's
/// `max_job_source_size`), and the job is registered without it.
pub(super) fn submission_of(
    request: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<Option<Submission>, ApiError> {
    let Some(value) = request.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(fields) = value.as_object() else {
        return Err(error(400, "Submission must be an object"));
    };
    let mut submission = Submission::default();
    for (key, value) in fields {
        let wrong = |kind: &str| error(400, format!("Submission.{key} must be {kind}"));
        let text = || match value {
            Value::String(text) => Ok(text.clone()),
            Value::Null => Ok(String::new()),
            _ => Err(wrong("a string")),
        };
        match key.to_ascii_lowercase().as_str() {
            "source" => submission.source = text()?,
            "format" => submission.format = text()?,
            "variables" => submission.variables = text()?,
            "variableflags" => {
                submission.variable_flags = match value {
                    Value::Null => None,
                    Value::Object(flags) if flags.len() > MAX_VARIABLE_FLAGS => {
                        return Err(error(
                            400,
                            format!(
                                "Submission.VariableFlags has {} flags (at most \
                                 {MAX_VARIABLE_FLAGS})",
                                flags.len()
                            ),
                        ))
                    }
                    Value::Object(flags) => Some(
                        flags
                            .iter()
                            .map(|(name, value)| match value {
                                Value::String(text) => Ok((name.clone(), text.clone())),
                                _ => Err(wrong("an object of strings")),
                            })
                            .collect::<Result<_, _>>()?,
                    ),
                    _ => return Err(wrong("an object of strings")),
                }
            }
            // Nomad's decoder ignores what its struct lacks.
            _ => {}
        }
    }
    if !matches!(submission.format.as_str(), "" | "hcl1" | "hcl2" | "json") {
        return Err(error(
            400,
            format!(
                "Submission.Format {:?} is not one of hcl1, hcl2, json",
                submission.format.chars().take(32).collect::<String>()
            ),
        ));
    }
    // Nomad drops an empty map of flags.
    if submission
        .variable_flags
        .as_ref()
        .is_some_and(BTreeMap::is_empty)
    {
        submission.variable_flags = None;
    }
    let size = submission.size();
    if size > MAX_SUBMISSION_BYTES {
        warnings.push(format!(
            "job source size of {size} bytes exceeds the maximum of {MAX_SUBMISSION_BYTES} \
             bytes and will be discarded"
        ));
        return Ok(None);
    }
    Ok(Some(submission))
}

/// `GET /v1/job/:id/submission?version=N`: the source of version N as it was submitted.
pub(super) fn job_submission(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let version = query
        .get("version")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            error(
                400,
                "Unable to parse job submission version parameter (version=N is required)",
            )
        })?;
    let index_of = |store: &StateStore| {
        store
            .job(id)
            .map_or(store.table_indexes().jobs, |job| job.modify_index)
    };
    let core = blocking_on(
        shared,
        query,
        |core| index_of(&core.server.store),
        |core| watch_job(&core.server.store, id),
    )?;
    let store = &core.server.store;
    let found = store
        .job_versions(id)
        .into_iter()
        .flatten()
        .find(|job| job.version == version);
    let Some(submission) = found.and_then(|job| job.submission.as_deref()) else {
        return Err(error(404, "job source not found"));
    };
    let index = index_of(store);
    ok(
        serde_json::to_value(submission).expect("submissions serialize"),
        index,
    )
}

/// `GET /v1/job/:id/services`: every registration of the job's allocations, as
/// `/v1/service/:name` shows them.
pub(super) fn job_services(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, &[Table::Services])?;
    let store = &core.server.store;
    if store.job(id).is_none() {
        return Err(error(404, "job not found"));
    }
    let registrations: Vec<Value> = store
        .services()
        .filter(|s| s.job_id == id)
        .map(|s| {
            let alloc = store.alloc_for_client(&s.alloc_id);
            let owner = alloc.map(|a| (a.job.as_ref(), a.task_group.as_str(), a.ports.as_slice()));
            service_json(shared, &core.node, s, owner)
        })
        .collect();
    ok(json!(registrations), store.table_indexes().services.max(1))
}

/// `PUT /v1/job/:id/evaluate`: a new evaluation of the job as stored, as Nomad's (its
/// `TriggeredBy` is a register's). The same write as registering the stored job unchanged,
/// logged as that register. A stopped job is not evaluated (Nomad's refusal).
pub(super) fn force_evaluate(shared: &Shared, id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    // Nomad's body: `{"JobID", "EvalOptions": {"ForceReschedule"}}`; nothing here is
    // rescheduled, so only its shape is checked.
    small_object(body, 4096, "an evaluate")?;
    let mut core = shared.core();
    let Some(stored) = core.server.store.job(id).cloned() else {
        return Err(error(404, "job not found"));
    };
    if stored.stop {
        return Err(error(400, "can't evaluate stopped job"));
    }
    let response = core
        .server
        .register_job_with(stored, quiesce_core::server::RegisterOptions::default())?;
    if let Some(stored) = core.server.store.job(id) {
        let entry = LogEntry::register_job(stored);
        core.log(entry);
    }
    commit(shared, &mut core)?;
    let job_modify_index = core.server.store.job(id).map_or(0, |j| j.job_modify_index);
    ok(
        json!({"EvalID": response.eval_id, "EvalCreateIndex": response.index,
               "JobModifyIndex": job_modify_index, "Warnings": "", "Index": response.index,
               "LastContact": 0, "KnownLeader": true, "NextToken": ""}),
        response.index,
    )
}
