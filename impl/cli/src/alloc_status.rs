//! `alloc status` and `eval status`, in the layouts of Nomad's `command/alloc_status.go` and
//! `command/eval_status.go`: the same keys in the same order, the same sections and the
//! same columns (`proofs/e2e/test_output_layout.py` holds them against samples of Nomad's).

use super::api::{ago, alloc_rows, fields, resolve, rfc3339, short, table, text, Api};
use serde_json::Value;

/// `alloc status ALLOC`: the allocation's fields, its addresses, then each task's resources,
/// times and recent events.
pub(super) fn alloc_status_of(api: &Api, id: &str, verbose: bool) -> Result<(), String> {
    let alloc = api.get(&format!("/v1/allocation/{id}"))?;
    let limit = |value: String| {
        if verbose {
            value
        } else {
            short(&value).to_string()
        }
    };
    let time = |key: &str| {
        let ns = alloc[key].as_i64().unwrap_or(0);
        if verbose {
            rfc3339(ns)
        } else {
            ago(ns)
        }
    };
    let mut shown = vec![
        ("ID", text(&alloc, "ID")),
        ("Eval ID", limit(text(&alloc, "EvalID"))),
        ("Name", text(&alloc, "Name")),
        ("Node ID", limit(text(&alloc, "NodeID"))),
        ("Node Name", text(&alloc, "NodeName")),
        ("Job ID", text(&alloc, "JobID")),
        ("Job Version", text(&alloc["Job"], "Version")),
        ("Client Status", text(&alloc, "ClientStatus")),
        ("Client Description", text(&alloc, "ClientDescription")),
        ("Desired Status", text(&alloc, "DesiredStatus")),
        ("Desired Description", text(&alloc, "DesiredDescription")),
        ("Created", time("CreateTime")),
        ("Modified", time("ModifyTime")),
    ];
    let deployment = text(&alloc, "DeploymentID");
    if !deployment.is_empty() {
        let health = match alloc["DeploymentStatus"]["Healthy"] {
            Value::Bool(true) => "healthy",
            Value::Bool(false) => "unhealthy",
            _ => "unset",
        };
        shown.push(("Deployment ID", limit(deployment)));
        shown.push(("Deployment Health", health.into()));
    }
    let next = text(&alloc, "NextAllocation");
    if !next.is_empty() {
        shown.push(("Replacement Alloc ID", limit(next)));
    }
    if verbose {
        // Not Nomad's: whether a stop of this allocation skips the shutdown delays (the
        // flag `-no-shutdown-delay` leaves on it), after Nomad's own verbose fields.
        let flag = alloc["DesiredTransition"]["NoShutdownDelay"] == Value::Bool(true);
        shown.push(("No Shutdown Delay", flag.to_string()));
    }
    println!("{}", fields(&shown));
    print_addresses(&alloc);
    // Nomad prints the tasks' resources with their use; a client that cannot say (the
    // allocation has ended) leaves the use out.
    let stats = api
        .get(&format!("/v1/client/allocation/{id}/stats"))
        .unwrap_or(Value::Null);
    for (task, lifecycle) in tasks_in_order(&alloc) {
        let state = &alloc["TaskStates"][&task];
        println!("\nTask {task:?}{lifecycle} is {:?}", text(state, "State"));
        print_task_resources(&alloc, &task, &stats["Tasks"][&task]["ResourceUsage"]);
        print_task_events(state);
    }
    Ok(())
}

/// The tasks that have a state, in Nomad's order: by name, those with a lifecycle hook
/// first (sidecars after the others), then the main tasks; each with its lifecycle shown
/// as Nomad shows it (` (poststop)`, ` (prestart sidecar)`, or nothing for a main task).
fn tasks_in_order(alloc: &Value) -> Vec<(String, String)> {
    let group = text(alloc, "TaskGroup");
    let specs: Vec<Value> = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| text(g, "Name") == group)
        .flat_map(|g| g["Tasks"].as_array().cloned().unwrap_or_default())
        .collect();
    let mut tasks: Vec<(u8, String, String)> = alloc["TaskStates"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, _)| {
            let lifecycle = specs
                .iter()
                .find(|t| text(t, "Name") == *name)
                .map(|t| &t["Lifecycle"])
                .filter(|l| !text(l, "Hook").is_empty());
            match lifecycle {
                None => (2, name.clone(), String::new()),
                Some(l) if l["Sidecar"] == Value::Bool(true) => {
                    (1, name.clone(), format!(" ({} sidecar)", text(l, "Hook")))
                }
                Some(l) => (0, name.clone(), format!(" ({})", text(l, "Hook"))),
            }
        })
        .collect();
    tasks.sort();
    tasks
        .into_iter()
        .map(|(_, name, hook)| (name, hook))
        .collect()
}

