//! The event log (DESIGN.md, "The event log"): JSON lines, one object per step — a sequence
//! number, the time (virtual in the simulator, real in the daemon), the step's name from
//! the step-alphabet table and its arguments — plus the context a validator of many jobs
//! needs (the job and task group of the step's allocation), the effects the step had
//! ([`Effect`]), and the registration of each job with its spec (`"step":"RegisterJob"`, not
//! a step of the alphabet: the model starts from a registered job).
//!
//! ```json
//! {"seq":9,"time_ns":…,"step":"TaskPreKill","job":"web","group":"web","alloc":"5f…",
//!  "task":"app","effects":[{"effect":"Deregister","task":"app","services":["app"]},
//!  {"effect":"Signal","task":"app","signal":"SIGINT","kill":1}]}
//! ```

use super::{Effect, Step};
use crate::server::structs::{Id, JobId};
use crate::spec::Job;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What an entry records.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Step(Step),
    /// A job was registered (first, or again): its spec as stored. Re-registering a stopped
    /// job unchanged is `StartJob`, a step, and logged as that.
    RegisterJob {
        spec: Box<Job>,
    },
    /// The job's deployment turned `status` (`paused`, `failed`) by a write the step
    /// alphabet has no step for: the operator's, or a replacement that failed. The model's
    /// deployments neither pause nor fail, so a validator stops judging the job there.
    Deployment {
        status: String,
    },
}

/// One entry of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub struct LogEntry {
    pub seq: u64,
    pub time_ns: i64,
    pub event: Event,
    /// The job and task group the entry is about (for a step of one allocation, its job and
    /// group); `None` for `ClientRestart`.
    pub job: Option<JobId>,
    pub group: Option<Id>,
    /// What the step did to the world, in order.
    pub effects: Vec<Effect>,
}

impl LogEntry {
    /// An entry for `step`, about `job` and `group` (taken from the step where it names its
    /// job); its sequence number and time are set when it is appended.
    pub fn step(step: Step, job: Option<JobId>, group: Option<Id>) -> LogEntry {
        let job = step.job().cloned().or(job);
        LogEntry {
            seq: 0,
            time_ns: 0,
            event: Event::Step(step),
            job,
            group,
            effects: Vec::new(),
        }
    }

    /// The registration of `spec`.
    pub fn register_job(spec: &Job) -> LogEntry {
        LogEntry {
            seq: 0,
            time_ns: 0,
            event: Event::RegisterJob {
                spec: Box::new(spec.clone()),
            },
            job: Some(spec.id.as_str().into()),
            group: None,
            effects: Vec::new(),
        }
    }

    /// Job `job`'s deployment turned `status`.
    pub fn deployment(job: &str, status: &str) -> LogEntry {
        LogEntry {
            seq: 0,
            time_ns: 0,
            event: Event::Deployment {
                status: status.to_string(),
            },
            job: Some(job.into()),
            group: None,
            effects: Vec::new(),
        }
    }

    /// The step, if the entry is one.
    pub fn as_step(&self) -> Option<&Step> {
        match &self.event {
            Event::Step(step) => Some(step),
            Event::RegisterJob { .. } | Event::Deployment { .. } => None,
        }
    }

    /// The name in the entry's `step` field.
    pub fn name(&self) -> &'static str {
        match &self.event {
            Event::Step(step) => step.name(),
            Event::RegisterJob { .. } => "RegisterJob",
            Event::Deployment { .. } => "Deployment",
        }
    }

    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a log entry always serializes")
    }

    pub fn parse_line(line: &str) -> Result<LogEntry, String> {
        serde_json::from_str(line)
            .map_err(|error| format!("not an event-log line ({error}): {line}"))
    }
}

/// An entry as it is written: the step's name and every argument flat, as DESIGN.md
/// describes the log.
#[derive(Serialize, Deserialize)]
struct Wire {
    seq: u64,
    time_ns: i64,
    step: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job: Option<JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<Id>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    alloc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task: Option<super::TaskName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    purge: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    no_shutdown_delay: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unrecoverable: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    effects: Vec<Effect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<Box<Job>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<String>,
}

impl Wire {
    /// The entry of `event` with this line's sequence number, time, job, group and effects.
    fn entry(self, event: Event) -> LogEntry {
        LogEntry {
            seq: self.seq,
            time_ns: self.time_ns,
            event,
            job: self.job,
            group: self.group,
            effects: self.effects,
        }
    }
}

