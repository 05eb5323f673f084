//! `node status`: the nodes, or one node, as Nomad's CLI shows them.

use super::api::{fields, resolve, short, table, text, Api};

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
    let drivers = node["Drivers"]
        .as_object()
        .map(|d| d.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    println!(
        "{}",
        fields(&[
            ("ID", text(&node, "ID")),
            ("Name", text(&node, "Name")),
            ("Node Pool", text(&node, "NodePool")),
            ("Class", text(&node, "NodeClass")),
            ("DC", text(&node, "Datacenter")),
            ("Drain", text(&node, "Drain")),
            ("Eligibility", text(&node, "SchedulingEligibility")),
            ("Status", text(&node, "Status")),
            ("Drivers", drivers),
        ])
    );
    let allocs = api.get("/v1/allocations")?;
    let mut rows = vec![
        ["ID", "Job ID", "Task Group", "Version", "Desired", "Status"]
            .map(String::from)
            .to_vec(),
    ];
    for alloc in allocs.as_array().into_iter().flatten() {
        if text(alloc, "NodeID") == text(&node, "ID") {
            rows.push(vec![
                short(&text(alloc, "ID")).to_string(),
                text(alloc, "JobID"),
                text(alloc, "TaskGroup"),
                text(alloc, "JobVersion"),
                text(alloc, "DesiredStatus"),
                text(alloc, "ClientStatus"),
            ]);
        }
    }
    println!("\nAllocations");
    if rows.len() == 1 {
        println!("No allocations placed");
    } else {
        println!("{}", table(&rows));
    }
    Ok(())
}
