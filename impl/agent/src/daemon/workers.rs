//! The agent's threads beside HTTP: the scheduler, and the client workers that pull
//! allocation updates and apply task exits.
//!
//! The kill path comes before its bookkeeping. Pulls go first; a dead task's exit is asked
//! of its supervisor only once no pull has been taken for [`REPORT_AFTER`] and the tasks
//! signalled last have died (or [`KILL_SETTLE`] has passed since the last kill request, so
//! a draining task holds up no one else); exits are applied after that; exited tasks'
//! control connections are closed, and their supervisors exit, once no pull has been taken
//! for [`CLOSE_AFTER`], under the same condition.
//!
//! Why: on two cores a stop of many allocations is a contest for the CPU between the path
//! that sends the signals and everything the signals set off. Measured with
//! `benches/benches/http_stop.rs` (`QUIESCE_BENCH_STOPS`), `perf sched` and `perf record`:
//! a thread per runner, a thread per task's exit and a core critical section per step sent
//! the last signals of a 100-task stop 30–45 ms after the request; steps on the event
//! thread, gathered server work, one exit watcher and unsynced runner commits brought it to
//! 22–25 ms. With `/bin/sleep` tasks, each supervisor spent about 250 µs of CPU (most of it
//! tearing itself down at exit), the task 110 µs and the agent 60 µs, and the supervisors'
//! reaping and exits ran ahead of signals still to be sent. Deferring them as above halved
//! the stop of 1,000 (220–250 ms to 120–135 ms) and took 100 from 23 ms to about 13 ms, the
//! direct kill of the same processes being 62–66 ms and 6.4–7 ms; waiting for the deaths in
//! flight removed the slow outliers (20 stops of 1,000 in a row, 101–155 ms). Tried and
//! dropped: a lower priority for the committer (an API write holds the core lock while it
//! waits for its durable commit, so a starved committer would hold up the kill path),
//! lower priorities for the supervisors, other worker counts, and a disk sync before each
//! round of signals (5 ms; the durable plan and the supervisor's refusal of repeats give
//! the same safety without one).

use super::*;

/// The allocation's record, if it is newer than the runner's copy, for a pull; the pull's
/// log entry is reserved and noted for the host (see [`Core::log_pull`]).
pub(super) fn fetch_newer(
    shared: &Shared,
    id: &AllocId,
    runner: &AllocRunner,
    host: &mut DaemonHost,
) -> Option<quiesce_core::server::structs::Allocation> {
    let mut core = shared.core();
    let alloc = core.server.store.alloc_for_client(id)?.clone();
    if alloc.alloc_modify_index <= runner.alloc.alloc_modify_index {
        return None;
    }
    if let Some((seq, time_ns)) = core.log_pull(&alloc) {
        host.note_pull(seq, time_ns, alloc.alloc_modify_index);
    }
    Some(alloc)
}

/// A runner whose allocation the server has deleted (a purge, once the client reported it
/// terminal) and that has ended is forgotten: its registry entry and its stored state go.
fn forget_if_gone(shared: &Arc<Shared>, id: &AllocId, shell: &RunnerShell<DaemonHost>) {
    if !shell.inspect(|runner, _| runner.phase == RunnerPhase::Terminal) {
        return;
    }
    let mut registry = shared
        .runners
        .lock()
        .expect("the registry lock is never poisoned");
    let mut core = shared.core();
    if core.server.store.alloc_for_client(id).is_some() {
        return;
    }
    registry.remove(id);
    core.logged_pulls.remove(id);
    core.forget_tasks(id);
    let forget = vec![
        (Table::Runners, id.to_string(), None),
        (Table::Pulls, id.to_string(), None),
    ];
    core.commit(None, forget);
    // Whatever the commit took for the client to pull, someone is woken for it.
    shared.notify(&mut core);
    drop(core);
    drop(registry);
    // Its directory goes once newer ones are kept (Nomad's client `gc_max_allocs`).
    let dir = shared.config.data_dir.join("alloc").join(id.as_str());
    if dir.exists() {
        shared.gc.forgot(dir, shared.config.gc.max_alloc_dirs);
    }
}

