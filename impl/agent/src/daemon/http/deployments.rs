//! Deployments, read — `/v1/deployments`, `/v1/deployment/:id`, and a job's
//! (`/v1/job/:id/deployments`, `/v1/job/:id/deployment`) — and written: `fail`, `pause`
//! (and resume) and `promote`, as Nomad answers them. A list's index is the deployments
//! table's (Nomad's `deployment` index), 1 while it is empty, so a client's next blocking
//! query waits instead of returning at once.

use super::*;
use quiesce_core::server::structs::Deployment;
use quiesce_core::server::DeploymentUpdate;

fn deployment_json(deployment: &Deployment) -> Value {
    serde_json::to_value(deployment).expect("deployments serialize")
}

fn table_index(store: &StateStore) -> u64 {
    store.table_indexes().deployments.max(1)
}

/// A blocking read of the deployments table: its index, and woken by its writes.
fn blocking_deployments<'a>(
    shared: &'a Shared,
    query: &Query,
) -> Result<std::sync::MutexGuard<'a, Core>, ApiError> {
    blocking_on(
        shared,
        query,
        |core| table_index(&core.server.store),
        |_| vec![Key::Table(Table::Deployments)],
    )
}

/// `GET /v1/deployments`: every deployment, oldest first (Nomad's order by create index),
/// or those whose ID starts with `prefix`.
pub(super) fn list_deployments(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_deployments(shared, query)?;
    let prefix = query.get("prefix").unwrap_or_default();
    let store = &core.server.store;
    let mut found: Vec<&Deployment> = store
        .deployments()
        .filter(|d| d.id.starts_with(prefix))
        .collect();
    found.sort_by_key(|d| (d.create_index, d.id.as_str()));
    let list: Vec<Value> = found.into_iter().map(deployment_json).collect();
    ok(json!(list), table_index(store))
}

/// `GET /v1/deployment/:id`.
pub(super) fn get_deployment(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    read_one(
        shared,
        query,
        Object::of(Table::Deployments, id),
        |store| store.deployment(id),
        |_, deployment| deployment.modify_index,
        "deployment not found",
        |_, deployment| deployment_json(deployment),
    )
}

/// `GET /v1/job/:id/deployments` (newest first, as Nomad's `DeploymentsByJobID` answers
/// the CLI) and `/v1/job/:id/deployment` (the latest, or `null`).
pub(super) fn job_deployments(
    shared: &Shared,
    id: &str,
    query: &Query,
    latest: bool,
) -> Result<Reply, ApiError> {
    let core = blocking_deployments(shared, query)?;
    let store = &core.server.store;
    let body = if latest {
        store
            .latest_deployment(id)
            .map_or(Value::Null, deployment_json)
    } else {
        let mut found: Vec<&Deployment> = store.deployments_of_job(id).collect();
        found.sort_by_key(|d| std::cmp::Reverse((d.create_index, d.id.as_str())));
        json!(found.into_iter().map(deployment_json).collect::<Vec<_>>())
    };
    ok(body, table_index(store))
}

/// What a deployment write answers (Nomad's `DeploymentUpdateResponse`).
fn update_json(update: &DeploymentUpdate, deployment_index: u64) -> Value {
    json!({
        "EvalID": update.eval_id.clone().unwrap_or_default(),
        "EvalCreateIndex": if update.eval_id.is_some() { update.index } else { 0 },
        "DeploymentModifyIndex": deployment_index,
        "RevertedJobVersion": update.reverted_job_version,
        "Index": update.index,
        "LastContact": 0,
        "KnownLeader": true,
        "NextToken": "",
    })
}

/// The body of a deployment write: a JSON object whose `DeploymentID` names the deployment
/// of the path (Nomad's checks and words).
fn deployment_body(id: &str, body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let fields = small_object(body, 64 * 1024, "a deployment")?;
    match fields.get("DeploymentID") {
        None | Some(Value::Null) => Err(error(400, "DeploymentID must be specified")),
        Some(Value::String(given)) if given.is_empty() => {
            Err(error(400, "DeploymentID must be specified"))
        }
        Some(Value::String(given)) if given == id => Ok(fields),
        Some(Value::String(_)) => Err(error(400, "Deployment ID does not match")),
        Some(_) => Err(error(400, "DeploymentID is a string")),
    }
}

fn bool_field(fields: &Map<String, Value>, name: &str) -> Result<bool, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(error(400, format!("{name} is a boolean"))),
    }
}

/// Applies a deployment write under the core's lock (the commit logs what it did: the
/// deployment's new status, an auto-revert's version) and answers once it is durable.
fn deployment_write(
    shared: &Shared,
    id: &str,
    write: impl FnOnce(&mut quiesce_core::server::Server) -> Result<DeploymentUpdate, ServerError>,
) -> Result<Reply, ApiError> {
    let mut core = shared.core();
    let update = write(&mut core.server)?;
    commit(shared, &mut core)?;
    let modify_index = core
        .server
        .store
        .deployment(id)
        .map_or(update.index, |d| d.modify_index);
    ok(update_json(&update, modify_index), update.index)
}

/// `PUT|POST /v1/deployment/fail/:id` (no body is read, as Nomad's).
pub(super) fn fail_deployment(shared: &Shared, id: &str) -> Result<Reply, ApiError> {
    deployment_write(shared, id, |server| server.fail_deployment(id))
}

/// `PUT|POST /v1/deployment/pause/:id` with `{"DeploymentID", "Pause"}`: `Pause: false`
/// resumes.
pub(super) fn pause_deployment(shared: &Shared, id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let fields = deployment_body(id, body)?;
    let pause = bool_field(&fields, "Pause")?;
    deployment_write(shared, id, |server| server.pause_deployment(id, pause))
}

/// `PUT|POST /v1/deployment/promote/:id` with `{"DeploymentID", "All", "Groups"}`.
pub(super) fn promote_deployment(
    shared: &Shared,
    id: &str,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let fields = deployment_body(id, body)?;
    let all = bool_field(&fields, "All")?;
    let groups: Vec<String> = match fields.get("Groups") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(groups)) if groups.len() <= spec::MAX_GROUPS_PER_JOB => groups
            .iter()
            .map(|g| g.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| error(400, "Groups is a list of group names"))?,
        Some(_) => return Err(error(400, "Groups is a list of group names")),
    };
    deployment_write(shared, id, |server| {
        server.promote_deployment(id, all, &groups)
    })
}
