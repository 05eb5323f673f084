//! The client's node: registered with the server at start (the node ID is kept with the
//! state, as Nomad keeps a client's `node-id`), `initializing` until its first heartbeat,
//! then `ready`. Only a ready node takes placements: evaluations processed before it is
//! ready block, and are processed again when it turns ready.

use super::*;
use quiesce_core::server::structs::{DriverInfo, Node, NodeEvent, NODE_INITIALIZING, NODE_READY};

/// When the client's first heartbeat, which turns its node ready, is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstHeartbeat {
    /// At the first whole second after the node registered: a node's `StatusUpdatedAt` is
    /// in whole seconds, and a client that read the clock before starting the agent sees a
    /// later one (Nomad's own API tests assert it).
    NextWholeSecond,
    /// With the registration (in-process tests, which start many agents).
    AtOnce,
}

/// The drivers the node fingerprints, all healthy (the agent checks what they need of a
/// task at registration instead).
fn drivers(now: &str) -> BTreeMap<String, DriverInfo> {
    host::DRIVERS
        .iter()
        .map(|name| {
            let info = DriverInfo {
                detected: true,
                healthy: true,
                health_description: "Healthy".into(),
                update_time: now.to_string(),
            };
            (name.to_string(), info)
        })
        .collect()
}

fn attributes(config: &AgentConfig) -> BTreeMap<String, String> {
    let mut attributes = BTreeMap::from([
        ("kernel.name".to_string(), std::env::consts::OS.to_string()),
        ("cpu.arch".to_string(), std::env::consts::ARCH.to_string()),
        ("unique.hostname".to_string(), hostname()),
        (
            "quiesce.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "nomad.advertise.address".to_string(),
            config.bind.to_string(),
        ),
    ]);
    if let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        attributes.insert("kernel.version".into(), release.trim().to_string());
    }
    for driver in host::DRIVERS {
        attributes.insert(format!("driver.{driver}"), "1".into());
    }
    attributes
}

/// The host's name, or `localhost` if it has none that reads.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// RFC 3339 (UTC, seconds) of a Unix time in seconds.
fn rfc3339(secs: i64) -> String {
    quiesce_core::gotime::rfc3339(secs.saturating_mul(1_000_000_000))
}

fn now_secs() -> i64 {
    unix_now_ns().div_euclid(1_000_000_000)
}

/// The client's node: the stored one, registered again now (a node the server knows keeps
/// its ID and its status); or a new one, with a new ID, which registers — ready — at its
/// first heartbeat ([`FirstHeartbeat`]): returned, to be registered then, unless that is
/// now.
pub(super) fn register(core: &mut Core, config: &AgentConfig) -> (NodeId, Option<Node>) {
    let now = now_secs();
    let stored = core.server.store.nodes().next().cloned();
    let mut node = match stored {
        Some(node) => node,
        None => Node {
            id: core.server.uuid().into(),
            name: config.name.clone(),
            datacenter: config.datacenter.clone(),
            node_pool: "default".into(),
            status: NODE_INITIALIZING.into(),
            status_updated_at: now,
            http_addr: String::new(),
            attributes: BTreeMap::new(),
            drivers: BTreeMap::new(),
            events: Vec::new(),
            create_index: 0,
            modify_index: 0,
        },
    };
    node.name = config.name.clone();
    node.datacenter = config.datacenter.clone();
    node.http_addr = config.bind.to_string();
    node.attributes = attributes(config);
    node.drivers = drivers(&rfc3339(now));
    let id = node.id.clone();
    if !node.is_ready() && config.first_heartbeat == FirstHeartbeat::NextWholeSecond {
        return (id, Some(node));
    }
    if !node.is_ready() {
        ready(&mut node, now);
    }
    core.server.upsert_node(node);
    (id, None)
}

/// The node turns ready, now.
fn ready(node: &mut Node, now: i64) {
    node.status = NODE_READY.into();
    node.status_updated_at = now;
    if node.events.is_empty() {
        node.events.push(NodeEvent {
            message: "Node registered".into(),
            subsystem: "Cluster".into(),
            timestamp: rfc3339(now),
            create_index: 0,
        });
    }
}

/// The first heartbeat, on its own thread: at the next whole second, the node registers,
/// ready, and the evaluations that blocked without it are processed (durably, as an API
/// write's).
pub(super) fn first_heartbeat(shared: &Arc<Shared>, mut node: Node) {
    let weak = Arc::downgrade(shared);
    spawn_named("heartbeat", move || {
        let into_second = unix_now_ns().rem_euclid(1_000_000_000) as u64;
        std::thread::sleep(std::time::Duration::from_nanos(1_000_000_000 - into_second));
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let mut core = shared.core();
        ready(&mut node, now_secs());
        let id = node.id.clone();
        core.server.upsert_node(node);
        core.process_evals();
        if let Err(error) = core.commit_durably() {
            say!("storing the node's first heartbeat: {error}");
        }
        shared.notify(&mut core);
        drop(core);
        announce_ready(&id);
    });
}

/// Says on stdout that the node is ready (after the agent's start-up lines, or among them).
pub fn announce_ready(node: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "==> Node {node} is ready");
    let _ = out.flush();
}
