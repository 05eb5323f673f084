//! The reference daemon (`quiesce agent -dev`): the server and one client in one process,
//! over real processes and a durable store.
//!
//! Threads, and the one lock order they keep (registry → a runner's shell → core):
//! * HTTP handlers (`http`) write to the server under the core lock, process the
//!   evaluations the write created, and commit both to the store before answering.
//! * The scheduler thread processes the evaluations no API write processed (those pending
//!   at start-up).
//! * The client workers pull changed allocations and hand each to its runner's shell
//!   (creating the runner on the first pull), and apply the task exits that the exit
//!   watcher thread (one, for every raw_exec task) queues for them.
//! * The timer thread fires runner timers. Timers and exits find the runner through the
//!   registry.
//! * A runner has no thread of its own: whichever of these threads applies an event to its
//!   shell takes the internal steps the event made ready (`client::shell`). A flagged stop's
//!   client worker deregisters the services and sends the signal itself.
//!
//! The runners' hosts ([`host::DaemonHost`]) carry out commands: start tasks under their
//! supervisors, signal process groups, (de)register services and report to the server, and
//! store the runner's progress in the same transaction as a hook's effect.

pub mod checks;
pub mod gc;
pub mod host;
pub mod http;
pub mod keyring;
mod launch;
mod node;
pub mod peers;
pub mod persist;
mod progress;
mod start;
pub mod timers;
mod workers;

pub use node::{announce_ready, hostname, FirstHeartbeat};
pub use start::spawn;
use workers::*;

use crate::raw_exec::{Event, ExitWatcher};
use host::DaemonHost;
use persist::{Batch, Committer, Payload, Persist, StoreError, Table, Write};
use quiesce_core::client::shell::{Applied, RunnerShell};
use quiesce_core::client::{
    AllocRunner, Command, ExitResult, RunnerPhase, DEFAULT_MAX_KILL_TIMEOUT_NS,
};
use quiesce_core::server::store::{Record, StateStore};
use quiesce_core::server::structs::{AllocId, NodeId};
use quiesce_core::server::Server;
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::Step;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use timers::{Due, Timers};

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    /// The agent's name: its member name and its node's (default: the host's name).
    pub name: String,
    pub region: String,
    pub datacenter: String,
    /// Whether the agent runs a client (`-dev`, or `client.enabled`): without one it is a
    /// server only, whose evaluations block for want of a node.
    pub client_enabled: bool,
    pub first_heartbeat: node::FirstHeartbeat,
    /// The port other agents join this one on (`/v1/agent/join`), if any.
    pub serf_port: Option<u16>,
    /// The agent's cgroup (v2), where each task's is made (`None`: none; see
    /// `raw_exec::cgroup`). Found at start.
    pub cgroups: Option<PathBuf>,
    /// The peers' shared key (Nomad's `server.encrypt`): with it, a peer is taken only if
    /// it proves it holds the same key (see `peers`).
    pub peer_key: Option<Vec<u8>>,
    pub max_kill_timeout_ns: i64,
    /// The program that runs task supervisors (this binary) and the arguments that make it
    /// one.
    pub supervisor: PathBuf,
    pub supervisor_args: Vec<String>,
    /// Whether requests are checked against ACL tokens (`-acl-enabled`; off by default, as
    /// in Nomad's dev agent).
    pub acl_enabled: bool,
    /// The HTTP layer's timeouts and connection cap (the defaults are documented limits;
    /// tests shorten the timeouts).
    pub http: http::HttpLimits,
    /// What is collected when (Nomad's defaults unless configured).
    pub gc: gc::GcConfig,
}

impl AgentConfig {
    pub fn new(data_dir: PathBuf, bind: SocketAddr, supervisor: PathBuf) -> Self {
        AgentConfig {
            data_dir,
            bind,
            name: node::hostname(),
            region: "global".into(),
            datacenter: "dc1".into(),
            client_enabled: true,
            first_heartbeat: node::FirstHeartbeat::NextWholeSecond,
            serf_port: None,
            peer_key: None,
            cgroups: None,
            max_kill_timeout_ns: DEFAULT_MAX_KILL_TIMEOUT_NS,
            supervisor,
            supervisor_args: vec!["supervise".to_string()],
            acl_enabled: false,
            http: http::HttpLimits::default(),
            gc: gc::GcConfig::default(),
        }
    }
}