impl From<LogEntry> for Wire {
    fn from(entry: LogEntry) -> Wire {
        let mut wire = Wire {
            seq: entry.seq,
            time_ns: entry.time_ns,
            step: entry.name().to_string(),
            job: entry.job,
            group: entry.group,
            alloc: None,
            task: None,
            purge: None,
            no_shutdown_delay: None,
            unrecoverable: None,
            effects: entry.effects,
            spec: None,
            status: None,
        };
        match entry.event {
            Event::RegisterJob { spec } => wire.spec = Some(spec),
            Event::Deployment { status } => wire.status = Some(status),
            Event::Step(step) => {
                wire.alloc = step.alloc().map(|alloc| alloc.to_string());
                wire.task = step.task().cloned();
                match step {
                    Step::StopJob {
                        purge,
                        no_shutdown_delay,
                        ..
                    } => {
                        wire.purge = Some(purge);
                        wire.no_shutdown_delay = Some(no_shutdown_delay);
                    }
                    Step::StopAlloc {
                        no_shutdown_delay, ..
                    }
                    | Step::RestartAlloc {
                        no_shutdown_delay, ..
                    } => wire.no_shutdown_delay = Some(no_shutdown_delay),
                    Step::RestartDecision { unrecoverable, .. } => {
                        wire.unrecoverable = Some(unrecoverable)
                    }
                    _ => {}
                }
            }
        }
        wire
    }
}

impl TryFrom<Wire> for LogEntry {
    type Error = String;

    fn try_from(wire: Wire) -> Result<LogEntry, String> {
        let missing = |field: &str| format!("a {} entry needs {field:?}", wire.step);
        let alloc = || wire.alloc.clone().ok_or_else(|| missing("alloc"));
        let task = || wire.task.clone().ok_or_else(|| missing("task"));
        let job = || wire.job.clone().ok_or_else(|| missing("job"));
        let flag = || {
            wire.no_shutdown_delay
                .ok_or_else(|| missing("no_shutdown_delay"))
        };
        let step = match wire.step.as_str() {
            "RegisterJob" => {
                let spec = wire.spec.clone().ok_or_else(|| missing("spec"))?;
                if wire.job.as_deref() != Some(spec.id.as_str()) {
                    return Err(format!(
                        "a RegisterJob entry's job {:?} is not its spec's {:?}",
                        wire.job, spec.id
                    ));
                }
                return Ok(wire.entry(Event::RegisterJob { spec }));
            }
            "Deployment" => {
                let status = wire.status.clone().ok_or_else(|| missing("status"))?;
                job()?;
                return Ok(wire.entry(Event::Deployment { status }));
            }
            "StopJob" => Step::StopJob {
                job: job()?,
                purge: wire.purge.ok_or_else(|| missing("purge"))?,
                no_shutdown_delay: flag()?,
            },
            "StopAlloc" => Step::StopAlloc {
                alloc: alloc()?.into(),
                no_shutdown_delay: flag()?,
            },
            "StartJob" => Step::StartJob { job: job()? },
            "ProcessEval" => Step::ProcessEval { job: job()? },
            "ClientSync" => Step::ClientSync {
                alloc: alloc()?.into(),
            },
            "GroupPreKill" => Step::GroupPreKill {
                alloc: alloc()?.into(),
            },
            "GroupDelayElapsed" => Step::GroupDelayElapsed {
                alloc: alloc()?.into(),
            },
            "TaskPreKill" => Step::TaskPreKill {
                alloc: alloc()?.into(),
                task: task()?,
            },
            "TaskDelayElapsed" => Step::TaskDelayElapsed {
                alloc: alloc()?.into(),
                task: task()?,
            },
            "TaskExit" => Step::TaskExit {
                alloc: alloc()?.into(),
                task: task()?,
            },
            "KillTimeout" => Step::KillTimeout {
                alloc: alloc()?.into(),
                task: task()?,
            },
            "PoststopStart" => Step::PoststopStart {
                alloc: alloc()?.into(),
                task: task()?,
            },
            "PoststopExit" => Step::PoststopExit {
                alloc: alloc()?.into(),
                task: task()?,
            },
            "ClientRestart" => Step::ClientRestart,
            "UpdateJob" => Step::UpdateJob { job: job()? },
            "AllocHealthy" => Step::AllocHealthy {
                alloc: alloc()?.into(),
            },
            "AllocUnhealthy" => Step::AllocUnhealthy {
                alloc: alloc()?.into(),
            },
            "RestartAlloc" => Step::RestartAlloc {
                alloc: alloc()?.into(),
                task: wire.task.clone(),
                no_shutdown_delay: flag()?,
            },
            "RestartDecision" => Step::RestartDecision {
                alloc: alloc()?.into(),
                task: task()?,
                unrecoverable: wire.unrecoverable.ok_or_else(|| missing("unrecoverable"))?,
            },
            "RestartDelayElapsed" => Step::RestartDelayElapsed {
                alloc: alloc()?.into(),
                task: task()?,
            },
            other => return Err(format!("unknown step {other:?}")),
        };
        Ok(LogEntry {
            seq: wire.seq,
            time_ns: wire.time_ns,
            event: Event::Step(step),
            job: wire.job,
            group: wire.group,
            effects: wire.effects,
        })
    }
}

