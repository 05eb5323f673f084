//! Deployments, read: `/v1/deployments`, `/v1/deployment/:id`, and a job's
//! (`/v1/job/:id/deployments`, `/v1/job/:id/deployment`), as Nomad answers them. A list's
//! index is the deployments table's (Nomad's `deployment` index), 1 while it is empty, so
//! a client's next blocking query waits instead of returning at once.

use super::*;
use quiesce_core::server::structs::Deployment;

fn deployment_json(deployment: &Deployment) -> Value {
    serde_json::to_value(deployment).expect("deployments serialize")
}

fn table_index(store: &StateStore) -> u64 {
    store.table_indexes().deployments.max(1)
}

/// `GET /v1/deployments`: every deployment, oldest first (Nomad's order by create index),
/// or those whose ID starts with `prefix`.
pub(super) fn list_deployments(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_on(shared, query, |core| table_index(&core.server.store))?;
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
    let core = blocking_on(shared, query, |core| table_index(&core.server.store))?;
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