/// Writes one line to the agent's stderr, after `quiesce agent: `. Never panics:
/// `eprintln!` does when stderr cannot be written (a log file on a full disk), and the
/// thread that said it — the committer, say — would die with it.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::daemon::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

pub(crate) fn say_line(line: std::fmt::Arguments) {
    use std::io::Write;
    // What a line quotes may come from a request or a peer: its control characters (a
    // newline that forges a line, a terminal escape) are written as escapes.
    let line = quiesce_core::text::shown(&line.to_string());
    // One write for the whole line: stderr is unbuffered, and a line written in pieces is
    // cut into by whatever else shares the stream (a test harness reading both).
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("quiesce agent: {line}\n").as_bytes());
}

pub use quiesce_core::gotime::unix_now_ns;

/// The server and what travels with its writes, under one lock.
pub struct Core {
    pub server: Server,
    /// ACL tokens and policies (checked only with `AgentConfig::acl_enabled`).
    pub acl: crate::acl::AclStore,
    committer: Committer,
    log_seq: u64,
    pending_log: Vec<LogEntry>,
    /// Allocations of this node whose update the client has not pulled yet.
    pending_pulls: BTreeSet<AllocId>,
    /// Pulls an API write made, and the ticket of its batch: such a pull waits until that
    /// batch is durable (always so by the time a worker looks, unless the commit failed:
    /// a plan the store does not hold is not acted on, as a crash could lose it after a
    /// task felt it).
    pulls_after: BTreeMap<AllocId, u64>,
    /// Pulls noted by `take_writes` since the last submit.
    fresh_pulls: Vec<AllocId>,
    /// Task exits the exit watcher reported and the client workers have not applied yet.
    pending_exits: std::collections::VecDeque<(AllocId, usize, ExitResult)>,
    /// Tasks whose process has died and whose exit status the client has not asked their
    /// supervisors for yet: it asks once no pull is waiting (the kill path first; a
    /// supervisor reaps and records its task only when asked, see `raw_exec::Request`).
    pending_deaths: Vec<(AllocId, usize, std::time::Instant)>,
    /// Threads asleep on the agent's condition variables: a write wakes only those that
    /// are (a wake-up is a system call, and most writes have nobody to wake).
    asleep: Asleep,
    /// The `AllocModifyIndex` of each allocation's last pull that the event log records (or
    /// will: its entry is stored with the runner's progress after the pull, by its host).
    logged_pulls: BTreeMap<AllocId, u64>,
    node: NodeId,
    /// Control connections of exited tasks, closed by the client workers once no pull has
    /// been taken for [`CLOSE_AFTER`]: a supervisor exits when its connections close, and
    /// its exit — tearing down a process — then comes after a stop's kill path rather than
    /// in the middle of it, where it would delay the signals still to be sent.
    closing: Vec<Connection>,
    /// When the client workers last took a pull.
    last_pull: std::time::Instant,
    /// Tasks sent a kill signal or SIGKILL whose death has not been seen yet, and when the
    /// last such request went out: while the kill path's requests are still being carried
    /// out, the supervisors that have done theirs are not asked to reap and exit (that
    /// would take the CPU from those still to deliver; see [`KILL_SETTLE`]).
    kills_in_flight: BTreeSet<(AllocId, usize)>,
    last_kill: std::time::Instant,
    /// Tasks whose death the exit watcher has seen and whose exit their runner has not
    /// applied yet: a kill request sent to one of them is not in flight (no death follows).
    dead: BTreeSet<(AllocId, usize)>,
}

/// What keeps a supervisor's control connection open (its drop closes it).
pub(crate) type Connection = Box<dyn Send>;

/// How long the client must have taken no pull before it closes exited tasks' control
/// connections (see [`Core::closing`]).
const CLOSE_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// How long the client must have taken no pull before it asks the supervisors of dead tasks
/// for their exits (see [`Core::pending_deaths`]): the signals of a stop of many
/// allocations go out first, and the tasks die of them, before any supervisor reaps and
/// records its task.
const REPORT_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

/// The longest a dead task's exit waits for the client to be quiet: a steady stream of
/// pulls does not defer it further.
const REPORT_LATEST: std::time::Duration = std::time::Duration::from_millis(200);

