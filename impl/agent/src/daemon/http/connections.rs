//! Who holds the agent's connections, so that nobody can hold all of them (issue 24,
//! finding 6: ~16,500 idle connections, reopened as the agent closed them at 30 s, timed out
//! 8 of 11 `/v1/status/leader` probes at 5 s; the 16,384 connections waited for a place
//! in the backlog, and a task, inheriting a 20,000-descriptor limit, could do it).
//!
//! * **A cap that leaves descriptors over**: at most half the agent's open-files limit (and
//!   at most the configured maximum) is connections; the rest is for the tasks' control
//!   connections and pidfds, the store and the logs.
//! * **Idle connections are shed, oldest first**: a connection is idle while it has no
//!   request in flight (a blocking query waiting is in flight). A new connection that
//!   finds the cap reached sheds the connection idle the longest, and is served; only if
//!   none is idle is it closed at once. So a crowd of idle connections makes room for
//!   every new one. A shed connection with no request in flight is closed at once, not
//!   gracefully: hyper's graceful shutdown waits out the header-read timeout (30 s) on a
//!   connection that has sent part of a request head, and a crowd sending one byte each
//!   would have held the accept loop to one connection a second.
//! * **Never more open than the cap, plus one** (plus one more for each shed connection
//!   still open after `SHED_PATIENCE`): a shed connection closes a moment later, not at
//!   once, so the accept loop waits for [`Registry::room`] before it accepts again (the
//!   kernel's backlog holds the newcomers meanwhile). Without it a burst of newcomers
//!   each shed one and added one, and the agent ran out of descriptors (CI, 320
//!   connections under `--nofile=256`).
//! * **A share per peer address**: a non-loopback address holds at most a quarter of the
//!   cap; past it, its own oldest idle connection is shed (or the new one refused). Every
//!   local client comes from 127.0.0.1, so loopback has the whole cap.
//!
//! Measured (`proofs/e2e/test_resource_bounds.py`): 16,500 idle connections opened in
//! 4.6 s, 6,501 shed, at most 10,001 open at once (a cap of 10,000), and 11
//! `/v1/status/leader` probes meanwhile, the slowest 5 ms. `/v1/metrics` gives the
//! connections open, shed, admitted and the most open at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One connection's standing, shared with its task.
#[derive(Debug)]
pub struct Handle {
    /// Woken when the connection is to go.
    pub shed: tokio::sync::Notify,
    id: u64,
    registry: Arc<Registry>,
}

#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    /// Requests in flight (a response being sent counts until its body is dropped).
    in_flight: u32,
    /// Since when it has had none (`None` while one is in flight).
    idle_since: Option<Instant>,
    /// Asked to go: not counted as idle any more.
    shedding: bool,
    handle: std::sync::Weak<Handle>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    entries: HashMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
    /// Connections shed since the start (for the metrics).
    shed: u64,
    /// Connections admitted since the start.
    admitted: u64,
    /// The most connections open at once since the start.
    peak: usize,
}

/// The registry's counts, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Open now (those being shed included, until they close).
    pub open: usize,
    /// Shed since the start.
    pub shed: u64,
    /// Admitted since the start.
    pub admitted: u64,
    /// The most open at once since the start.
    pub peak: usize,
}

#[derive(Debug)]
pub struct Registry {
    cap: usize,
    peer_cap: usize,
    state: Mutex<State>,
    /// Woken whenever a connection ends.
    freed: tokio::sync::Notify,
}

/// How long the accept loop waits for shed connections to close before it goes on anyway
/// (one that took a request in the moment before it was told to go finishes it first).
const SHED_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// What [`Registry::admit`] decided.
pub enum Admission {
    Admitted(Arc<Handle>),
    /// The cap is reached and nothing is idle: the connection is closed at once.
    Refused,
}

impl Registry {
    /// A registry for at most `cap` connections, a quarter of them per non-loopback peer.
    pub fn new(cap: usize) -> Arc<Registry> {
        let cap = cap.max(4);
        Arc::new(Registry {
            cap,
            peer_cap: (cap / 4).max(1),
            state: Mutex::new(State::default()),
            freed: tokio::sync::Notify::new(),
        })
    }

