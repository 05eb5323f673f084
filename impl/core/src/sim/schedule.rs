//! The simulator's schedule: each runner's timers and each mock process's own exit, by
//! when it is due, and the driver's handle of each started task. Every map is shared
//! between clones of the simulator (the lockstep walk clones one per model transition) and
//! copied by a write that changes it, so a step copies only what it moves. Lookups take an
//! allocation's `Id` (compared by its first eight bytes as a number, its text read only when
//! those agree) and allocate nothing. What
//! is due first is kept in order by a queue built when a timed run first asks
//! (`run_until_quiet`), kept up by every write while this copy lives, and not carried by a
//! clone: the walk, which clones per model transition and never asks, never copies it, and
//! a timed run over 10,000 allocations finds the soonest in O(log n) (a scan per step made
//! `sim_stop` quadratic).

use crate::client::Timer;
use crate::server::structs::AllocId;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

#[derive(Debug, Default)]
pub(super) struct Schedule {
    /// Each allocation's running timers: when each is due.
    timers: Arc<BTreeMap<AllocId, BTreeMap<Timer, i64>>>,
    /// When each task (by position) whose exit is a step now (killing, or a running
    /// poststop task) will exit by itself, by the mock driver's script: an allocation's
    /// entry has one place per task, and is there while one of them is set.
    exits: Arc<BTreeMap<AllocId, Box<[Option<i64>]>>>,
    /// The mock driver's handle of each started task, by position.
    handles: Arc<BTreeMap<AllocId, BTreeMap<usize, u64>>>,
    /// `timers` and `exits` by when each is due, once asked for.
    queues: OnceLock<Queues>,
}

/// What is due, sorted by `(due, allocation, key)`: the order of the soonest first.
#[derive(Debug, Default)]
struct Queues {
    timers: BTreeSet<(i64, AllocId, Timer)>,
    exits: BTreeSet<(i64, AllocId, usize)>,
}

impl Clone for Schedule {
    /// The maps shared; the queues left behind (built again if the clone is asked).
    fn clone(&self) -> Self {
        Schedule {
            timers: Arc::clone(&self.timers),
            exits: Arc::clone(&self.exits),
            handles: Arc::clone(&self.handles),
            queues: OnceLock::new(),
        }
    }
}

impl Schedule {
    pub(super) fn has_timer(&self, alloc: &AllocId, timer: Timer) -> bool {
        self.timers
            .get(alloc)
            .is_some_and(|timers| timers.contains_key(&timer))
    }

