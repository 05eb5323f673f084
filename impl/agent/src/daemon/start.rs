//! Starting the agent: the data dir opened, the server and ACLs restored, the node
//! registered, the runners reattached to their tasks, the threads started.
//!
//! A restart, in order: everything is loaded and the broker rebuilt from pending
//! evaluations; `ClientRestart` is logged if a runner was mid-way; a pending evaluation is
//! processed and its plan stored durably; each unfinished runner is restored
//! (`AllocRunner::restore`: timers re-armed with the deadlines stored with its progress,
//! but for `min_healthy_time`'s, which starts again; so a delay resumes where it was, and a
//! stored flag applied at once), then brought up to its allocation's stored record as a
//! pull, before any of its tasks' exits; its tasks are reattached (a supervisor answers on
//! an abstract socket named after the run's directory; if it is gone, its `exit.json` gives
//! the exit; a reattach that fails otherwise reports the task lost rather than starting it
//! twice); its signalled tasks' kill requests are sent again; and the pulls the client had
//! not taken are queued. A runner is registered with its shell's lock held
//! (`RunnerShell::starting`), so no event from another thread reaches it before its restore
//! has been carried out.

use super::*;

impl Agent {
    /// Opens the data dir, restores the server and the runners (reattaching to their tasks),
    /// and starts the scheduler, client and timer threads. The HTTP listener is separate
    /// ([`http::serve`]).
    pub fn start(mut config: AgentConfig) -> Result<Agent, String> {
        raise_open_files_limit();
        if config.client_enabled {
            match crate::raw_exec::cgroup::prepare(&config.data_dir) {
                Ok(root) => config.cgroups = Some(root),
                Err(why) => say!(
                    "tasks run without a cgroup of their own ({why}): a task's processes \
                     that leave its process group are not stopped with it"
                ),
            }
        }
        let (persist, loaded) = Persist::open(&config.data_dir)?;
        let seed = unix_now_ns() as u64 ^ u64::from(std::process::id()).rotate_left(32);
        let mut store = StateStore::restore(loaded.index, loaded.tables, loaded.table_indexes);
        store.limit_job_versions(config.gc.job_max_versions);
        store.set_clock(unix_now_ns);
        // Blocking queries wake on what each write moved (`http/watch.rs`).
        store.watch_moves();
        // The event stream's journal starts with this run, as Nomad's event buffer does.
        // `QUIESCE_NO_JOURNAL` leaves it out, to measure what it costs (`server/events.rs`).
        if std::env::var_os("QUIESCE_NO_JOURNAL").is_none() {
            store.journal_events();
        }
        let mut server = Server::restore(store, Vec::new(), seed);
        let acl = restore_acl(loaded.acl)?;
        let (keyring, new_key) = keyring::Keyring::restore_or_create(
            loaded.keys,
            || server.uuid(),
            unix_now_ns() / 1_000_000_000,
        )?;
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
            logged_pulls: (loaded.logged_pulls.into_iter())
                .map(|(alloc, index)| (alloc.into(), index))
                .collect(),
            node: NodeId::default(),
            closing: Vec::new(),
            last_pull: std::time::Instant::now(),
            kills_in_flight: BTreeSet::new(),
            last_kill: std::time::Instant::now(),
            dead: BTreeSet::new(),
        };
        if let Some(key) = new_key {
            let write = (Table::Keys, key.key_id.clone(), Some(Payload::Key(key)));
            core.commit_durably_with(vec![write])?;
        }
        // The node, before anything is placed or pulled; a server-only agent has none.
        let mut first_heartbeat = None;
        if !config.client_enabled {
            // A client this agent no longer runs: its node is down, and takes nothing.
            let stored: Vec<_> = core.server.store.nodes().cloned().collect();
            for mut node in stored.into_iter().filter(|n| n.status != "down") {
                node.status = "down".into();
                node.status_updated_at = unix_now_ns() / 1_000_000_000;
                core.server.upsert_node(node);
            }
            core.commit_durably()?;
        }
        if config.client_enabled {
            let (node, later) = node::register(&mut core, &config);
            core.node = node;
            core.commit_durably()?;
            first_heartbeat = later;
        }
        // Pulls the client had not taken when the agent stopped.
        let pulled: BTreeMap<&AllocId, u64> = loaded
            .runners
            .iter()
            .map(|r| (&r.runner.alloc.id, r.runner.alloc.alloc_modify_index))
            .collect();
        for alloc in core.server.store.allocs_for_node(&core.node) {
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
            watchers: http::Watchers::default(),
            evals: Condvar::new(),
            work: Condvar::new(),
            runners: Mutex::new(BTreeMap::new()),
            timers: Timers::default(),
            keyring,
            peers: peers::Peers::default(),
            exits: ExitWatcher::new().map_err(|e| format!("watching for task exits: {e}"))?,
            config,
            stopping: Default::default(),
            answers: Default::default(),
            connections: Default::default(),
            gc: Default::default(),
            checks: Default::default(),
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
                        shared.notify(&mut core);
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
        {
            let (checks, weak) = (Arc::clone(&shared.checks), Arc::downgrade(&shared));
            std::thread::Builder::new()
                .name("checks".into())
                .spawn(move || super::checks::run(checks, weak))
                .map_err(|e| format!("starting the check runner: {e}"))?;
        }
        for stored in loaded.runners {
            restore_runner(&shared, stored);
        }
        forget_unknown_alloc_dirs(&shared);
        for (name, body) in [
            ("scheduler", scheduler_loop as fn(Arc<Shared>)),
            ("client", client_loop),
            ("gc", gc::run),
            ("deployments", super::progress::run),
        ] {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(shared))
                .map_err(|e| e.to_string())?;
        }
        if let Some(node) = first_heartbeat {
            node::first_heartbeat(&shared, node);
        }
        Ok(Agent { shared })
    }
}

