//! `job status`, `job inspect`, `job allocs`, `job scaling-events`, and the top-level
//! `status`: what is stored, as Nomad's CLI prints it.

use super::super::alloc_status::{alloc_status_of, eval_status};
use super::super::api::{alloc_rows, fields, resolve_job, segment, table, text, Api};
use super::super::StatusArgs;

/// `job status` (and, with `any_object`, the top-level `status`, whose ID may also name an
/// allocation, an evaluation or a node, as Nomad's).
pub(crate) fn status(args: StatusArgs, any_object: bool) -> Result<(), String> {
    let api = args.address.api()?;
    let Some(id) = args.id else {
        return list_jobs(&api);
    };
    if any_object {
        let jobs = api.get(&format!("/v1/jobs?prefix={}", segment(&id)))?;
        if jobs.as_array().is_none_or(Vec::is_empty) {
            return other_object(&api, &id, args.verbose);
        }
    }
    let id = resolve_job(&api, &id)?;
    if args.json {
        let stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
        println!("{}", serde_json::to_string_pretty(&stored).expect("JSON"));
        return Ok(());
    }
    job_status(&api, &id, args.verbose, args.short)
}

/// The allocation, evaluation or node a prefix names (Nomad's `status` searches them all).
fn other_object(api: &Api, prefix: &str, verbose: bool) -> Result<(), String> {
    let found = |list: &str| -> Result<Vec<String>, String> {
        let listed = api.get(&format!("/v1/{list}?prefix={}", segment(prefix)))?;
        Ok(listed
            .as_array()
            .into_iter()
            .flatten()
            .map(|object| text(object, "ID"))
            .collect())
    };
    if let [alloc] = found("allocations")?.as_slice() {
        return alloc_status_of(api, alloc, verbose);
    }
    if let [_] = found("evaluations")?.as_slice() {
        return eval_status(api, prefix);
    }
    if let [_] = found("nodes")?.as_slice() {
        return super::super::node::node_status(api, Some(prefix), false);
    }
    Err(format!(
        "No matches found for {prefix:?}: not a job, allocation, evaluation or node"
    ))
}

/// `job inspect`: the stored job as JSON, or (`hcl`) the source it was submitted as; of
/// `version` if given.
pub(super) fn inspect(
    api: &Api,
    job: &str,
    json: bool,
    hcl: bool,
    version: Option<u64>,
) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    let stored = match version {
        None => api.get(&format!("/v1/job/{}", segment(&id)))?,
        Some(wanted) => {
            let versions = api.get(&format!("/v1/job/{}/versions", segment(&id)))?;
            versions["Versions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["Version"].as_u64() == Some(wanted))
                .cloned()
                .ok_or_else(|| format!("job {id:?} has no version {wanted}"))?
        }
    };
    if hcl {
        let version = stored["Version"].as_u64().unwrap_or(0);
        let submission = api
            .get(&format!(
                "/v1/job/{}/submission?version={version}",
                segment(&id)
            ))
            .map_err(|e| format!("job {id:?} version {version}: its source: {e}"))?;
        print!("{}", text(&submission, "Source"));
        if !text(&submission, "Source").ends_with('\n') {
            println!();
        }
        return Ok(());
    }
    let shown = if json {
        stored
    } else {
        serde_json::json!({ "Job": stored })
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&shown).expect("JSON values serialize")
    );
    Ok(())
}

pub(crate) fn list_jobs(api: &Api) -> Result<(), String> {
    let jobs = api.get("/v1/jobs")?;
    let jobs = jobs.as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("No running jobs");
        return Ok(());
    }
    let mut rows = vec![vec![
        "ID".to_string(),
        "Type".into(),
        "Priority".into(),
        "Status".into(),
        "Submit Date".into(),
    ]];
    for job in &jobs {
        let submitted = job["SubmitTime"].as_i64().unwrap_or(0);
        rows.push(vec![
            text(job, "ID"),
            text(job, "Type"),
            text(job, "Priority"),
            text(job, "Status"),
            quiesce_core::gotime::rfc3339(submitted),
        ]);
    }
    println!("{}", table(&rows));
    Ok(())
}

/// `job allocs JOB`: the job's allocations, as `job status` lists them.
pub(super) fn job_allocs(api: &Api, job: &str, verbose: bool) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    let allocs = api.get(&format!("/v1/job/{}/allocations", segment(&id)))?;
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    if allocs.is_empty() {
        println!("No allocations placed");
    } else {
        println!("{}", alloc_rows(&allocs, verbose));
    }
    Ok(())
}

