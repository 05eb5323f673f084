//! The check runner: Nomad-native service checks (`http`, `tcp`), run by the agent while
//! their service is registered, and their latest results (`GET
//! /v1/client/allocation/:id/checks`).
//!
//! 1. A service is registered on the server (`host/flush.rs` `change_services`, under the
//!    core's lock): its checks join the registry, pending, due at once. Deregistered (the
//!    stop path's pre-kill hooks, before any delay), they leave it in the same critical
//!    section, cancelled: no run starts after that, and a run in flight has its result
//!    dropped.
//! 2. One scheduler thread starts each due check on a thread of its own, the longest due
//!    first, at most [`MAX_RUNNING`] at once and [`MAX_RUNNING_PER_ALLOC`] for one
//!    allocation (a check waits its turn past that), against the agent's address
//!    (loopback when it binds every address) and the allocation's port. A run started
//!    before its service was deregistered checks its cancellation before it connects and
//!    before it sends: the task hears nothing from a check once its stop began.
//! 3. The run's result is stored, and the allocation's runner is told, through its shell
//!    like every other event, whether every healthiness check now passes
//!    ([`RunnerShell::checks`](quiesce_core::client::shell::RunnerShell::checks)); the
//!    health watch decides (`quiesce_core::client::alloc_runner::health`).
//!
//! Lock order: a runner's shell → core → this registry; a run's thread holds none of them
//! while it probes, nor this registry while it tells the runner.

mod probe;

use super::Shared;
use probe::Probe;
use quiesce_core::server::structs::{AllocId, Allocation};
use quiesce_core::spec::ServiceCheck;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Check runs in flight at once, agent-wide.
pub const MAX_RUNNING: usize = 64;
/// Check runs in flight at once for one allocation: a task that accepts connections and
/// never answers holds its own checks' turns, never the other allocations'.
pub const MAX_RUNNING_PER_ALLOC: usize = 4;

/// A check's latest result, as Nomad's `CheckQueryResult`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CheckResult {
    #[serde(rename = "ID")]
    pub id: String,
    pub check: String,
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub task: String,
    pub service: String,
    /// `success`, `failure`, or `pending` (not yet run).
    pub status: &'static str,
    #[serde(skip_serializing_if = "is_zero")]
    pub status_code: u16,
    pub output: String,
    /// `healthiness`, or `readiness` for a check with `on_update = "ignore"`.
    pub mode: &'static str,
    /// When it ran, in Unix seconds (0: not yet).
    pub timestamp: i64,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

struct Entry {
    result: CheckResult,
    probe: Probe,
    addr: Option<SocketAddr>,
    interval: Duration,
    timeout: Duration,
    due: Instant,
    running: bool,
    /// Which registration this is: a run's result is kept only for the one it ran for.
    generation: u64,
    /// Set when the service is deregistered: a run started before does not probe after.
    cancelled: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    /// By allocation, then check ID.
    allocs: BTreeMap<AllocId, BTreeMap<String, Entry>>,
    running: usize,
    generation: u64,
}

/// The registry and its scheduler's wake-up.
#[derive(Default)]
pub struct Checks {
    state: Mutex<State>,
    wake: Condvar,
}

