//! What a client does to or reads from an allocation's running tasks besides restarting
//! them: `alloc signal` (through each task's supervisor) and `alloc status -stats` (the
//! CPU and memory of the task's processes, from `/proc`).

use super::*;
use crate::raw_exec;

/// The largest signal request read (Nomad's carries the allocation, task, signal and
/// query options).
const MAX_SIGNAL_BODY: usize = 4096;

/// `PUT /v1/client/allocation/:id/signal` with `{"Task": …, "Signal": …}`: the signal goes
/// to the named task's process group, or to every task of the allocation that has a
/// process; each once, through its supervisor, and logged by the agent. Deliberate
/// differences from Nomad (ARCHITECTURE.md): an unknown or empty signal is a 400 naming it
/// (Nomad's raw_exec sends SIGINT instead); with no task named, tasks without a process are
/// passed over instead of each failing the request; no `Signaling` task event is recorded.
pub(super) fn signal_alloc(shared: &Shared, id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let fields = small_object(body, MAX_SIGNAL_BODY, "a signal")?;
    let (mut task_name, mut signal_name) = (String::new(), String::new());
    for (key, value) in fields {
        let text = |into: &mut String| match value {
            Value::String(text) => {
                *into = text.clone();
                Ok(())
            }
            Value::Null => Ok(()),
            _ => Err(error(400, format!("{key} must be a string (got {value})"))),
        };
        match key.to_ascii_lowercase().as_str() {
            "task" => text(&mut task_name)?,
            "signal" => text(&mut signal_name)?,
            "allocid" | "region" | "namespace" | "authtoken" => {}
            _ => {
                return Err(error(
                    400,
                    format!("unknown field {key:?} in the signal request (Task, Signal)"),
                ))
            }
        }
    }
    if signal_name.trim().is_empty() {
        return Err(error(
            400,
            "Signal is required (a name such as SIGHUP or SIGUSR1)",
        ));
    }
    let Some(number) = raw_exec::signal_number(&signal_name) else {
        return Err(error(
            400,
            format!(
                "unknown signal {:?}",
                signal_name.chars().take(32).collect::<String>()
            ),
        ));
    };
    let index = {
        let core = shared.core();
        if core.server.store.alloc(id).is_none() {
            return Err(error(404, format!("Unknown allocation {id:?}")));
        }
        core.server.store.index()
    };
    let Some(shell) = shared.runner(id) else {
        return Err(error(
            400,
            format!("allocation {id:?} is not running on this client"),
        ));
    };
    let signalled = shell.inspect(|runner, host| {
        let names: Vec<&str> = runner.tasks.iter().map(|t| &*t.name).collect();
        if !task_name.is_empty() {
            let ix = names
                .iter()
                .position(|name| *name == task_name)
                .ok_or_else(|| error(404, format!("Task not found: {task_name:?}")))?;
            host.user_signal(ix, number)
                .map_err(|why| error(400, format!("task {task_name:?}: {why}")))?;
            return Ok(vec![task_name.clone()]);
        }
        let mut signalled = Vec::new();
        for (ix, name) in names.iter().enumerate() {
            match host.user_signal(ix, number) {
                Ok(()) => signalled.push(name.to_string()),
                // No process: passed over.
                Err(_) if host.task_pid(ix).is_none() => {}
                Err(why) => return Err(error(500, format!("task {name:?}: {why}"))),
            }
        }
        if signalled.is_empty() {
            return Err(error(
                400,
                "Task not running: no task of the allocation runs",
            ));
        }
        Ok(signalled)
    })?;
    let upper = signal_name.trim().to_ascii_uppercase();
    let shown = format!("SIG{}", upper.strip_prefix("SIG").unwrap_or(&upper));
    for task in &signalled {
        crate::daemon::say!("allocation {id} task {task}: {shown} sent at a user's request");
    }
    ok(json!({}), index)
}

/// One process's usage, read from `/proc/<pid>/stat`.
#[derive(Clone, Copy, Default)]
struct Usage {
    user_ticks: u64,
    system_ticks: u64,
    /// Ticks since boot when the process started.
    start_ticks: u64,
    rss_pages: u64,
}

/// `/proc/<pid>/stat`'s process group and usage; `None` for a process gone or unreadable.
fn read_stat(pid: &str) -> Option<(i32, Usage)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last `)`.
    let fields: Vec<&str> = text
        .get(text.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // Fields 3.. of proc(5): state, ppid, pgrp, … utime (14), stime (15), starttime (22),
    // rss (24).
    let pgrp = fields.get(2)?.parse::<i32>().ok()?;
    Some((
        pgrp,
        Usage {
            user_ticks: number(11)?,
            system_ticks: number(12)?,
            start_ticks: number(19)?,
            rss_pages: number(21)?,
        },
    ))
}