/// Nomad's "Task Resources": the task's CPU and memory (with their use when the client
/// reports it), the allocation's disk, and the task's addresses.
fn print_task_resources(alloc: &Value, task: &str, usage: &Value) {
    let group = text(alloc, "TaskGroup");
    let spec = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| text(g, "Name") == group)
        .flat_map(|g| g["Tasks"].as_array().cloned().unwrap_or_default())
        .find(|t| text(t, "Name") == task)
        .unwrap_or(Value::Null);
    let resources = &spec["Resources"];
    let cpu = resources["CPU"].as_u64().unwrap_or(0);
    let memory_mb = resources["MemoryMB"].as_u64().unwrap_or(0);
    let disk_mb = alloc["Resources"]["DiskMB"].as_u64().unwrap_or(0);
    let (cpu, memory) = match (
        usage["CpuStats"]["TotalTicks"].as_f64(),
        usage["MemoryStats"]["RSS"].as_u64(),
    ) {
        (Some(ticks), Some(rss)) => (
            format!("{}/{cpu} MHz", ticks.floor()),
            format!("{}/{}", ibytes(rss), ibytes(memory_mb << 20)),
        ),
        _ => (format!("{cpu} MHz"), ibytes(memory_mb << 20)),
    };
    let rows = vec![
        ["CPU", "Memory", "Disk", "Addresses"]
            .map(String::from)
            .to_vec(),
        vec![cpu, memory, ibytes(disk_mb << 20), String::new()],
    ];
    println!("Task Resources:\n{}", table(&rows));
}

/// Nomad's "Task Events" (the task's times and restarts) and "Recent Events", newest first.
fn print_task_events(state: &Value) {
    // Go's zero time on the wire means the moment has not come.
    let moment = |key: &str| {
        let at = text(state, key);
        match at.split_once('.') {
            _ if at.is_empty() || at.starts_with("0001-01-01") => "N/A".to_string(),
            // Whole seconds, as Nomad's `formatTime` (the agent writes UTC).
            Some((seconds, _)) => format!("{seconds}Z"),
            None => at,
        }
    };
    let times = fields(&[
        ("Started At", moment("StartedAt")),
        ("Finished At", moment("FinishedAt")),
        ("Total Restarts", text(state, "Restarts")),
        ("Last Restart", moment("LastRestart")),
    ]);
    println!("\nTask Events:\n{times}");
    let mut rows = vec![vec![
        "Time".to_string(),
        "Type".into(),
        "Description".into(),
    ]];
    let events = state["Events"].as_array().cloned().unwrap_or_default();
    for event in events.iter().rev() {
        rows.push(vec![
            rfc3339(event["Time"].as_i64().unwrap_or(0)),
            text(event, "Type"),
            text(event, "DisplayMessage"),
        ]);
    }
    println!("\nRecent Events:\n{}", table(&rows));
}

/// Bytes as Go's humanize.IBytes writes them (`300 MiB`, `1.1 GiB`).
pub(super) fn ibytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let exponent = ((bytes as f64).ln() / 1024f64.ln()).floor() as usize;
    let exponent = exponent.min(UNITS.len() - 1);
    let value = bytes as f64 / 1024f64.powi(exponent as i32);
    let rounded = (value * 10.0 + 0.5).floor() / 10.0;
    if rounded < 10.0 {
        format!("{rounded:.1} {}", UNITS[exponent])
    } else {
        format!("{rounded:.0} {}", UNITS[exponent])
    }
}

