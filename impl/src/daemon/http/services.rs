//! `/v1/service(s)`.

use super::*;

pub(super) fn list_services(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, |t| t.services)?;
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
    ok(json!(list), core.server.store.table_indexes().services)
}

pub(super) fn get_service(shared: &Shared, name: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, |t| t.services)?;
    let node = core.node.clone();
    let registrations: Vec<Value> = core
        .server
        .store
        .services()
        .filter(|s| s.service_name == name)
        .map(|s| {
            let mut value = serde_json::to_value(s).expect("services serialize");
            value["Namespace"] = json!("default");
            value["NodeID"] = json!(node);
            value["Datacenter"] = json!(shared.config.datacenter);
            value["ModifyIndex"] = json!(s.create_index);
            value
        })
        .collect();
    ok(
        json!(registrations),
        core.server.store.table_indexes().services,
    )
}
