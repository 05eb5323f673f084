//! The agent's own endpoints: `/v1/agent/self`, `/v1/agent/members`, `/v1/regions`,
//! `/v1/status/*`, `/v1/metrics`, `/.well-known/jwks.json`.

use super::*;
use std::net::SocketAddr;

/// Nomad's member name: the agent's name and its region.
fn member_name(shared: &Shared) -> String {
    format!("{}.{}", shared.config.name, shared.config.region)
}

fn member(shared: &Shared) -> Value {
    let config = &shared.config;
    member_json(
        &member_name(shared),
        config.bind,
        &config.region,
        &config.datacenter,
    )
}

fn member_json(name: &str, http: SocketAddr, region: &str, datacenter: &str) -> Value {
    json!({
        "Name": name, "Addr": http.ip().to_string(), "Port": http.port(),
        "Status": "alive", "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
        "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
        "Tags": {"region": region, "dc": datacenter, "role": "nomad",
                 "build": env!("CARGO_PKG_VERSION"), "bootstrap": "1", "expect": "1",
                 "port": http.port().to_string()},
    })
}

/// `/v1/agent/join?address=…`: joins the agents listening there (see `daemon::peers`).
pub(super) fn join(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let addresses: Vec<&str> = query.all("address").collect();
    if addresses.is_empty() {
        return Err(error(400, "missing address to join"));
    }
    if addresses.len() > crate::daemon::peers::MAX_JOIN_ADDRESSES {
        return Err(error(
            400,
            format!(
                "at most {} addresses to join at once (got {})",
                crate::daemon::peers::MAX_JOIN_ADDRESSES,
                addresses.len()
            ),
        ));
    }
    let (joined, errors) = crate::daemon::peers::join(shared, &addresses);
    plain(json!({"num_joined": joined, "error": errors.join("; "), "warning": ""}))
}

/// quiesce's extensions of Nomad's API (DESIGN.md, "Where quiesce deliberately differs"):
/// the group delay's task events, and `NoShutdownDelay` on an allocation's restart.
pub const EXTENSIONS: [&str; 2] = ["group-shutdown-delay-events", "restart-no-shutdown-delay"];

pub(super) fn agent_self(shared: &Shared) -> Result<Reply, ApiError> {
    let bind = shared.config.bind;
    let runners = shared.runner_count().to_string();
    // The client's node, as Nomad's stats name it (`node status -self` reads it); none
    // for a server without a client.
    let node_id = if shared.config.client_enabled {
        shared.core().node().to_string()
    } else {
        String::new()
    };
    let config = &shared.config;
    plain(json!({
        "config": {"Region": config.region, "Datacenter": config.datacenter,
                   "NodeName": config.name, "DataDir": config.data_dir,
                   "Version": {"Version": env!("CARGO_PKG_VERSION")},
                   "DevMode": config.client_enabled,
                   "Client": {"Enabled": config.client_enabled},
                   "Server": {"Enabled": true, "BootstrapExpect": 1},
                   "ACL": {"Enabled": config.acl_enabled}},
        "member": member(shared),
        "stats": {"nomad": {"server": "true", "leader": "true", "leader_addr": bind.to_string()},
                  "client": {"known_servers": bind.to_string(), "alloc_runners": runners,
                             "node_id": node_id}},
        // What this agent offers beyond Nomad's API, for clients (the probe) that probe
        // an extension only where a server advertises it. Nomad has no such key.
        "quiesce": {"extensions": EXTENSIONS},
    }))
}

/// `/v1/agent/members`: this agent, the only server of its cluster.
pub(super) fn members(shared: &Shared) -> Result<Reply, ApiError> {
    let mut members = vec![member(shared)];
    for peer in shared.peers.list() {
        let http = peer
            .http_addr
            .parse()
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let name = format!("{}.{}", peer.name, peer.region);
        members.push(member_json(&name, http, &peer.region, &peer.datacenter));
    }
    plain(
        json!({"ServerName": shared.config.name, "ServerRegion": shared.config.region,
                 "ServerDC": shared.config.datacenter, "Members": members}),
    )
}

