//! The `job` commands (`run`, `status`, `stop`, `start`): reading a jobspec file (JSON or
//! HCL) into a register body, asking for confirmation when a job is named by a prefix, and
//! printing the job list, one job's status and its allocations.

use super::alloc::monitor;
use super::api::{fields, resolve_job, segment, short, table, text, Api};
use super::JobCommand;
use crate::spec::Job;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::path::Path;

/// A jobspec file as a register body: JSON (wrapped in `{"Job": …}` if it is not already),
/// or HCL (parsed here, as Nomad's CLI does).
fn read_jobspec(file: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("Error reading job file {}: {e}", file.display()))?;
    let is_json =
        file.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let value: Value = if is_json {
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "Error parsing job file {}: invalid JSON: {e}",
                file.display()
            )
        })?
    } else {
        crate::hcl_jobspec::parse_job(&text)
            .map_err(|e| format!("Error parsing job file {}: {e}", file.display()))?
    };
    let wrapped = match value.as_object() {
        Some(object) if object.keys().any(|k| k.eq_ignore_ascii_case("job")) => value,
        _ => serde_json::json!({ "Job": value }),
    };
    Ok(serde_json::to_vec(&wrapped).expect("JSON values serialize"))
}

pub(super) fn job(command: JobCommand) -> Result<(), String> {
    match command {
        JobCommand::Run {
            file,
            detach,
            check_index,
            address,
        } => {
            let api = Api::new(&address)?;
            let mut body = read_jobspec(&file)?;
            if let Some(index) = check_index {
                let mut value: Value = serde_json::from_slice(&body).expect("our own JSON");
                value["EnforceIndex"] = Value::Bool(true);
                value["JobModifyIndex"] = serde_json::json!(index);
                body = serde_json::to_vec(&value).expect("JSON values serialize");
            }
            let answer = api.call("PUT", "/v1/jobs", Some(&body))?;
            print_warnings(&answer);
            let eval = text(&answer, "EvalID");
            if eval.is_empty() {
                println!("Job registered; no evaluation was created");
                return Ok(());
            }
            if detach {
                println!("Job registration successful\nEvaluation ID: {eval}");
                return Ok(());
            }
            monitor(&api, &eval, None)
        }
        JobCommand::Status {
            job,
            verbose,
            json,
            address,
        } => {
            let api = Api::new(&address)?;
            match job {
                None => list_jobs(&api),
                Some(job) => {
                    let id = resolve_job(&api, &job)?;
                    if json {
                        let stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
                        let shown = serde_json::to_string_pretty(&stored).expect("JSON");
                        println!("{shown}");
                        return Ok(());
                    }
                    job_status(&api, &id, verbose)
                }
            }
        }
        JobCommand::Stop {
            jobs,
            purge,
            global,
            no_shutdown_delay,
            detach,
            yes,
            eval_priority,
            address,
        } => {
            let api = Api::new(&address)?;
            // As Nomad: each job in turn, its monitor to the end before the next.
            for (n, job) in jobs.iter().enumerate() {
                if n > 0 {
                    println!();
                }
                let options = StopOptions {
                    purge,
                    global,
                    no_shutdown_delay,
                    detach,
                    yes,
                    eval_priority,
                };
                stop_job(&api, job, &options)?;
            }
            Ok(())
        }
        JobCommand::Inspect { job, json, address } => {
            let api = Api::new(&address)?;
            let id = resolve_job(&api, &job)?;
            let stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
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
        JobCommand::History { job, address } => {
            let api = Api::new(&address)?;
            let id = resolve_job(&api, &job)?;
            let versions = api.get(&format!("/v1/job/{}/versions", segment(&id)))?;
            for (n, version) in versions["Versions"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if n > 0 {
                    println!();
                }
                println!(
                    "{}",
                    fields(&[
                        ("Version", text(version, "Version")),
                        ("Stop", text(version, "Stop")),
                        (
                            "Submit Date",
                            version["SubmitTime"]
                                .as_i64()
                                .filter(|&ns| ns > 0)
                                .map(crate::gotime::rfc3339)
                                .unwrap_or_default(),
                        ),
                    ])
                );
            }
            Ok(())
        }
        JobCommand::Plan { file, address } => {
            // Nomad's exit codes: 0 no change to allocations, 1 some, 255 an error.
            let planned = (|| {
                let api = Api::new(&address)?;
                let body = read_jobspec(&file)?;
                let mut value: Value = serde_json::from_slice(&body).expect("our own JSON");
                let member = |object: &Value, name: &str| {
                    object
                        .as_object()
                        .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
                        .map(|(_, v)| v.clone())
                        .unwrap_or(Value::Null)
                };
                let job = member(&value, "Job");
                let id = member(&job, "ID").as_str().unwrap_or_default().to_string();
                value["Diff"] = Value::Bool(true);
                let body = serde_json::to_vec(&value).expect("JSON values serialize");
                api.call(
                    "PUT",
                    &format!("/v1/job/{}/plan", segment(&id)),
                    Some(&body),
                )
            })();
            let answer = match planned {
                Ok(answer) => answer,
                Err(message) => {
                    eprintln!("Error: {message}");
                    std::process::exit(255);
                }
            };
            let changes = print_plan(&answer, &file);
            if changes {
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::process::exit(1);
            }
            Ok(())
        }
        JobCommand::Validate { file, address } => {
            let api = Api::new(&address)?;
            let body = read_jobspec(&file)?;
            let answer = api.call("PUT", "/v1/validate/job", Some(&body))?;
            print_warnings(&answer);
            match answer["ValidationErrors"].as_array() {
                Some(errors) if !errors.is_empty() => {
                    let lines: Vec<String> = errors
                        .iter()
                        .map(|e| format!("* {}", e.as_str().unwrap_or_default()))
                        .collect();
                    Err(format!("Job validation errors:\n{}", lines.join("\n")))
                }
                _ => {
                    println!("Job validation successful");
                    Ok(())
                }
            }
        }
        JobCommand::Restart {
            job,
            groups,
            tasks,
            all_tasks,
            reschedule,
            no_shutdown_delay,
            batch_size,
            batch_wait,
            on_error,
            yes,
            verbose,
            address,
        } => {
            let api = Api::new(&address)?;
            super::restart::job_restart(
                &api,
                super::restart::JobRestart {
                    job,
                    job_type: String::new(),
                    groups,
                    tasks,
                    all_tasks,
                    reschedule,
                    no_shutdown_delay,
                    batch_size,
                    batch_wait,
                    on_error,
                    yes,
                    verbose,
                },
            )
        }
        JobCommand::Start {
            job,
            detach,
            address,
        } => {
            let api = Api::new(&address)?;
            let id = resolve_job(&api, &job)?;
            let mut stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
            if stored["Stop"] != Value::Bool(true) {
                return Err(format!("Job {id:?} is not stopped: nothing to start"));
            }
            stored["Stop"] = Value::Bool(false);
            let job: Job = serde_json::from_value(stored)
                .map_err(|e| format!("the agent's job does not decode: {e}"))?;
            let body = serde_json::to_vec(&serde_json::json!({ "Job": job }))
                .expect("JSON values serialize");
            let answer = api.call("PUT", &format!("/v1/job/{}", segment(&id)), Some(&body))?;
            let eval = text(&answer, "EvalID");
            if detach {
                println!("Job start successful\nEvaluation ID: {eval}");
                return Ok(());
            }
            monitor(&api, &eval, None)
        }
    }
}

/// The answer's warnings, as Nomad's CLI prints them: "Job Warnings:" and the server's
/// text, then a blank line.
fn print_warnings(answer: &Value) {
    let warnings = text(answer, "Warnings");
    if !warnings.is_empty() {
        println!("Job Warnings:\n{warnings}\n");
    }
}

/// Prints a plan as Nomad's CLI does; returns whether allocations would be created or
/// destroyed.
fn print_plan(answer: &Value, file: &Path) -> bool {
    let mark = |kind: &Value| match kind.as_str() {
        Some("Added") => "+",
        Some("Deleted") => "-",
        Some("Edited") => "+/-",
        _ => "",
    };
    let field_line = |indent: &str, field: &Value| {
        let (old, new) = (text(field, "Old"), text(field, "New"));
        let change = match field["Type"].as_str() {
            Some("Added") => format!("{new:?}"),
            Some("Deleted") => format!("{old:?}"),
            _ => format!("{old:?} => {new:?}"),
        };
        println!(
            "{indent}{} {}: {change}",
            mark(&field["Type"]),
            text(field, "Name")
        );
    };
    let diff = &answer["Diff"];
    println!("{} Job: {:?}", mark(&diff["Type"]), text(diff, "ID"));
    for field in diff["Fields"].as_array().into_iter().flatten() {
        field_line("", field);
    }
    let mut changes = false;
    for group in diff["TaskGroups"].as_array().into_iter().flatten() {
        let updates = &answer["Annotations"]["DesiredTGUpdates"][text(group, "Name")];
        let count = |key: &str| updates[key].as_u64().unwrap_or(0);
        let mut said = Vec::new();
        for (key, words) in [
            ("Place", "create"),
            ("DestructiveUpdate", "create/destroy update"),
            ("InPlaceUpdate", "in-place update"),
            ("Stop", "destroy"),
            ("Migrate", "migrate"),
            ("Ignore", "ignore"),
        ] {
            if count(key) > 0 {
                said.push(format!("{} {words}", count(key)));
            }
        }
        changes |= ["Place", "DestructiveUpdate", "Stop", "Migrate"]
            .iter()
            .any(|key| count(key) > 0);
        println!(
            "{} Task Group: {:?} ({})",
            mark(&group["Type"]),
            text(group, "Name"),
            said.join(", ")
        );
        for field in group["Fields"].as_array().into_iter().flatten() {
            field_line("  ", field);
        }
        for task in group["Tasks"].as_array().into_iter().flatten() {
            let forces = count("DestructiveUpdate") > 0 && task["Type"] == "Edited";
            println!(
                "  {} Task: {:?}{}",
                mark(&task["Type"]),
                text(task, "Name"),
                if forces {
                    " (forces create/destroy update)"
                } else {
                    ""
                }
            );
            for field in task["Fields"].as_array().into_iter().flatten() {
                field_line("    ", field);
            }
        }
    }
    match answer["FailedTGAllocs"].as_object() {
        Some(failed) if !failed.is_empty() => {
            let warnings = text(answer, "Warnings");
            if !warnings.is_empty() {
                println!("\nJob Warnings:\n{warnings}");
            }
            // No change to the job: nothing to run, whatever the scheduler would place (Nomad's).
            if diff["Type"] == "None" {
                changes = false;
            }
            println!("\nScheduler dry-run:\n- WARNING: Failed to place all allocations.");
            for (group, metric) in failed {
                let count = metric["CoalescedFailures"].as_u64().unwrap_or(0) + 1;
                println!("  Task Group {group:?} (failed to place {count} allocation(s)):");
                println!(
                    "    * No node is ready that meets its constraints and has its ports free"
                );
            }
        }
        _ => println!("\nScheduler dry-run:\n- All tasks successfully allocated."),
    }
    let index = text(answer, "JobModifyIndex");
    println!(
        "\nJob Modify Index: {index}\nTo submit the job with version verification run:\n\n\
         quiesce job run -check-index {index} {}\n\nWhen running the job with the check-index \
         flag, the job will only be run if the\njob modify index given matches the server-side \
         version. If the index has\nchanged, another user has modified the job and the plan's \
         results are\npotentially invalid.",
        file.display()
    );
    changes
}

/// The flags of `job stop`, for each job it stops.
struct StopOptions {
    purge: bool,
    global: bool,
    no_shutdown_delay: bool,
    detach: bool,
    yes: bool,
    eval_priority: Option<i64>,
}

fn stop_job(api: &Api, job: &str, options: &StopOptions) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    if id != job
        && !options.yes
        && !confirm(&format!("Are you sure you want to stop job {id:?}? [y/N] "))?
    {
        println!("Cancelling job stop");
        return Ok(());
    }
    let mut path = format!(
        "/v1/job/{}?purge={}&global={}&no_shutdown_delay={}",
        segment(&id),
        options.purge,
        options.global,
        options.no_shutdown_delay
    );
    if let Some(priority) = options.eval_priority {
        path.push_str(&format!("&eval_priority={priority}"));
    }
    // The allocations this stop stops: those still meant to run and not yet ended.
    let allocs: Vec<String> = api
        .get(&format!("/v1/job/{}/allocations", segment(&id)))?
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| {
            let ended = matches!(
                text(a, "ClientStatus").as_str(),
                "complete" | "failed" | "lost"
            );
            !ended
        })
        .map(|a| text(a, "ID"))
        .collect();
    let answer = api.call("DELETE", &path, None)?;
    let eval = text(&answer, "EvalID");
    if options.detach {
        println!("{eval}");
        return Ok(());
    }
    monitor(api, &eval, Some(&allocs))
}

