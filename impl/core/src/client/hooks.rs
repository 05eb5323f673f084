//! Hook interfaces of the runners (`reference/nomad-stop-path.md` §2.1): what runs before an
//! allocation's tasks are killed, before a task is killed, and after a task has exited.
//! Hooks are sans-IO like the runners: they issue [`Command`]s. None of them is ever skipped
//! by `-no-shutdown-delay`; the flag only ends the waits (prestop_hooks_always_run).

use super::Command;
use serde::{Deserialize, Serialize};

/// Runs in the alloc runner before any task is killed. It may ask the runner to wait a
/// delay before killing; the runner skips or cuts short that wait when the flag is applied.
pub trait RunnerPreKillHook {
    /// Issues the hook's effects; returns the delay to wait afterwards in nanoseconds (0 for
    /// none).
    fn pre_kill(&self, out: &mut Vec<Command>) -> i64;
    /// After every task has exited (Nomad's postrun): must be idempotent.
    fn postrun(&self, out: &mut Vec<Command>);
}

/// Runs in a task runner right before the task is killed.
pub trait TaskPreKillHook {
    fn pre_killing(&self, task: usize, out: &mut Vec<Command>);
}

/// Runs after the task has exited and will not run again; must be idempotent.
pub trait TaskStopHook {
    fn stop(&self, task: usize, out: &mut Vec<Command>);
}

/// The group service hook: deregisters the group's services, then asks for the group
/// `shutdown_delay` (so load balancers stop sending traffic before the tasks die).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupServiceHook {
    pub services: std::sync::Arc<[String]>,
    pub shutdown_delay_ns: i64,
}

impl GroupServiceHook {
    pub fn register(&self, out: &mut Vec<Command>) {
        if !self.services.is_empty() {
            out.push(Command::RegisterServices {
                task: None,
                names: self.services.clone(),
            });
        }
    }

    fn deregister(&self, out: &mut Vec<Command>) {
        if !self.services.is_empty() {
            out.push(Command::DeregisterServices {
                task: None,
                names: self.services.clone(),
            });
        }
    }
}

impl RunnerPreKillHook for GroupServiceHook {
    // invariant: prestop_hooks_always_run
    fn pre_kill(&self, out: &mut Vec<Command>) -> i64 {
        self.deregister(out);
        self.shutdown_delay_ns
    }

    fn postrun(&self, out: &mut Vec<Command>) {
        self.deregister(out);
    }
}

/// The task service hook: registers the task's services when it starts, deregisters them
/// before it is killed, and again once it has exited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskServiceHook {
    pub services: std::sync::Arc<[String]>,
}

impl TaskServiceHook {
    pub fn register(&self, task: usize, out: &mut Vec<Command>) {
        if !self.services.is_empty() {
            out.push(Command::RegisterServices {
                task: Some(task),
                names: self.services.clone(),
            });
        }
    }

    fn deregister(&self, task: usize, out: &mut Vec<Command>) {
        if !self.services.is_empty() {
            out.push(Command::DeregisterServices {
                task: Some(task),
                names: self.services.clone(),
            });
        }
    }
}

impl TaskPreKillHook for TaskServiceHook {
    // invariant: prestop_hooks_always_run
    fn pre_killing(&self, task: usize, out: &mut Vec<Command>) {
        self.deregister(task, out);
    }
}

impl TaskStopHook for TaskServiceHook {
    fn stop(&self, task: usize, out: &mut Vec<Command>) {
        self.deregister(task, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> std::sync::Arc<[String]> {
        ["web".to_string()].into()
    }

    // invariant: prestop_hooks_always_run
    /// Deregistration happens before the kill and again after it (postrun, stop hooks), so
    /// that a service registered in between, or after a crash, is still removed.
    #[test]
    fn service_hooks_deregister_before_and_after_the_kill() {
        let group = GroupServiceHook {
            services: names(),
            shutdown_delay_ns: 7,
        };
        let mut out = Vec::new();
        assert_eq!(group.pre_kill(&mut out), 7);
        group.postrun(&mut out);
        let deregister = Command::DeregisterServices {
            task: None,
            names: names(),
        };
        assert_eq!(out, [deregister.clone(), deregister]);

        let task = TaskServiceHook { services: names() };
        let mut out = Vec::new();
        task.pre_killing(2, &mut out);
        task.stop(2, &mut out);
        let deregister = Command::DeregisterServices {
            task: Some(2),
            names: names(),
        };
        assert_eq!(out, [deregister.clone(), deregister]);
    }

    // invariant: services_restored
    /// A start registers the group's and each task's services, by name.
    #[test]
    fn service_hooks_register_at_a_start() {
        let mut out = Vec::new();
        GroupServiceHook {
            services: names(),
            shutdown_delay_ns: 0,
        }
        .register(&mut out);
        TaskServiceHook { services: names() }.register(1, &mut out);
        assert_eq!(
            out,
            [
                Command::RegisterServices {
                    task: None,
                    names: names()
                },
                Command::RegisterServices {
                    task: Some(1),
                    names: names()
                },
            ]
        );
    }

    #[test]
    fn hooks_without_services_issue_nothing() {
        let mut out = Vec::new();
        assert_eq!(GroupServiceHook::default().pre_kill(&mut out), 0);
        GroupServiceHook::default().register(&mut out);
        TaskServiceHook::default().register(0, &mut out);
        TaskServiceHook::default().stop(0, &mut out);
        assert!(out.is_empty());
    }
}
