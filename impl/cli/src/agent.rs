//! The `agent` command: it checks for `-dev`, makes the data dir, starts the daemon, and
//! then waits on SIGINT or SIGTERM (blocked in every thread it starts), saving state
//! durably before it exits while the tasks keep running under their supervisors.

use super::AgentArgs;
use nix::sys::signal::{SigSet, Signal};
use quiesce_agent::daemon::{self, AgentConfig};
use std::io::Write;
use std::net::SocketAddr;

/// glibc's malloc arenas, at most one per core here: by default it keeps up to eight per
/// core, and each holds on to the most it ever had. Under many reads at once (issue 24:
/// 300 clients that never read, each asking for a different 0.9 MB list) the freed memory
/// of the answers' builds, kept per arena, was the larger part of the agent's growth:
/// +233–262 MB with the default, +134–140 MB with two.
const MALLOC_ARENAS: i32 = 2;

pub(super) fn agent(args: AgentArgs) -> Result<(), String> {
    // Raw: neither nix nor rustix wraps mallopt (a glibc function, not a system call); it
    // is called before the agent starts any thread.
    // SAFETY: mallopt takes two integers and changes only the allocator's tuning.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
    if !args.dev && args.config.is_empty() {
        return Err(
            "give -dev (a server and a client in one process) or -config FILE: run `quiesce \
             agent -dev`"
                .into(),
        );
    }
    let settings = super::agent_config::read(&args.config)?;
    let data_dir = match args.data_dir.or(settings.data_dir.clone()) {
        Some(dir) => dir,
        None => {
            let dir = std::env::temp_dir().join(format!("quiesce-{}", std::process::id()));
            create_data_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            dir
        }
    };
    let data_dir = std::fs::canonicalize(&data_dir)
        .or_else(|_| {
            create_data_dir(&data_dir)?;
            std::fs::canonicalize(&data_dir)
        })
        .map_err(|e| format!("data dir {}: {e}", data_dir.display()))?;
    let supervisor = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    // SIGINT and SIGTERM are taken by this thread (sigwait), so every thread the agent
    // starts inherits them blocked; tasks do not (std resets the mask of a child).
    let signals = shutdown_signals();
    let bind = args
        .bind
        .or(settings.bind_addr)
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    let port = args.port.or(settings.http_port).unwrap_or(4646);
    let mut config = AgentConfig::new(data_dir.clone(), SocketAddr::new(bind, port), supervisor);
    config.acl_enabled = args.acl_enabled || settings.acl_enabled == Some(true);
    // `-dev` runs a client whatever the files say (as Nomad's dev mode).
    config.client_enabled = args.dev || settings.client_enabled == Some(true);
    for (value, slot) in [
        (args.node.or(settings.name), &mut config.name),
        (args.region.or(settings.region), &mut config.region),
        (args.dc.or(settings.datacenter), &mut config.datacenter),
    ] {
        if let Some(value) = value {
            if value.is_empty() || value.chars().any(char::is_control) || value.len() > 128 {
                return Err(format!(
                    "{value:?}: a name, region or datacenter is 1 to 128 bytes without control \
                     characters"
                ));
            }
            *slot = value;
        }
    }
    config.serf_port = settings.serf_port;
    config.peer_key = settings.peer_key.clone();
    config.gc = settings.gc.over(config.gc);
    if config.serf_port.is_some() && config.peer_key.is_none() {
        // Nomad's gossip without `encrypt` takes anyone too; say so rather than be silent.
        let line = "==> peers: no server.encrypt key: any process that reaches the serf port \
                    can join as a peer (listed by /v1/regions and /v1/agent/members); set one \
                    to require it\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }
    for key in &settings.ignored {
        if let Some((_, why)) = super::agent_config::IGNORED.iter().find(|(k, _)| k == key) {
            // One write for the line (stderr is unbuffered: `eprintln!` writes it in pieces).
            let line = format!("==> config: {key} has no effect: {why}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    }
    let agent = daemon::spawn(config)?;
    let mode = if agent.shared.config.client_enabled {
        "server and client"
    } else {
        "server only"
    };
    println!("==> quiesce agent started ({mode})");
    println!("    HTTP address: http://{}", agent.shared.config.bind);
    println!("    Data dir:     {}", data_dir.display());
    println!(
        "    Event log:    {}",
        data_dir.join(daemon::persist::EVENT_LOG_FILE).display()
    );
    let (node, ready) = {
        let core = agent.shared.core();
        let ready = core
            .server
            .store
            .node(core.node())
            .is_some_and(|n| n.is_ready());
        (core.node().to_string(), ready)
    };
    if !node.is_empty() {
        println!("    Node:         {node} ({})", agent.shared.config.name);
        if ready {
            daemon::announce_ready(&node);
        }
    }
    let _ = std::io::stdout().flush();
    let caught = wait_for(&signals);
    // A clean stop: everything queued is made durable first. Tasks keep running under their
    // supervisors; an agent started on the same data dir reattaches to them.
    agent.shared.core().commit_durably()?;
    daemon::http::end_event_streams(&agent.shared);
    println!("==> Caught signal {caught}: state saved; tasks keep running under their supervisors");
    Ok(())
}

fn shutdown_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    // pthread_sigmask on the calling thread; an error (none is possible) is ignored.
    let _ = set.thread_block();
    set
}

/// The signal number taken, or 0 should sigwait fail.
fn wait_for(signals: &SigSet) -> i32 {
    signals.wait().map_or(0, |caught| caught as i32)
}

/// A data dir this agent makes: others may pass through it but not list it
/// (`daemon::persist::DATA_DIR`).
fn create_data_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(quiesce_agent::daemon::persist::DATA_DIR)
        .create(dir)
}
