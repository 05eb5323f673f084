//! The simulator's schedule: each runner's timers and each mock process's own exit, by
//! when it is due, and the driver's handle of each started task. Every map is shared
//! between clones of the simulator (the lockstep walk clones one per model transition) and
//! copied by a write that changes it, so a step copies only what it moves. Lookups take an
//! allocation's ID as `&str` and allocate nothing. What is due first is found by a scan
//! (a few timers and exits per allocation), not kept in a queue that every step would
//! copy: only a timed run asks for it.

use crate::client::Timer;
use crate::server::structs::AllocId;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub(super) struct Schedule {
    /// Each allocation's running timers: when each is due.
    timers: Arc<BTreeMap<AllocId, BTreeMap<Timer, i64>>>,
    /// When each task (by position) whose exit is a step now (killing, or a running
    /// poststop task) will exit by itself, by the mock driver's script.
    exits: Arc<BTreeMap<AllocId, BTreeMap<usize, i64>>>,
    /// The mock driver's handle of each started task, by position.
    handles: Arc<BTreeMap<AllocId, BTreeMap<usize, u64>>>,
}

impl Schedule {
    pub(super) fn has_timer(&self, alloc: &str, timer: Timer) -> bool {
        self.timers
            .get(alloc)
            .is_some_and(|timers| timers.contains_key(&timer))
    }

    /// The allocation's running timers, in their order.
    pub(super) fn timers_of(&self, alloc: &str) -> Vec<Timer> {
        self.timers
            .get(alloc)
            .map(|timers| timers.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Starts `timer` (again, if it runs), due at `due`.
    pub(super) fn start_timer(&mut self, alloc: &AllocId, timer: Timer, due: i64) {
        Arc::make_mut(&mut self.timers)
            .entry(alloc.clone())
            .or_default()
            .insert(timer, due);
    }

    /// Stops `timer` if it runs; copies nothing if it does not.
    pub(super) fn stop_timer(&mut self, alloc: &str, timer: Timer) {
        if !self.has_timer(alloc, timer) {
            return;
        }
        let timers = Arc::make_mut(&mut self.timers);
        if let Some(of_alloc) = timers.get_mut(alloc) {
            of_alloc.remove(&timer);
            if of_alloc.is_empty() {
                timers.remove(alloc);
            }
        }
    }

    /// The timer due soonest (of those due at once, the least allocation ID's first timer).
    pub(super) fn first_timer(&self) -> Option<(i64, AllocId, Timer)> {
        soonest(&self.timers)
    }

    pub(super) fn handle(&self, alloc: &str, task: usize) -> Option<&u64> {
        self.handles
            .get(alloc)
            .and_then(|handles| handles.get(&task))
    }

    pub(super) fn set_handle(&mut self, alloc: &AllocId, task: usize, handle: u64) {
        Arc::make_mut(&mut self.handles)
            .entry(alloc.clone())
            .or_default()
            .insert(task, handle);
    }

    /// Sets when task `task` will exit by itself (`None`: its exit is no step now); copies
    /// nothing if that is as it was.
    pub(super) fn set_exit(&mut self, alloc: &AllocId, task: usize, due: Option<i64>) {
        let was = self
            .exits
            .get(alloc.as_str())
            .and_then(|exits| exits.get(&task))
            .copied();
        if was == due {
            return;
        }
        let exits = Arc::make_mut(&mut self.exits);
        match due {
            Some(at) => {
                exits.entry(alloc.clone()).or_default().insert(task, at);
            }
            None => {
                if let Some(of_alloc) = exits.get_mut(alloc.as_str()) {
                    of_alloc.remove(&task);
                    if of_alloc.is_empty() {
                        exits.remove(alloc.as_str());
                    }
                }
            }
        }
    }

    /// The process exit due soonest (ties as [`Schedule::first_timer`]'s).
    pub(super) fn first_exit(&self) -> Option<(i64, AllocId, usize)> {
        soonest(&self.exits)
    }
}

/// The entry due soonest; of those due at once, the least allocation ID's, then the least
/// key's (the order of a queue sorted by `(due, allocation, key)`).
fn soonest<K: Copy + Ord>(due: &BTreeMap<AllocId, BTreeMap<K, i64>>) -> Option<(i64, AllocId, K)> {
    due.iter()
        .flat_map(|(alloc, of_alloc)| of_alloc.iter().map(move |(&key, &at)| (at, alloc, key)))
        .min()
        .map(|(at, alloc, key)| (at, alloc.clone(), key))
}