impl Checks {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("the checks' lock is never poisoned")
    }

    /// The checks of `alloc`'s services `names` (of the task `owner`, `""` for the group's)
    /// join the registry, pending and due now; `ip` is the agent's address.
    pub fn register(&self, alloc: &Allocation, owner: &str, names: &[String], ip: IpAddr) {
        let Some(group) = alloc
            .job
            .task_groups
            .iter()
            .find(|g| g.name == alloc.task_group)
        else {
            return;
        };
        let ip = if ip.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            ip
        };
        let mut state = self.lock();
        state.generation += 1;
        let generation = state.generation;
        let now = Instant::now();
        let services = group
            .all_services()
            .filter(|(task, service)| *task == owner && names.contains(&service.name));
        for (task, service) in services {
            for check in service.checks.iter().flatten() {
                let label = if check.port_label.is_empty() {
                    &service.port_label
                } else {
                    &check.port_label
                };
                let port = alloc.ports.iter().find(|p| &p.label == label);
                let id = check_id(&alloc.id, &group.name, task, &service.name, check);
                let entry = Entry {
                    result: CheckResult {
                        id: id.clone(),
                        check: check.name.clone(),
                        group: group.name.clone(),
                        task: task.to_string(),
                        service: service.name.clone(),
                        status: "pending",
                        status_code: 0,
                        output: String::new(),
                        mode: if check.healthiness() {
                            "healthiness"
                        } else {
                            "readiness"
                        },
                        timestamp: 0,
                    },
                    probe: probe_of(check),
                    addr: port.map(|p| SocketAddr::new(ip, p.value)),
                    interval: duration(check.interval_ns),
                    timeout: duration(check.timeout_ns),
                    due: now,
                    running: false,
                    generation,
                    cancelled: Arc::default(),
                };
                state
                    .allocs
                    .entry(alloc.id.clone())
                    .or_default()
                    .insert(id, entry);
            }
        }
        drop(state);
        self.wake.notify_all();
    }

    /// The checks of services `names` of `owner` leave the registry: none of them runs
    /// again, and a run in flight has its result dropped.
    pub fn deregister(&self, alloc: &str, owner: &str, names: &[String]) {
        let mut state = self.lock();
        if let Some(checks) = state.allocs.get_mut(alloc) {
            checks.retain(|_, e| {
                let gone = e.result.task == owner && names.contains(&e.result.service);
                if gone {
                    e.cancelled.store(true, Ordering::SeqCst);
                }
                !gone
            });
            if checks.is_empty() {
                state.allocs.remove(alloc);
            }
        }
    }

    /// The latest result of each check of the allocation, by ID.
    pub fn results(&self, alloc: &str) -> BTreeMap<String, CheckResult> {
        let state = self.lock();
        let checks = state.allocs.get(alloc).into_iter().flatten();
        checks
            .map(|(id, e)| (id.clone(), e.result.clone()))
            .collect()
    }

    /// Every healthiness check of the allocation passed at its latest run (one at least is
    /// registered; a pending one does not pass), as Nomad's `watchNomadEvents` judges.
    pub fn passing(&self, alloc: &str) -> bool {
        let state = self.lock();
        let mut healthiness = state
            .allocs
            .get(alloc)
            .into_iter()
            .flatten()
            .map(|(_, e)| &e.result)
            .filter(|r| r.mode == "healthiness")
            .peekable();
        healthiness.peek().is_some() && healthiness.all(|r| r.status == "success")
    }

    /// How many checks are registered, agent-wide.
    pub fn count(&self) -> usize {
        self.lock().allocs.values().map(BTreeMap::len).sum()
    }
}

fn duration(ns: i64) -> Duration {
    Duration::from_nanos(ns.max(0) as u64)
}

fn probe_of(check: &ServiceCheck) -> Probe {
    if check.check_type.eq_ignore_ascii_case("tcp") {
        Probe::Tcp
    } else {
        Probe::Http {
            method: if check.method.is_empty() {
                "GET".into()
            } else {
                check.method.clone()
            },
            path: check.path.clone(),
        }
    }
}

