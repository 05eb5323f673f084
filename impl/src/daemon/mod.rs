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

pub mod host;
pub mod http;
pub mod persist;
pub mod timers;

use crate::client::raw_exec::{Event, ExitWatcher};
use crate::client::shell::{Applied, RunnerShell};
use crate::client::{AllocRunner, Command, ExitResult, RunnerPhase, DEFAULT_MAX_KILL_TIMEOUT_NS};
use crate::server::store::{Record, StateStore};
use crate::server::structs::{AllocId, NodeId};
use crate::server::Server;
use crate::step::log::LogEntry;
use crate::step::Step;
use host::DaemonHost;
use persist::{Batch, Committer, Payload, Persist, Table, Write};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};
use timers::{Due, Timers};

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    pub node_name: NodeId,
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
}

impl AgentConfig {
    pub fn new(data_dir: PathBuf, bind: SocketAddr, supervisor: PathBuf) -> Self {
        AgentConfig {
            data_dir,
            bind,
            node_name: "node-0".to_string(),
            max_kill_timeout_ns: DEFAULT_MAX_KILL_TIMEOUT_NS,
            supervisor,
            supervisor_args: vec!["supervise".to_string()],
            acl_enabled: false,
            http: http::HttpLimits::default(),
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
    let _ = writeln!(std::io::stderr().lock(), "quiesce agent: {line}");
}

/// Unix time in nanoseconds.
pub fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

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
    /// Drops what the client tracks of a forgotten allocation's tasks.
    fn forget_tasks(&mut self, alloc: &AllocId) {
        self.kills_in_flight.retain(|(id, _)| id != alloc);
        self.dead.retain(|(id, _)| id != alloc);
    }

    /// Appends an entry to the event log; it is stored with the next commit. An entry whose
    /// sequence number was reserved ([`Core::log_pull`]) keeps it, and its time.
    pub fn log(&mut self, mut entry: LogEntry) {
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
            .filter_map(|record| {
                Some(match &record {
                    Record::Index => return None,
                    Record::Job(id) => (
                        Table::Jobs,
                        id.clone(),
                        store.job_versions_owned(id).cloned().map(Payload::Jobs),
                    ),
                    Record::Alloc(id) => (
                        Table::Allocs,
                        id.clone(),
                        store
                            .alloc_record(id)
                            .map(|alloc| Payload::Alloc(Box::new(alloc.clone()))),
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
                Ok(Some((_, job))) => {
                    self.log(LogEntry::step(Step::ProcessEval { job }, None, None))
                }
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
    pub fn log_pull(&mut self, alloc: &crate::server::structs::Allocation) -> Option<(u64, i64)> {
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

    fn submit(
        &mut self,
        runner: Option<(AllocId, Vec<u8>)>,
        earlier: Vec<Write>,
        durable: bool,
    ) -> u64 {
        let mut writes = earlier;
        writes.extend(self.take_writes());
        if let Some((id, encoded)) = runner {
            writes.push((Table::Runners, id, Some(Payload::Runner(encoded))));
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
    pub fn store_failing(&self) -> Option<String> {
        self.committer.failing()
    }

    /// Commits `writes` (ACL records) with everything written since, durably, as
    /// [`Core::commit_durably`] does.
    pub fn commit_durably_with(&mut self, writes: Vec<Write>) -> Result<(), String> {
        let ticket = self.submit(None, writes, true);
        self.committer.wait(ticket)
    }

    /// Commits as [`Core::commit`] does and waits until the batch is durable: for writes that
    /// are acknowledged (the API's), and before anyone acts on them (the lock is held).
    pub fn commit_durably(&mut self) -> Result<(), String> {
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
    /// Sent after every write while a blocking query waits on it (on the HTTP runtime).
    changes: tokio::sync::watch::Sender<()>,
    /// Notified when there is an evaluation to process: the scheduler waits on it.
    evals: Condvar,
    /// Notified when there is an update to pull or an exit to apply: the client workers
    /// wait on it.
    work: Condvar,
    /// The runners by allocation: how timers and exits find them.
    runners: Mutex<BTreeMap<AllocId, RunnerShell<DaemonHost>>>,
    timers: Timers,
    /// Watches the raw_exec tasks for their exits (one thread for all of them).
    exits: ExitWatcher<(AllocId, usize)>,
    pub config: AgentConfig,
}

impl Shared {
    pub fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().expect("the core lock is never poisoned")
    }

    /// Wakes the blocking queries (every write changes the index), and the scheduler and
    /// the client workers if there is work for them — only those asleep. Called with the
    /// core locked.
    pub fn notify(&self, core: &Core) {
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

    /// Changes as soon as there is a write (every write changes the index).
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
            Due::Timer(timer) => {
                shell.fire(timer);
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

impl Agent {
    /// Opens the data dir, restores the server and the runners (reattaching to their tasks),
    /// and starts the scheduler, client and timer threads. The HTTP listener is separate
    /// ([`http::serve`]).
    pub fn start(config: AgentConfig) -> Result<Agent, String> {
        raise_open_files_limit();
        let (persist, loaded) = Persist::open(&config.data_dir)?;
        let seed = unix_now_ns() as u64 ^ u64::from(std::process::id()).rotate_left(32);
        let store = StateStore::restore(
            loaded.index,
            loaded.jobs,
            loaded.allocs,
            loaded.evals,
            loaded.services,
        );
        let server = Server::restore(store, vec![config.node_name.clone()], seed);
        let acl = restore_acl(loaded.acl)?;
        let mut core = Core {
            server,
            acl,
            committer: Committer::start(persist)?,
            log_seq: loaded.log_seq,
            pending_log: Vec::new(),
            pending_pulls: BTreeSet::new(),
            pulls_after: BTreeMap::new(),
            fresh_pulls: Vec::new(),
            pending_exits: std::collections::VecDeque::new(),
            pending_deaths: Vec::new(),
            asleep: Asleep::default(),
            logged_pulls: loaded.logged_pulls,
            node: config.node_name.clone(),
            closing: Vec::new(),
            last_pull: std::time::Instant::now(),
            kills_in_flight: BTreeSet::new(),
            last_kill: std::time::Instant::now(),
            dead: BTreeSet::new(),
        };
        // Pulls the client had not taken when the agent stopped.
        let pulled: BTreeMap<&AllocId, u64> = loaded
            .runners
            .iter()
            .map(|r| (&r.runner.alloc.id, r.runner.alloc.alloc_modify_index))
            .collect();
        for alloc in core.server.store.allocs_for_node(&config.node_name) {
            if pulled
                .get(&alloc.id)
                .is_none_or(|&seen| alloc.alloc_modify_index > seen)
            {
                core.pending_pulls.insert(alloc.id.clone());
            }
        }
        let restarting = loaded
            .runners
            .iter()
            .any(|r| r.runner.phase != RunnerPhase::Terminal);
        if restarting {
            core.log(LogEntry::step(Step::ClientRestart, None, None));
            core.commit_durably()?;
        }
        // Evaluations left pending (their plans are durable with the write that made them,
        // so these are the ones a crash caught before they were processed) are processed
        // now, durably, before any runner is restored or pulls: no runner acts on a plan a
        // crash could lose (see `Core::process_evals`).
        if core.server.eval_pending() {
            core.process_evals();
            core.commit_durably()?;
        }
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            changes: tokio::sync::watch::Sender::new(()),
            evals: Condvar::new(),
            work: Condvar::new(),
            runners: Mutex::new(BTreeMap::new()),
            timers: Timers::default(),
            exits: ExitWatcher::new().map_err(|e| format!("watching for task exits: {e}"))?,
            config,
        });
        {
            // An exit is queued for the client workers (who apply it after any pending
            // pull: the kill path first), not applied on the watcher's thread, which a
            // poststop task's launch would hold up.
            let weak = Arc::downgrade(&shared);
            shared
                .exits
                .start(move |found| {
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
                    let mut core = shared.core();
                    // Deaths alone wake the workers only when they change what is due:
                    // the first one (a worker arms its timer), or the last task in flight.
                    let mut wake = core.pending_deaths.is_empty();
                    for event in found {
                        let exited = match event {
                            Event::Died(token) => {
                                let at = std::time::Instant::now();
                                wake |= core.kills_in_flight.remove(&token)
                                    && core.kills_in_flight.is_empty();
                                core.dead.insert(token.clone());
                                core.pending_deaths.push((token.0, token.1, at));
                                continue;
                            }
                            Event::Exited(exited) => exited,
                        };
                        wake = true;
                        core.kills_in_flight.remove(&exited.token);
                        core.dead.remove(&exited.token);
                        let (alloc, task) = exited.token;
                        if let Some(error) = &exited.record.error {
                            crate::daemon::say!("allocation {alloc} task {task}: {error}");
                        }
                        core.pending_exits
                            .push_back((alloc, task, exited.record.result()));
                        if let Some(connection) = exited.connection {
                            core.closing.push(Box::new(connection));
                        }
                    }
                    if wake {
                        shared.notify(&core);
                    }
                })
                .map_err(|e| format!("starting the exit watcher: {e}"))?;
        }
        {
            let timers = shared.timers.clone();
            let weak = Arc::downgrade(&shared);
            std::thread::Builder::new()
                .name("timers".into())
                .spawn(move || {
                    timers.run(|alloc, due| {
                        if let Some(shared) = weak.upgrade() {
                            shared.dispatch(alloc, due);
                        }
                    })
                })
                .map_err(|e| e.to_string())?;
        }
        for stored in loaded.runners {
            restore_runner(&shared, stored);
        }
        for (name, body) in [
            ("scheduler", scheduler_loop as fn(Arc<Shared>)),
            ("client", client_loop),
        ] {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(shared))
                .map_err(|e| e.to_string())?;
        }
        Ok(Agent { shared })
    }
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does for Nomad:
/// the agent holds descriptors for every task (its control connection, the pidfds of the
/// task and its supervisor), and 1,024 — a common default — would stop it at a few hundred.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            // An error leaves the limit as it was.
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// The ACL store from its stored records.
fn restore_acl(records: Vec<persist::AclRecord>) -> Result<crate::acl::AclStore, String> {
    let (mut tokens, mut policies, mut bootstrapped) = (Vec::new(), Vec::new(), None);
    for record in records {
        match record {
            persist::AclRecord::Token(token) => tokens.push(token),
            persist::AclRecord::Policy(policy) => policies.push(policy),
            persist::AclRecord::Bootstrap(index) => bootstrapped = Some(index),
        }
    }
    crate::acl::AclStore::restore(tokens, policies, bootstrapped)
}

/// Binds the HTTP listener on `config.bind` (port 0 picks a free one), starts the agent and
/// serves HTTP on a background thread. Returns the agent with `config.bind` set to the bound
/// address.
pub fn spawn(mut config: AgentConfig) -> Result<Agent, String> {
    let socket = std::net::TcpListener::bind(config.bind)
        .map_err(|e| format!("listening on {}: {e}", config.bind))?;
    config.bind = socket
        .local_addr()
        .map_err(|e| format!("listening on {}: {e}", config.bind))?;
    let runtime = http::runtime().map_err(|e| format!("starting the HTTP runtime: {e}"))?;
    let agent = Agent::start(config)?;
    let shared = Arc::clone(&agent.shared);
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || runtime.block_on(http::serve(shared, socket)))
        .map_err(|e| e.to_string())?;
    Ok(agent)
}

/// Restores one runner from its stored state: terminal ones are only registered; the others
/// reattach to their tasks, re-arm their timers and apply a stored flag (DESIGN.md).
fn restore_runner(shared: &Arc<Shared>, stored: persist::StoredRunner) {
    let persist::StoredRunner {
        runner: stored,
        deadlines,
    } = stored;
    let id = stored.alloc.id.clone();
    let mut registry = shared
        .runners
        .lock()
        .expect("the registry lock is never poisoned");
    let host = DaemonHost::new(&id, shared).resuming(deadlines);
    if stored.phase == RunnerPhase::Terminal {
        registry.insert(id, RunnerShell::new(stored, host, Vec::new()));
        return;
    }
    let mut commands = Vec::new();
    let restored = AllocRunner::restore(stored, unix_now_ns(), &mut commands);
    // Reattach first, so a signal among the restore's commands reaches the task.
    let reattach: Vec<Command> = restored
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, task)| task.phase != crate::client::TaskPhase::NotStarted)
        .filter(|(_, task)| task.phase != crate::client::TaskPhase::Dead)
        .map(|(ix, _)| Command::StartTask { task: ix })
        .collect();
    // The kill requests of tasks stored as signalled (or SIGKILLed) go again: a step is
    // stored before its requests are sent (they go once it is committed, see
    // `DaemonHost::flush`), so a crash in between leaves a step the task never felt. The
    // supervisor refuses what it has carried out, and its hello says so.
    let resend: Vec<Command> = restored
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, task)| task.phase == crate::client::TaskPhase::Signalled)
        .flat_map(|(ix, task)| {
            let signal = Command::Signal {
                task: ix,
                signal: task.kill_signal.clone(),
                kill: task.kills,
            };
            let force = task.sigkilled.then_some(Command::ForceKill {
                task: ix,
                kill: task.kills,
            });
            std::iter::once(signal).chain(force)
        })
        .collect();
    // Registered first, its commands carried out after the registry's lock is released: a
    // reattach (or launch) must not hold up every other runner's timers and exits.
    let shell = RunnerShell::unstarted(restored, host);
    let starting = shell.starting();
    registry.insert(id.clone(), shell.clone());
    drop(registry);
    // A newer record of the allocation (a stop whose pull, or the steps after it, a crash
    // lost from the runner's stored state) is pulled in the same critical section, before
    // the reattached tasks' exits can be delivered: a task signalled before the crash must
    // not look as if it had ended on its own. The stop itself is durable (an API write's
    // plan).
    starting.restore([reattach, resend, commands].concat(), |runner, host| {
        fetch_newer(shared, &id, runner, host)
    });
}

/// The allocation's record, if it is newer than the runner's copy, for a pull; the pull's
/// log entry is reserved and noted for the host (see [`Core::log_pull`]).
fn fetch_newer(
    shared: &Shared,
    id: &AllocId,
    runner: &AllocRunner,
    host: &mut DaemonHost,
) -> Option<crate::server::structs::Allocation> {
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
        (Table::Runners, id.clone(), None),
        (Table::Pulls, id.clone(), None),
    ];
    core.commit(None, forget);
    // Whatever the commit took for the client to pull, someone is woken for it.
    shared.notify(&core);
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
fn scheduler_loop(shared: Arc<Shared>) {
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
        match core.server.process_next_eval() {
            Ok(Some((_, job))) => core.log(LogEntry::step(Step::ProcessEval { job }, None, None)),
            Ok(None) => continue,
            Err(error) => crate::daemon::say!("scheduler: {error}"),
        }
        if let Err(error) = core.commit_durably() {
            crate::daemon::say!("scheduler: storing the plan: {error}");
        }
        shared.notify(&core);
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
fn client_loop(shared: Arc<Shared>) {
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