/// How long after the last kill request the client waits for the deaths of the tasks
/// still in flight before it asks for exits and closes connections anyway (a task that
/// drains, or ignores its signal, holds up the others' bookkeeping no longer than this).
/// On a busy machine the deaths of a stop of many allocations trail its last request by
/// tens of milliseconds: the supervisors' reaps and exits in that time doubled the stop.
const KILL_SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// The most closed connections a worker gathers before it closes them whatever the pulls.
const MAX_CLOSING: usize = 4096;

impl Core {
    /// The client's node ID (empty for a server-only agent).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Drops what the client tracks of a forgotten allocation's tasks.
    fn forget_tasks(&mut self, alloc: &AllocId) {
        self.kills_in_flight.retain(|(id, _)| id != alloc);
        self.dead.retain(|(id, _)| id != alloc);
    }

    /// Appends an entry to the event log; it is stored with the next commit. An entry whose
    /// sequence number was reserved ([`Core::log_pull`]) keeps it, and its time.
    pub fn log(&mut self, mut entry: LogEntry) {
        self.log_notes();
        if entry.seq == 0 {
            self.log_seq += 1;
            entry.seq = self.log_seq;
            entry.time_ns = unix_now_ns();
        }
        debug_assert!(
            entry.seq <= self.log_seq,
            "a sequence number never reserved"
        );
        self.pending_log.push(entry);
    }

    /// Logs what the server's writes that are no step did since the last entry (a
    /// deployment paused or failed, an auto-revert's new version), so the log holds them
    /// in order before whatever follows.
    fn log_notes(&mut self) {
        for entry in self.server.take_note_entries() {
            self.log_seq += 1;
            self.pending_log.push(LogEntry {
                seq: self.log_seq,
                time_ns: unix_now_ns(),
                ..entry
            });
        }
    }

    /// Takes the server's records written since the last take, as stored values (or
    /// deletions), and notes which allocations the client now has to pull.
    pub fn take_writes(&mut self) -> Vec<Write> {
        for id in self.server.store.drain_client_changes() {
            // Ours: placed on this node, or deleted after this client pulled it (its runner
            // is then forgotten, see `forget_if_gone`).
            let ours = match self.server.store.alloc_for_client(&id) {
                Some(alloc) => alloc.node_id == self.node,
                None => self.logged_pulls.contains_key(&id),
            };
            if ours {
                self.fresh_pulls.push(id.clone());
                self.pending_pulls.insert(id);
            }
        }
        let written = self.server.store.drain_written();
        let store = &self.server.store;
        written
            .into_iter()
            .map(|record| match &record {
                Record::Index => (
                    Table::Indexes,
                    persist::INDEXES_KEY.to_string(),
                    Some(Payload::Indexes(store.table_indexes())),
                ),
                Record::Deployment(id) => (
                    Table::Deployments,
                    id.clone(),
                    store
                        .deployment(id)
                        .map(|d| Payload::Deployment(Box::new(d.clone()))),
                ),
                Record::ScalingEvents(id) => (
                    Table::ScalingEvents,
                    id.to_string(),
                    store
                        .scaling_events(id)
                        .map(|events| Payload::ScalingEvents(Box::new(events.clone()))),
                ),
                Record::Node(id) => (
                    Table::Nodes,
                    id.to_string(),
                    store
                        .node(id)
                        .map(|node| Payload::Node(Box::new(node.clone()))),
                ),
                Record::Job(id) => (
                    Table::Jobs,
                    id.to_string(),
                    store.job_versions_owned(id).cloned().map(Payload::Jobs),
                ),
                Record::Alloc(id) => (
                    Table::Allocs,
                    id.to_string(),
                    store
                        .alloc_shared(id)
                        .map(|alloc| Payload::Alloc(Arc::clone(alloc))),
                ),
                Record::Eval(id) => (
                    Table::Evals,
                    id.clone(),
                    store.eval(id).cloned().map(Payload::Eval),
                ),
                Record::Service(id) => (
                    Table::Services,
                    id.clone(),
                    store.service(id).cloned().map(Payload::Service),
                ),
            })
            .collect()
    }

