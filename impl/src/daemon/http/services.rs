//! `/v1/service(s)` and `/v1/agent/self`.

use super::*;

pub(super) fn list_services(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let mut names: BTreeMap<(String, String), ()> = BTreeMap::new();
    for service in core.server.store.services() {
        let namespace = core
            .server
            .store
            .alloc_for_client(&service.alloc_id)
            .map_or("default".to_string(), |a| a.namespace.clone());
        names.insert((namespace, service.service_name.clone()), ());
    }
    let mut by_namespace: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (namespace, name) in names.into_keys() {
        by_namespace
            .entry(namespace)
            .or_default()
            .push(json!({"ServiceName": name, "Tags": []}));
    }
    let list: Vec<Value> = by_namespace
        .into_iter()
        .map(|(namespace, services)| json!({"Namespace": namespace, "Services": services}))
        .collect();
    ok(json!(list), core.server.store.index())
}

pub(super) fn get_service(shared: &Shared, name: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let registrations: Vec<Value> = core
        .server
        .store
        .services()
        .filter(|s| s.service_name == name)
        .map(|s| {
            let mut value = serde_json::to_value(s).expect("services serialize");
            value["Namespace"] = json!("default");
            value["NodeID"] = json!(shared.config.node_name);
            value["Datacenter"] = json!("dc1");
            value["ModifyIndex"] = json!(s.create_index);
            value
        })
        .collect();
    ok(json!(registrations), core.server.store.index())
}

// ---------------------------------------------------------------------------- agent

pub(super) fn agent_self(shared: &Shared) -> Result<Reply, ApiError> {
    let bind = shared.config.bind;
    let runners = shared.runner_count().to_string();
    Ok(Reply {
        status: 200,
        body: json!({
            "config": {"Region": "global", "Datacenter": "dc1", "NodeName": shared.config.node_name,
                       "DataDir": shared.config.data_dir, "Version": {"Version": env!("CARGO_PKG_VERSION")},
                       "DevMode": true},
            "member": {"Name": shared.config.node_name, "Addr": bind.ip().to_string(),
                       "Port": bind.port(), "Status": "alive", "Tags": {"region": "global", "dc": "dc1"}},
            "stats": {"nomad": {"server": "true", "leader": "true", "leader_addr": bind.to_string()},
                      "client": {"known_servers": bind.to_string(), "alloc_runners": runners}},
        }),
        index: None,
    })
}
