//! The host of a runner in the daemon: carries out its commands on real processes (the
//! `raw_exec` driver) or scripted ones (`mock_driver`), on the server (services, reports) and
//! on the timer thread, and records each applied event in the event log and the store.
//!
//! A shell's critical section ends at [`Host::settled`], where the host does, in one
//! critical section of the core: the service changes made visible on the server; one batch
//! with their records, the steps' log entries (a pull's under the number reserved when its
//! record was read), the pulled index, the report and the runner's state after the steps.
//! So the stored progress is never ahead of its effects or its log entries, and a crash
//! keeps both or neither. Only then, the deregistrations visible, do the kill requests go to
//! the supervisors.
//!
//! A crash can lose that batch after a signal went out. That is safe because the stop
//! itself is durable (an API write's plan): the restored runner applies the stored record
//! before its reattached tasks' exits, redoes the pre-kill steps, and sees the task's exit
//! as the end of a kill. Its supervisor's hello says which kill signals it delivered and
//! when: the redone step sends nothing, logs its `Signal` effect `already_delivered`, and
//! runs the kill timeout from the delivery. The other way round, a step stored whose
//! requests never went out, the restored runner sends the requests of every task stored as
//! signalled again, and the supervisor refuses what it has carried out.
//!
//! A task is launched only from durable state. `StartTask` waits in the host's pending
//! work; the settle commits its batch with a disk sync (shared by every batch committed
//! with it; the core's lock is not held while it waits), and only then is the supervisor
//! spawned and the server told the task runs. So after a crash every process the agent
//! started belongs to a stored runner, which reattaches it, or stops it if its allocation
//! was stopped meanwhile. A run counts as launched once its supervisor has created
//! `exit.json`, before it forks the task. Launches run outside the registry's lock, so the
//! client workers launch allocations in parallel.

use super::timers::Due;
use super::{unix_now_ns, Shared};
use crate::raw_exec::{self, Reattach};
use quiesce_core::client::driver::{Driver, MockDriver};
use quiesce_core::client::shell::{Applied, Host};
use quiesce_core::client::{AllocRunner, Command, ExitResult, RunnerStep, Timer};
use quiesce_core::server::structs::AllocId;
use quiesce_core::server::ClientReport;
use quiesce_core::spec::{Task, TaskRole};
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::{Effect, Step};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The drivers a task may name.
pub const DRIVERS: [&str; 2] = ["raw_exec", "mock_driver"];

#[derive(Clone, Debug)]
enum Handle {
    /// A raw_exec task: signalled through its supervisor, which had delivered `delivered`
    /// when this host attached to it (a restored runner's task may have had its kill signal
    /// before the crash lost the record of it).
    Process {
        signaller: Arc<raw_exec::Signaller>,
        delivered: Vec<raw_exec::Delivery>,
        /// The task's pid, the leader of its process group.
        pid: i32,
        /// Its supervisor carries out user signals (one started by an older agent does not).
        user_signals: bool,
    },
    Mock(u64),
}

pub struct DaemonHost {
    alloc: AllocId,
    shared: Weak<Shared>,
    tasks: Vec<Option<Handle>>,
    mock: MockDriver,
    /// What the runner did since the last [`DaemonHost::flush`], to be carried out on the
    /// server and stored in one critical section of the core (see [`Host::settled`]).
    pending: Pending,
    /// When each running timer is due (Unix ns), stored with the runner's progress.
    deadlines: BTreeMap<Timer, i64>,
    /// Deadlines stored before a restart: a re-armed timer keeps its old deadline.
    resumed: BTreeMap<Timer, i64>,
    /// Tasks whose current kill signal their supervisor had delivered before this host
    /// attached (a runner restored from progress stored before the signal): when (Unix ns).
    /// The kill timeout runs from then, not from the step taken again.
    signalled_before: BTreeMap<usize, i64>,
    /// The pull being applied, as `fetch` noted it: its reserved sequence number and time,
    /// and the `AllocModifyIndex` it read (see [`DaemonHost::note_pull`]).
    pull: Option<(u64, i64, u64)>,
    /// The restart being applied: its reserved sequence number and time.
    restart: Option<(u64, i64)>,
    /// The commands carried out now belong to the last entry of `pending.log` (a step's),
    /// or to no step: a restore's (reattaching is not a launch) or a forced exit's (the
    /// model merges it into its kill timeout; its commands are idempotent deregistrations).
    recording: bool,
    /// The commands carried out now are a restore's.
    restoring: bool,
}