/// Queues for removal the directories of allocations neither the store nor a runner knows
/// any more (forgotten before a restart, the removal still to come): a runner is forgotten
/// only once it is terminal, and a task is launched only once its runner is stored, so
/// nothing runs in them.
fn forget_unknown_alloc_dirs(shared: &Shared) {
    let allocs = shared.config.data_dir.join("alloc");
    let Ok(entries) = std::fs::read_dir(&allocs) else {
        return;
    };
    let unknown: Vec<std::path::PathBuf> = {
        let registry = shared
            .runners
            .lock()
            .expect("the registry lock is never poisoned");
        let core = shared.core();
        entries
            .flatten()
            .filter(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                !registry.contains_key(name.as_str())
                    && core.server.store.alloc_for_client(name.as_str()).is_none()
            })
            .map(|entry| entry.path())
            .collect()
    };
    for dir in unknown {
        shared.gc.forgot(dir, shared.config.gc.max_alloc_dirs);
    }
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does for Nomad:
/// the agent holds descriptors for every task (its control connection, the pidfds of the
/// task and its supervisor), and 1,024 — a common default — would stop it at a few hundred.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        // Tasks get the limit the agent was given, not the one it raised for itself: a
        // task could otherwise hold as many connections to the agent as the agent can.
        crate::raw_exec::set_task_open_files_limit(soft);
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

/// How many connections the kernel queues for the agent to accept: std's listener takes
/// 128, and a crowd of new connections (issue 24's 16,500) then waits out SYN retransmits
/// of a second and more, the agent's own clients among them.
const LISTEN_BACKLOG: i32 = 4096;

/// The HTTP listener on `address`, with [`LISTEN_BACKLOG`] (the kernel caps it at
/// `net.core.somaxconn`).
fn listen(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use nix::sys::socket::{self, sockopt, AddressFamily, Backlog, SockFlag, SockType};
    let family = if address.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &socket::SockaddrStorage::from(address),
    )?;
    socket::listen(&fd, Backlog::new(LISTEN_BACKLOG)?)?;
    Ok(std::net::TcpListener::from(fd))
}

/// Binds the HTTP listener on `config.bind` (port 0 picks a free one), starts the agent and
/// serves HTTP on a background thread. Returns the agent with `config.bind` set to the bound
/// address.
pub fn spawn(mut config: AgentConfig) -> Result<Agent, String> {
    let socket = listen(config.bind).map_err(|e| format!("listening on {}: {e}", config.bind))?;
    config.bind = socket
        .local_addr()
        .map_err(|e| format!("listening on {}: {e}", config.bind))?;
    let runtime = http::runtime().map_err(|e| format!("starting the HTTP runtime: {e}"))?;
    let serf_port = config.serf_port;
    let agent = Agent::start(config)?;
    if let Some(port) = serf_port {
        peers::listen(&agent.shared, port)?;
    }
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
        // Only a task with a process: not one that never started or is dead, nor one whose
        // run ended on its own (its restart policy decides, or its restart delay runs).
        .filter(|(_, task)| {
            use quiesce_core::client::TaskPhase::*;
            matches!(task.phase, Running | Delaying | Signalled)
        })
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
        .filter(|(_, task)| task.phase == quiesce_core::client::TaskPhase::Signalled)
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
    // The runner's state is what the store kept; the server's copy of its report may be
    // older (a launch's report is stored after the launch, see `DaemonHost::flush`): it is
    // sent again.
    let report = vec![Command::Report];
    starting.restore(
        [reattach, resend, commands, report].concat(),
        |runner, host| fetch_newer(shared, &id, runner, host),
    );
    restore_checks(shared, &id);
}

/// The checks of the services an allocation still has registered run again (the check
/// runner keeps nothing across a restart: they start pending).
fn restore_checks(shared: &Shared, alloc: &str) {
    let core = shared.core();
    let Some(record) = core.server.store.alloc_for_client(alloc) else {
        return;
    };
    let mut by_owner: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for service in core.server.store.services_of_alloc(alloc) {
        by_owner
            .entry(service.task.as_str())
            .or_default()
            .push(service.service_name.clone());
    }
    for (owner, names) in by_owner {
        shared
            .checks
            .register(record, owner, &names, shared.config.bind.ip());
    }
}
