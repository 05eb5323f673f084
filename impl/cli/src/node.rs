//! `node status`: the nodes, or one node, in the layout of Nomad's
//! `command/node_status.go` (neither `-short` nor `-verbose`).

use super::alloc_status::ibytes;
use super::api::{alloc_rows, fields, resolve, short, table, text, Api};
use serde_json::Value;

pub(super) fn node_status(api: &Api, node: Option<&str>, json: bool) -> Result<(), String> {
    let as_json = |value: &serde_json::Value| {
        println!(
            "{}",
            serde_json::to_string_pretty(value).expect("JSON values serialize")
        );
    };
    let Some(prefix) = node else {
        let nodes = api.get("/v1/nodes")?;
        if json {
            as_json(&nodes);
            return Ok(());
        }
        let nodes = nodes.as_array().cloned().unwrap_or_default();
        if nodes.is_empty() {
            println!("No nodes registered");
            return Ok(());
        }
        let mut rows = vec![[
            "ID",
            "Node Pool",
            "DC",
            "Name",
            "Class",
            "Drain",
            "Eligibility",
            "Status",
        ]
        .map(String::from)
        .to_vec()];
        for node in &nodes {
            rows.push(vec![
                short(&text(node, "ID")).to_string(),
                text(node, "NodePool"),
                text(node, "Datacenter"),
                text(node, "Name"),
                none_if_empty(text(node, "NodeClass")),
                text(node, "Drain"),
                text(node, "SchedulingEligibility"),
                text(node, "Status"),
            ]);
        }
        println!("{}", table(&rows));
        return Ok(());
    };
    let stub = resolve(api, "Node", "nodes", prefix)?;
    let node = api.get(&format!("/v1/node/{}", text(&stub, "ID")))?;
    if json {
        as_json(&node);
        return Ok(());
    }
    print_node(api, &node)
}

fn none_if_empty(value: String) -> String {
    if value.is_empty() {
        "<none>".into()
    } else {
        value
    }
}

/// One node: its fields, events, the resources its running allocations hold and use, and
/// its allocations. Nomad's `Uptime` and "Host Resource Utilization" come from the host's
/// statistics, which this agent does not serve; Nomad leaves them out too when it cannot
/// read them.
fn print_node(api: &Api, node: &Value) -> Result<(), String> {
    let id = text(node, "ID");
    // The detected drivers, sorted, an unhealthy one marked, as Nomad's "Driver Status".
    let mut drivers: Vec<String> = node["Drivers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, info)| info["Detected"] != Value::Bool(false))
        .map(|(name, info)| match info["Healthy"] {
            Value::Bool(false) => format!("{name} (unhealthy)"),
            _ => name.clone(),
        })
        .collect();
    drivers.sort();
    let none = || "<none>".to_string();
    println!(
        "{}",
        fields(&[
            ("ID", id.clone()),
            ("Name", text(node, "Name")),
            ("Node Pool", text(node, "NodePool")),
            ("Class", none_if_empty(text(node, "NodeClass"))),
            ("DC", text(node, "Datacenter")),
            ("Drain", text(node, "Drain")),
            ("Eligibility", text(node, "SchedulingEligibility")),
            ("Status", text(node, "Status")),
            ("CSI Controllers", none()),
            ("CSI Drivers", none()),
            ("Host Volumes", none()),
            ("Host Networks", none()),
            ("CSI Volumes", none()),
            ("Driver Status", drivers.join(",")),
        ])
    );
    let mut events = vec![["Time", "Subsystem", "Message"].map(String::from).to_vec()];
    for event in node["Events"].as_array().into_iter().flatten().rev() {
        events.push(vec![
            text(event, "Timestamp"),
            text(event, "Subsystem"),
            text(event, "Message"),
        ]);
    }
    println!("\nNode Events\n{}", table(&events));
    let allocs = api.get(&format!("/v1/node/{id}/allocations"))?;
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    let running: Vec<&Value> = allocs
        .iter()
        .filter(|a| text(a, "ClientStatus") == "running")
        .collect();
    print_resources(api, node, &running);
    println!("\nAllocations");
    if allocs.is_empty() {
        println!("No allocations placed");
    } else {
        println!("{}", alloc_rows(&allocs, false));
    }
    Ok(())
}

/// Nomad's "Allocated Resources" (what the running allocations hold of what the node
/// offers) and "Allocation Resource Utilization" (what they use, from the client's
/// statistics; left out, as Nomad's, when one cannot be read).
fn print_resources(api: &Api, node: &Value, running: &[&Value]) {
    let total = |part: &str, key: &str| {
        let have = node["NodeResources"][part][key].as_u64().unwrap_or(0);
        let reserved = node["ReservedResources"][part][key].as_u64().unwrap_or(0);
        have.saturating_sub(reserved)
    };
    let (cpu_total, memory_total, disk_total) = (
        total("Cpu", "CpuShares"),
        total("Memory", "MemoryMB"),
        total("Disk", "DiskMB"),
    );
    let held = |key: &str| -> u64 {
        running
            .iter()
            .map(|a| a["Resources"][key].as_u64().unwrap_or(0))
            .sum()
    };
    let allocated = vec![
        ["CPU", "Memory", "Disk", "Alloc Count"]
            .map(String::from)
            .to_vec(),
        vec![
            format!("{}/{cpu_total} MHz", held("CPU")),
            format!(
                "{}/{}",
                ibytes(held("MemoryMB") << 20),
                ibytes(memory_total << 20)
            ),
            format!(
                "{}/{}",
                ibytes(held("DiskMB") << 20),
                ibytes(disk_total << 20)
            ),
            running.len().to_string(),
        ],
    ];
    println!("\nAllocated Resources\n{}", table(&allocated));
    let mut ticks = 0.0;
    let mut memory = 0u64;
    for alloc in running {
        let path = format!("/v1/client/allocation/{}/stats", text(alloc, "ID"));
        let Ok(stats) = api.get(&path) else {
            return;
        };
        let usage = &stats["ResourceUsage"];
        ticks += usage["CpuStats"]["TotalTicks"].as_f64().unwrap_or(0.0);
        let memory_stats = &usage["MemoryStats"];
        memory += match memory_stats["Usage"].as_u64() {
            Some(used) if used > 0 => used,
            _ => memory_stats["RSS"].as_u64().unwrap_or(0),
        };
    }
    let used = vec![
        vec!["CPU".to_string(), "Memory".into()],
        vec![
            format!("{}/{cpu_total} MHz", ticks.floor()),
            format!("{}/{}", ibytes(memory), ibytes(memory_total << 20)),
        ],
    ];
    println!("\nAllocation Resource Utilization\n{}", table(&used));
}
