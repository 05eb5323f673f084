//! The rules every effect in an event log must keep, whatever job it belongs to and whether
//! or not the model can follow that job (DESIGN.md's invariants as they show in effects):
//!
//! * `prestop_hooks_always_run`: a task's kill signal goes out only once its own services
//!   and — unless the kill is an in-place restart's, which leaves the group alone — its
//!   group's are deregistered (no registration of the allocation is left that the task or
//!   the group owns);
//! * a kill signal at most once per kill: each `Signal` of a task carries a kill number
//!   higher than the last one's;
//! * `kill_timeout_respected`: SIGKILL only as the effect of that task's `KillTimeout` step,
//!   after the kill signal of the same kill, and no sooner than that kill's timeout after
//!   it began (where the signal's effect records its timeout: from the moment it records,
//!   else from its entry's time; a signal logged by a step taken again after a crash is
//!   not timed, as its delivery, when the timeout began, came before);
//! * a task is launched only when it is not running: first, or again after its process
//!   ended (a restart); never twice over a live process.

use quiesce_core::server::structs::AllocId;
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::{Effect, Step};
use std::collections::{BTreeMap, BTreeSet};

/// What the effects so far have done, by allocation.
#[derive(Default)]
pub struct EffectRules {
    /// Registered services by (allocation, owner: a task or the group).
    registered: BTreeMap<(AllocId, Option<String>), BTreeSet<String>>,
    /// The last kill number signalled, by (allocation, task).
    signalled: BTreeMap<(AllocId, String), u32>,
    /// When that kill's timeout began (Unix ns) and how long it is, where the log says.
    timed: BTreeMap<(AllocId, String), (i64, i64)>,
    /// Tasks whose process runs, by (allocation, task).
    live: BTreeSet<(AllocId, String)>,
    /// Tasks under an in-place restart's kill (from its `RestartAlloc` until they run
    /// again), by (allocation, task).
    restarting: BTreeSet<(AllocId, String)>,
    /// Effects checked so far.
    pub checked: usize,
}

impl EffectRules {
    /// Checks the effects of one entry, in order, and applies them; the first rule broken
    /// is the error.
    pub fn check(&mut self, entry: &LogEntry) -> Result<(), String> {
        let alloc = entry.as_step().and_then(Step::alloc).cloned();
        let restart = matches!(entry.as_step(), Some(Step::RestartAlloc { .. }));
        // The tasks a restart restarts, from the step itself (a task with no services and
        // no delay shows none in its effects until its signal): the one it names, or every
        // task of the allocation whose process runs.
        if let (Some(Step::RestartAlloc { task, .. }), Some(alloc)) = (entry.as_step(), &alloc) {
            let targets: Vec<(AllocId, String)> = match task {
                Some(task) => vec![(alloc.clone(), task.to_string())],
                None => self
                    .live
                    .iter()
                    .filter(|(a, _)| a == alloc)
                    .cloned()
                    .collect(),
            };
            self.restarting.extend(targets);
        }
        // The step's own exit comes before what follows it (a restarted task runs again).
        if let (Some(Step::TaskExit { task, .. } | Step::PoststopExit { task, .. }), Some(alloc)) =
            (entry.as_step(), &alloc)
        {
            self.live.remove(&(alloc.clone(), task.to_string()));
        }
        for effect in &entry.effects {
            self.checked += 1;
            let Some(alloc) = alloc.clone() else {
                return Err(format!(
                    "{} has an effect but names no allocation: {effect:?}",
                    entry.name()
                ));
            };
            match effect {
                Effect::Launch { task } => {
                    let key = (alloc.clone(), task.clone());
                    if !self.live.insert(key.clone()) {
                        return Err(format!(
                            "task {task:?} of allocation {alloc} is launched a second time \
                             while its process runs"
                        ));
                    }
                    self.restarting.remove(&key);
                }
                Effect::Register { task, services } => {
                    self.registered
                        .entry((alloc, task.clone()))
                        .or_default()
                        .extend(services.iter().cloned());
                }
                Effect::Deregister { task, services } => {
                    if let (true, Some(task)) = (restart, task) {
                        self.restarting.insert((alloc.clone(), task.clone()));
                    }
                    if let Some(registered) = self.registered.get_mut(&(alloc, task.clone())) {
                        for service in services.iter() {
                            registered.remove(service);
                        }
                    }
                }
                Effect::Signal {
                    task,
                    signal,
                    kill,
                    already_delivered,
                    kill_timeout_ns,
                    timeout_from_ns,
                } => {
                    let key = (alloc.clone(), task.clone());
                    if restart {
                        self.restarting.insert(key.clone());
                    }
                    let group_too = !self.restarting.contains(&key);
                    let last = self.signalled.get(&key).copied().unwrap_or(0);
                    if *kill <= last {
                        return Err(format!(
                            "task {task:?} of allocation {alloc} gets its kill signal {signal} \
                             again for kill {kill} (kill {last} was signalled already)"
                        ));
                    }
                    let owners = [Some(Some(task.clone())), group_too.then_some(None)];
                    for owner in owners.into_iter().flatten() {
                        let left = self
                            .registered
                            .get(&(alloc.clone(), owner.clone()))
                            .filter(|left| !left.is_empty());
                        if let Some(left) = left {
                            let whose = owner.map_or("its group's".to_string(), |task| {
                                format!("task {task:?}'s")
                            });
                            return Err(format!(
                                "task {task:?} of allocation {alloc} is signalled ({signal}) \
                                 while {whose} services {left:?} are still registered"
                            ));
                        }
                    }
                    match kill_timeout_ns.filter(|_| !already_delivered) {
                        Some(timeout) => self.timed.insert(
                            key.clone(),
                            (timeout_from_ns.unwrap_or(entry.time_ns), timeout),
                        ),
                        None => self.timed.remove(&key),
                    };
                    self.signalled.insert(key, *kill);
                }
                Effect::SigKill { task, kill } => {
                    let timed_out = matches!(
                        entry.as_step(),
                        Some(Step::KillTimeout { task: t, .. }) if **t == **task
                    );
                    if !timed_out {
                        return Err(format!(
                            "task {task:?} of allocation {alloc} is SIGKILLed by {}, not by its \
                             kill timeout",
                            entry.name()
                        ));
                    }
                    let signalled = self.signalled.get(&(alloc.clone(), task.clone()));
                    if signalled != Some(kill) {
                        return Err(format!(
                            "task {task:?} of allocation {alloc} is SIGKILLed for kill {kill} \
                             before that kill's signal"
                        ));
                    }
                    if let Some(&(at, timeout)) = self.timed.get(&(alloc.clone(), task.clone())) {
                        // The agent's timer is due at `at + timeout` on the Unix clock and
                        // fires on the monotonic one: a millisecond is allowed between them.
                        if entry.time_ns - at < timeout - 1_000_000 {
                            return Err(format!(
                                "task {task:?} of allocation {alloc} is SIGKILLed {} ms after \
                                 kill {kill}'s timeout began, before its end at {} ms",
                                (entry.time_ns - at) / 1_000_000,
                                timeout / 1_000_000
                            ));
                        }
                    }
                    // A stop's forced exit follows in the same step; a restart's is a
                    // `TaskExit` of its own (until then the process is still there).
                    let key = (alloc.clone(), task.clone());
                    if !self.restarting.contains(&key) {
                        self.live.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }
}
