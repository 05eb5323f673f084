//! Allocations and a recording host for the runner's unit and loom tests.

use super::Command;
use crate::server::structs::{Allocation, ClientStatus, DesiredStatus, DesiredTransition};
use crate::spec::{Job, Service, Task, TaskGroup};
use std::sync::Arc;

const SECOND: i64 = 1_000_000_000;

/// One allocation of a job with a group service and a leader task with a service;
/// `group_delay_s` and `task_delay_s` are the delays in seconds (0 for none).
pub(crate) fn alloc(stop: bool, flag: bool, group_delay_s: i64, task_delay_s: i64) -> Allocation {
    let services = |name: &str| {
        Some(vec![Service {
            name: name.into(),
            provider: "nomad".into(),
            ..Service::default()
        }])
    };
    let app = Task {
        name: "app".into(),
        driver: "mock_driver".into(),
        leader: true,
        shutdown_delay_ns: task_delay_s * SECOND,
        services: services("app"),
        ..Task::default()
    };
    let group = TaskGroup {
        name: "web".into(),
        count: Some(1),
        shutdown_delay_ns: Some(group_delay_s * SECOND),
        services: services("web"),
        tasks: vec![app],
        ..TaskGroup::default()
    };
    Allocation {
        id: "a1".into(),
        namespace: "default".into(),
        eval_id: "e1".into(),
        name: "web.web[0]".into(),
        node_id: "node-0".into(),
        job_id: "web".into(),
        ports: Vec::new(),
        deployment_id: String::new(),
        deployment_status: None,
        job: Arc::new(Job {
            id: "web".into(),
            task_groups: vec![group],
            ..Job::default()
        }),
        job_version: 0,
        task_group: "web".into(),
        desired_status: if stop {
            DesiredStatus::Stop
        } else {
            DesiredStatus::Run
        },
        desired_description: String::new(),
        desired_transition: DesiredTransition {
            no_shutdown_delay: flag.then_some(true),
            ..DesiredTransition::default()
        },
        client_status: ClientStatus::Pending,
        client_description: String::new(),
        task_states: Default::default(),
        previous_allocation: None,
        next_allocation: None,
        create_index: 1,
        modify_index: 1,
        alloc_modify_index: 1,
        create_time: 0,
        modify_time: 0,
        tombstone: false,
    }
}

/// A host that records every command, in order, and checks that the shell settles every
/// critical section (`Host::settled`) before the next event is applied: the daemon's host
/// carries out a step's server-side work only then.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) commands: Vec<Command>,
    /// Events and steps applied since the last `settled`.
    pub(crate) unsettled: usize,
}

impl super::shell::Host for Recorder {
    fn execute(&mut self, command: &Command, _runner: &crate::client::AllocRunner) {
        self.commands.push(command.clone());
    }

    fn applied(&mut self, _runner: &crate::client::AllocRunner, what: super::shell::Applied) {
        if !matches!(what, super::shell::Applied::Step(_)) {
            assert_eq!(
                self.unsettled, 0,
                "{what:?} applied before the previous event was settled"
            );
        }
        self.unsettled += 1;
    }

    fn settled(&mut self, _runner: &crate::client::AllocRunner) {
        self.unsettled = 0;
    }

    /// A clock that advances a second per command, so that events are ordered in time.
    fn now(&self) -> i64 {
        self.commands.len() as i64 * SECOND
    }
}

impl Recorder {
    pub(crate) fn count(&self, wanted: impl Fn(&Command) -> bool) -> usize {
        self.commands.iter().filter(|c| wanted(c)).count()
    }

    pub(crate) fn first(&self, wanted: impl Fn(&Command) -> bool) -> Option<usize> {
        self.commands.iter().position(wanted)
    }
}