/// Unique to the check of this allocation (Nomad's is a SHA-256 of the check's
/// coordinates and fields too): hex.
fn check_id(alloc: &str, group: &str, task: &str, service: &str, check: &ServiceCheck) -> String {
    let mut sum = Sha256::new();
    let fields = [alloc, group, task, service, &check.name, &check.check_type];
    let more = [
        &check.port_label,
        &check.path,
        &check.method,
        &check.on_update,
    ];
    for field in fields.into_iter().chain(more.map(String::as_str)) {
        sum.update((field.len() as u64).to_le_bytes());
        sum.update(field.as_bytes());
    }
    sum.update(check.interval_ns.to_le_bytes());
    sum.update(check.timeout_ns.to_le_bytes());
    sum.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A run to start: its allocation, check ID, registration, what to probe, and its
/// cancellation.
struct Start {
    alloc: AllocId,
    id: String,
    generation: u64,
    probe: Probe,
    addr: Option<SocketAddr>,
    timeout: Duration,
    cancelled: Arc<AtomicBool>,
}

/// Marks the due checks running, the longest due first, as many as there is room for
/// (agent-wide and per allocation), and returns them, with when the next one is due.
fn take_due(state: &mut State, now: Instant) -> (Vec<Start>, Instant) {
    let mut next = now + Duration::from_secs(1);
    let mut due = Vec::new();
    for (alloc, entries) in &state.allocs {
        let in_flight = entries.values().filter(|e| e.running).count();
        let room = MAX_RUNNING_PER_ALLOC.saturating_sub(in_flight);
        let mut ready: Vec<_> = entries
            .iter()
            .filter(|(_, e)| !e.running)
            .filter(|(_, e)| {
                if e.due > now {
                    next = next.min(e.due);
                }
                e.due <= now
            })
            .map(|(id, e)| (e.due, alloc.clone(), id.clone()))
            .collect();
        ready.sort();
        due.extend(ready.into_iter().take(room));
    }
    due.sort();
    due.truncate(MAX_RUNNING.saturating_sub(state.running));
    let mut start = Vec::new();
    for (_, alloc, id) in due {
        let Some(entry) = state.allocs.get_mut(&alloc).and_then(|e| e.get_mut(&id)) else {
            continue;
        };
        entry.running = true;
        start.push(Start {
            generation: entry.generation,
            probe: entry.probe.clone(),
            addr: entry.addr,
            timeout: entry.timeout,
            cancelled: Arc::clone(&entry.cancelled),
            alloc,
            id,
        });
    }
    state.running += start.len();
    (start, next)
}

/// The scheduler thread: starts every due check (at most [`MAX_RUNNING`] in flight), and
/// sleeps until the next is due or a registration wakes it. Ends with the agent.
pub fn run(checks: Arc<Checks>, weak: Weak<Shared>) {
    loop {
        match weak.upgrade() {
            Some(shared) if !shared.stopping.load(Ordering::Relaxed) => {}
            _ => return,
        }
        let mut state = checks.lock();
        let now = Instant::now();
        let (start, next) = take_due(&mut state, now);
        drop(state);
        for run in start {
            let Start {
                alloc,
                id,
                generation,
                probe,
                addr,
                timeout,
                cancelled,
            } = run;
            let spawned = std::thread::Builder::new().name("check".into()).spawn({
                let (alloc, id) = (alloc.clone(), id.clone());
                let (checks, weak) = (Arc::clone(&checks), weak.clone());
                move || {
                    let outcome = match addr {
                        Some(addr) => probe::run(&probe, addr, timeout, &cancelled),
                        None => probe::Outcome {
                            success: false,
                            status_code: 0,
                            output: "nomad: the check's port is not allocated".into(),
                        },
                    };
                    finish(&checks, &weak, &alloc, &id, generation, outcome);
                }
            });
            if let Err(error) = spawned {
                let outcome = probe::Outcome {
                    success: false,
                    status_code: 0,
                    output: format!("nomad: starting the check: {error}"),
                };
                finish(&checks, &weak, &alloc, &id, generation, outcome);
            }
        }
        let state = checks.lock();
        let wait = next.saturating_duration_since(Instant::now());
        let _ = checks
            .wake
            .wait_timeout(state, wait.min(Duration::from_secs(1)));
    }
}

/// A run ended: its result is kept if its registration still stands, and the runner told.
fn finish(
    checks: &Checks,
    weak: &Weak<Shared>,
    alloc: &str,
    id: &str,
    generation: u64,
    outcome: probe::Outcome,
) {
    let mut state = checks.lock();
    debug_assert!(state.running > 0, "a check run ends that never started");
    state.running = state.running.saturating_sub(1);
    let entry = state
        .allocs
        .get_mut(alloc)
        .and_then(|entries| entries.get_mut(id))
        .filter(|entry| entry.generation == generation);
    let kept = entry.is_some();
    if let Some(entry) = entry {
        entry.running = false;
        entry.due = Instant::now() + entry.interval;
        let result = &mut entry.result;
        result.status = if outcome.success {
            "success"
        } else {
            "failure"
        };
        result.status_code = outcome.status_code;
        result.output = outcome.output;
        result.timestamp = crate::daemon::unix_now_ns() / 1_000_000_000;
    }
    drop(state);
    checks.wake.notify_all();
    if !kept {
        return;
    }
    let Some(shared) = weak.upgrade() else { return };
    if let Some(shell) = shared.runner(alloc) {
        // Read under the runner's lock: the latest verdict is the one it keeps.
        shell.checks(|| checks.passing(alloc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(due: Instant) -> Entry {
        Entry {
            result: CheckResult {
                id: String::new(),
                check: String::new(),
                group: String::new(),
                task: String::new(),
                service: String::new(),
                status: "pending",
                status_code: 0,
                output: String::new(),
                mode: "healthiness",
                timestamp: 0,
            },
            probe: Probe::Tcp,
            addr: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            due,
            running: false,
            generation: 1,
            cancelled: Arc::default(),
        }
    }

    #[test]
    fn one_allocation_takes_its_own_turns_only_and_the_longest_due_go_first() {
        let now = Instant::now();
        let mut state = State::default();
        let greedy: BTreeMap<_, _> = (0..10)
            .map(|i| {
                (
                    format!("g{i:02}"),
                    entry(now - Duration::from_millis(10 + i)),
                )
            })
            .collect();
        state.allocs.insert("a-greedy".into(), greedy);
        let mut other = BTreeMap::new();
        other.insert("o".to_string(), entry(now));
        other.insert("later".to_string(), entry(now + Duration::from_millis(300)));
        state.allocs.insert("b-other".into(), other);
        let (start, next) = take_due(&mut state, now);
        let greedy: Vec<&str> = start
            .iter()
            .filter(|s| s.alloc == "a-greedy")
            .map(|s| s.id.as_str())
            .collect();
        // The four due longest (the highest numbers were due first).
        assert_eq!(greedy, ["g09", "g08", "g07", "g06"]);
        assert!(start.iter().any(|s| s.alloc == "b-other" && s.id == "o"));
        assert_eq!(state.running, 5);
        assert_eq!(next, now + Duration::from_millis(300));
        // Nothing more for the greedy one while its four run.
        let (again, _) = take_due(&mut state, now);
        assert!(again.is_empty(), "{} more started", again.len());
    }
}