/// Starts a named thread (the name shows in `top -H` and in profiles). A thread that cannot
/// be started is a resource exhaustion the agent cannot recover from.
pub(crate) fn spawn_named(name: &str, body: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .unwrap_or_else(|error| panic!("starting a {name} thread: {error}"));
}

/// Processes any evaluation no API write processed (none, as the server is today: an API
/// write processes its own, and those pending at start-up are processed before the
/// runners are restored), durably, before anyone acts on its plan.
pub(super) fn scheduler_loop(shared: Arc<Shared>) {
    let mut core = shared.core();
    loop {
        while !core.server.eval_pending() {
            core.asleep.scheduler = true;
            core = shared
                .evals
                .wait(core)
                .expect("the core lock is never poisoned");
            core.asleep.scheduler = false;
        }
        core.process_evals();
        if let Err(error) = core.commit_durably() {
            crate::daemon::say!("scheduler: storing the plan: {error}");
        }
        shared.notify(&mut core);
    }
}

/// How many client workers apply allocation updates and task exits at once (a stop of many
/// allocations is pulled in parallel; see benches/benches/http_stop.rs).
const CLIENT_WORKERS: usize = 4;

/// The client: pulls every allocation update of this node and hands it to its runner, and
/// applies the task exits the exit watcher reports, on [`CLIENT_WORKERS`] threads. Two
/// pulls of one allocation may run at once: each reads the record under the runner's lock
/// and applies it only if it is newer than the runner's copy, so they apply in order. A pull
/// reads the record and logs `ClientSync` in one critical section of the core, so the event
/// log orders pulls by what they read.
pub(super) fn client_loop(shared: Arc<Shared>) {
    for _ in 1..CLIENT_WORKERS {
        let shared = Arc::clone(&shared);
        spawn_named("client", move || client_worker(&shared));
    }
    client_worker(&shared);
}

enum Work {
    Pull(AllocId),
    /// Ask the supervisor of a task that has died for its exit status.
    Report(AllocId, usize),
    Exit(AllocId, usize, ExitResult),
}