/// The server's side of a runner's steps, gathered while the runner's lock is held and
/// carried out when the shell settles, in one critical section of the core: hooks' effects
/// (service registrations), the report, the event-log entries, and the runner's state,
/// committed in one transaction. Before a command that acts outside the agent (a signal, a
/// kill, a launch) only the hooks' effects are made visible on the server
/// ([`DaemonHost::apply_services`]), their records held for the settle's commit. A flagged
/// stop's pull so takes three critical sections of the core (the read of the record, the
/// deregistration before the signal, the settle), where a section per event, step and hook
/// took six.
#[derive(Default)]
struct Pending {
    /// Services to register (`true`) or deregister, by owner (`""` for the group), not yet
    /// applied on the server.
    services: Vec<(bool, String, Vec<String>)>,
    /// The records of services already applied on the server, for the settle's commit.
    effects: Vec<super::persist::Write>,
    /// A `Report` command came: the report is sent with the runner's state at the flush.
    report: bool,
    /// The steps' log entries, each with the effects its commands had. A pull's entry
    /// carries the sequence number reserved when its record was read (`Core::log_pull`).
    log: Vec<LogEntry>,
    /// A pull's log entry is among them: the `AllocModifyIndex` it read, stored with it.
    pulled: Option<u64>,
    /// The runner changed: its state is stored.
    progress: bool,
    /// Control connections of exited tasks, handed to the client to close.
    closing: Vec<super::Connection>,
    /// Kill signals and SIGKILLs for the supervisors, sent in order once the settle's
    /// critical section has made the services' deregistration visible.
    /// Each with its task's index.
    requests: Vec<(usize, Arc<raw_exec::Signaller>, raw_exec::Request)>,
    /// Tasks whose exit was applied: no kill of theirs is in flight any more.
    exited: Vec<usize>,
    /// raw_exec tasks to launch (index, name, what), once the settle's commit — the
    /// runner's state saying they run — is durable: a crash at any moment after a task's
    /// process exists then finds it stored as running, and reattaches it (issue 24: a task
    /// launched less than 20 ms before a `kill -9` was orphaned, its start never stored).
    launches: Vec<(usize, String, raw_exec::Launch)>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.effects.is_empty()
            && !self.report
            && self.log.is_empty()
            && !self.progress
            && self.closing.is_empty()
            && self.requests.is_empty()
            && self.exited.is_empty()
            && self.launches.is_empty()
    }
}

fn exited(exit_code: i32, signal: Option<i32>) -> ExitResult {
    ExitResult {
        exit_code,
        signal,
        failure: None,
    }
}

fn lost(why: String) -> raw_exec::ExitRecord {
    raw_exec::ExitRecord::failed(-1, why)
}

impl DaemonHost {
    pub fn new(alloc: &str, shared: &Arc<Shared>) -> Self {
        DaemonHost {
            alloc: alloc.to_string(),
            shared: Arc::downgrade(shared),
            tasks: Vec::new(),
            mock: MockDriver::default(),
            pending: Pending::default(),
            deadlines: BTreeMap::new(),
            resumed: BTreeMap::new(),
            signalled_before: BTreeMap::new(),
            pull: None,
            restart: None,
            recording: false,
            restoring: false,
        }
    }

    /// A pull read the allocation's record at `index` and reserved the log sequence number
    /// `seq` (at `time_ns`) for its `ClientSync` entry: the entry is made when the runner
    /// applies the record, with the effects the update has, and stored with them.
    pub fn note_pull(&mut self, seq: u64, time_ns: i64, index: u64) {
        self.pull = Some((seq, time_ns, index));
    }