/// `/v1/regions`: this agent's region, and its peers' if `peers`, sorted.
pub(super) fn regions(shared: &Shared, peers: bool) -> Result<Reply, ApiError> {
    let known = if peers {
        shared.peers.list()
    } else {
        Vec::new()
    };
    let mut regions: std::collections::BTreeSet<String> =
        known.into_iter().map(|peer| peer.region).collect();
    regions.insert(shared.config.region.clone());
    plain(json!(regions))
}

/// `/v1/metrics`, in Nomad's JSON form: a few gauges of the agent's state (no telemetry
/// sink is kept, so no counters or samples; no Prometheus text).
pub(super) fn metrics(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let runners = shared.runner_count();
    let connections = shared
        .connections
        .get()
        .map(|c| c.counts())
        .unwrap_or_default();
    let collected = shared.gc.total();
    let watched = shared.watchers.counts();
    let (jobs, allocs, index, evals, versions) = {
        let core = shared.core();
        let store = &core.server.store;
        let versions: usize = store
            .jobs()
            .map(|job| store.job_versions(&job.id).map_or(0, <[_]>::len))
            .sum();
        (
            store.jobs().count(),
            store.allocs().count(),
            store.index(),
            store.evals().count(),
            versions,
        )
    };
    let gauges = [
        ("nomad.client.allocations.runners", runners as f64),
        ("nomad.nomad.job_summary.jobs", jobs as f64),
        ("nomad.nomad.state.allocations", allocs as f64),
        ("nomad.nomad.state.index", index as f64),
        // quiesce's own: the HTTP connections open, those shed to make room for new ones
        // (and, since the start, those admitted and the most open at once), and the encoded
        // answers held for clients that have not taken them.
        ("quiesce.http.connections", connections.open as f64),
        ("quiesce.state.evaluations", evals as f64),
        ("quiesce.state.job_versions", versions as f64),
        ("quiesce.gc.jobs", collected.jobs as f64),
        ("quiesce.gc.evals", collected.evals as f64),
        ("quiesce.gc.allocs", collected.allocs as f64),
        ("quiesce.http.connections_shed", connections.shed as f64),
        (
            "quiesce.http.connections_admitted",
            connections.admitted as f64,
        ),
        ("quiesce.http.connections_peak", connections.peak as f64),
        (
            "quiesce.http.unsent_answer_bytes",
            shared.answers.unsent() as f64,
        ),
        // Blocking queries (`watch.rs`): waiting now; since the start, how often a write
        // woke one, and whether its read then answered or waited again; refused for room.
        ("quiesce.http.blocked_queries", watched.waiting as f64),
        ("quiesce.http.blocked_query_wakeups", watched.woken as f64),
        (
            "quiesce.http.blocked_query_wakeups_answered",
            watched.answered as f64,
        ),
        (
            "quiesce.http.blocked_query_wakeups_waited_again",
            watched.waited_again as f64,
        ),
        (
            "quiesce.http.blocked_queries_refused",
            watched.refused as f64,
        ),
    ];
    match query.get("format") {
        None | Some("") | Some("json") => {}
        Some(other) => {
            return Err(error(
                400,
                format!("Invalid format {other:?}: this agent serves its metrics as JSON only"),
            ))
        }
    }
    let timestamp = quiesce_core::gotime::rfc3339(crate::daemon::unix_now_ns());
    let gauges: Vec<Value> = gauges
        .iter()
        .map(|(name, value)| json!({"Name": name, "Value": value, "Labels": {}}))
        .collect();
    plain(
        json!({"Timestamp": timestamp, "Gauges": gauges, "Counters": [], "Samples": [],
                 "Points": []}),
    )
}

/// `/.well-known/jwks.json`: the keyring's public keys.
pub(super) fn jwks(shared: &Shared) -> Result<Reply, ApiError> {
    plain(shared.keyring.jwks())
}