/// The most processes of one task listed under `Pids` (all are counted in its totals).
const MAX_LISTED_PIDS: usize = 256;

/// `GET /v1/client/allocation/:id/stats`: each running task's CPU and memory, summed over
/// the processes of its process group. Memory is the resident set (`Measured: ["RSS"]`);
/// CPU is the share of one core each process has used since it started (`Percent`, with
/// its user and system parts), not Nomad's share since its last sample, for the agent
/// keeps no sampler.
/// `GET /v1/client/allocation/:id/checks`: the latest result of each of its services'
/// checks, by check ID (Nomad's `CheckQueryResult`s); `{}` when none is registered.
pub(super) fn alloc_checks(shared: &Shared, id: &str) -> Result<Reply, ApiError> {
    if shared.core().server.store.alloc(id).is_none() {
        return Err(error(404, format!("Unknown allocation {id:?}")));
    }
    plain(json!(shared.checks.results(id)))
}

pub(super) fn alloc_stats(shared: &Shared, id: &str) -> Result<Reply, ApiError> {
    if shared.core().server.store.alloc(id).is_none() {
        return Err(error(404, format!("Unknown allocation {id:?}")));
    }
    let Some(shell) = shared.runner(id) else {
        return Err(error(
            400,
            format!("allocation {id:?} is not running on this client"),
        ));
    };
    let leaders: Vec<(String, i32)> = shell.inspect(|runner, host| {
        let named = runner.tasks.iter().enumerate();
        named
            .filter_map(|(ix, task)| {
                host.task_pid(ix)
                    .map(|pid| (String::from(&*task.name), pid))
            })
            .collect()
    });
    // SAFETY: sysconf has no preconditions.
    let (ticks_per_second, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    let uptime_ticks = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |seconds| seconds * ticks_per_second);
    let mut by_group: BTreeMap<i32, Vec<(String, Usage)>> = BTreeMap::new();
    if !leaders.is_empty() {
        let entries = std::fs::read_dir("/proc").map_err(|e| error(500, format!("/proc: {e}")))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            if let Some((pgrp, usage)) = read_stat(pid) {
                if leaders.iter().any(|(_, leader)| *leader == pgrp) {
                    by_group
                        .entry(pgrp)
                        .or_default()
                        .push((pid.to_string(), usage));
                }
            }
        }
    }
    let percent = |ticks: u64, start: u64| {
        let lived = (uptime_ticks - start as f64).max(1.0);
        ticks as f64 / lived * 100.0
    };
    let resources = |rss: u64, user: f64, system: f64| {
        json!({
            "MemoryStats": {"RSS": rss, "Cache": 0, "Swap": 0, "Usage": 0, "MaxUsage": 0,
                            "KernelUsage": 0, "KernelMaxUsage": 0, "Measured": ["RSS"]},
            "CpuStats": {"SystemMode": system, "UserMode": user, "TotalTicks": 0.0,
                         "ThrottledPeriods": 0, "ThrottledTime": 0,
                         "Percent": user + system,
                         "Measured": ["System Mode", "User Mode", "Percent"]},
            "DeviceStats": [],
        })
    };
    let now = crate::daemon::unix_now_ns();
    let (mut alloc_rss, mut alloc_user, mut alloc_system) = (0u64, 0f64, 0f64);
    let mut tasks = Map::new();
    for (task, leader) in &leaders {
        let (mut rss, mut user, mut system) = (0u64, 0f64, 0f64);
        let mut pids = Map::new();
        for (pid, usage) in by_group.get(leader).into_iter().flatten() {
            let bytes = usage.rss_pages.saturating_mul(page_size);
            let (u, s) = (
                percent(usage.user_ticks, usage.start_ticks),
                percent(usage.system_ticks, usage.start_ticks),
            );
            (rss, user, system) = (rss.saturating_add(bytes), user + u, system + s);
            if pids.len() < MAX_LISTED_PIDS {
                pids.insert(pid.clone(), resources(bytes, u, s));
            }
        }
        (alloc_rss, alloc_user, alloc_system) = (
            alloc_rss.saturating_add(rss),
            alloc_user + user,
            alloc_system + system,
        );
        tasks.insert(
            task.clone(),
            json!({"ResourceUsage": resources(rss, user, system), "Timestamp": now,
                   "Pids": pids}),
        );
    }
    plain(json!({
        "ResourceUsage": resources(alloc_rss, alloc_user, alloc_system),
        "Tasks": tasks,
        "Timestamp": now,
    }))
}