/// Nomad's "Allocation Addresses": each port of the allocation on the host, a static one
/// (`ReservedPorts` in its group) marked not dynamic.
fn print_addresses(alloc: &Value) {
    let ports = alloc["AllocatedResources"]["Shared"]["Ports"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() {
        return;
    }
    let ip = text(&alloc["Resources"]["Networks"][0], "IP");
    let group = text(alloc, "TaskGroup");
    let reserved: Vec<String> = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| text(g, "Name") == group)
        .flat_map(|g| g["Networks"].as_array().cloned().unwrap_or_default())
        .flat_map(|n| n["ReservedPorts"].as_array().cloned().unwrap_or_default())
        .map(|p| text(&p, "Label"))
        .collect();
    let mut rows = vec![vec![
        "Label".to_string(),
        "Dynamic".into(),
        "Address".into(),
    ]];
    for port in &ports {
        let label = text(port, "Label");
        let dynamic = if reserved.contains(&label) {
            "no"
        } else {
            "yes"
        };
        rows.push(vec![
            format!("*{label}"),
            dynamic.into(),
            format!("{ip}:{}", text(port, "Value")),
        ]);
    }
    println!(
        "\nAllocation Addresses (mode = \"host\"):\n{}",
        table(&rows)
    );
}

// ---------------------------------------------------------------------------- evaluations

/// `eval status EVAL`: the evaluation's fields in Nomad's order, then the allocations it
/// placed.
pub(super) fn eval_status(api: &Api, prefix: &str) -> Result<(), String> {
    let stub = resolve(api, "Eval", "evaluations", prefix)?;
    let id = text(&stub, "ID");
    let eval = api.get(&format!("/v1/evaluation/{id}"))?;
    let failures = eval["FailedTGAllocs"]
        .as_object()
        .is_some_and(|failed| !failed.is_empty());
    let description = match text(&eval, "StatusDescription") {
        none if none.is_empty() => text(&eval, "Status"),
        said => said,
    };
    let linked = |key: &str| short(&text(&eval, key)).to_string();
    let time = |key: &str| ago(eval[key].as_i64().unwrap_or(0));
    let mut shown = vec![
        ("ID", short(&id).to_string()),
        ("Create Time", time("CreateTime")),
        ("Modify Time", time("ModifyTime")),
        ("Status", text(&eval, "Status")),
        ("Status Description", description),
        ("Type", text(&eval, "Type")),
        ("TriggeredBy", text(&eval, "TriggeredBy")),
        ("Job ID", text(&eval, "JobID")),
        ("Namespace", text(&eval, "Namespace")),
    ];
    // Nomad names what triggered it when that is a node.
    if text(&eval, "TriggeredBy") == "node-update" {
        shown.push(("Node ID", linked("NodeID")));
    }
    shown.extend([
        ("Priority", text(&eval, "Priority")),
        ("Placement Failures", failures.to_string()),
        ("Previous Eval", linked("PreviousEval")),
        ("Next Eval", linked("NextEval")),
        ("Blocked Eval", linked("BlockedEval")),
    ]);
    println!("{}", fields(&shown));
    let placed = api.get(&format!("/v1/evaluation/{id}/allocations"))?;
    let placed = placed.as_array().cloned().unwrap_or_default();
    if !placed.is_empty() {
        println!("\nPlaced Allocations\n{}", alloc_rows(&placed, false));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_written_as_go_humanize_writes_them() {
        assert_eq!(ibytes(0), "0 B");
        assert_eq!(ibytes(1023), "1023 B");
        assert_eq!(ibytes(300 << 20), "300 MiB");
        assert_eq!(ibytes(1_153_434), "1.1 MiB");
        assert_eq!(ibytes(15 << 30), "15 GiB");
    }

    #[test]
    fn tasks_come_in_nomads_order_with_their_lifecycle() {
        let alloc = serde_json::json!({
            "TaskGroup": "web",
            "TaskStates": {"server": {}, "cleanup": {}, "proxy": {}, "init": {}},
            "Job": {"TaskGroups": [{"Name": "web", "Tasks": [
                {"Name": "server"},
                {"Name": "cleanup", "Lifecycle": {"Hook": "poststop", "Sidecar": false}},
                {"Name": "proxy", "Lifecycle": {"Hook": "prestart", "Sidecar": true}},
                {"Name": "init", "Lifecycle": {"Hook": "prestart", "Sidecar": false}},
            ]}]},
        });
        let shown: Vec<String> = tasks_in_order(&alloc)
            .into_iter()
            .map(|(name, hook)| format!("{name}{hook}"))
            .collect();
        assert_eq!(
            shown,
            [
                "cleanup (poststop)",
                "init (prestart)",
                "proxy (prestart sidecar)",
                "server"
            ]
        );
    }
}
