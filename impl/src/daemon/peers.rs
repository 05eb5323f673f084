//! Other agents this one knows (`/v1/agent/join`), so that `/v1/regions` and
//! `/v1/agent/members` list them as Nomad's federated servers do. Each agent listens on its
//! `ports.serf` (Nomad's gossip port); a join connects there, and the two exchange one line
//! of JSON each — who they are — and remember each other. That is all: no gossip, no
//! failure detection, no forwarding of requests to another region; peers are kept in
//! memory only.
//!
//! Hostile input: a line is at most [`MAX_LINE`] bytes and must arrive within [`TIMEOUT`];
//! names are checked as the agent's own are; at most [`MAX_PEERS`] are kept; connections
//! are served one at a time.

use super::*;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

pub const MAX_LINE: u64 = 4096;
pub const TIMEOUT: Duration = Duration::from_secs(5);
pub const MAX_PEERS: usize = 64;
/// The most addresses one join request names.
pub const MAX_JOIN_ADDRESSES: usize = 16;

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

fn read_line(stream: &TcpStream) -> Result<Peer, String> {
    let mut line = String::new();
    BufReader::new(stream.take(MAX_LINE))
        .read_line(&mut line)
        .map_err(|e| format!("reading: {e}"))?;
    if !line.ends_with('\n') {
        return Err(format!("no line of at most {MAX_LINE} bytes"));
    }
    serde_json::from_str(&line).map_err(|e| format!("not a peer's line: {e}"))
}

fn write_line(mut stream: &TcpStream, peer: &Peer) -> Result<(), String> {
    let mut line = serde_json::to_vec(peer).expect("peers serialize");
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| format!("writing: {e}"))
}

/// Listens on `port` (the HTTP listener's address) for agents that join this one.
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
            let _ = stream.set_read_timeout(Some(TIMEOUT));
            let _ = stream.set_write_timeout(Some(TIMEOUT));
            let own = Peer::of(&shared.config);
            let exchanged = read_line(&stream).and_then(|peer| {
                write_line(&stream, &own)?;
                shared.peers.remember(&own, peer)
            });
            if let Err(error) = exchanged {
                say!("a peer's join: {error}");
            }
        }
    });
    Ok(())
}

/// Joins the agents at `addresses` (`host:port` of their `ports.serf`): how many joined,
/// and what went wrong with the others.
pub fn join(shared: &Shared, addresses: &[&str]) -> (usize, Vec<String>) {
    let own = Peer::of(&shared.config);
    let mut joined = 0;
    let mut errors = Vec::new();
    for address in addresses {
        let exchanged = (|| {
            let target = address
                .to_socket_addrs()
                .map_err(|e| e.to_string())?
                .next()
                .ok_or("no address")?;
            let stream = TcpStream::connect_timeout(&target, TIMEOUT).map_err(|e| e.to_string())?;
            let _ = stream.set_read_timeout(Some(TIMEOUT));
            let _ = stream.set_write_timeout(Some(TIMEOUT));
            write_line(&stream, &own)?;
            let peer = read_line(&stream)?;
            shared.peers.remember(&own, peer)
        })();
        match exchanged {
            Ok(()) => joined += 1,
            Err(error) => errors.push(format!("{address:?}: {error}")),
        }
    }
    (joined, errors)
}
