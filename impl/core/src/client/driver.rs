//! Drivers run task processes. The trait is what a runner's host needs from one: start,
//! signal, SIGKILL, and learn of an exit. `mock_driver` runs no process: each task is a
//! scripted process on a clock (how long it runs, its exit code, whether it ignores the kill
//! signal, how long it takes to exit after one). The real `raw_exec` driver comes with the
//! daemon and implements the same trait over process groups.

use super::task_runner::ExitResult;
use crate::spec::Task;
use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverError(pub String);

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DriverError {}

/// A driver, as a runner's host uses it. `now` is the host's clock in nanoseconds.
pub trait Driver {
    type Handle: Clone;
    fn start(&mut self, task: &Task, now: i64) -> Result<Self::Handle, DriverError>;
    fn signal(&mut self, handle: &Self::Handle, signal: &str, now: i64) -> Result<(), DriverError>;
    fn force_kill(&mut self, handle: &Self::Handle, now: i64) -> Result<(), DriverError>;
    /// When the process will exit, and how, if nothing else happens to it.
    fn next_exit(&self, handle: &Self::Handle) -> Option<(i64, ExitResult)>;
}

/// SIGKILL's number, reported in the `Terminated` event after a forced kill.
pub const SIGKILL: i32 = 9;

/// How a `mock_driver` task behaves, from its `Config` (durations in nanoseconds, or Go
/// duration strings as Nomad's mock driver takes them):
/// `run_for` (absent: until killed), `exit_code`, `ignore_signal`, `exit_after_signal`, and
/// `lost` (the end of its run is an error the driver reports: the process was lost).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MockBehaviour {
    pub run_for_ns: Option<i64>,
    pub exit_code: i32,
    pub ignore_signal: bool,
    pub exit_after_signal_ns: i64,
    pub lost: bool,
}

impl MockBehaviour {
    pub fn from_task(task: &Task) -> Result<Self, DriverError> {
        let no_config = BTreeMap::new();
        let config = task.config.as_ref().unwrap_or(&no_config);
        let int = |key: &str| -> Result<Option<i64>, DriverError> {
            match config.get(key) {
                None => Ok(None),
                Some(value) => value.as_i64().map(Some).ok_or_else(|| {
                    DriverError(format!(
                        "task {:?}: mock_driver Config.{key} must be an integer (got {value})",
                        task.name
                    ))
                }),
            }
        };
        let boolean = |key: &str| -> Result<bool, DriverError> {
            match config.get(key) {
                None => Ok(false),
                Some(value) => value.as_bool().ok_or_else(|| {
                    DriverError(format!(
                        "task {:?}: mock_driver Config.{key} must be a boolean (got {value})",
                        task.name
                    ))
                }),
            }
        };
        // A duration: nanoseconds, or a Go duration string as Nomad's mock driver takes.
        let duration = |key: &str| -> Result<Option<i64>, DriverError> {
            match config.get(key) {
                Some(serde_json::Value::String(text)) => crate::gotime::parse_go_duration(text)
                    .filter(|ns| *ns >= 0)
                    .map(Some)
                    .ok_or_else(|| {
                        DriverError(format!(
                            "task {:?}: mock_driver Config.{key} {text:?} is not a duration such as 500ms or 2s",
                            task.name
                        ))
                    }),
                _ => int(key),
            }
        };
        let ignore_signal = boolean("ignore_signal")?;
        Ok(MockBehaviour {
            run_for_ns: duration("run_for")?,
            exit_code: int("exit_code")?.unwrap_or(0) as i32,
            ignore_signal,
            exit_after_signal_ns: duration("exit_after_signal")?.unwrap_or(0),
            lost: boolean("lost")?,
        })
    }
}

#[derive(Clone, Debug)]
struct MockProcess {
    behaviour: MockBehaviour,
    started_at: i64,
    signalled_at: Option<i64>,
    killed_at: Option<i64>,
}

/// The mock driver: scripted processes keyed by a handle the host chooses.
#[derive(Clone, Debug, Default)]
pub struct MockDriver {
    processes: BTreeMap<u64, MockProcess>,
    next_handle: u64,
}

impl MockProcess {
    /// When it ends by itself (`run_for`) and when after its signal, if it does.
    fn own_and_graceful_exits(&self) -> (Option<i64>, Option<i64>) {
        let own = self.behaviour.run_for_ns.map(|run| self.started_at + run);
        let graceful = self
            .signalled_at
            .filter(|_| !self.behaviour.ignore_signal)
            .map(|at| at + self.behaviour.exit_after_signal_ns);
        (own, graceful)
    }
}

impl MockDriver {
    /// Forgets a process that exited.
    pub fn reap(&mut self, handle: &u64) {
        self.processes.remove(handle);
    }