/// `job scaling-events JOB`: every group's scaling events in one table, newest first, as
/// Nomad's (`command/job_scaling_events.go`): `-verbose` adds each event's error flag,
/// message and evaluation ID; an empty cell reads `<none>`, as Nomad's lists do.
pub(super) fn scaling_events(api: &Api, job: &str, verbose: bool) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    let status = api
        .get(&format!("/v1/job/{}/scale", segment(&id)))
        .map_err(|e| format!("Error listing scaling events: {e}"))?;
    let mut events: Vec<(&str, &serde_json::Value)> = status["TaskGroups"]
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(group, state)| {
            let events = state["Events"].as_array().into_iter().flatten();
            events.map(move |event| (group.as_str(), event))
        })
        .collect();
    if events.is_empty() {
        println!("No events found");
        return Ok(());
    }
    let order = |event: &serde_json::Value| (event["Time"].as_u64(), event["CreateIndex"].as_u64());
    events.sort_by_key(|(_, event)| std::cmp::Reverse(order(event)));
    let mut header = vec!["Task Group", "Count", "PrevCount"];
    if verbose {
        header.extend(["Error", "Message", "Eval ID"]);
    }
    header.push("Date");
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for (group, event) in events {
        let mut row = vec![
            group.to_string(),
            text(event, "Count"),
            text(event, "PreviousCount"),
        ];
        if verbose {
            row.extend([
                text(event, "Error"),
                text(event, "Message"),
                text(event, "EvalID"),
            ]);
        }
        // Nomad's `formatTime` shows nothing for a time before 1970-01-01T00:00:01Z.
        let time_ns = event["Time"].as_i64().filter(|&ns| ns >= 1_000_000_000);
        row.push(time_ns.map(super::super::api::rfc3339).unwrap_or_default());
        for cell in &mut row {
            if cell.is_empty() {
                *cell = "<none>".into();
            }
        }
        rows.push(row);
    }
    println!("{}", table(&rows));
    Ok(())
}

fn job_status(api: &Api, id: &str, verbose: bool, short_output: bool) -> Result<(), String> {
    let job = api.get(&format!("/v1/job/{}", segment(id)))?;
    let list = |key: &str| {
        job[key].as_array().map_or(String::new(), |items| {
            items
                .iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let submitted = job["SubmitTime"]
        .as_i64()
        .filter(|&ns| ns > 0)
        .map(quiesce_core::gotime::rfc3339)
        .unwrap_or_default();
    // Nomad's fields, in Nomad's order.
    println!(
        "{}",
        fields(&[
            ("ID", text(&job, "ID")),
            ("Name", text(&job, "Name")),
            ("Submit Date", submitted),
            ("Type", text(&job, "Type")),
            ("Priority", text(&job, "Priority")),
            ("Datacenters", list("Datacenters")),
            ("Namespace", text(&job, "Namespace")),
            ("Node Pool", text(&job, "NodePool")),
            ("Status", text(&job, "Status")),
            ("Periodic", "false".into()),
            ("Parameterized", "false".into()),
        ])
    );
    if short_output {
        return Ok(());
    }
    let summary = api.get(&format!("/v1/job/{}/summary", segment(id)))?;
    let columns = [
        "Queued", "Starting", "Running", "Failed", "Complete", "Lost", "Unknown",
    ];
    let mut rows = vec![std::iter::once("Task Group")
        .chain(columns)
        .map(String::from)
        .collect::<Vec<_>>()];
    for group in job["TaskGroups"].as_array().into_iter().flatten() {
        let name = text(group, "Name");
        let counts = &summary["Summary"][&name];
        rows.push(
            std::iter::once(name.clone())
                .chain(columns.iter().map(|c| text(counts, c)))
                .collect(),
        );
    }
    println!("\nSummary\n{}", table(&rows));
    let latest = api.get(&format!("/v1/job/{}/deployment", segment(id)))?;
    if !latest.is_null() {
        let block = super::super::deployment::status_text(&latest, verbose);
        // Nomad's "Latest Deployment": the deployment's ID, status and description, then
        // its groups; the job's own ID and version are said above.
        let kept: Vec<&str> = block
            .lines()
            .filter(|line| !line.starts_with("Job ID") && !line.starts_with("Job Version"))
            .collect();
        println!("\nLatest Deployment\n{}", kept.join("\n"));
    }
    let allocs = api.get(&format!("/v1/job/{}/allocations", segment(id)))?;
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    println!("\nAllocations");
    if allocs.is_empty() {
        println!("No allocations placed");
    } else {
        println!("{}", alloc_rows(&allocs, verbose));
    }
    Ok(())
}