    /// Processes every pending evaluation now, logging each (`ProcessEval`). An API write
    /// does this before its durable commit, so the plan it causes is durable when the write
    /// is answered and before any runner acts on it: a crash then cannot lose a stop that a
    /// task has already been signalled for (see `restore_runner`).
    pub fn process_evals(&mut self) {
        loop {
            match self.server.process_next_eval() {
                // A blocked evaluation placed nothing: for the model it is still pending,
                // and it is logged when it is processed again, once a node is ready.
                Ok(Some(processed)) if processed.blocked => {}
                Ok(Some(processed)) => self.log(LogEntry::step(
                    Step::ProcessEval { job: processed.job },
                    None,
                    None,
                )),
                Ok(None) => return,
                Err(error) => {
                    crate::daemon::say!("scheduler: {error}");
                    return;
                }
            }
        }
    }

    /// A pull of `alloc`'s record, unless the log already has it (or will): reserves the
    /// sequence number of its `ClientSync` entry now, while the record is read, so the log
    /// orders pulls by what they read; the entry itself, with the effects of the update, is
    /// stored with the runner's progress after the update (`DaemonHost::note_pull`), so a
    /// crash keeps both or neither — and a pull whose entry was lost is made (and logged)
    /// again by the restored runner. Returns the sequence number and its time.
    /// Reserves the next log sequence number (and its time) for an entry made later, in
    /// the order of what was read now under this lock.
    pub fn reserve_log_seq(&mut self) -> (u64, i64) {
        self.log_seq += 1;
        (self.log_seq, unix_now_ns())
    }

    pub fn log_pull(
        &mut self,
        alloc: &quiesce_core::server::structs::Allocation,
    ) -> Option<(u64, i64)> {
        let index = alloc.alloc_modify_index;
        if self
            .logged_pulls
            .get(&alloc.id)
            .is_some_and(|&logged| logged >= index)
        {
            return None;
        }
        self.logged_pulls.insert(alloc.id.clone(), index);
        self.log_seq += 1;
        Some((self.log_seq, unix_now_ns()))
    }

    /// Submits, as one batch (one transaction): `earlier` (writes taken before, by the same
    /// step), everything written since, the pending log entries, and a runner's state if
    /// given — the allocation's ID and the state encoded ([`persist::StoredRunner::encode`])
    /// by the caller before it locked the core: a runner's state is the largest part of a
    /// commit. Returns the batch's ticket for the committer.
    pub fn commit(&mut self, runner: Option<(AllocId, Vec<u8>)>, earlier: Vec<Write>) -> u64 {
        self.submit(runner, earlier, false)
    }

    /// Commits as [`Core::commit`] does, syncing the disk: returns the committer and the
    /// batch's ticket, to wait for it once the core's lock is released (a launch waits so).
    pub fn commit_durable(
        &mut self,
        runner: Option<(AllocId, Vec<u8>)>,
        earlier: Vec<Write>,
    ) -> (Committer, u64) {
        let ticket = self.submit(runner, earlier, true);
        (self.committer.clone(), ticket)
    }

    fn submit(
        &mut self,
        runner: Option<(AllocId, Vec<u8>)>,
        earlier: Vec<Write>,
        durable: bool,
    ) -> u64 {
        self.log_notes();
        let mut writes = earlier;
        writes.extend(self.take_writes());
        if let Some((id, encoded)) = runner {
            writes.push((
                Table::Runners,
                id.to_string(),
                Some(Payload::Runner(encoded)),
            ));
        }
        let ticket = self.committer.submit(Batch {
            index: Some(self.server.store.index()),
            writes,
            log: std::mem::take(&mut self.pending_log),
            durable,
        });
        let fresh = std::mem::take(&mut self.fresh_pulls);
        if durable {
            self.pulls_after
                .extend(fresh.into_iter().map(|id| (id, ticket)));
        }
        ticket
    }

    /// Why the store refuses commits now (a full disk, say), if it does: the API refuses
    /// writes up front then (see `persist::Committer::failing`).
    pub fn store_failing(&self) -> Option<StoreError> {
        self.committer.failing()
    }

    /// Commits `writes` (ACL records) with everything written since, durably, as
    /// [`Core::commit_durably`] does.
    pub fn commit_durably_with(&mut self, writes: Vec<Write>) -> Result<(), StoreError> {
        let ticket = self.submit(None, writes, true);
        self.committer.wait(ticket)
    }

    /// Commits as [`Core::commit`] does and waits until the batch is durable: for writes that
    /// are acknowledged (the API's), and before anyone acts on them (the lock is held).
    pub fn commit_durably(&mut self) -> Result<(), StoreError> {
        let ticket = self.submit(None, Vec::new(), true);
        self.committer.wait(ticket)
    }
}

