//! The cluster's reads where this agent has one of each and nothing to manage: the
//! `default` namespace, the raft configuration (one voter: this server), volumes (none).
//! Each is answered as Nomad answers it, read-only.

use super::*;

/// Nomad's `default` namespace as it describes it.
fn default_namespace() -> Value {
    json!({
        "Name": "default",
        "Description": "Default shared namespace",
        "Quota": "",
        "Capabilities": null,
        "NodePoolConfiguration": null,
        "VaultConfiguration": null,
        "ConsulConfiguration": null,
        "Meta": null,
        "CreateIndex": 1,
        "ModifyIndex": 1,
        "RequiredExtraClaims": null,
        "OptionalExtraClaims": null,
    })
}

/// `GET /v1/namespaces`: the `default` namespace, if the token may use it (Nomad lists only
/// the namespaces a token has a capability in), and if it matches `prefix`.
pub(super) fn list_namespaces(
    shared: &Shared,
    query: &Query,
    authority: &crate::acl::Authority,
) -> Result<Reply, ApiError> {
    unchanging(shared, query)?;
    let allowed = acl::check(authority, Need::Either("list-jobs", "read-job")).is_ok();
    let prefix = query.get("prefix").unwrap_or_default();
    let list = if allowed && "default".starts_with(prefix) {
        json!([default_namespace()])
    } else {
        json!([])
    };
    ok(list, 1)
}

/// `GET /v1/namespace/:name`.
pub(super) fn get_namespace(shared: &Shared, name: &str, query: &Query) -> Result<Reply, ApiError> {
    unchanging(shared, query)?;
    if name != "default" {
        return Err(error(404, "namespace not found"));
    }
    ok(default_namespace(), 1)
}

/// `GET /v1/operator/raft/configuration`: one server, this one, the leader and a voter.
pub(super) fn raft_configuration(shared: &Shared) -> Result<Reply, ApiError> {
    let config = &shared.config;
    let address = config.bind.to_string();
    let node = shared.core().node.clone();
    plain(json!({
        "Servers": [{
            "ID": node,
            "Node": format!("{}.{}", config.name, config.region),
            "Address": address,
            "Leader": true,
            "Voter": true,
            "RaftProtocol": "3",
        }],
        "Index": 1,
    }))
}

/// `GET /v1/operator/scheduler/configuration`: Nomad's defaults, which this agent's one
/// scheduler follows (binpack; no preemption but of system jobs, which it has none of).
pub(super) fn scheduler_configuration() -> Result<Reply, ApiError> {
    ok(
        json!({
            "SchedulerConfig": {
                "SchedulerAlgorithm": "binpack",
                "PreemptionConfig": {"SystemSchedulerEnabled": true,
                                     "SysBatchSchedulerEnabled": false,
                                     "BatchSchedulerEnabled": false,
                                     "ServiceSchedulerEnabled": false},
                "MemoryOversubscriptionEnabled": false,
                "RejectJobRegistration": false,
                "PauseEvalBroker": false,
                "CreateIndex": 1,
                "ModifyIndex": 1,
            },
            "Index": 1, "LastContact": 0, "KnownLeader": true, "NextToken": "",
        }),
        1,
    )
}

/// `GET /v1/volumes?type=host|csi`: none (the agent's node offers no volumes). Nomad needs
/// the type, and names the ones it knows.
pub(super) fn list_volumes(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    match query.get("type") {
        Some("host" | "csi") => {
            unchanging(shared, query)?;
            ok(json!([]), 1)
        }
        Some(other) => Err(error(
            400,
            format!(
                "unsupported volume type {:?}: the types are host and csi",
                other.chars().take(32).collect::<String>()
            ),
        )),
        None => Err(error(
            400,
            "the volume type is required: type=host or type=csi",
        )),
    }
}

/// A blocking query on a table that never changes (its index is 1): one past it waits out
/// its `wait` (no write wakes it), as Nomad's does.
fn unchanging(shared: &Shared, query: &Query) -> Result<(), ApiError> {
    blocking_on(shared, query, |_| 1, |_| Vec::new()).map(drop)
}
