//! `/v1/service(s)`.

use super::*;

pub(super) fn list_services(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, &[Table::Services])?;
    // Each name's tags: the union of its registrations' (Nomad's stub), sorted.
    let mut names: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
    for service in core.server.store.services() {
        let alloc = core.server.store.alloc_for_client(&service.alloc_id);
        let namespace = alloc.map_or("default".to_string(), |a| a.namespace.clone());
        let tags = alloc
            .and_then(|a| service_spec(&a.job, &a.task_group, &service.task, &service.service_name))
            .and_then(|spec| spec.tags.clone())
            .unwrap_or_default();
        names
            .entry((namespace, service.service_name.clone()))
            .or_default()
            .extend(tags);
    }
    let mut by_namespace: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for ((namespace, name), tags) in names {
        by_namespace
            .entry(namespace)
            .or_default()
            .push(json!({"ServiceName": name, "Tags": tags}));
    }
    let list: Vec<Value> = by_namespace
        .into_iter()
        .map(|(namespace, services)| json!({"Namespace": namespace, "Services": services}))
        .collect();
    ok(json!(list), core.server.store.table_indexes().services)
}

pub(super) fn get_service(shared: &Shared, name: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, &[Table::Services])?;
    let node = core.node.clone();
    let registrations: Vec<Value> = core
        .server
        .store
        .services()
        .filter(|s| s.service_name == name)
        .map(|s| {
            let alloc = core.server.store.alloc_for_client(&s.alloc_id);
            let owner = alloc.map(|a| (a.job.as_ref(), a.task_group.as_str(), a.ports.as_slice()));
            service_json(shared, &node, s, owner)
        })
        .collect();
    ok(
        json!(registrations),
        core.server.store.table_indexes().services,
    )
}

/// A registration as Nomad shows it, with its allocation's job, group and ports (`owner`;
/// without them, no tags and no port).
pub(super) fn service_json(
    shared: &Shared,
    node: &str,
    s: &quiesce_core::server::structs::ServiceRegistration,
    owner: Option<(&Job, &str, &[quiesce_core::server::structs::AllocatedPort])>,
) -> Value {
    let mut value = serde_json::to_value(s).expect("services serialize");
    // The task it belongs to is the agent's own bookkeeping; Nomad's registration has none.
    if let Some(object) = value.as_object_mut() {
        object.remove("Task");
    }
    value["Namespace"] = json!("default");
    value["NodeID"] = json!(node);
    value["Datacenter"] = json!(shared.config.datacenter);
    value["ModifyIndex"] = json!(s.create_index);
    let spec = owner.and_then(|(job, group, _)| service_spec(job, group, &s.task, &s.service_name));
    let tags = spec.and_then(|spec| spec.tags.clone()).unwrap_or_default();
    let port = spec
        .filter(|spec| !spec.port_label.is_empty())
        .and_then(|spec| {
            let (_, _, ports) = owner.expect("the spec is the allocation's");
            ports.iter().find(|p| p.label == spec.port_label)
        })
        .map_or(0, |p| p.value);
    value["Tags"] = json!(tags);
    value["Address"] = json!(shared.config.bind.ip().to_string());
    value["Port"] = json!(port);
    value
}

/// The spec of a service of a job's group (`task` empty for a group service).
fn service_spec<'a>(
    job: &'a Job,
    group: &str,
    task: &str,
    name: &str,
) -> Option<&'a spec::Service> {
    let group = job.task_groups.iter().find(|g| g.name == group)?;
    let services = if task.is_empty() {
        group.services.as_deref()
    } else {
        group
            .tasks
            .iter()
            .find(|t| t.name == task)?
            .services
            .as_deref()
    };
    services?.iter().find(|s| s.name == name)
}
