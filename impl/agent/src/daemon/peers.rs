//! Other agents this one knows (`/v1/agent/join`), so that `/v1/regions` and
//! `/v1/agent/members` list them as Nomad's federated servers do. An agent listens on its
//! `ports.serf` (Nomad's gossip port) only when a configuration file sets it; a join connects
//! there, and the two exchange who they are and remember each other. That is all: no gossip,
//! no failure detection, no forwarding of requests to another region; peers are kept in
//! memory only.
//!
//! The exchange, one line of JSON each way at a time: the joiner sends a nonce, the
//! listener its own; then the joiner sends who it is with a proof, and the listener
//! answers the same. A proof is HMAC-SHA256, under the peers' shared key (Nomad's
//! `server.encrypt`), of the role, both nonces and the line's `Peer` (issue 24: anyone who
//! reached the port could add peers, 70 of them filled the list, `/v1/regions` listed the
//! attacker's regions to anonymous readers, and real joins were refused until a restart).
//! With a key, a side that cannot prove it holds the same key is refused and not
//! remembered; without one (Nomad's own gossip without `encrypt` takes anyone too, and
//! Nomad's Go API tests join so), proofs are empty and the agent says at start that anyone
//! can join.
//!
//! Hostile input: a line is at most [`MAX_LINE`] bytes, and a whole exchange must be done
//! within [`TIMEOUT`] (a peer that trickles bytes is cut off at the deadline, not per
//! read); names are checked as the agent's own are; at most [`MAX_PEERS`] are kept; at most
//! [`MAX_EXCHANGES`] exchanges run at once each way (others are refused); a join names IP
//! addresses only (no name lookup, which has no time limit). The peers are only listed,
//! never trusted with anything.

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

/// A nonce line, or a peer's line with its proof (hex; empty without a key).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct Line {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    nonce: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    peer: Option<Peer>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    proof: String,
    /// Why the other side is refused: sent instead of its next line, before the close.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    error: String,
}

/// Which side a proof is made by: the joiner's and the listener's differ, so that one
/// cannot be sent back as the other.
#[derive(Clone, Copy)]
enum Role {
    Joiner,
    Listener,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn nonce() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("drawing a nonce: {e}"))?;
    Ok(hex(&bytes))
}

/// The HMAC of what a side says, under `key`: its role, its own nonce, the other side's,
/// and its `Peer` as sent.
fn mac(key: &[u8], role: Role, own: &str, theirs: &str, peer: &Peer) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    let role = match role {
        Role::Joiner => "quiesce-peer-v1 joiner",
        Role::Listener => "quiesce-peer-v1 listener",
    };
    for part in [role, own, theirs] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    mac.update(&serde_json::to_vec(peer).expect("peers serialize"));
    mac
}

fn prove(key: Option<&[u8]>, role: Role, own: &str, theirs: &str, peer: &Peer) -> String {
    use hmac::Mac;
    key.map_or_else(String::new, |key| {
        hex(&mac(key, role, own, theirs, peer).finalize().into_bytes())
    })
}

/// Checks the other side's proof (made in `role`, with its nonce `theirs` first).
fn verify(
    key: Option<&[u8]>,
    role: Role,
    theirs: &str,
    own: &str,
    peer: &Peer,
    proof: &str,
) -> Result<(), String> {
    use hmac::Mac;
    let Some(key) = key else {
        return Ok(());
    };
    // Hex, so bytes are characters (a multi-byte character must not split a slice).
    let bytes: Option<Vec<u8>> = (proof.len() == 64 && proof.is_ascii())
        .then(|| {
            (0..32)
                .map(|i| u8::from_str_radix(&proof[2 * i..2 * i + 2], 16).ok())
                .collect()
        })
        .flatten();
    let Some(bytes) = bytes else {
        return Err("no proof of the peers' key (server.encrypt)".into());
    };
    mac(key, role, theirs, own, peer)
        .verify_slice(&bytes)
        .map_err(|_| "the peer does not hold this agent's key (server.encrypt)".into())
}

/// One line, by `deadline` (each read waits only for what is left of it). Each side sends
/// its next line only once it has read the other's, so a read never takes in more than one.
fn read_line(stream: &TcpStream, deadline: Instant) -> Result<Line, String> {
    let line = read_any_line(stream, deadline)?;
    if line.error.is_empty() {
        Ok(line)
    } else {
        Err(format!("refused: {}", line.error))
    }
}