    /// A restart was admitted with the log sequence number `seq` (at `time_ns`) reserved
    /// for its `RestartAlloc` entry, under the core's lock (see [`DaemonHost::note_pull`]).
    pub fn note_restart(&mut self, seq: u64, time_ns: i64) {
        self.restart = Some((seq, time_ns));
    }

    /// A host for a restored runner: the timers it re-arms keep the deadlines they had.
    pub fn resuming(mut self, deadlines: Vec<(Timer, i64)>) -> Self {
        self.resumed = deadlines.into_iter().collect();
        self
    }

    // invariant: kill_timeout_respected
    fn start_timer(&mut self, timer: Timer, after_ns: i64) {
        let now = unix_now_ns();
        let signalled_before = match timer {
            Timer::KillTimeout(ix) => self.signalled_before.remove(&ix),
            Timer::GroupDelay | Timer::TaskDelay(_) | Timer::RestartDelay(_) => None,
        };
        let due = match (self.resumed.remove(&timer), signalled_before) {
            (Some(due), _) => due,
            // kill_timeout_respected: the timeout runs from the signal the task really got.
            (None, Some(signalled)) => signalled + after_ns,
            (None, None) => now + after_ns,
        };
        self.deadlines.insert(timer, due);
        self.schedule(due - now, Due::Timer(timer));
    }

    /// The directory of one task of this allocation.
    pub fn task_dir(data_dir: &std::path::Path, alloc: &str, task: &str) -> PathBuf {
        data_dir.join("alloc").join(alloc).join(task)
    }

    /// A mock task's scripted exit, if it is due by `now`.
    pub fn mock_exit_due(&self, task: usize, now: i64) -> Option<ExitResult> {
        match self.tasks.get(task).cloned().flatten() {
            Some(Handle::Mock(handle)) => self
                .mock
                .next_exit(&handle)
                .filter(|(at, _)| *at <= now)
                .map(|(_, exit)| exit),
            _ => None,
        }
    }

    fn set_handle(&mut self, task: usize, handle: Handle) {
        if self.tasks.len() <= task {
            self.tasks.resize(task + 1, None);
        }
        self.tasks[task] = Some(handle);
    }

    fn schedule(&self, after_ns: i64, due: Due) {
        if let Some(shared) = self.shared.upgrade() {
            let after = Duration::from_nanos(after_ns.max(0) as u64);
            shared.timers.schedule(after, &self.alloc, due);
        }
    }

    /// The next check of a mock task's scripted exit.
    fn schedule_mock_check(&self, task: usize, now: i64) {
        if let Some(Handle::Mock(handle)) = self.tasks.get(task).cloned().flatten() {
            if let Some((at, _)) = self.mock.next_exit(&handle) {
                self.schedule(at - now, Due::MockCheck(task));
            }
        }
    }

