//! Carrying out a runner's commands: the mock driver's processes, the server's services
//! and reports, the schedule's timers and exits.

use super::{SimError, Simulator};
use crate::client::driver::{Driver, SIGKILL};
use crate::client::{AllocRunner, Command, ExitResult, TaskPhase};
use crate::server::structs::{AllocId, NodeId};
use crate::spec::Task;
use crate::step::Effect;
use std::sync::Arc;

impl Simulator {
    /// Carries out a runner's commands. A stop's SIGKILL is followed by the forced exit in the
    /// same step (a deterministic follow-up, merged identically in the model); a restart's
    /// is not — its exit, after which the task runs again, is a `TaskExit` of its own.
    pub(super) fn execute(
        &mut self,
        node: &NodeId,
        alloc: &AllocId,
        mut commands: Vec<Command>,
    ) -> Result<(), SimError> {
        let mut report = false;
        while !commands.is_empty() {
            let mut follow_ups = Vec::new();
            // Each command's effect, in order, with the runner looked up once for the batch:
            // an effect reads only the tasks' names and kill timeouts, which no command of
            // the batch changes.
            if let Some(runner) = self.clients.get(node).and_then(|c| c.runners.get(alloc)) {
                let effects = commands
                    .iter()
                    .filter_map(|command| Effect::of(command, runner));
                self.effects.extend(effects);
            }
            for command in commands {
                match command {
                    Command::Report => report = true,
                    Command::ForceKill { task, .. } => {
                        if let Some(handle) = self.schedule.handle(alloc, task) {
                            Arc::make_mut(&mut self.driver)
                                .force_kill(handle, self.now_ns)
                                .map_err(|e| SimError::Driver(e.to_string()))?;
                        }
                        let restarting = self
                            .clients
                            .get(node)
                            .and_then(|c| c.runners.get(alloc))
                            .and_then(|r| r.tasks.get(task))
                            .is_some_and(|t| t.restart != crate::client::RestartMark::None);
                        if restarting {
                            continue;
                        }
                        let exit = ExitResult {
                            exit_code: 137,
                            signal: Some(SIGKILL),
                            failure: None,
                        };
                        let now = self.now_ns;
                        let runner = self
                            .clients
                            .get_mut(node)
                            .and_then(|c| c.runner_mut(alloc))
                            .expect("runner");
                        runner.task_exited(task, exit, now, &mut follow_ups);
                    }
                    other => self.execute_one(node, alloc, other)?,
                }
            }
            commands = follow_ups;
        }
        if report {
            let runner = &self.clients[node].runners[alloc];
            self.server.client_report(alloc, runner.report());
            self.after_server_write();
        }
        self.refresh(node, alloc);
        Ok(())
    }

    fn execute_one(
        &mut self,
        node: &NodeId,
        alloc: &AllocId,
        command: Command,
    ) -> Result<(), SimError> {
        // The runner is looked up only by the commands that read it: most (timers, signals)
        // do not.
        let runner = || &self.clients[node].runners[alloc];
        let now = self.now_ns;
        match command {
            Command::StartTask { task } => {
                let runner = runner();
                let group = runner
                    .alloc
                    .job
                    .task_groups
                    .iter()
                    .find(|g| g.name == runner.alloc.task_group);
                let default_spec;
                let spec = match group.and_then(|g| g.tasks.get(task)) {
                    Some(spec) => spec,
                    None => {
                        default_spec = Task::default();
                        &default_spec
                    }
                };
                let handle = Arc::make_mut(&mut self.driver)
                    .start(spec, now)
                    .map_err(|e| SimError::Driver(e.to_string()))?;
                self.schedule.set_handle(alloc, task, handle);
            }
            Command::RegisterServices { task, names } => {
                let owner = task_owner(runner(), task);
                self.server.register_services(alloc, owner, &names);
            }
            Command::DeregisterServices { task, names } => {
                let owner = task_owner(runner(), task);
                self.server.deregister_services(alloc, owner, &names);
            }
            Command::StartTimer { timer, after_ns } => {
                self.schedule.start_timer(alloc, timer, now + after_ns);
            }
            Command::CancelTimer { timer } => self.schedule.stop_timer(alloc, timer),
            Command::Signal { task, signal, .. } => {
                if let Some(handle) = self.schedule.handle(alloc, task) {
                    Arc::make_mut(&mut self.driver)
                        .signal(handle, &signal, now)
                        .map_err(|e| SimError::Driver(e.to_string()))?;
                }
            }
            Command::ForceKill { .. } | Command::Report => unreachable!("handled by execute"),
        }
        Ok(())
    }

    /// After a runner's step and its commands: re-reads, for every task of one allocation,
    /// when it will exit by itself if that exit is a step now, and notes whether the runner
    /// has a step ready (`ready_runners`: only its steps change what it has).
    fn refresh(&mut self, node: &NodeId, alloc: &AllocId) {
        let Some(runner) = self.clients[node].runners.get(alloc) else {
            return;
        };
        let ready = !runner.ready_steps().is_empty();
        if ready != self.ready_runners.contains(alloc) {
            let ready_runners = Arc::make_mut(&mut self.ready_runners);
            if ready {
                ready_runners.insert(alloc.clone());
            } else {
                ready_runners.remove(alloc);
            }
        }
        // The allocation's handles looked up once, not once per task, and a task's exit
        // only for a task whose exit can be a step. Written on the stack for a group of up
        // to eight tasks (this runs after every step).
        let handles = self.schedule.handles_of(alloc);
        let mut on_stack = [None; 8];
        let mut on_heap = Vec::new();
        let dues = if runner.tasks.len() <= on_stack.len() {
            &mut on_stack[..runner.tasks.len()]
        } else {
            on_heap.resize(runner.tasks.len(), None);
            &mut on_heap[..]
        };
        for (ix, (task, due)) in runner.tasks.iter().zip(dues.iter_mut()).enumerate() {
            let eligible = match task.phase {
                TaskPhase::Delaying | TaskPhase::Signalled | TaskPhase::Running => true,
                TaskPhase::NotStarted
                | TaskPhase::Dead
                | TaskPhase::Crashed
                | TaskPhase::Restarting => false,
            };
            *due = handles
                .filter(|_| eligible)
                .and_then(|handles| handles.get(&ix))
                .and_then(|handle| self.driver.next_exit_at(handle))
                .map(|at| at.max(self.now_ns));
        }
        self.schedule.set_exits(alloc, dues);
    }
}

/// The task a service belongs to, by name; empty for a group service.
fn task_owner(runner: &AllocRunner, task: Option<usize>) -> &str {
    task.map_or("", |ix| &runner.tasks[ix].name)
}
