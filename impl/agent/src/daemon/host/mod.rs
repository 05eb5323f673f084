//! The host of a runner in the daemon: carries out its commands on real processes (the
//! `raw_exec` driver) or scripted ones (`mock_driver`), on the server (services, reports) and
//! on the timer thread, and records each applied event in the event log and the store.
//!
//! A shell's critical section ends at [`Host::settled`](quiesce_core::client::shell::Host::settled), where the host does, in one
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
//!
//! By job: `process` starts, attaches, signals and kills tasks; `flush` carries out
//! the pending work when the shell settles; `steps` is the runner's [`Host`](quiesce_core::client::shell::Host): its
//! commands, the steps' log entries and the timers.

mod flush;
mod process;
mod steps;

use super::timers::Due;
use super::Shared;
use crate::raw_exec;
use quiesce_core::client::driver::{Driver, MockDriver};
use quiesce_core::client::{AllocRunner, ExitResult, Timer};
use quiesce_core::server::structs::AllocId;
use quiesce_core::spec::Task;
use quiesce_core::step::log::LogEntry;
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
    /// server and stored in one critical section of the core (see [`Host::settled`](quiesce_core::client::shell::Host::settled)).
    pending: Pending,
    /// When each running timer is due (Unix ns), stored with the runner's progress.
    deadlines: BTreeMap<Timer, i64>,
    /// Deadlines stored before a restart: a re-armed timer keeps its old deadline, except
    /// `min_healthy_time`'s (see [`DaemonHost::resuming`]).
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
    /// applied on the server; the names shared with the hook's command.
    services: Vec<(bool, String, Arc<[String]>)>,
    /// The records of services already applied on the server, for the settle's commit.
    effects: Vec<super::persist::Write>,
    /// A `Report` command came: the report is sent with the runner's state at the flush.
    report: bool,
    /// The steps' log entries, each with the effects its commands had. A pull's entry
    /// carries the sequence number reserved when its record was read (`Core::log_pull`).
    log: Vec<LogEntry>,
    /// A pull's log entry is among them: the `AllocModifyIndex` it read, stored with it.
    pulled: Option<u64>,
    /// The runner changed: its state is stored. Every command comes after an applied event,
    /// which sets it, so nothing is pending without it.
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
            alloc: alloc.into(),
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

    /// When `timer`, armed now, is due (Unix ns).
    pub(crate) fn deadline(&self, timer: Timer) -> Option<i64> {
        self.deadlines.get(&timer).copied()
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

    /// A host for a restored runner: the timers it re-arms keep their stored deadlines,
    /// except the `min_healthy_time` timer, which starts again when the runner watches
    /// anew (`AllocRunner::rearm_health`; Nomad's restored health hook makes a new
    /// tracker). The `healthy_deadline` keeps its deadline, unlike Nomad's
    /// (ARCHITECTURE.md, "Deliberate differences in behaviour").
    pub fn resuming(mut self, deadlines: Vec<(Timer, i64)>) -> Self {
        self.resumed = deadlines
            .into_iter()
            .filter(|(timer, _)| *timer != Timer::Healthy)
            .collect();
        self
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