/// How many threads wait on each of the agent's condition variables.
#[derive(Default)]
struct Asleep {
    scheduler: bool,
    workers: usize,
}

/// What every thread of the agent shares.
pub struct Shared {
    core: Mutex<Core>,
    /// Sent after every write while an event stream waits on it (on the HTTP runtime).
    changes: tokio::sync::watch::Sender<()>,
    /// The blocking queries waiting, each on what it read (`http::watch`).
    pub watchers: http::Watchers,
    /// Notified when there is an evaluation to process: the scheduler waits on it.
    evals: Condvar,
    /// Notified when there is an update to pull or an exit to apply: the client workers
    /// wait on it.
    work: Condvar,
    /// The runners by allocation: how timers and exits find them.
    runners: Mutex<BTreeMap<AllocId, RunnerShell<DaemonHost>>>,
    timers: Timers,
    pub keyring: keyring::Keyring,
    /// Other agents that joined this one, or that it joined.
    pub peers: peers::Peers,
    /// Watches the raw_exec tasks for their exits (one thread for all of them).
    exits: ExitWatcher<(AllocId, usize)>,
    pub config: AgentConfig,
    /// The agent is stopping: its event streams end (`http::end_event_streams`).
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// The answers held for clients, agent-wide (`http::answers`).
    pub answers: http::Answers,
    /// The garbage collector's state (`gc`).
    pub gc: gc::Collector,
    /// The services' checks and their latest results (`checks`).
    pub checks: Arc<checks::Checks>,
    /// The HTTP connections, once the agent serves (`http::connections`).
    pub connections: std::sync::OnceLock<Arc<http::Connections>>,
}

impl Shared {
    pub fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().expect("the core lock is never poisoned")
    }

    /// Wakes the blocking queries that watch what the writes since the last call moved,
    /// the event streams, and the scheduler and the client workers if there is work for
    /// them — only those asleep. Called with the core locked (a blocking query registers
    /// under the same lock: `http/watch.rs`).
    pub fn notify(&self, core: &mut Core) {
        let moved = core.server.store.drain_moved();
        self.watchers.publish(&moved);
        if self.changes.receiver_count() > 0 {
            self.changes.send_replace(());
        }
        if core.asleep.scheduler && core.server.eval_pending() {
            self.evals.notify_one();
        }
        if core.asleep.workers > 0
            && (!core.pending_pulls.is_empty()
                || !core.pending_exits.is_empty()
                || !core.pending_deaths.is_empty()
                || !core.closing.is_empty())
        {
            self.work.notify_all();
        }
    }

    /// Whether a thread panicked holding the core's lock.
    pub fn poisoned(&self) -> bool {
        self.core.is_poisoned()
    }

    /// Wakes every reader waiting for a write (the agent is stopping).
    pub fn wake_readers(&self) {
        self.changes.send_replace(());
        self.watchers.wake_all();
    }

    /// Changes as soon as there is a write (every write changes the index): what the event
    /// streams wait on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.changes.subscribe()
    }

    /// How many alloc runners the client holds (running or ended, not yet forgotten).
    pub fn runner_count(&self) -> usize {
        self.runners
            .lock()
            .expect("the registry lock is never poisoned")
            .len()
    }

    fn runner(&self, alloc: &str) -> Option<RunnerShell<DaemonHost>> {
        self.runners
            .lock()
            .expect("the registry lock is never poisoned")
            .get(alloc)
            .cloned()
    }

    /// Delivers what the timer thread found due.
    fn dispatch(&self, alloc: AllocId, due: Due) {
        let Some(shell) = self.runner(&alloc) else {
            return;
        };
        match due {
            // An entry of an arming since cancelled (a restart's kill timeout, whose task
            // exited and was killed again) must not fire the arming that followed it.
            Due::Timer(timer, due) => {
                shell.fire_if(timer, |host| host.deadline(timer) == Some(due));
            }
            Due::Exited(task, exit) => {
                shell.task_exited(task, exit.into());
            }
            Due::MockCheck(task) => {
                let now = unix_now_ns();
                if let Some(exit) = shell.inspect(|_, host| host.mock_exit_due(task, now)) {
                    shell.task_exited(task, exit);
                }
            }
        }
    }
}

/// A running agent.
pub struct Agent {
    pub shared: Arc<Shared>,
}