    /// Whether a connection accepted now keeps the open ones within the cap plus one: below
    /// the cap, or at it with none shed and still open (a newcomer then sheds one).
    fn has_room(&self) -> bool {
        let state = self.state();
        state.entries.len() < self.cap || !state.entries.values().any(|e| e.shedding)
    }

    /// Returns once there is room for one more connection (see [`Registry::has_room`]), or
    /// after [`SHED_PATIENCE`] without any.
    pub async fn room(&self) {
        let deadline = tokio::time::Instant::now() + SHED_PATIENCE;
        loop {
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if self.has_room() {
                return;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return;
            }
        }
    }

    /// The cap for an agent whose open-files limit is `limit`: at most `configured`, and at
    /// most half the limit (the rest is the tasks' and the store's).
    pub fn cap_for(configured: usize, limit: u64) -> usize {
        let half = usize::try_from(limit / 2).unwrap_or(usize::MAX);
        configured.min(half).max(4)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("the connections' lock is never poisoned")
    }

    /// A new connection from `peer`: admitted, shedding the connection idle the longest
    /// where the cap (or the peer's share) is reached; refused if none is idle.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Admission {
        let mut shed = None;
        let mut state = self.state();
        let peer_full =
            !peer.is_loopback() && state.per_peer.get(&peer).copied().unwrap_or(0) >= self.peer_cap;
        let full = state.entries.len() >= self.cap;
        if full || peer_full {
            let oldest = state
                .entries
                .iter()
                .filter(|(_, e)| !e.shedding && (!peer_full || e.peer == peer))
                .filter_map(|(id, e)| e.idle_since.map(|since| (since, *id)))
                .min();
            let Some((_, id)) = oldest else {
                return Admission::Refused;
            };
            let entry = state.entries.get_mut(&id).expect("found above");
            entry.shedding = true;
            shed = entry.handle.upgrade();
            state.shed += 1;
        }
        state.next_id += 1;
        let id = state.next_id;
        let handle = Arc::new(Handle {
            shed: tokio::sync::Notify::new(),
            id,
            registry: Arc::clone(self),
        });
        state.entries.insert(
            id,
            Entry {
                peer,
                in_flight: 0,
                idle_since: Some(Instant::now()),
                shedding: false,
                handle: Arc::downgrade(&handle),
            },
        );
        *state.per_peer.entry(peer).or_default() += 1;
        state.admitted += 1;
        state.peak = state.peak.max(state.entries.len());
        drop(state);
        // Told, and let go of, outside the lock: this may be the last reference to it, and
        // its drop takes the lock.
        if let Some(shed) = shed {
            shed.shed.notify_one();
        }
        Admission::Admitted(handle)
    }

    /// Connections open now, shed and admitted since the start, and the most open at once.
    pub fn counts(&self) -> Counts {
        let state = self.state();
        Counts {
            open: state.entries.len(),
            shed: state.shed,
            admitted: state.admitted,
            peak: state.peak,
        }
    }
}

impl Handle {
    /// Whether it has a request in flight now.
    pub fn is_busy(&self) -> bool {
        self.registry
            .state()
            .entries
            .get(&self.id)
            .is_some_and(|entry| entry.in_flight > 0)
    }

    /// A request arrived: in flight until the returned guard (kept with its response's
    /// body) is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        let mut state = self.registry.state();
        if let Some(entry) = state.entries.get_mut(&self.id) {
            entry.in_flight += 1;
            entry.idle_since = None;
        }
        Busy(Arc::clone(self))
    }
}

impl Drop for Handle {
    /// The connection has ended.
    fn drop(&mut self) {
        let mut state = self.registry.state();
        if let Some(entry) = state.entries.remove(&self.id) {
            if let Some(count) = state.per_peer.get_mut(&entry.peer) {
                *count -= 1;
                if *count == 0 {
                    state.per_peer.remove(&entry.peer);
                }
            }
        }
        drop(state);
        self.registry.freed.notify_waiters();
    }
}