/// The log of one run, in order. A persistent list, so that cloning a simulator to branch
/// it (the conformance walk does, at every transition) costs nothing for the log.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    last: Option<Arc<Node>>,
    len: u64,
}

#[derive(Debug)]
struct Node {
    entry: LogEntry,
    previous: Option<Arc<Node>>,
}

impl EventLog {
    pub fn push(&mut self, mut entry: LogEntry) {
        self.len += 1;
        entry.seq = self.len;
        let previous = self.last.take();
        self.last = Some(Arc::new(Node { entry, previous }));
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<LogEntry> {
        let mut entries = Vec::with_capacity(self.len());
        let mut node = self.last.as_deref();
        while let Some(current) = node {
            entries.push(current.entry.clone());
            node = current.previous.as_deref();
        }
        entries.reverse();
        entries
    }

    /// The whole log as JSON lines, each ending in a newline.
    pub fn to_json_lines(&self) -> String {
        self.entries()
            .iter()
            .map(|entry| entry.to_json_line() + "\n")
            .collect()
    }
}

impl Drop for EventLog {
    /// Drops a long list iteratively: the default recursive drop would overflow the stack.
    fn drop(&mut self) {
        let mut node = self.last.take();
        while let Some(current) = node {
            node = match Arc::try_unwrap(current) {
                Ok(mut owned) => owned.previous.take(),
                Err(_) => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_written() {
        let mut entry = LogEntry::step(
            Step::TaskPreKill {
                alloc: "a1".into(),
                task: "app".into(),
            },
            Some("web".into()),
            Some("g".into()),
        );
        entry.seq = 7;
        entry.effects = vec![
            Effect::Deregister {
                task: Some("app".into()),
                services: ["app-svc".to_string()].into(),
            },
            Effect::Signal {
                task: "app".into(),
                signal: "SIGINT".into(),
                kill: 1,
                already_delivered: true,
                kill_timeout_ns: Some(5_000_000_000),
                timeout_from_ns: Some(1_000),
            },
        ];
        let line = entry.to_json_line();
        assert_eq!(LogEntry::parse_line(&line), Ok(entry));
        let stop = LogEntry::step(
            Step::StopJob {
                job: "web".into(),
                purge: true,
                no_shutdown_delay: false,
            },
            None,
            None,
        );
        assert_eq!(stop.job.as_deref(), Some("web"));
        assert_eq!(LogEntry::parse_line(&stop.to_json_line()), Ok(stop));
        let note = LogEntry::deployment("web", "failed");
        assert_eq!(LogEntry::parse_line(&note.to_json_line()), Ok(note));
        // The rollout's steps, as the agent writes them.
        for step in [
            Step::AllocHealthy { alloc: "a1".into() },
            Step::AllocUnhealthy { alloc: "a1".into() },
            Step::UpdateJob { job: "web".into() },
        ] {
            let entry = LogEntry::step(step, Some("web".into()), Some("g".into()));
            assert_eq!(LogEntry::parse_line(&entry.to_json_line()), Ok(entry));
        }
    }

    #[test]
    fn an_entry_missing_an_argument_is_refused_by_name() {
        let error = LogEntry::parse_line(r#"{"seq":1,"time_ns":0,"step":"TaskExit","alloc":"a"}"#)
            .unwrap_err();
        assert!(
            error.contains(r#"a TaskExit entry needs "task""#),
            "{error}"
        );
        let error = LogEntry::parse_line(r#"{"seq":1,"time_ns":0,"step":"Teleport"}"#).unwrap_err();
        assert!(error.contains(r#"unknown step "Teleport""#), "{error}");
    }
}