fn read_any_line(mut stream: &TcpStream, deadline: Instant) -> Result<Line, String> {
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

fn write_line(mut stream: &TcpStream, line: &Line, deadline: Instant) -> Result<(), String> {
    let mut bytes = serde_json::to_vec(line).expect("lines serialize");
    bytes.push(b'\n');
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(format!("not done within {TIMEOUT:?}"));
    }
    let _ = stream.set_write_timeout(Some(left));
    stream
        .write_all(&bytes)
        .map_err(|e| format!("writing: {e}"))
}

/// The peer a line names, or why it names none.
fn peer_of(line: Line) -> Result<(Peer, String), String> {
    match line.peer {
        Some(peer) => Ok((peer, line.proof)),
        None => Err("not a peer's line".into()),
    }
}

/// The listener's side of an exchange: the joiner, proven, is remembered before the answer
/// goes (a joiner that has its answer finds itself listed).
fn serve_exchange(
    stream: &TcpStream,
    own: &Peer,
    key: Option<&[u8]>,
    peers: &Peers,
) -> Result<(), String> {
    let deadline = Instant::now() + TIMEOUT;
    let theirs = read_line(stream, deadline)?.nonce;
    if theirs.is_empty() || theirs.len() > 128 {
        return Err("no nonce".into());
    }
    let mine = nonce()?;
    let hello = Line {
        nonce: mine.clone(),
        ..Line::default()
    };
    write_line(stream, &hello, deadline)?;
    let (peer, proof) = peer_of(read_line(stream, deadline)?)?;
    if let Err(error) = verify(key, Role::Joiner, &theirs, &mine, &peer, &proof) {
        let refusal = Line {
            error: error.clone(),
            ..Line::default()
        };
        let _ = write_line(stream, &refusal, deadline);
        return Err(error);
    }
    if let Err(error) = peers.remember(own, peer) {
        let refusal = Line {
            error: error.clone(),
            ..Line::default()
        };
        let _ = write_line(stream, &refusal, deadline);
        return Err(error);
    }
    let answer = Line {
        peer: Some(own.clone()),
        proof: prove(key, Role::Listener, &mine, &theirs, own),
        ..Line::default()
    };
    write_line(stream, &answer, deadline)
}

/// The joiner's side: the listener, proven.
fn join_exchange(stream: &TcpStream, own: &Peer, key: Option<&[u8]>) -> Result<Peer, String> {
    let deadline = Instant::now() + TIMEOUT;
    let mine = nonce()?;
    let hello = Line {
        nonce: mine.clone(),
        ..Line::default()
    };
    write_line(stream, &hello, deadline)?;
    let theirs = read_line(stream, deadline)?.nonce;
    if theirs.is_empty() || theirs.len() > 128 {
        return Err("no nonce".into());
    }
    let line = Line {
        peer: Some(own.clone()),
        proof: prove(key, Role::Joiner, &mine, &theirs, own),
        ..Line::default()
    };
    write_line(stream, &line, deadline)?;
    let (peer, proof) = peer_of(read_line(stream, deadline)?)?;
    verify(key, Role::Listener, &theirs, &mine, &peer, &proof)?;
    Ok(peer)
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
                let own = Peer::of(&shared.config);
                let key = shared.config.peer_key.as_deref();
                let exchanged = serve_exchange(&stream, &own, key, &shared.peers);
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
            let stream = TcpStream::connect_timeout(&target, TIMEOUT).map_err(|e| e.to_string())?;
            let peer = join_exchange(&stream, &own, shared.config.peer_key.as_deref())?;
            shared.peers.remember(&own, peer)
        })();
        match exchanged {
            Ok(()) => joined += 1,
            Err(error) => errors.push(format!("{address:?}: {error}")),
        }
    }
    (joined, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_of_multi_byte_characters_is_refused_not_a_panic() {
        let peer = Peer {
            name: "a".into(),
            region: "global".into(),
            datacenter: "dc1".into(),
            http_addr: "127.0.0.1:4646".into(),
        };
        // 64 bytes, 22 characters: slicing it by byte pairs would split a character.
        let proof = format!("{}a", "€".repeat(21));
        assert_eq!(proof.len(), 64);
        let refused = verify(Some(b"key"), Role::Joiner, "n1", "n2", &peer, &proof);
        assert!(refused.unwrap_err().contains("server.encrypt"));
    }
}
