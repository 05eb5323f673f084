//! Other agents this one knows (`/v1/agent/join`), so that `/v1/regions` and
//! `/v1/agent/members` list them as Nomad's federated servers do. Each agent listens on its
//! `ports.serf` (Nomad's gossip port); a join connects there, and the two exchange one line
//! of JSON each — who they are — and remember each other. That is all: no gossip, no
//! failure detection, no forwarding of requests to another region; peers are kept in
//! memory only.
//!
//! Hostile input: a line is at most [`MAX_LINE`] bytes, and a whole exchange must be done
//! within [`TIMEOUT`] (a peer that trickles bytes is cut off at the deadline, not per
//! read); names are checked as the agent's own are; at most [`MAX_PEERS`] are kept; at most
//! [`MAX_EXCHANGES`] exchanges run at once each way (others are refused); a join names IP
//! addresses only (no name lookup, which has no time limit). Anyone who can reach the port
//! can add a peer: the peers are only listed (regions, members), never trusted with
//! anything.

use super::*;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const MAX_LINE: u64 = 4096;
pub const TIMEOUT: Duration = Duration::from_secs(5);
pub const MAX_PEERS: usize = 64;
/// The most addresses one join request names.
pub const MAX_JOIN_ADDRESSES: usize = 16;
/// The most exchanges under way at once, served and started each.
pub const MAX_EXCHANGES: usize = 4;

/// Who an agent is, as it tells another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Peer {
    pub name: String,
    pub region: String,
    pub datacenter: String,
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
}

impl Peer {
    fn of(config: &AgentConfig) -> Peer {
        Peer {
            name: config.name.clone(),
            region: config.region.clone(),
            datacenter: config.datacenter.clone(),
            http_addr: config.bind.to_string(),
        }
    }

    fn problem(&self) -> Option<String> {
        for (what, text) in [
            ("name", &self.name),
            ("region", &self.region),
            ("datacenter", &self.datacenter),
            ("HTTP address", &self.http_addr),
        ] {
            if text.is_empty() || text.len() > 128 || text.chars().any(char::is_control) {
                return Some(format!(
                    "the peer's {what} {text:?} is not 1 to 128 bytes without control characters"
                ));
            }
        }
        None
    }
}

/// The peers known, by member name (`name.region`).
#[derive(Default)]
pub struct Peers {
    known: Mutex<BTreeMap<String, Peer>>,
    /// Exchanges under way: served (`.0`), started by joins (`.1`).
    serving: AtomicUsize,
    joining: AtomicUsize,
}

/// A slot of [`MAX_EXCHANGES`], given back when dropped.
struct Slot<'a>(&'a AtomicUsize);

impl<'a> Slot<'a> {
    fn take(count: &'a AtomicUsize) -> Option<Slot<'a>> {
        let taken = count.fetch_add(1, Ordering::SeqCst);
        if taken >= MAX_EXCHANGES {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(count))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Peers {
    pub fn list(&self) -> Vec<Peer> {
        self.known
            .lock()
            .expect("the peers lock is never poisoned")
            .values()
            .cloned()
            .collect()
    }

    fn remember(&self, own: &Peer, peer: Peer) -> Result<(), String> {
        if let Some(problem) = peer.problem() {
            return Err(problem);
        }
        if peer.name == own.name && peer.region == own.region {
            return Err(format!("{}.{} is this agent", peer.name, peer.region));
        }
        let mut known = self.known.lock().expect("the peers lock is never poisoned");
        let key = format!("{}.{}", peer.name, peer.region);
        if !known.contains_key(&key) && known.len() >= MAX_PEERS {
            return Err(format!("this agent already knows {MAX_PEERS} peers"));
        }
        known.insert(key, peer);
        Ok(())
    }
}

/// One line, by `deadline` (each read waits only for what is left of it).
fn read_line(mut stream: &TcpStream, deadline: Instant) -> Result<Peer, String> {
    let mut line = Vec::new();
    let mut chunk = [0u8; 512];
    while !line.contains(&b'\n') {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no line within {TIMEOUT:?}"));
        }
        let _ = stream.set_read_timeout(Some(left));
        let read = stream
            .read(&mut chunk)
            .map_err(|e| format!("reading: {e}"))?;
        if read == 0 {
            return Err("the connection closed before a line".into());
        }
        line.extend_from_slice(&chunk[..read]);
        if line.len() as u64 > MAX_LINE {
            return Err(format!("no line of at most {MAX_LINE} bytes"));
        }
    }
    let end = line.iter().position(|b| *b == b'\n').expect("a line");
    serde_json::from_slice(&line[..end]).map_err(|e| format!("not a peer's line: {e}"))
}

fn write_line(mut stream: &TcpStream, peer: &Peer, deadline: Instant) -> Result<(), String> {
    let mut line = serde_json::to_vec(peer).expect("peers serialize");
    line.push(b'\n');
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(format!("not done within {TIMEOUT:?}"));
    }
    let _ = stream.set_write_timeout(Some(left));
    stream.write_all(&line).map_err(|e| format!("writing: {e}"))
}

/// Listens on `port` (the HTTP listener's address) for agents that join this one: each
/// connection on a thread of its own, at most [`MAX_EXCHANGES`] at once.
pub fn listen(shared: &Arc<Shared>, port: u16) -> Result<(), String> {
    let address = SocketAddr::new(shared.config.bind.ip(), port);
    let listener =
        TcpListener::bind(address).map_err(|e| format!("listening for peers on {address}: {e}"))?;
    let weak = Arc::downgrade(shared);
    spawn_named("peers", move || {
        for stream in listener.incoming() {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let Ok(stream) = stream else {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            };
            if shared.peers.serving.load(Ordering::SeqCst) >= MAX_EXCHANGES {
                continue; // dropped: closed unread
            }
            spawn_named("peer", move || {
                let Some(_slot) = Slot::take(&shared.peers.serving) else {
                    return;
                };
                let deadline = Instant::now() + TIMEOUT;
                let own = Peer::of(&shared.config);
                let exchanged = read_line(&stream, deadline).and_then(|peer| {
                    write_line(&stream, &own, deadline)?;
                    shared.peers.remember(&own, peer)
                });
                if let Err(error) = exchanged {
                    say!("a peer's join: {error}");
                }
            });
        }
    });
    Ok(())
}

/// Joins the agents at `addresses` (`ip:port` of their `ports.serf`): how many joined,
/// and what went wrong with the others.
pub fn join(shared: &Shared, addresses: &[&str]) -> (usize, Vec<String>) {
    let Some(_slot) = Slot::take(&shared.peers.joining) else {
        return (
            0,
            vec![format!("{MAX_EXCHANGES} joins are under way already")],
        );
    };
    let own = Peer::of(&shared.config);
    let mut joined = 0;
    let mut errors = Vec::new();
    for address in addresses {
        let exchanged = (|| {
            let target: SocketAddr = address
                .parse()
                .map_err(|_| "not an IP address and port (no names are looked up)".to_string())?;
            let deadline = Instant::now() + TIMEOUT;
            let stream = TcpStream::connect_timeout(&target, TIMEOUT).map_err(|e| e.to_string())?;
            write_line(&stream, &own, deadline)?;
            let peer = read_line(&stream, deadline)?;
            shared.peers.remember(&own, peer)
        })();
        match exchanged {
            Ok(()) => joined += 1,
            Err(error) => errors.push(format!("{address:?}: {error}")),
        }
    }
    (joined, errors)
}