    fn start_task(&mut self, ix: usize, runner: &AllocRunner) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let Some(task) = task_spec(runner, ix) else {
            return;
        };
        let now = unix_now_ns();
        if task.driver == "mock_driver" {
            match self.mock.start(task, now) {
                Ok(handle) => {
                    self.set_handle(ix, Handle::Mock(handle));
                    self.schedule_mock_check(ix, now);
                }
                Err(error) => self.failed_to_start(ix, &error.to_string()),
            }
            return;
        }
        let dir = DaemonHost::task_dir(&shared.config.data_dir, &self.alloc, &task.name);
        // Each run (the first, and one per restart) has its own supervisor state.
        let run = runner
            .tasks
            .get(ix)
            .map_or(0, |t| u32::try_from(t.state.restarts).unwrap_or(u32::MAX));
        // A run was launched before if its supervisor started: it creates its `exit.json`
        // (empty) before it forks the task. The task's logs, or a run's directory, made
        // before a crash cut the launch short, are no launch: nothing ran.
        let found = if run == 0 {
            Ok(dir.clone())
        } else {
            raw_exec::find_run_dir(&dir, run).and_then(|found| match found {
                Some(found) => Ok(found),
                None => raw_exec::new_run_dir(&dir, run),
            })
        };
        let state = match found {
            Ok(found) => found,
            Err(error) => {
                self.failed_to_start(ix, &format!("finding the run's directory: {error}"));
                return;
            }
        };
        let launched_before = state.join(raw_exec::EXIT_FILE).exists();
        // A run started before a restart of the agent (or before a crash lost the runner's
        // progress) is reattached, never started twice.
        let attached = match raw_exec::reattach(&state) {
            Ok(Reattach::Running(attached)) => Ok(Ok(attached)),
            Ok(Reattach::Exited(record)) => Ok(Err(record)),
            // Launched before, yet neither supervisor nor exit status is left.
            Ok(Reattach::Lost) if launched_before => {
                Ok(Err(lost("the task's supervisor is gone".into())))
            }
            Ok(Reattach::Lost) => {
                let mut launch = super::launch::launch_of(task, runner, &dir, &shared.config);
                launch.state = (run > 0).then(|| state.clone());
                if self.restoring {
                    // The state that says it runs was read from the store: launched now
                    // (the restore may go on to stop it, in this critical section).
                    self.launch(ix, &task.name, &launch);
                } else {
                    // Launched once the runner's state saying so is durable (see `flush`).
                    self.pending.launches.push((ix, task.name.clone(), launch));
                }
                return;
            }
            // Never launched again on a doubt: a task must not run twice.
            Err(error) => Ok(Err(lost(format!("reattaching to the task: {error}")))),
        };
        self.attach(ix, &task.name, attached);
    }

    /// Carries out a launch, now: the runner's state that says the task runs is durable.
    fn launch(&mut self, ix: usize, name: &str, launch: &raw_exec::Launch) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let args: Vec<&str> = shared
            .config
            .supervisor_args
            .iter()
            .map(String::as_str)
            .collect();
        let launched = raw_exec::launch(&shared.config.supervisor, &args, launch);
        self.attach(ix, name, launched);
    }

    /// Takes a launched or reattached task's handle (or its exit, if it has ended or could
    /// not start).
    fn attach(
        &mut self,
        ix: usize,
        name: &str,
        attached: std::io::Result<Result<raw_exec::Attached, raw_exec::ExitRecord>>,
    ) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        match attached {
            Ok(Ok(attached)) => {
                match attached.signaller() {
                    Ok(signaller) => self.set_handle(
                        ix,
                        Handle::Process {
                            signaller: Arc::new(signaller),
                            delivered: attached.delivered.clone(),
                            pid: attached.pid,
                            user_signals: attached.user_signals,
                        },
                    ),
                    Err(error) => {
                        // A task that cannot be signalled cannot be stopped: it is ended now
                        // (its supervisor has not reaped it, so the pid is still its own),
                        // and the exit watcher reports the exit.
                        crate::daemon::say!(
                            "allocation {} task {}: no control connection, \
                             killing it: {error}",
                            self.alloc,
                            name
                        );
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(attached.pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                if let Err((error, attached)) =
                    shared.exits.watch(attached, (self.alloc.clone(), ix))
                {
                    // Not watchable (out of descriptors): a thread of its own waits instead.
                    crate::daemon::say!(
                        "allocation {} task {ix}: watching for its exit: {error}",
                        self.alloc
                    );
                    let weak = self.shared.clone();
                    let alloc = self.alloc.clone();
                    super::spawn_named("waiter", move || {
                        let (record, reaper) = attached.wait();
                        if let Some(error) = &record.error {
                            crate::daemon::say!("allocation {alloc} task {ix}: {error}");
                        }
                        if let Some(shell) = weak.upgrade().and_then(|shared| shared.runner(&alloc))
                        {
                            shell.task_exited(ix, record.result());
                        }
                        reaper.reap();
                    });
                }
            }
            Ok(Err(record)) => {
                if let Some(error) = &record.error {
                    crate::daemon::say!("allocation {} task {}: {error}", self.alloc, name);
                }
                self.schedule(0, Due::Exited(ix, record.result().into()));
            }
            Err(error) => self.failed_to_start(ix, &error.to_string()),
        }
    }

    fn failed_to_start(&mut self, ix: usize, error: &str) {
        crate::daemon::say!(
            "allocation {} task {ix} failed to start: {error}",
            self.alloc
        );
        let mut exit = exited(-1, None);
        exit.failure = Some(error.to_string());
        self.schedule(0, Due::Exited(ix, exit.into()));
    }

    /// The kill signal of kill number `kill`: asked of the supervisor (when the shell
    /// settles), which delivers it at most once — or, if it had delivered it before this
    /// host attached, not asked again. Returns whether it had been delivered so.
    fn signal(&mut self, ix: usize, signal: &str, kill: u32, timeout_ns: i64) -> bool {
        self.launch_pending_now(ix);
        let now = unix_now_ns();
        match self.tasks.get(ix).cloned().flatten() {
            Some(Handle::Process {
                signaller,
                delivered,
                ..
            }) => {
                let Some(number) = raw_exec::signal_number(signal) else {
                    // Jobspec validation admits only signals this driver knows.
                    crate::daemon::say!(
                        "allocation {} task {ix}: unknown signal {signal:?}",
                        self.alloc
                    );
                    return false;
                };
                let before = delivered.iter().find(|d| d.kill == kill && !d.forced);
                if let Some(before) = before {
                    self.signalled_before.insert(ix, before.unix_ns);
                    return true;
                }
                let request = raw_exec::Request::Kill {
                    kill,
                    signal: number,
                    timeout_ns,
                };
                self.pending.requests.push((ix, signaller, request));
            }
            Some(Handle::Mock(handle)) => {
                let _ = self.mock.signal(&handle, signal, now);
                self.schedule_mock_check(ix, now);
            }
            None => {}
        }
        false
    }

    /// SIGKILL, asked of the supervisor when the shell settles.
    fn force_kill(&mut self, ix: usize, kill: u32, runner: &AllocRunner) {
        self.launch_pending_now(ix);
        let now = unix_now_ns();
        match self.tasks.get(ix).cloned().flatten() {
            Some(Handle::Process { signaller, .. }) => {
                let task = runner.tasks.get(ix);
                let request = raw_exec::Request::Force {
                    kill,
                    signal: task
                        .and_then(|t| raw_exec::signal_number(&t.kill_signal))
                        .unwrap_or(libc::SIGINT),
                    timeout_ns: task.map_or(0, |t| t.kill_timeout_ns),
                };
                self.pending.requests.push((ix, signaller, request));
            }
            Some(Handle::Mock(handle)) => {
                let _ = self.mock.force_kill(&handle, now);
                self.schedule_mock_check(ix, now);
            }
            None => {}
        }
    }

    /// A user's signal (`alloc signal`) to task `ix`'s process group, sent now through its
    /// supervisor, which delivers it once (or not at all, should the task have exited
    /// first). Refused, as Nomad's "Task not running", when the task has no process.
    pub fn user_signal(&self, ix: usize, signal: i32) -> Result<(), String> {
        match self.tasks.get(ix) {
            Some(Some(Handle::Process {
                user_signals: false,
                ..
            })) => Err(
                "its supervisor was started by an older agent, which cannot send a \
                        user's signal: restart the task to signal it"
                    .to_string(),
            ),
            Some(Some(Handle::Process { signaller, .. })) => signaller
                .send(raw_exec::Request::Signal { signal })
                .map_err(|e| format!("sending the signal to the task's supervisor: {e}")),
            // A mock task takes a signal and does nothing with it, as Nomad's mock driver.
            Some(Some(Handle::Mock(_))) => Ok(()),
            _ => Err("Task not running".to_string()),
        }
    }

    /// The pid leading task `ix`'s process group, while it has a process.
    pub fn task_pid(&self, ix: usize) -> Option<i32> {
        match self.tasks.get(ix) {
            Some(Some(Handle::Process { pid, .. })) => Some(*pid),
            _ => None,
        }
    }

    /// Asks the supervisor of a task whose process has died for its exit status.
    pub fn request_exit(&self, ix: usize) {
        if let Some(Some(Handle::Process { signaller, .. })) = self.tasks.get(ix) {
            if let Err(error) = signaller.send(raw_exec::Request::Report) {
                crate::daemon::say!(
                    "allocation {} task {ix}: asking for the exit: {error}",
                    self.alloc
                );
            }
        }
    }

    fn services(&mut self, runner: &AllocRunner, task: Option<usize>, names: &[String], on: bool) {
        if names.is_empty() {
            return;
        }
        let owner = task.map_or(String::new(), |ix| runner.tasks[ix].name.clone());
        self.pending.services.push((on, owner, names.to_vec()));
    }

    /// Makes the pending services' changes visible on the server now, before a launch, and
    /// holds their records for the settle's commit, which stores them with the runner's
    /// progress and the steps' log entries.
    fn apply_services(&mut self) {
        if self.pending.services.is_empty() {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut core = shared.core();
        change_services(
            &mut core,
            &self.alloc,
            &std::mem::take(&mut self.pending.services),
        );
        let effects = core.take_writes();
        self.pending.effects.extend(effects);
        shared.notify(&core);
    }

    // invariant: prestop_hooks_always_run
    /// Carries out what is pending on the server, in one critical section of the core when
    /// the shell settles: the services' changes not yet applied, the report, the log
    /// entries, and one commit holding them, the services' records and the runner's state.
    /// Then, the deregistrations visible, the kill signals and SIGKILLs go to the
    /// supervisors (prestop_hooks_always_run: a flagged stop's pull so takes two critical
    /// sections of the core, the read of the record and this one).
    fn flush(&mut self, runner: &AllocRunner) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        // Built before the core is locked: the runner is ours (its shell's lock is held).
        let stored = pending.progress.then(|| {
            let deadlines: Vec<_> = self.deadlines.iter().map(|(t, at)| (*t, *at)).collect();
            let encoded = super::persist::StoredRunner::encode(runner, &deadlines);
            (self.alloc.clone(), encoded)
        });
        let report = pending.report.then(|| ClientReport {
            client_status: runner.alloc.client_status,
            client_description: runner.alloc.client_description.clone(),
            task_states: runner.task_states(),
        });
        let mut writes = pending.effects;
        if let Some(index) = pending.pulled {
            let pulled = super::persist::Payload::Pulled(self.alloc.clone(), index);
            writes.push((
                super::persist::Table::Pulls,
                self.alloc.clone(),
                Some(pulled),
            ));
        }
        let mut core = shared.core();
        change_services(&mut core, &self.alloc, &pending.services);
        // The server hears that a task runs once its process does: a launch's report waits
        // for the launch.
        let mut report = report;
        if pending.launches.is_empty() {
            if let Some(report) = report.take() {
                core.server.client_report(&self.alloc, report);
            }
        }
        for entry in pending.log {
            core.log(entry);
        }
        core.closing.extend(pending.closing);
        if !pending.requests.is_empty() {
            core.last_kill = std::time::Instant::now();
            for (ix, ..) in &pending.requests {
                let task = (self.alloc.clone(), *ix);
                if !core.dead.contains(&task) {
                    core.kills_in_flight.insert(task);
                }
            }
        }
        for ix in &pending.exited {
            let task = (self.alloc.clone(), *ix);
            core.kills_in_flight.remove(&task);
            core.dead.remove(&task);
        }
        // A launch waits for its batch to be durable (a disk sync, shared with every batch
        // committed with it), outside the core's lock; the rest is stored within 20 ms.
        let launching = if pending.launches.is_empty() {
            core.commit(stored, writes);
            None
        } else {
            Some(core.commit_durable(stored, writes))
        };
        shared.notify(&core);
        drop(core);
        for (_, signaller, request) in pending.requests {
            if let Err(error) = signaller.send(request) {
                crate::daemon::say!("allocation {}: {request:?}: {error}", self.alloc);
            }
        }
        if let Some((committer, ticket)) = launching {
            let stored = committer.wait(ticket);
            for (ix, name, launch) in pending.launches {
                match &stored {
                    Ok(()) => self.launch(ix, &name, &launch),
                    // Not launched: a crash could lose the record of it.
                    Err(error) => self.failed_to_start(ix, &format!("storing its launch: {error}")),
                }
            }
            if let Some(report) = report {
                let mut core = shared.core();
                core.server.client_report(&self.alloc, report);
                core.commit(None, Vec::new());
                shared.notify(&core);
            }
        }
    }

    /// A command for a task whose launch waits for the settle: launched now, before its
    /// batch is durable (the runner never asks this: a task's first commands after its
    /// start come in later events).
    fn launch_pending_now(&mut self, ix: usize) {
        let Some(at) = self
            .pending
            .launches
            .iter()
            .position(|(task, ..)| *task == ix)
        else {
            return;
        };
        debug_assert!(
            false,
            "a command for task {ix} before its launch was stored"
        );
        crate::daemon::say!(
            "bug: allocation {} task {ix}: launched before its launch was stored",
            self.alloc
        );
        let (ix, name, launch) = self.pending.launches.remove(at);
        self.launch(ix, &name, &launch);
    }
}

/// Registers (`true`) or deregisters an allocation's services, by owner (`""` for the
/// group), on the server.
fn change_services(core: &mut super::Core, alloc: &str, services: &[(bool, String, Vec<String>)]) {
    for (on, owner, names) in services {
        if *on {
            core.server.register_services(alloc, owner, names);
        } else {
            core.server.deregister_services(alloc, owner, names);
        }
    }
}

fn task_spec(runner: &AllocRunner, ix: usize) -> Option<&Task> {
    runner
        .alloc
        .job
        .task_groups
        .iter()
        .find(|group| group.name == runner.alloc.task_group)?
        .tasks
        .get(ix)
}

impl Host for DaemonHost {
    fn execute(&mut self, command: &Command, runner: &AllocRunner) {
        if let Some(effect) = Effect::of(command, runner) {
            match self.pending.log.last_mut().filter(|_| self.recording) {
                Some(entry) => entry.effects.push(effect),
                // A restore's reattachment and the kill requests it sends again (the steps
                // that did them are logged already), or a forced exit's stop hooks.
                None => {
                    let expected = match effect {
                        Effect::Launch { .. } | Effect::Signal { .. } | Effect::SigKill { .. } => {
                            self.restoring
                        }
                        Effect::Deregister { .. } => true,
                        Effect::Register { .. } => false,
                    };
                    if !expected {
                        crate::daemon::say!(
                            "bug: allocation {}: an effect outside any step: \
                             {effect:?}",
                            self.alloc
                        );
                    }
                }
            }
        }
        match command {
            Command::StartTask { task } => {
                self.apply_services();
                self.start_task(*task, runner)
            }
            Command::RegisterServices { task, names } => self.services(runner, *task, names, true),
            Command::DeregisterServices { task, names } => {
                self.services(runner, *task, names, false)
            }
            Command::StartTimer { timer, after_ns } => self.start_timer(*timer, *after_ns),
            // The shell refuses a timer it no longer has armed.
            Command::CancelTimer { timer } => {
                self.deadlines.remove(timer);
            }
            // Sent when the shell settles, after the deregistration is visible and the step
            // stored (not durably: a crash can lose the step after the signal went out,
            // which is safe because the stop it follows is durable — an API write's plan,
            // see `Core::process_evals` — a restored runner applies it before its tasks'
            // exits, and the supervisor does not deliver the signal twice).
            Command::Signal { task, signal, kill } => {
                let timeout_ns = runner.tasks.get(*task).map_or(0, |t| t.kill_timeout_ns);
                if self.signal(*task, signal, *kill, timeout_ns) {
                    let effect = self
                        .pending
                        .log
                        .last_mut()
                        .and_then(|e| e.effects.last_mut());
                    if let Some(Effect::Signal {
                        already_delivered, ..
                    }) = effect.filter(|_| self.recording)
                    {
                        *already_delivered = true;
                    }
                }
            }
            Command::ForceKill { task, kill } => self.force_kill(*task, *kill, runner),
            Command::Report => self.pending.report = true,
        }
    }

    fn settled(&mut self, runner: &AllocRunner) {
        // Deadlines not re-armed by the critical section that restored the runner are stale.
        self.resumed.clear();
        self.flush(runner);
    }

    fn now(&self) -> i64 {
        unix_now_ns()
    }

    /// Notes the step's log entry (in the step alphabet's terms, with the effects of the
    /// commands that follow) and that the runner's state is to be stored with whatever the
    /// step changed on the server (at the next flush).
    fn applied(&mut self, runner: &AllocRunner, what: Applied) {
        let alloc = || self.alloc.clone();
        let task = |ix: usize| {
            runner
                .tasks
                .get(ix)
                .map_or_else(String::new, |t| t.name.clone())
        };
        let step = match what {
            // Read (and its sequence number reserved) by the client, under the core lock.
            Applied::Update => self.pull.take().map(|(seq, time_ns, index)| {
                self.pending.pulled = Some(index);
                (Step::ClientSync { alloc: alloc() }, Some((seq, time_ns)))
            }),
            Applied::Step(RunnerStep::GroupPreKill) => {
                Some((Step::GroupPreKill { alloc: alloc() }, None))
            }
            Applied::Step(RunnerStep::TaskPreKill(ix)) => Some((
                Step::TaskPreKill {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Step(RunnerStep::PoststopStart(ix)) => Some((
                Step::PoststopStart {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Step(RunnerStep::RestartDecision(ix)) => Some((
                Step::RestartDecision {
                    alloc: alloc(),
                    task: task(ix),
                    unrecoverable: runner.tasks.get(ix).is_some_and(|t| t.unrecoverable()),
                },
                None,
            )),
            Applied::Timer(Timer::RestartDelay(ix)) => Some((
                Step::RestartDelayElapsed {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Timer(Timer::GroupDelay) => {
                Some((Step::GroupDelayElapsed { alloc: alloc() }, None))
            }
            Applied::Timer(Timer::TaskDelay(ix)) => Some((
                Step::TaskDelayElapsed {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Timer(Timer::KillTimeout(ix)) => Some((
                Step::KillTimeout {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Restart {
                task: target,
                no_shutdown_delay,
            } => Some((
                Step::RestartAlloc {
                    alloc: alloc(),
                    task: target.map(task),
                    no_shutdown_delay,
                },
                self.restart.take(),
            )),
            // The model merges a stop's forced exit into its kill timeout (a restart's is a
            // step: the task runs again).
            Applied::Exit {
                forced: true,
                restart: false,
                ..
            }
            | Applied::Restored => None,
            Applied::Exit { task: ix, .. } => {
                let poststop = runner
                    .tasks
                    .get(ix)
                    .is_some_and(|t| t.role == TaskRole::Poststop);
                let (alloc, task) = (alloc(), task(ix));
                Some((
                    if poststop {
                        Step::PoststopExit { alloc, task }
                    } else {
                        Step::TaskExit { alloc, task }
                    },
                    None,
                ))
            }
        };
        match what {
            Applied::Timer(timer) => {
                self.deadlines.remove(&timer);
            }
            // The control connection of an exited task goes (one socket per task otherwise),
            // with the client's other closed connections, once the kill path is quiet.
            Applied::Exit { task, .. } => {
                self.pending.exited.push(task);
                if let Some(Handle::Process { signaller, .. }) =
                    self.tasks.get_mut(task).and_then(Option::take)
                {
                    self.pending.closing.push(Box::new(signaller));
                }
            }
            _ => {}
        }
        self.recording = step.is_some();
        self.restoring = what == Applied::Restored;
        if let Some((step, reserved)) = step {
            let job = Some(runner.alloc.job_id.clone());
            let group = Some(runner.alloc.task_group.clone());
            let mut entry = LogEntry::step(step, job, group);
            if let Some((seq, time_ns)) = reserved {
                entry.seq = seq;
                entry.time_ns = time_ns;
            }
            self.pending.log.push(entry);
        }
        self.pending.progress = true;
    }
}
