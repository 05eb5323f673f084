//! The probe's jobs: raw_exec tasks in Nomad's JSON job shape — the witness where the probe
//! knows its path on the cluster's nodes, `/bin/sleep` otherwise, mock_driver tasks where
//! the nodes offer no raw_exec — with short delays.

use serde_json::{json, Value};

/// What the scenarios' tasks run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tasks {
    /// raw_exec: the witness, at this path on the nodes.
    Witness(String),
    /// raw_exec: `/bin/sleep` (no witness given).
    Sleep,
    /// `mock_driver` (where the nodes offer no raw_exec): no process, no witness.
    Mock,
}

impl Tasks {
    pub fn witness(&self) -> Option<&str> {
        match self {
            Tasks::Witness(path) => Some(path),
            Tasks::Sleep | Tasks::Mock => None,
        }
    }

    /// Why nothing from inside the process can be read.
    pub fn no_witness_reason(&self) -> &'static str {
        match self {
            Tasks::Witness(_) => "",
            Tasks::Sleep => "no witness: the tasks run /bin/sleep (give --witness PATH)",
            Tasks::Mock => "no witness: the nodes offer no raw_exec, the tasks are mock_driver's",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Main,
    /// A poststart sidecar.
    Sidecar,
    Poststop,
}

impl Role {
    /// Its place in the kill order.
    pub fn stage(self) -> u8 {
        match self {
            Role::Leader => 0,
            Role::Main => 1,
            Role::Sidecar => 2,
            Role::Poststop => 3,
        }
    }
}

#[derive(Clone, Debug)]
pub struct TaskSpec {
    pub name: &'static str,
    pub role: Role,
    pub delay_ns: i64,
    pub kill_timeout_ns: Option<i64>,
    /// The witness records its kill signal and runs on (until SIGKILL).
    pub ignores_signal: bool,
    pub service: bool,
}

impl TaskSpec {
    pub fn new(name: &'static str, role: Role, delay_ns: i64) -> TaskSpec {
        TaskSpec {
            name,
            role,
            delay_ns,
            kill_timeout_ns: None,
            ignores_signal: false,
            service: role != Role::Poststop,
        }
    }
}

#[derive(Clone, Debug)]
pub struct JobSpec {
    pub id: String,
    pub batch: bool,
    pub count: u32,
    pub group_delay_ns: i64,
    pub group_service: bool,
    pub tasks: Vec<TaskSpec>,
    /// A static port (`ReservedPorts`), as `TestOverlap`'s job has.
    pub static_port: Option<u16>,
    /// Constrained to this node.
    pub node: Option<String>,
}

impl JobSpec {
    pub fn new(id: String, count: u32, tasks: Vec<TaskSpec>) -> JobSpec {
        JobSpec {
            id,
            batch: false,
            count,
            group_delay_ns: 0,
            group_service: false,
            tasks,
            static_port: None,
            node: None,
        }
    }

    pub fn group_service_name(&self) -> String {
        format!("{}-group", self.id)
    }

    pub fn task_service_name(&self, task: &str) -> String {
        format!("{}-{task}", self.id)
    }

    /// Every service name of the group, its own and its tasks'.
    pub fn service_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .group_service
            .then(|| self.group_service_name())
            .into_iter()
            .collect();
        names.extend(
            self.tasks
                .iter()
                .filter(|t| t.service)
                .map(|t| self.task_service_name(t.name)),
        );
        names
    }

    pub fn task(&self, name: &str) -> Option<&TaskSpec> {
        self.tasks.iter().find(|t| t.name == name)
    }

    /// The register body, `{"Job": …}`; `agent` is the address the witness asks for the
    /// services.
    pub fn body(&self, namespace: &str, tasks: &Tasks, agent: &str) -> Value {
        let tasks: Vec<Value> = self
            .tasks
            .iter()
            .map(|t| self.task_json(t, tasks, agent))
            .collect();
        let mut group = json!({
            "Name": "g",
            "Count": self.count,
            "Tasks": tasks,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 600_000_000_000i64, "Delay": 1_000_000_000},
            "EphemeralDisk": {"SizeMB": 10},
        });
        if self.group_delay_ns > 0 {
            group["ShutdownDelay"] = self.group_delay_ns.into();
        }
        if self.group_service {
            group["Services"] = json!([{"Name": self.group_service_name(), "Provider": "nomad"}]);
        }
        if let Some(port) = self.static_port {
            group["Networks"] = json!([{"ReservedPorts": [{"Label": "held", "Value": port}]}]);
        }
        if let Some(node) = &self.node {
            group["Constraints"] =
                json!([{"LTarget": "${node.unique.id}", "RTarget": node, "Operand": "="}]);
        }
        json!({"Job": {
            "ID": self.id,
            "Name": self.id,
            "Namespace": namespace,
            "Type": if self.batch { "batch" } else { "service" },
            "Datacenters": ["*"],
            "TaskGroups": [group],
        }})
    }

    fn task_json(&self, task: &TaskSpec, tasks: &Tasks, agent: &str) -> Value {
        let config = match (tasks, task.role) {
            (Tasks::Witness(witness), Role::Poststop) => {
                json!({"command": witness, "args": ["--exit-after", "50ms"]})
            }
            (Tasks::Sleep, Role::Poststop) => json!({"command": "/bin/sleep", "args": ["0.05"]}),
            (Tasks::Witness(witness), _) => {
                let mut args = vec![
                    "--services".to_string(),
                    self.service_names().join(","),
                    "--agent".into(),
                    agent.into(),
                ];
                if task.ignores_signal {
                    args.push("--ignore-kill-signal".into());
                }
                json!({"command": witness, "args": args})
            }
            (Tasks::Sleep, _) => json!({"command": "/bin/sleep", "args": ["3600"]}),
            // Nomad's mock driver and quiesce's both take a Go duration (Nomad's ends a task
            // without one at once).
            (Tasks::Mock, Role::Poststop) => json!({"run_for": "50ms"}),
            (Tasks::Mock, _) => json!({"run_for": "24h"}),
        };
        let driver = if *tasks == Tasks::Mock {
            "mock_driver"
        } else {
            "raw_exec"
        };
        let mut spec = json!({
            "Name": task.name,
            "Driver": driver,
            "Config": config,
            "Leader": task.role == Role::Leader,
            "Resources": {"CPU": 20, "MemoryMB": 32},
            "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1},
        });
        if task.delay_ns > 0 {
            spec["ShutdownDelay"] = task.delay_ns.into();
        }
        if let Some(timeout) = task.kill_timeout_ns {
            spec["KillTimeout"] = timeout.into();
        }
        if task.service {
            spec["Services"] =
                json!([{"Name": self.task_service_name(task.name), "Provider": "nomad"}]);
        }
        match task.role {
            Role::Sidecar => spec["Lifecycle"] = json!({"Hook": "poststart", "Sidecar": true}),
            Role::Poststop => spec["Lifecycle"] = json!({"Hook": "poststop", "Sidecar": false}),
            Role::Leader | Role::Main => {}
        }
        spec
    }
}