/// A request in flight on a connection (see [`Handle::busy`]).
#[derive(Debug)]
pub struct Busy(Arc<Handle>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.registry.state();
        if let Some(entry) = state.entries.get_mut(&self.0.id) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            if entry.in_flight == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(registry: &Arc<Registry>, peer: &str) -> Option<Arc<Handle>> {
        match registry.admit(peer.parse().unwrap()) {
            Admission::Admitted(handle) => Some(handle),
            Admission::Refused => None,
        }
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_shed_and_busy_ones_are_kept() {
        let registry = Registry::new(4);
        let handles: Vec<_> = (0..4)
            .map(|_| admitted(&registry, "127.0.0.1").unwrap())
            .collect();
        let busy = handles[0].busy();
        // The fifth sheds the oldest idle one: the second (the first is busy).
        let fifth = admitted(&registry, "127.0.0.1").unwrap();
        assert_eq!(registry.counts().shed, 1);
        let shed_one = |handle: &Arc<Handle>| {
            let notified = handle.shed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable()
        };
        assert!(
            shed_one(&handles[1]),
            "the oldest idle connection is asked to go"
        );
        assert!(!shed_one(&handles[2]) && !shed_one(&handles[0]));
        drop(handles);
        drop(busy);
        assert_eq!(registry.counts().open, 1, "only the fifth is left");
        drop(fifth);
        assert_eq!(
            registry.counts(),
            Counts {
                open: 0,
                shed: 1,
                admitted: 5,
                // The shed one was still open when the fifth came.
                peak: 5,
            }
        );
    }

    #[test]
    fn with_nothing_idle_a_new_connection_is_refused() {
        let registry = Registry::new(4);
        let handles: Vec<_> = (0..4)
            .map(|_| admitted(&registry, "127.0.0.1").unwrap())
            .collect();
        let _busy: Vec<_> = handles.iter().map(Handle::busy).collect();
        assert!(admitted(&registry, "127.0.0.1").is_none());
    }

    #[test]
    fn a_remote_peer_holds_a_quarter_of_the_cap_and_sheds_its_own() {
        let registry = Registry::new(16);
        let theirs: Vec<_> = (0..4)
            .map(|_| admitted(&registry, "10.0.0.9").unwrap())
            .collect();
        let ours = admitted(&registry, "127.0.0.1").unwrap();
        let _fifth = admitted(&registry, "10.0.0.9").unwrap();
        let notified = ours.shed.notified();
        let mut notified = std::pin::pin!(notified);
        assert!(
            !notified.as_mut().enable(),
            "another peer's connection is not shed"
        );
        let notified = theirs[0].shed.notified();
        let mut notified = std::pin::pin!(notified);
        assert!(notified.as_mut().enable(), "the peer's own oldest is");
    }

    #[test]
    fn while_a_shed_connection_is_open_there_is_no_room_at_the_cap() {
        let registry = Registry::new(4);
        let mut handles: Vec<_> = (0..4)
            .map(|_| admitted(&registry, "127.0.0.1").unwrap())
            .collect();
        assert!(registry.has_room(), "at the cap, a newcomer may shed one");
        handles.push(admitted(&registry, "127.0.0.1").unwrap());
        assert!(!registry.has_room(), "the shed one has not closed yet");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let waiting = {
            let registry = Arc::clone(&registry);
            runtime.spawn(async move { registry.room().await })
        };
        let shed = handles.remove(0);
        runtime.block_on(async {
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished(), "no room until it closes");
            drop(shed);
            tokio::time::timeout(std::time::Duration::from_millis(500), waiting)
                .await
                .expect("room as soon as it closed")
                .unwrap();
        });
        assert!(registry.has_room());
    }

    #[test]
    fn the_cap_leaves_half_the_descriptors() {
        assert_eq!(Registry::cap_for(16_384, 20_000), 10_000);
        assert_eq!(Registry::cap_for(16_384, 1 << 20), 16_384);
        assert_eq!(Registry::cap_for(16_384, 1_024), 512);
    }
}
