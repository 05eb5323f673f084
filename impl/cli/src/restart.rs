//! `alloc restart` and `job restart`: tasks restarted in place (`PUT
//! /v1/client/allocation/:id/restart`, with quiesce's `NoShutdownDelay`), or — `job restart
//! -reschedule` — allocations stopped and replaced, in batches, with Nomad's output.

use super::api::{now, resolve, resolve_job, segment, short, text, Api};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// `alloc restart [-task T] [-all-tasks] [-no-shutdown-delay] ALLOC [TASK]`: restarts the
/// task, or every running task, and waits until each has run again.
pub(super) fn alloc_restart(
    api: &Api,
    alloc: &str,
    task: Option<String>,
    all_tasks: bool,
    no_shutdown_delay: bool,
) -> Result<(), String> {
    if all_tasks && task.is_some() {
        return Err("The -all-tasks option is not allowed when restarting a specific task.".into());
    }
    let stub = resolve(api, "Alloc", "allocations", alloc)?;
    let id = text(&stub, "ID");
    let record = api.get(&format!("/v1/allocation/{id}"))?;
    if let Some(task) = &task {
        let names = group_tasks(&record);
        if !names.contains(task) {
            return Err(format!(
                "Could not find task named: {task}, found:\n{}",
                names
                    .iter()
                    .map(|name| format!("* {name}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    let what = if task.is_some() { "task" } else { "allocation" };
    let started = restart_in_place(api, &record, task.as_deref(), all_tasks, no_shutdown_delay)
        .map_err(|e| format!("Failed to restart {what}:\n\n{e}"))?;
    wait_until_run_again(api, &id, &started)
        .map_err(|e| format!("Failed to restart {what}:\n\n{e}"))
}

/// The names of the tasks of the allocation's group, in the jobspec's order.
fn group_tasks(record: &Value) -> Vec<String> {
    let group = text(record, "TaskGroup");
    record["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| text(g, "Name") == group)
        .flat_map(|g| g["Tasks"].as_array().cloned().unwrap_or_default())
        .map(|t| text(&t, "Name"))
        .collect()
}

/// Each task's restart count, by name.
fn restart_counts(record: &Value) -> Vec<(String, u64)> {
    record["TaskStates"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, state)| (name.clone(), state["Restarts"].as_u64().unwrap_or(0)))
        .collect()
}

/// Sends the restart; returns the tasks it restarts (the named one, or those running) with
/// their restart counts before it.
fn restart_in_place(
    api: &Api,
    record: &Value,
    task: Option<&str>,
    all_tasks: bool,
    no_shutdown_delay: bool,
) -> Result<Vec<(String, u64)>, String> {
    let id = text(record, "ID");
    let running = |name: &str| text(&record["TaskStates"][name], "State") == "running";
    let targets: Vec<(String, u64)> = restart_counts(record)
        .into_iter()
        .filter(|(name, _)| match task {
            Some(task) => name == task,
            None => running(name),
        })
        .collect();
    let body = json!({
        "TaskName": task.unwrap_or_default(),
        "AllTasks": all_tasks,
        "NoShutdownDelay": no_shutdown_delay,
    });
    api.call(
        "PUT",
        &format!("/v1/client/allocation/{}/restart", segment(&id)),
        Some(body.to_string().as_bytes()),
    )?;
    Ok(targets)
}

/// Waits (blocking queries) until every task in `started` has a higher restart count — it
/// runs again — or the allocation ends first (an error).
fn wait_until_run_again(api: &Api, id: &str, started: &[(String, u64)]) -> Result<(), String> {
    let mut index = 0;
    loop {
        let (record, next) = api.call_indexed(
            "GET",
            &format!("/v1/allocation/{}?index={index}&wait=5s", segment(id)),
            None,
        )?;
        let counts = restart_counts(&record);
        // Each target ran again, or ended for good (a batch or lifecycle task that finished
        // between the read and the restart: a restarted task's exit and its next run reach
        // the server together, never "dead" in between).
        let done = started.iter().all(|(name, before)| {
            let dead = text(&record["TaskStates"][name.as_str()], "State") == "dead";
            counts
                .iter()
                .any(|(task, now)| task == name && (now > before || dead))
        });
        if done {
            return Ok(());
        }
        if matches!(
            text(&record, "ClientStatus").as_str(),
            "complete" | "failed" | "lost"
        ) {
            return Err(format!(
                "allocation {:?} ended before its tasks ran again",
                short(id)
            ));
        }
        index = next;
    }
}

/// What `job restart` was asked to do.
pub(super) struct JobRestart {
    pub job: String,
    /// Set from the job once it is read.
    pub job_type: String,
    pub groups: Vec<String>,
    pub tasks: Vec<String>,
    pub all_tasks: bool,
    pub reschedule: bool,
    pub no_shutdown_delay: bool,
    pub batch_size: String,
    pub batch_wait: String,
    pub on_error: String,
    pub yes: bool,
    pub verbose: bool,
}

/// How many allocations a batch holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchSize {
    Count(usize),
    Percent(usize),
}

fn batch_size(given: &str) -> Result<BatchSize, String> {
    let (digits, percent) = match given.strip_suffix('%') {
        Some(digits) => (digits, true),
        None => (given, false),
    };
    let invalid = || {
        format!(
            "Invalid -batch-size value {given:?}: batch size must be an integer or a percentage"
        )
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let number: usize = digits.parse().map_err(|_| invalid())?;
    if number == 0 {
        return Err(format!(
            "Invalid -batch-size value {given:?}: number value must be greater than zero"
        ));
    }
    Ok(if percent {
        BatchSize::Percent(number.min(100))
    } else {
        BatchSize::Count(number)
    })
}

/// `-batch-wait`: a duration, or `None` for "ask".
fn batch_wait(given: &str) -> Result<Option<Duration>, String> {
    if given.eq_ignore_ascii_case("ask") {
        return Ok(None);
    }
    quiesce_core::gotime::parse_go_duration(given)
        .filter(|ns| *ns >= 0)
        .map(|ns| Some(Duration::from_nanos(ns as u64)))
        .ok_or_else(|| {
            format!("Invalid -batch-wait value {given:?}: not a duration such as \"5s\"")
        })
}

/// `job restart`: the job's live allocations, in batches, each restarted in place or
/// rescheduled; Nomad's lines as it goes.
pub(super) fn job_restart(api: &Api, mut request: JobRestart) -> Result<(), String> {
    let size = batch_size(&request.batch_size)?;
    let wait = batch_wait(&request.batch_wait)?;
    let on_error = request.on_error.to_ascii_lowercase();
    if on_error != "ask" && on_error != "fail" {
        return Err(format!(
            "Invalid -on-error value {:?}: valid options are \"ask\" and \"fail\"",
            request.on_error
        ));
    }
    let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if !interactive && !request.yes {
        if wait.is_none() {
            return Err("Invalid -batch-wait value \"ask\": \"ask\" cannot be used when terminal is not interactive".into());
        }
        if on_error == "ask" {
            return Err("Invalid -on-error value \"ask\": \"ask\" cannot be used when terminal is not interactive".into());
        }
    }
    if request.all_tasks && !request.tasks.is_empty() {
        return Err("The -all-tasks option cannot be used with -task".into());
    }
    if request.reschedule && !request.tasks.is_empty() {
        return Err("The -reschedule option cannot be used with -task".into());
    }
    let job_id = resolve_job(api, &request.job)?;
    let job = api.get(&format!("/v1/job/{}", segment(&job_id)))?;
    let job_type = text(&job, "Type");
    request.job_type = job_type.clone();
    if request.reschedule && !matches!(job_type.as_str(), "batch" | "service" | "system") {
        return Err(format!(
            "Jobs of type {job_type:?} are not allowed to be rescheduled."
        ));
    }
    let groups: Vec<Value> = job["TaskGroups"].as_array().cloned().unwrap_or_default();
    for group in &request.groups {
        if !groups.iter().any(|g| text(g, "Name") == *group) {
            return Err(format!("Group {group:?} not found in job {job_id:?}"));
        }
    }
    let chosen_groups: Vec<&Value> = groups
        .iter()
        .filter(|g| request.groups.is_empty() || request.groups.contains(&text(g, "Name")))
        .collect();
    for task in &request.tasks {
        let found = chosen_groups.iter().any(|g| {
            g["Tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| text(t, "Name") == *task)
        });
        if !found {
            return Err(format!("Task {task:?} not found in the job's groups"));
        }
    }
    let allocs = api.get(&format!("/v1/job/{}/allocations", segment(&job_id)))?;
    let mut chosen: Vec<Value> = Vec::new();
    for alloc in allocs.as_array().into_iter().flatten() {
        // Allocations that run and are meant to (Nomad takes either, and then fails on one
        // being stopped, or a failed one that will not be replaced).
        let live =
            text(alloc, "ClientStatus") == "running" && text(alloc, "DesiredStatus") == "run";
        let group = text(alloc, "TaskGroup");
        let in_group = request.groups.is_empty() || request.groups.contains(&group);
        let has_task = request.tasks.is_empty()
            || request
                .tasks
                .iter()
                .any(|t| alloc["TaskStates"].get(t).is_some());
        if !live || !text(alloc, "NextAllocation").is_empty() || !in_group || !has_task {
            if request.verbose {
                println!(
                    "    {}: Skipping allocation {:?} because desired status is {:?} and client \
                     status is {:?}",
                    now(),
                    short(&text(alloc, "ID")),
                    text(alloc, "DesiredStatus"),
                    text(alloc, "ClientStatus")
                );
            }
            continue;
        }
        chosen.push(alloc.clone());
    }
    chosen.sort_by_key(|a| (a["CreateIndex"].as_u64().unwrap_or(0), text(a, "ID")));
    if chosen.is_empty() {
        println!("No allocations to restart");
        return Ok(());
    }
    let total = chosen.len();
    println!(
        "==> {}: Restarting {total} allocation{}",
        now(),
        if total == 1 { "" } else { "s" }
    );
    let per_batch = match size {
        BatchSize::Count(n) => n,
        BatchSize::Percent(p) => (total * p).div_ceil(100).max(1),
    };
    let batches: Vec<&[Value]> = chosen.chunks(per_batch).collect();
    let mut errors: Vec<String> = Vec::new();
    for (number, batch) in batches.iter().enumerate() {
        if per_batch > 1 {
            println!(
                "==> {}: Restarting {} batch of {} allocation{}",
                now(),
                ordinal(number + 1),
                batch.len(),
                if batch.len() == 1 { "" } else { "s" }
            );
        }
        let failed_before = errors.len();
        run_batch(api, &request, batch, &mut errors);
        let last = number + 1 == batches.len();
        if errors.len() > failed_before && !last {
            let proceed = if request.yes {
                true
            } else if on_error == "ask" && interactive {
                ask(
                    "Ignore the errors above and proceed with the next batch? [y/N] ",
                    false,
                )
            } else {
                false
            };
            if !proceed {
                println!("==> {}: Stopping job restart due to error", now());
                println!("==> {}: Job restart canceled", now());
                return Err(error_list(&errors));
            }
        }
        if last {
            break;
        }
        match wait {
            None if !request.yes && !ask("Proceed with the next batch? [Y/n] ", true) => {
                println!("==> {}: Job restart canceled", now());
                return Ok(());
            }
            None => {}
            Some(wait) if wait.is_zero() => {}
            Some(wait) => {
                println!(
                    "==> {}: Waiting {} before restarting the next batch",
                    now(),
                    quiesce_core::gotime::go_duration(wait.as_nanos() as i64)
                );
                std::thread::sleep(wait);
            }
        }
    }
    if errors.is_empty() {
        println!("==> {}: Job restart finished", now());
        println!("\nJob restarted successfully!");
        Ok(())
    } else {
        println!("==> {}: Job restart finished with errors", now());
        Err(error_list(&errors))
    }
}

fn error_list(errors: &[String]) -> String {
    format!(
        "{} error{} occurred while restarting job:\n{}",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" },
        errors
            .iter()
            .map(|e| format!("* {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The tasks a restart was sent for, with their restart counts before it.
type Started = Vec<(String, u64)>;

/// One batch: every allocation's restart (or stop) is sent first, then each is waited for,
/// so that a batch's delays run together.
fn run_batch(api: &Api, request: &JobRestart, batch: &[Value], errors: &mut Vec<String>) {
    let mut waits: Vec<(String, Result<Started, String>)> = Vec::new();
    for chosen in batch {
        let id = text(chosen, "ID");
        // As it is now: a batch before may have taken a while, and the policy may have
        // restarted a task meanwhile (its count, and which tasks run, are read here).
        let alloc = match api.get(&format!("/v1/allocation/{}", segment(&id))) {
            Ok(alloc) => alloc,
            Err(error) => {
                waits.push((id, Err(error)));
                continue;
            }
        };
        let alloc = &alloc;
        let group = text(alloc, "TaskGroup");
        if request.reschedule {
            println!(
                "    {}: Rescheduling allocation {:?} for group {group:?}",
                now(),
                short(&id)
            );
            let stopped = api
                .call(
                    "PUT",
                    &format!(
                        "/v1/allocation/{}/stop?no_shutdown_delay={}",
                        segment(&id),
                        request.no_shutdown_delay
                    ),
                    None,
                )
                .map(|_| Vec::new());
            waits.push((id, stopped));
            continue;
        }
        match request.tasks.as_slice() {
            [] => {
                let which = if request.all_tasks { "all" } else { "running" };
                println!(
                    "    {}: Restarting {which} tasks in allocation {:?} for group {group:?}",
                    now(),
                    short(&id)
                );
                let started = restart_in_place(
                    api,
                    alloc,
                    None,
                    request.all_tasks,
                    request.no_shutdown_delay,
                );
                waits.push((id, started));
            }
            tasks => {
                let mut all = Ok(Vec::new());
                for task in tasks
                    .iter()
                    .filter(|t| alloc["TaskStates"].get(*t).is_some())
                {
                    println!(
                        "    {}: Restarting task {task:?} in allocation {:?} for group {group:?}",
                        now(),
                        short(&id)
                    );
                    match restart_in_place(api, alloc, Some(task), false, request.no_shutdown_delay)
                    {
                        Ok(started) => {
                            if let Ok(all) = &mut all {
                                all.extend(started);
                            }
                        }
                        Err(error) => all = Err(error),
                    }
                }
                waits.push((id, all));
            }
        }
    }
    for (id, sent) in waits {
        let outcome = sent.and_then(|started| {
            if request.reschedule {
                wait_for_replacement(api, &id, request.job_type == "batch")
            } else {
                wait_until_run_again(api, &id, &started)
            }
        });
        if let Err(error) = outcome {
            errors.push(format!("allocation {:?}: {error}", short(&id)));
        }
    }
}

/// `-reschedule`: follows the stopped allocation's `NextAllocation` until a replacement
/// runs (a batch job's may have completed), saying so as Nomad does; an error if the
/// replacement ends otherwise first, or the job is stopped meanwhile.
fn wait_for_replacement(api: &Api, id: &str, batch: bool) -> Result<(), String> {
    let mut current = id.to_string();
    let mut index = 0;
    let mut said = String::new();
    let mut last_note = Instant::now();
    loop {
        let (record, next_index) = api.call_indexed(
            "GET",
            &format!("/v1/allocation/{}?index={index}&wait=5s", segment(&current)),
            None,
        )?;
        let status = text(&record, "ClientStatus");
        if current != id && (status == "running" || (batch && status == "complete")) {
            println!(
                "    {}: Allocation {:?} is {status:?}",
                now(),
                short(&current)
            );
            return Ok(());
        }
        if current != id && matches!(status.as_str(), "complete" | "failed" | "lost") {
            return Err(format!(
                "its replacement {:?} ended {status:?} before it ran",
                short(&current)
            ));
        }
        let job = api.get(&format!("/v1/job/{}", segment(&text(&record, "JobID"))))?;
        if job["Stop"].as_bool() == Some(true) {
            return Err(format!(
                "the job was stopped before allocation {:?} was replaced",
                short(id)
            ));
        }
        let next = text(&record, "NextAllocation");
        if !next.is_empty() {
            if said != next {
                println!(
                    "    {}: Allocation {:?} replaced by {:?}, waiting for {:?} to start running",
                    now(),
                    short(&current),
                    short(&next),
                    short(&next)
                );
                said = next.clone();
            }
            current = next;
            index = 0;
            continue;
        }
        if last_note.elapsed() >= Duration::from_secs(60) {
            println!(
                "    {}: Still waiting for allocation {:?} to be replaced",
                now(),
                short(&current)
            );
            last_note = Instant::now();
        }
        index = next_index;
    }
}

/// "1st", "2nd", "3rd", "4th", … "11th", "12th", "13th", "21st".
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Asks on the terminal; an empty answer is `default`.
fn ask(question: &str, default: bool) -> bool {
    use std::io::Write;
    loop {
        print!("{question}");
        let _ = std::io::stdout().flush();
        let mut answer = String::new();
        if std::io::stdin().read_line(&mut answer).unwrap_or(0) == 0 {
            return false;
        }
        match answer.trim().to_ascii_lowercase().as_str() {
            "" => return default,
            "y" | "yes" => return true,
            "n" | "no" => return false,
            other => println!("{:31}Invalid answer {other:?}", ""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_read_as_nomad_reads_them() {
        assert_eq!(batch_size("3"), Ok(BatchSize::Count(3)));
        assert_eq!(batch_size("50%"), Ok(BatchSize::Percent(50)));
        assert!(batch_size("0").unwrap_err().contains("greater than zero"));
        for bad in ["", "%", "-1", "1.5", "x", "5%%"] {
            assert!(
                batch_size(bad)
                    .unwrap_err()
                    .contains("integer or a percentage"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn ordinals_read_as_english() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }

    #[test]
    fn batch_waits_are_durations_or_ask() {
        assert_eq!(batch_wait("ASK"), Ok(None));
        assert_eq!(batch_wait("1s"), Ok(Some(Duration::from_secs(1))));
        assert!(batch_wait("soon").is_err());
    }
}