    /// The allocation's running timers, in their order.
    pub(super) fn timers_of(&self, alloc: &AllocId) -> Vec<Timer> {
        self.timers
            .get(alloc)
            .map(|timers| timers.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Starts `timer` (again, if it runs), due at `due`.
    pub(super) fn start_timer(&mut self, alloc: &AllocId, timer: Timer, due: i64) {
        let was = Arc::make_mut(&mut self.timers)
            .entry(alloc.clone())
            .or_default()
            .insert(timer, due);
        if let Some(queues) = self.queues.get_mut() {
            if let Some(was) = was {
                queues.timers.remove(&(was, alloc.clone(), timer));
            }
            queues.timers.insert((due, alloc.clone(), timer));
        }
    }

    /// Stops `timer` if it runs; copies nothing if it does not. One lookup of the
    /// allocation while this copy has the table to itself, two while a clone shares it.
    pub(super) fn stop_timer(&mut self, alloc: &AllocId, timer: Timer) {
        if Arc::get_mut(&mut self.timers).is_none() && !self.has_timer(alloc, timer) {
            return;
        }
        let timers = Arc::make_mut(&mut self.timers);
        let Entry::Occupied(mut of_alloc) = timers.entry(alloc.clone()) else {
            return;
        };
        let was = of_alloc.get_mut().remove(&timer);
        if of_alloc.get().is_empty() {
            of_alloc.remove();
        }
        if let (Some(queues), Some(was)) = (self.queues.get_mut(), was) {
            queues.timers.remove(&(was, alloc.clone(), timer));
        }
    }

    /// The timer due soonest (of those due at once, the least allocation ID's first timer).
    pub(super) fn first_timer(&self) -> Option<(i64, AllocId, Timer)> {
        self.queues().timers.first().cloned()
    }

    pub(super) fn handle(&self, alloc: &AllocId, task: usize) -> Option<&u64> {
        self.handles
            .get(alloc)
            .and_then(|handles| handles.get(&task))
    }

    /// The driver's handles of the allocation's started tasks, by position.
    pub(super) fn handles_of(&self, alloc: &AllocId) -> Option<&BTreeMap<usize, u64>> {
        self.handles.get(alloc)
    }

    pub(super) fn set_handle(&mut self, alloc: &AllocId, task: usize, handle: u64) {
        Arc::make_mut(&mut self.handles)
            .entry(alloc.clone())
            .or_default()
            .insert(task, handle);
    }

    /// Sets when each task of the allocation will exit by itself, `dues[i]` for task `i`
    /// (`None`: its exit is no step now), replacing the allocation's whole entry: a task at
    /// or past `dues.len()` has none after. One lookup, and nothing copied, when all are as
    /// they were, as they are after most steps; else one write of the entry.
    pub(super) fn set_exits(&mut self, alloc: &AllocId, dues: &[Option<i64>]) {
        let current = self.exits.get(alloc).map_or(&[][..], |exits| &exits[..]);
        let was = |task: usize| current.get(task).copied().flatten();
        let tasks = dues.len().max(current.len());
        let due = |task: usize| dues.get(task).copied().flatten();
        if (0..tasks).all(|task| was(task) == due(task)) {
            return;
        }
        if let Some(queues) = self.queues.get_mut() {
            for task in (0..tasks).filter(|&task| was(task) != due(task)) {
                if let Some(was) = was(task) {
                    queues.exits.remove(&(was, alloc.clone(), task));
                }
                if let Some(at) = due(task) {
                    queues.exits.insert((at, alloc.clone(), task));
                }
            }
        }
        let exits = Arc::make_mut(&mut self.exits);
        if dues.iter().all(Option::is_none) {
            exits.remove(alloc);
        } else {
            exits.insert(alloc.clone(), dues.into());
        }
    }

    /// Sets when task `task` alone will exit by itself (as [`Schedule::set_exits`]).
    #[cfg(test)]
    fn set_exit(&mut self, alloc: &AllocId, task: usize, due: Option<i64>) {
        let mut dues = self
            .exits
            .get(alloc)
            .map_or_else(Vec::new, |exits| exits.to_vec());
        dues.resize(dues.len().max(task + 1), None);
        dues[task] = due;
        self.set_exits(alloc, &dues);
    }

    /// The process exit due soonest (ties as [`Schedule::first_timer`]'s).
    pub(super) fn first_exit(&self) -> Option<(i64, AllocId, usize)> {
        self.queues().exits.first().cloned()
    }

    /// The queues, built from the maps if this copy has none yet.
    fn queues(&self) -> &Queues {
        self.queues.get_or_init(|| Queues {
            timers: sorted(&self.timers),
            exits: self
                .exits
                .iter()
                .flat_map(|(alloc, dues)| {
                    dues.iter()
                        .enumerate()
                        .filter_map(move |(task, due)| Some((*due.as_ref()?, alloc.clone(), task)))
                })
                .collect(),
        })
    }
}

/// Every entry as `(due, allocation, key)`, in that order.
fn sorted<K: Copy + Ord>(due: &BTreeMap<AllocId, BTreeMap<K, i64>>) -> BTreeSet<(i64, AllocId, K)> {
    due.iter()
        .flat_map(|(alloc, of_alloc)| {
            of_alloc
                .iter()
                .map(move |(&key, &at)| (at, alloc.clone(), key))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queues a copy keeps up through its writes agree with the ones a fresh clone
    /// builds from the maps, ties broken by allocation, then by key.
    #[test]
    fn the_kept_queues_agree_with_ones_built_afresh() {
        let (a, b) = (AllocId::from("a"), AllocId::from("b"));
        let mut schedule = Schedule::default();
        schedule.start_timer(&b, Timer::KillTimeout(0), 10);
        schedule.start_timer(&a, Timer::KillTimeout(1), 10);
        schedule.start_timer(&a, Timer::GroupDelay, 10);
        schedule.set_exit(&b, 0, Some(5));
        assert_eq!(
            schedule.first_timer(),
            Some((10, a.clone(), Timer::GroupDelay))
        );
        assert_eq!(schedule.first_exit(), Some((5, b.clone(), 0)));
        // Writes once the queues exist: a timer restarted later, one stopped, exits moved.
        schedule.start_timer(&a, Timer::GroupDelay, 30);
        schedule.stop_timer(&a, Timer::KillTimeout(1));
        schedule.set_exit(&b, 0, None);
        schedule.set_exit(&a, 2, Some(7));
        let afresh = schedule.clone();
        assert_eq!(
            schedule.first_timer(),
            Some((10, b.clone(), Timer::KillTimeout(0)))
        );
        assert_eq!(schedule.first_timer(), afresh.first_timer());
        assert_eq!(schedule.first_exit(), Some((7, a.clone(), 2)));
        assert_eq!(schedule.first_exit(), afresh.first_exit());
        schedule.stop_timer(&b, Timer::KillTimeout(0));
        assert_eq!(schedule.first_timer(), Some((30, a, Timer::GroupDelay)));
        assert_eq!(schedule.clone().first_timer(), schedule.first_timer());
    }
}