fn client_worker(shared: &Arc<Shared>) {
    let mut batch = Vec::new();
    let mut closing = Vec::new();
    loop {
        // Closed outside the core lock.
        closing.clear();
        {
            let mut core = shared.core();
            loop {
                // An evaluation's plan goes first (API writes make theirs before they
                // commit, so this matters only for the scheduler thread's): a pull after it
                // takes a stop's flag and its desired status together. Pulls
                // go before exits: the kill path before the bookkeeping of its results.
                // One pull at a time (a worker that is descheduled holds up only its own),
                // the exits a share at a time.
                // A pull whose plan is not durable yet (its commit failed: a full disk)
                // waits; the committer retries, and the workers look again as often.
                let durable = core.committer.durable();
                let ready = core
                    .pending_pulls
                    .iter()
                    .find(|id| core.pulls_after.get(*id).is_none_or(|t| *t <= durable))
                    .cloned();
                let held = ready.is_none() && !core.pending_pulls.is_empty();
                if !core.server.eval_pending() {
                    if let Some(id) = ready.inspect(|id| {
                        core.pending_pulls.remove(id);
                        core.pulls_after.remove(id);
                    }) {
                        core.last_pull = std::time::Instant::now();
                        batch.push(Work::Pull(id));
                        break;
                    }
                }
                // Exits are asked for once the kill path is quiet (see `Core::pending_deaths`).
                // A steady stream of pulls defers them no longer than REPORT_LATEST.
                let quiet = core.last_pull.elapsed();
                let oldest = core.pending_deaths.first().map(|(_, _, at)| at.elapsed());
                // Until the tasks signalled last have died (or KILL_SETTLE has passed).
                let unsettled = if core.kills_in_flight.is_empty() {
                    std::time::Duration::ZERO
                } else {
                    KILL_SETTLE.saturating_sub(core.last_kill.elapsed())
                };
                let settled = unsettled.is_zero();
                if oldest.is_some_and(|waited| {
                    (quiet >= REPORT_AFTER && settled) || waited >= REPORT_LATEST
                }) {
                    batch.extend(
                        std::mem::take(&mut core.pending_deaths)
                            .into_iter()
                            .map(|(alloc, task, _)| Work::Report(alloc, task)),
                    );
                    break;
                }
                if !core.pending_exits.is_empty() {
                    let share = core.pending_exits.len().div_ceil(CLIENT_WORKERS).min(8);
                    batch.extend(
                        core.pending_exits
                            .drain(..share)
                            .map(|(alloc, task, exit)| Work::Exit(alloc, task, exit)),
                    );
                    break;
                }
                // Connections close once the kill path is quiet (see `Core::closing`).
                if !core.closing.is_empty()
                    && ((quiet >= CLOSE_AFTER && settled) || core.closing.len() >= MAX_CLOSING)
                {
                    closing = std::mem::take(&mut core.closing);
                    break;
                }
                // Asleep until there is work, or until deaths or connections are due.
                let due = [
                    oldest.map(|waited| {
                        REPORT_AFTER
                            .saturating_sub(quiet)
                            .max(unsettled)
                            .min(REPORT_LATEST.saturating_sub(waited))
                    }),
                    (!core.closing.is_empty())
                        .then(|| CLOSE_AFTER.saturating_sub(quiet).max(unsettled)),
                    held.then_some(persist::RETRY_AFTER),
                ]
                .into_iter()
                .flatten()
                .min();
                core.asleep.workers += 1;
                core = match due {
                    None => shared
                        .work
                        .wait(core)
                        .expect("the core lock is never poisoned"),
                    Some(left) => {
                        shared
                            .work
                            .wait_timeout(core, left.max(std::time::Duration::from_millis(1)))
                            .expect("the core lock is never poisoned")
                            .0
                    }
                };
                core.asleep.workers -= 1;
            }
        }
        for work in batch.drain(..) {
            match work {
                Work::Pull(id) => pull(shared, id),
                Work::Report(alloc, task) => {
                    if let Some(shell) = shared.runner(&alloc) {
                        shell.inspect(|_, host| host.request_exit(task));
                    }
                }
                Work::Exit(alloc, task, exit) => {
                    if let Some(shell) = shared.runner(&alloc) {
                        shell.task_exited(task, exit);
                    }
                }
            }
        }
    }
}

/// One pull: an update for the allocation's runner, or its runner's creation.
fn pull(shared: &Arc<Shared>, id: AllocId) {
    let mut registry = shared
        .runners
        .lock()
        .expect("the registry lock is never poisoned");
    if let Some(shell) = registry.get(&id).cloned() {
        drop(registry);
        shell.pull(|runner, host| fetch_newer(shared, &id, runner, host));
        forget_if_gone(shared, &id, &shell);
        return;
    }
    let (alloc, logged) = {
        let mut core = shared.core();
        let Some(alloc) = core.server.store.alloc_for_client(&id).cloned() else {
            return;
        };
        let logged = core.log_pull(&alloc);
        (alloc, logged)
    };
    let mut commands = Vec::new();
    let index = alloc.alloc_modify_index;
    let runner = AllocRunner::new(
        alloc,
        shared.config.max_kill_timeout_ns,
        unix_now_ns(),
        &mut commands,
    );
    let mut host = DaemonHost::new(&id, shared);
    if let Some((seq, time_ns)) = logged {
        host.note_pull(seq, time_ns, index);
    }
    // Registered under the registry's lock (one runner per allocation); its first commands
    // — launching the tasks — are carried out once that lock is released, so launches run
    // in parallel and never hold up other runners' timers and exits. The shell's own lock
    // is taken before it is registered: an event that reaches it in between (a second pull,
    // a timer) waits for the creation — its log entry, launches and steps come first.
    let shell = RunnerShell::unstarted(runner, host);
    let starting = shell.starting();
    registry.insert(id, shell.clone());
    drop(registry);
    starting.start(commands, Applied::Update);
}
