//! The `alloc` commands (`stop`, `signal`, `logs`; `status` is `alloc_status.rs`), and Nomad's
//! evaluation monitor,
//! which after a stop goes on until every stopped allocation is client-terminal.

use super::api::{now, resolve, short, text, Api};
use super::{AllocCommand, LogsArgs, Tail};
use std::time::Instant;

pub(super) fn alloc(command: AllocCommand) -> Result<(), String> {
    match command {
        AllocCommand::Status {
            alloc,
            verbose,
            json,
            address,
        } => {
            let api = address.api()?;
            let stub = resolve(&api, "Alloc", "allocations", &alloc)?;
            if json {
                let full = api.get(&format!("/v1/allocation/{}", text(&stub, "ID")))?;
                println!("{}", serde_json::to_string_pretty(&full).expect("JSON"));
                return Ok(());
            }
            super::alloc_status::alloc_status_of(&api, &text(&stub, "ID"), verbose)
        }
        AllocCommand::Logs(args) => logs_command(args),
        AllocCommand::Fs(args) => super::alloc_fs::fs_command(args),
        AllocCommand::Signal {
            signal,
            alloc,
            task,
            address,
        } => {
            let api = address.api()?;
            let stub = resolve(&api, "Alloc", "allocations", &alloc)?;
            let body = serde_json::json!({"Signal": signal, "Task": task.unwrap_or_default()});
            super::api::put_json(
                &api,
                &format!("/v1/client/allocation/{}/signal", text(&stub, "ID")),
                &body,
            )
            .map(drop)
        }
        AllocCommand::Restart {
            alloc,
            task,
            task_flag,
            all_tasks,
            no_shutdown_delay,
            verbose: _,
            address,
        } => {
            let api = address.api()?;
            super::restart::alloc_restart(
                &api,
                &alloc,
                task_flag.or(task),
                all_tasks,
                no_shutdown_delay,
            )
        }
        AllocCommand::Stop {
            alloc,
            no_shutdown_delay,
            reschedule,
            detach,
            address,
        } => {
            let api = address.api()?;
            let stub = resolve(&api, "Alloc", "allocations", &alloc)?;
            let id = text(&stub, "ID");
            let answer = api.call(
                "PUT",
                &format!(
                    "/v1/allocation/{id}/stop?no_shutdown_delay={no_shutdown_delay}\
                     &reschedule={reschedule}"
                ),
                None,
            )?;
            let eval = text(&answer, "EvalID");
            if detach {
                println!("{eval}");
                return Ok(());
            }
            monitor(&api, &eval, Some(std::slice::from_ref(&id)))?;
            // The allocation that replaces it, placed by the same evaluation.
            let stopped = api.get(&format!("/v1/allocation/{id}"))?;
            let next = text(&stopped, "NextAllocation");
            if !next.is_empty() {
                println!(
                    "    {}: Allocation {:?} replaced by {:?}",
                    now(),
                    short(&id),
                    short(&next)
                );
            }
            Ok(())
        }
    }
}

/// `alloc logs` (and `logs`): the allocation by ID or prefix, its task by name (which may
/// be left out when it has one).
pub(super) fn logs_command(args: LogsArgs) -> Result<(), String> {
    let api = args.address.api()?;
    let stub = resolve(&api, "Alloc", "allocations", &args.alloc)?;
    let tasks: Vec<String> = stub["TaskStates"]
        .as_object()
        .map(|states| states.keys().cloned().collect())
        .unwrap_or_default();
    let task = match args.task_flag.or(args.task) {
        Some(task) => task,
        None if tasks.len() == 1 => tasks[0].clone(),
        None => {
            return Err(format!(
                "Allocation {:?} is running the following tasks:\n  * {}\n\nPlease \
                 specify the task.",
                short(&text(&stub, "ID")),
                tasks.join("\n  * ")
            ))
        }
    };
    let tail = args.tail.chosen()?;
    logs(
        &api,
        &text(&stub, "ID"),
        &task,
        args.stderr,
        args.follow,
        tail,
    )
}

/// The most a `-tail -n` reads back from the end to find its lines.
const MAX_TAIL_SCAN: u64 = 8 << 20;