fn confirm(question: &str) -> Result<bool, String> {
    print!("{question}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "Yes"))
}

pub(super) fn list_jobs(api: &Api) -> Result<(), String> {
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
    ]];
    for job in &jobs {
        rows.push(vec![
            text(job, "ID"),
            text(job, "Type"),
            text(job, "Priority"),
            text(job, "Status"),
        ]);
    }
    println!("{}", table(&rows));
    Ok(())
}

fn alloc_rows(allocs: &[Value], verbose: bool) -> String {
    let id = |value: &str| {
        if verbose {
            value.to_string()
        } else {
            short(value).to_string()
        }
    };
    let mut rows = vec![vec![
        "ID".to_string(),
        "Node ID".into(),
        "Task Group".into(),
        "Version".into(),
        "Desired".into(),
        "Status".into(),
    ]];
    for alloc in allocs {
        rows.push(vec![
            id(&text(alloc, "ID")),
            id(&text(alloc, "NodeID")),
            text(alloc, "TaskGroup"),
            text(alloc, "JobVersion"),
            text(alloc, "DesiredStatus"),
            text(alloc, "ClientStatus"),
        ]);
    }
    table(&rows)
}

fn job_status(api: &Api, id: &str, verbose: bool) -> Result<(), String> {
    let job = api.get(&format!("/v1/job/{}", segment(id)))?;
    println!(
        "{}",
        fields(&[
            ("ID", text(&job, "ID")),
            ("Name", text(&job, "Name")),
            ("Type", text(&job, "Type")),
            ("Priority", text(&job, "Priority")),
            (
                "Datacenters",
                job["Datacenters"].as_array().map_or(String::new(), |d| {
                    d.iter()
                        .map(|x| x.as_str().unwrap_or("").to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
            ),
            ("Namespace", text(&job, "Namespace")),
            ("Status", text(&job, "Status")),
            ("Version", text(&job, "Version")),
            ("Stop", text(&job, "Stop")),
        ])
    );
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
