//! The client: nodes that pull allocation updates by modify index, and alloc runners (with
//! their task runners) that turn updates, timers and process exits into commands.

pub mod alloc_runner;
pub mod driver;
pub mod hooks;
pub mod shell;
pub mod task_runner;
#[cfg(test)]
pub(crate) mod test_support;

pub use alloc_runner::{AllocRunner, RunnerPhase};
pub use task_runner::{ExitResult, RestartMark, TaskPhase, TaskRunner};

use crate::server::structs::{AllocId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The client's default `max_kill_timeout`: 30 s.
pub const DEFAULT_MAX_KILL_TIMEOUT_NS: i64 = 30_000_000_000;

/// How a delay (group or task) ended, or where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DelayOutcome {
    /// Not reached, or no delay set.
    None,
    Waiting,
    /// The timer fired: waited in full.
    Elapsed,
    /// Not waited at all: the flag was applied before the wait began.
    Skipped,
    /// The flag arrived during the wait and ended it.
    CutShort,
    /// The task exited on its own during its delay.
    ExitedDuring,
}

/// A timer of one allocation's runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Timer {
    GroupDelay,
    TaskDelay(usize),
    KillTimeout(usize),
    /// The restart policy's delay before a crashed task runs again.
    RestartDelay(usize),
    /// The update block's `min_healthy_time`, from the moment every task runs: then the
    /// allocation is healthy within its deployment.
    Healthy,
    /// The update block's `healthy_deadline`, from the moment the allocation runs: if it
    /// fires before the allocation is healthy, it is unhealthy, and its deployment fails.
    HealthyDeadline,
}

/// An internal step a runner can take without waiting for anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunnerStep {
    GroupPreKill,
    TaskPreKill(usize),
    PoststopStart(usize),
    /// The restart policy decides about a task that ended on its own.
    RestartDecision(usize),
}

/// What a runner asks its host to do. Tasks are positions in the group's task list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    StartTask {
        task: usize,
    },
    /// Register the group's (`None`) or a task's native services.
    RegisterServices {
        task: Option<usize>,
        names: std::sync::Arc<[String]>,
    },
    DeregisterServices {
        task: Option<usize>,
        names: std::sync::Arc<[String]>,
    },
    StartTimer {
        timer: Timer,
        after_ns: i64,
    },
    CancelTimer {
        timer: Timer,
    },
    /// Send the kill signal of the task's kill number `kill` (see [`TaskRunner::kills`]).
    Signal {
        task: usize,
        signal: String,
        kill: u32,
    },
    /// SIGKILL the process group: kill number `kill`'s timeout fired.
    ForceKill {
        task: usize,
        kill: u32,
    },
    /// Report the task states and client status to the server.
    Report,
}

/// One node's client agent.
#[derive(Clone, Debug)]
pub struct Client {
    pub node_id: NodeId,
    pub max_kill_timeout_ns: i64,
    /// `AllocModifyIndex` of the last pulled copy of each allocation.
    pub pulled: Arc<BTreeMap<AllocId, u64>>,
    /// Shared between clones (the lockstep walk clones a simulator per transition), as is
    /// each runner: a step copies the map of runners and the runner it changes
    /// ([`Client::runner_mut`]).
    pub runners: Arc<BTreeMap<AllocId, Arc<AllocRunner>>>,
}

impl Client {
    pub fn new(node_id: NodeId, max_kill_timeout_ns: i64) -> Self {
        Client {
            node_id,
            max_kill_timeout_ns,
            pulled: Arc::default(),
            runners: Arc::default(),
        }
    }

    /// The runner of `alloc`, to change: copied first if a clone shares it.
    pub fn runner_mut<Q>(&mut self, alloc: &Q) -> Option<&mut AllocRunner>
    where
        AllocId: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        if !self.runners.contains_key(alloc) {
            return None;
        }
        Arc::make_mut(&mut self.runners)
            .get_mut(alloc)
            .map(Arc::make_mut)
    }

    /// The allocation's update is newer than the copy the client holds.
    pub fn update_pending(&self, alloc: &crate::server::structs::Allocation) -> bool {
        alloc.node_id == self.node_id
            && self
                .pulled
                .get(&alloc.id)
                .is_none_or(|&seen| alloc.alloc_modify_index > seen)
    }

    /// Applies one pulled allocation: a new runner, or an update to its runner.
    pub fn pull(
        &mut self,
        alloc: crate::server::structs::Allocation,
        now: i64,
        out: &mut Vec<Command>,
    ) {
        Arc::make_mut(&mut self.pulled).insert(alloc.id.clone(), alloc.alloc_modify_index);
        match self.runner_mut(&alloc.id) {
            Some(runner) => runner.update(alloc, now, out),
            None => {
                let id = alloc.id.clone();
                let runner = AllocRunner::new(alloc, self.max_kill_timeout_ns, now, out);
                Arc::make_mut(&mut self.runners).insert(id, Arc::new(runner));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::structs::Allocation;

    fn alloc(node: &str, alloc_modify_index: u64) -> Allocation {
        let record = serde_json::json!({
            "ID": "a1", "Namespace": "default", "EvalID": "e1", "Name": "web.web[0]",
            "NodeID": node, "JobID": "web", "Job": {"ID": "web"}, "JobVersion": 0,
            "TaskGroup": "web", "DesiredStatus": "run", "DesiredDescription": "",
            "DesiredTransition": {}, "ClientStatus": "pending", "ClientDescription": "",
            "TaskStates": {}, "PreviousAllocation": null, "NextAllocation": null,
            "CreateIndex": 1, "ModifyIndex": alloc_modify_index,
            "AllocModifyIndex": alloc_modify_index
        });
        serde_json::from_value(record).unwrap()
    }

    /// A client pulls an allocation of its own node whose `AllocModifyIndex` is newer than
    /// the copy it holds, and nothing else.
    #[test]
    fn an_update_is_pending_only_when_newer_and_on_this_node() {
        let mut client = Client::new("node-0".into(), DEFAULT_MAX_KILL_TIMEOUT_NS);
        assert!(client.update_pending(&alloc("node-0", 5)), "never pulled");
        assert!(
            !client.update_pending(&alloc("node-1", 5)),
            "another node's allocation"
        );
        Arc::make_mut(&mut client.pulled).insert("a1".into(), 5);
        assert!(
            !client.update_pending(&alloc("node-0", 5)),
            "already pulled at this index"
        );
        assert!(
            !client.update_pending(&alloc("node-0", 4)),
            "older than the copy held"
        );
        assert!(
            client.update_pending(&alloc("node-0", 6)),
            "newer than the copy held"
        );
    }
}