/// The offset from the start at which the log's last `lines` lines begin (best effort, as
/// Nomad's: at most [`MAX_TAIL_SCAN`] bytes are read back for them).
fn tail_start(api: &Api, path: &str, lines: u64) -> Result<u64, String> {
    use base64::Engine;
    let size_frame = api.get(&format!("{path}&origin=end&offset=0"))?;
    let size = size_frame["Offset"].as_u64().unwrap_or(0);
    let mut back = 64u64 << 10;
    loop {
        let back_now = back.min(size);
        let start = size - back_now;
        let mut read = Vec::new();
        let mut at = start;
        while at < size {
            let frame = api.get(&format!("{path}&origin=start&offset={at}"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(frame["Data"].as_str().unwrap_or_default())
                .map_err(|e| format!("the agent's log frame does not decode: {e}"))?;
            if bytes.is_empty() {
                break;
            }
            at += bytes.len() as u64;
            read.extend_from_slice(&bytes);
        }
        // The last `lines` lines: past the newline before them (a final newline ends the
        // last line, it does not start another).
        let body = read.strip_suffix(b"\n").unwrap_or(&read);
        let newlines: Vec<usize> = body
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i)
            .collect();
        if (newlines.len() as u64) >= lines {
            let cut = newlines[newlines.len() - lines as usize];
            return Ok(start + cut as u64 + 1);
        }
        if start == 0 || back >= MAX_TAIL_SCAN {
            return Ok(start);
        }
        back *= 4;
    }
}

/// Prints a task's log from the start (or, with `tail`, from near its end); with `follow`,
/// goes on asking from where it got to until the allocation has ended or the user
/// interrupts.
fn logs(
    api: &Api,
    alloc: &str,
    task: &str,
    stderr: bool,
    follow: bool,
    tail: Option<Tail>,
) -> Result<(), String> {
    use std::io::Write;
    let kind = if stderr { "stderr" } else { "stdout" };
    let base = format!(
        "/v1/client/fs/logs/{alloc}?task={}&type={kind}",
        super::api::segment(task)
    );
    let mut offset = match tail {
        None => 0,
        Some(Tail::Lines(0)) | Some(Tail::Bytes(0)) => {
            let end = api.get(&format!("{base}&origin=end&offset=0"))?;
            end["Offset"].as_u64().unwrap_or(0)
        }
        Some(Tail::Bytes(bytes)) => {
            let end = api.get(&format!("{base}&origin=end&offset=0"))?;
            end["Offset"].as_u64().unwrap_or(0).saturating_sub(bytes)
        }
        Some(Tail::Lines(lines)) => tail_start(api, &base, lines)?,
    };
    loop {
        let frame = api.get(&format!("{base}&origin=start&offset={offset}"))?;
        let data = frame["Data"].as_str().unwrap_or_default();
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("the agent's log frame does not decode: {e}"))?;
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        offset = frame["Offset"]
            .as_u64()
            .unwrap_or(offset + bytes.len() as u64);
        if !follow {
            // One read is at most a MiB: a longer log is read to its end.
            if bytes.is_empty() {
                return Ok(());
            }
            continue;
        }
        if bytes.is_empty() {
            // Nothing new: done once the allocation has ended (all it wrote is out).
            let alloc = api.get(&format!("/v1/allocation/{alloc}"))?;
            if matches!(
                text(&alloc, "ClientStatus").as_str(),
                "complete" | "failed" | "lost"
            ) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
}

// ---------------------------------------------------------------------------- evaluations

/// Nomad's evaluation monitor. With `stopped`, it then waits until each of those
/// allocations is client-terminal (its tasks dead), reporting each as it ends.
pub(super) fn monitor(api: &Api, eval_id: &str, stopped: Option<&[String]>) -> Result<(), String> {
    monitor_with(api, eval_id, stopped, false)
}

/// [`monitor`], with full IDs in its lines when `verbose`.
pub(super) fn monitor_with(
    api: &Api,
    eval_id: &str,
    stopped: Option<&[String]>,
    verbose: bool,
) -> Result<(), String> {
    let short = |id: &str| -> String {
        if verbose {
            id.to_string()
        } else {
            short(id).to_string()
        }
    };
    println!("==> {}: Monitoring evaluation {:?}", now(), short(eval_id));
    let mut index = 0u64;
    let mut last_status = String::new();
    let eval = loop {
        let eval = api.get(&format!("/v1/evaluation/{eval_id}?index={index}&wait=5s"))?;
        let status = text(&eval, "Status");
        if last_status.is_empty() {
            println!(
                "    {}: Evaluation triggered by job {:?}",
                now(),
                text(&eval, "JobID")
            );
        } else if status != last_status {
            println!(
                "    {}: Evaluation status changed: {last_status:?} -> {status:?}",
                now()
            );
        }
        if status != "pending" {
            break eval;
        }
        last_status = status;
        index = eval["ModifyIndex"].as_u64().unwrap_or(index);
    };
    let status = text(&eval, "Status");
    let blocked = text(&eval, "BlockedEval");
    if blocked.is_empty() {
        println!(
            "==> {}: Evaluation {:?} finished with status {status:?}",
            now(),
            short(eval_id)
        );
    } else {
        // Nomad's lines for placements that failed, and the evaluation left to retry them;
        // the command then exits 2, as Nomad's does for placement issues.
        super::PLACEMENT_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
        println!(
            "==> {}: Evaluation {:?} finished with status {status:?} but failed to place all \
             allocations:",
            now(),
            short(eval_id)
        );
        let queued = eval["QueuedAllocations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (group, count) in queued {
            let count = count.as_u64().unwrap_or(0);
            let plural = if count == 1 { "" } else { "s" };
            println!(
                "    {}: Task Group {group:?} (failed to place {count} allocation{plural}):",
                now()
            );
            println!("      * No node is ready to place on");
        }
        println!(
            "    {}: Evaluation {:?} waiting for additional capacity to place remainder",
            now(),
            short(&blocked)
        );
    }
    match stopped {
        None => {
            let allocs = api.get(&format!("/v1/evaluation/{eval_id}/allocations"))?;
            for alloc in allocs.as_array().cloned().unwrap_or_default() {
                println!(
                    "    {}: Allocation {:?} created: node {:?}, group {:?}",
                    now(),
                    short(&text(&alloc, "ID")),
                    short(&text(&alloc, "NodeID")),
                    text(&alloc, "TaskGroup")
                );
            }
            Ok(())
        }
        Some(allocs) => wait_stopped(api, allocs),
    }
}

/// Waits until every allocation in `ids` is client-terminal or gone — on its node's list,
/// which still shows a purged job's allocations while their tasks are being stopped, so a
/// purge's monitor too ends only when the tasks are dead.
fn wait_stopped(api: &Api, ids: &[String]) -> Result<(), String> {
    let mut left: Vec<String> = ids.to_vec();
    let started = Instant::now();
    // The nodes of the allocations, from one list.
    let listed = api.get("/v1/allocations")?;
    let mut nodes: std::collections::BTreeSet<String> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| ids.contains(&text(a, "ID")))
        .map(|a| text(a, "NodeID"))
        .collect();
    if nodes.is_empty()
        || listed
            .as_array()
            .is_some_and(|l| ids.iter().any(|id| !l.iter().any(|a| text(a, "ID") == *id)))
    {
        // Some already purged from the list: every node's, then (if this token may read
        // nodes; else the list, on which a purged allocation is gone at once).
        if let Ok(all) = api.get("/v1/nodes") {
            nodes.extend(all.as_array().into_iter().flatten().map(|n| text(n, "ID")));
        }
    }
    let mut index = 0u64;
    while !left.is_empty() {
        let mut allocs = Vec::new();
        let mut next = index;
        let mut by_node = true;
        for node in &nodes {
            // A node that is down will not report its allocations' ends: not waited for.
            let down = api
                .get(&format!("/v1/node/{node}"))
                .is_ok_and(|n| text(&n, "Status") == "down");
            match api.call_indexed(
                "GET",
                &format!("/v1/node/{node}/allocations?index={index}&wait=5s"),
                None,
            ) {
                Ok((answer, at)) if down => {
                    let on_node: Vec<String> = answer
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| text(a, "ID"))
                        .collect();
                    left.retain(|id| {
                        let abandoned = on_node.contains(id);
                        if abandoned {
                            println!(
                                "    {}: Allocation {:?}: its node is down; not waiting",
                                now(),
                                short(id)
                            );
                        }
                        !abandoned
                    });
                    next = next.max(at);
                }
                Ok((answer, at)) => {
                    allocs.extend(answer.as_array().cloned().unwrap_or_default());
                    next = next.max(at);
                }
                Err(_) => by_node = false,
            }
        }
        if !by_node || nodes.is_empty() {
            let (answer, at) = api.call_indexed(
                "GET",
                &format!("/v1/allocations?index={index}&wait=5s"),
                None,
            )?;
            allocs = answer.as_array().cloned().unwrap_or_default();
            next = at;
        }
        left.retain(|id| {
            let found = allocs.iter().find(|a| text(a, "ID") == *id);
            let done = match found {
                None => {
                    println!(
                        "    {}: Allocation {:?} stopped and purged: tasks dead",
                        now(),
                        short(id)
                    );
                    true
                }
                Some(alloc) => {
                    let status = text(alloc, "ClientStatus");
                    let done = matches!(status.as_str(), "complete" | "failed" | "lost");
                    if done {
                        println!(
                            "    {}: Allocation {:?} stopped: tasks dead, client status {status:?}",
                            now(),
                            short(id)
                        );
                    }
                    done
                }
            };
            !done
        });
        index = next;
    }
    println!(
        "==> {}: Stop complete: {} allocation(s) stopped in {:.1}s",
        now(),
        ids.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