    /// When the process will exit if nothing else happens to it: the time of
    /// [`Driver::next_exit`], without building its result (the simulator asks this of
    /// every task after each of its steps).
    pub fn next_exit_at(&self, handle: &u64) -> Option<i64> {
        let process = self.processes.get(handle)?;
        let (own, graceful) = process.own_and_graceful_exits();
        [process.killed_at, own, graceful]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Driver for MockDriver {
    type Handle = u64;

    fn start(&mut self, task: &Task, now: i64) -> Result<u64, DriverError> {
        let behaviour = MockBehaviour::from_task(task)?;
        let handle = self.next_handle;
        self.next_handle += 1;
        self.processes.insert(
            handle,
            MockProcess {
                behaviour,
                started_at: now,
                signalled_at: None,
                killed_at: None,
            },
        );
        Ok(handle)
    }

    fn signal(&mut self, handle: &u64, _signal: &str, now: i64) -> Result<(), DriverError> {
        let process = self
            .processes
            .get_mut(handle)
            .ok_or_else(|| DriverError("task not found".into()))?;
        process.signalled_at.get_or_insert(now);
        Ok(())
    }

    fn force_kill(&mut self, handle: &u64, now: i64) -> Result<(), DriverError> {
        let process = self
            .processes
            .get_mut(handle)
            .ok_or_else(|| DriverError("task not found".into()))?;
        process.killed_at.get_or_insert(now);
        Ok(())
    }

    fn next_exit(&self, handle: &u64) -> Option<(i64, ExitResult)> {
        let process = self.processes.get(handle)?;
        let (own, graceful) = process.own_and_graceful_exits();
        let mut exits = Vec::new();
        if let Some(at) = process.killed_at {
            exits.push((
                at,
                ExitResult {
                    exit_code: 137,
                    signal: Some(SIGKILL),
                    failure: None,
                },
            ));
        }
        let lost = process.behaviour.lost;
        for (at, own) in [(own, true), (graceful, false)]
            .into_iter()
            .filter_map(|(at, own)| Some((at?, own)))
        {
            exits.push((
                at,
                ExitResult {
                    exit_code: process.behaviour.exit_code,
                    signal: None,
                    failure: (own && lost).then(|| "the task's process was lost".to_string()),
                },
            ));
        }
        exits.into_iter().min_by_key(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::{Driver, MockBehaviour, MockDriver};
    use crate::spec::Task;

    /// `next_exit_at` is the time of `next_exit`, whichever of a process's exits comes
    /// first: its own end, its end after a signal (or none: it ignores signals), a kill.
    #[test]
    fn next_exit_at_is_the_time_of_next_exit() {
        let configs = [
            serde_json::json!({}),
            serde_json::json!({"run_for": 50}),
            serde_json::json!({"run_for": 50, "lost": true}),
            serde_json::json!({"exit_after_signal": 30}),
            serde_json::json!({"exit_after_signal": 80, "run_for": 100}),
            serde_json::json!({"ignore_signal": true, "run_for": 100}),
        ];
        let mut driver = MockDriver::default();
        let mut checked = 0;
        for config in configs {
            let task = Task {
                name: "t".into(),
                config: Some(serde_json::from_value(config).unwrap()),
                ..Task::default()
            };
            // Untouched, signalled at 20, signalled at 20 and killed at 40.
            for touched in 0..3 {
                let handle = driver.start(&task, 10).unwrap();
                if touched >= 1 {
                    driver.signal(&handle, "SIGINT", 20).unwrap();
                }
                if touched == 2 {
                    driver.force_kill(&handle, 40).unwrap();
                }
                let full = driver.next_exit(&handle).map(|(at, _)| at);
                assert_eq!(driver.next_exit_at(&handle), full, "{task:?}, {touched}");
                checked += usize::from(full.is_some());
            }
        }
        // All but the two left untouched that have no `run_for`.
        assert_eq!(checked, 16, "the processes with an exit");
    }

    fn behaviour(config: serde_json::Value) -> Result<MockBehaviour, String> {
        let task = Task {
            name: "t".into(),
            config: Some(serde_json::from_value(config).unwrap()),
            ..Task::default()
        };
        MockBehaviour::from_task(&task).map_err(|e| e.0)
    }

    #[test]
    fn mock_durations_are_nanoseconds_or_go_durations_as_nomads_mock_driver_takes() {
        assert_eq!(
            behaviour(serde_json::json!({"run_for": 50_000_000}))
                .unwrap()
                .run_for_ns,
            Some(50_000_000)
        );
        assert_eq!(
            behaviour(serde_json::json!({"run_for": "50ms"}))
                .unwrap()
                .run_for_ns,
            Some(50_000_000)
        );
        assert_eq!(
            behaviour(serde_json::json!({"exit_after_signal": "2s"}))
                .unwrap()
                .exit_after_signal_ns,
            2_000_000_000
        );
        assert_eq!(behaviour(serde_json::json!({})).unwrap().run_for_ns, None);
        let error = behaviour(serde_json::json!({"run_for": "soon"})).unwrap_err();
        assert!(error.contains("Config.run_for \"soon\""), "{error}");
        assert!(behaviour(serde_json::json!({"run_for": true})).is_err());
    }
}
