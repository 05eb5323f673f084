//! `/v1/nodes` and `/v1/node/:id`: the client's node.

use super::*;
use quiesce_core::server::structs::Node;

/// Nomad's default range for dynamic ports, which the node offers.
pub const MIN_DYNAMIC_PORT: u16 = 20000;
pub const MAX_DYNAMIC_PORT: u16 = 32000;

/// What the host has: CPU (MHz × cores, as Nomad's fingerprint counts it), memory, disk.
fn resources() -> Value {
    static READ: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    READ.get_or_init(read_resources).clone()
}

/// Read once, the first time a node is shown (not again under the core's lock).
fn read_resources() -> Value {
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    let mhz = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("cpu MHz"))
                .and_then(|line| line.split(':').nth(1))
                .and_then(|mhz| mhz.trim().parse::<f64>().ok())
        })
        .map_or(1000, |mhz| mhz as u64);
    let memory_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("MemTotal:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024);
    json!({
        "Cpu": {"CpuShares": mhz * cores, "TotalCpuCores": cores, "ReservableCpuCores": null},
        "Memory": {"MemoryMB": memory_mb}, "Disk": {"DiskMB": 0}, "Networks": [],
        "Devices": null, "NodeNetworks": null,
        "MinDynamicPort": MIN_DYNAMIC_PORT, "MaxDynamicPort": MAX_DYNAMIC_PORT,
    })
}

pub(super) fn node_json(node: &Node) -> Value {
    let mut value = serde_json::to_value(node).expect("nodes serialize");
    let object = value.as_object_mut().expect("a node is an object");
    for (key, extra) in [
        ("NodeClass", json!("")),
        ("SchedulingEligibility", json!("eligible")),
        ("Drain", json!(false)),
        ("DrainStrategy", json!(null)),
        ("StatusDescription", json!("")),
        ("Meta", json!({})),
        ("Links", json!({})),
        ("TLSEnabled", json!(false)),
        ("NodeResources", resources()),
        ("ReservedResources", json!(null)),
        ("HostVolumes", json!(null)),
        ("CSIControllerPlugins", json!(null)),
        ("CSINodePlugins", json!(null)),
        // Nomad's node answers carry the field, blanked: the secret is the client's own.
        ("SecretID", json!("")),
    ] {
        object.insert(key.into(), extra);
    }
    // The legacy totals, which older clients read: what the host has, and nothing
    // reserved.
    let have = resources();
    let number = |part: &str, key: &str| have[part][key].as_i64().unwrap_or(0);
    object.insert(
        "Resources".into(),
        nomad_zeros::legacy_resources(
            number("Cpu", "CpuShares"),
            number("Memory", "MemoryMB"),
            number("Disk", "DiskMB"),
            json!(null),
        ),
    );
    object.insert(
        "Reserved".into(),
        nomad_zeros::legacy_resources(0, 0, 0, json!(null)),
    );
    nomad_zeros::node(&mut value);
    value
}

fn node_stub(node: &Node) -> Value {
    let mut stub = json!({
        "Address": node.http_addr.rsplit_once(':').map_or("", |(host, _)| host),
        "ID": node.id, "Datacenter": node.datacenter, "Name": node.name, "NodeClass": "",
        "NodePool": node.node_pool, "Version": env!("CARGO_PKG_VERSION"), "Drain": false,
        "SchedulingEligibility": "eligible", "Status": node.status, "StatusDescription": "",
        "Drivers": node.drivers, "HostVolumes": null, "LastDrain": null,
        "CreateIndex": node.create_index, "ModifyIndex": node.modify_index,
    });
    nomad_zeros::node_stub(&mut stub);
    stub
}

pub(super) fn list_nodes(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let with_resources = query.bool("resources")?;
    let with_attributes = query.bool("os")?;
    let core = blocking_table(shared, query, &[Table::Nodes])?;
    let prefix = query.get("prefix").unwrap_or("");
    let nodes: Vec<Value> = core
        .server
        .store
        .nodes()
        .filter(|node| node.id.starts_with(prefix))
        .map(|node| {
            let mut stub = node_stub(node);
            if with_attributes {
                stub["Attributes"] = json!(node.attributes);
            }
            if with_resources {
                stub["NodeResources"] = resources();
                stub["ReservedResources"] = json!({"Cpu": {"CpuShares": 0},
                    "Memory": {"MemoryMB": 0}, "Disk": {"DiskMB": 0},
                    "Networks": {"ReservedHostPorts": ""}});
            }
            stub
        })
        .collect();
    ok(json!(nodes), core.server.store.table_indexes().nodes)
}

pub(super) fn get_node(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = |_: &StateStore, node: &Node| node.modify_index;
    let render = |_: &Core, node: &Node| node_json(node);
    read_one(
        shared,
        query,
        Object::of(Table::Nodes, id),
        |s| s.node(id),
        index,
        "node not found",
        render,
    )
}

/// `/v1/node/:id/allocations`: every allocation placed on the node, as its client has them
/// — a purged job's included while its tasks are still being stopped (the API's other
/// lists no longer show them): how a purge's monitor knows when they are dead.
pub(super) fn node_allocs(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    // An unknown node has no allocations (Nomad answers an empty list too).
    let core = blocking_table(shared, query, &[Table::Allocs])?;
    // Full allocations, as Nomad's: copied under the lock (each shares its job version's
    // `Arc`), rendered after it is released, as the lists' stubs are. The answer is counted
    // against the agent's budget of answers not yet taken, as every store read's is.
    let (chosen, index) = stubs(&core, core.server.store.allocs_for_node(id));
    drop(core);
    let ip = shared.config.bind.ip().to_string();
    let allocs: Vec<Value> = chosen
        .iter()
        .map(|(alloc, node)| alloc_json(alloc, node, &ip))
        .collect();
    ok(json!(allocs), index)
}
