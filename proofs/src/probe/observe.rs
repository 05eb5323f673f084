//! What the API shows, read into plain values: allocations with their transition and task
//! events, a witness's record read back through `/v1/client/fs/logs`, and the bound the
//! probe can put on the difference between its clock and a client's.

use super::api::{escape, Api};
use serde_json::Value;
use std::collections::BTreeMap;

/// Nomad's task event `Type`s the probe reads.
pub mod kinds {
    pub const RECEIVED: &str = "Received";
    pub const STARTED: &str = "Started";
    pub const KILLING: &str = "Killing";
    pub const TERMINATED: &str = "Terminated";
    pub const KILLED: &str = "Killed";
    pub const WAITING: &str = "Waiting for shutdown delay";
    pub const SKIPPING: &str = "Skipping shutdown delay";
    pub const RESTART_SIGNALED: &str = "Restart Signaled";
    /// quiesce's extensions (advertised in `/v1/agent/self`).
    pub const CUT_SHORT: &str = "Shutdown delay cut short";
    pub const GROUP_WAITING: &str = "Waiting for group shutdown delay";
    pub const GROUP_SKIPPING: &str = "Skipping group shutdown delay";
    pub const GROUP_CUT_SHORT: &str = "Group shutdown delay cut short";
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub kind: String,
    /// Unix nanoseconds, the client's clock.
    pub time: i64,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct TaskView {
    pub state: String,
    pub failed: bool,
    pub restarts: u64,
    pub events: Vec<Event>,
}

/// One stop's kill of a task, as its events tell it: from its last `Killing` event.
#[derive(Clone, Debug, PartialEq)]
pub struct Kill {
    pub killing: i64,
    /// The task's `Terminated` (else `Killed`) event after it.
    pub end: Option<i64>,
    pub end_signal: Option<i64>,
    pub waiting_event: bool,
    pub skipping_event: bool,
    pub cut_short_event: bool,
}

impl TaskView {
    pub fn first_after(&self, kind: &str, from: i64) -> Option<&Event> {
        self.events
            .iter()
            .find(|e| e.kind == kind && e.time >= from)
    }

    fn has_after(&self, kind: &str, from: i64) -> bool {
        self.first_after(kind, from).is_some()
    }

    /// The kill begun by the task's last `Killing` event, if it was killed.
    pub fn kill(&self) -> Option<Kill> {
        let killing = self
            .events
            .iter()
            .rev()
            .find(|e| e.kind == kinds::KILLING)?
            .time;
        let end = self
            .first_after(kinds::TERMINATED, killing)
            .or_else(|| self.first_after(kinds::KILLED, killing));
        Some(Kill {
            killing,
            end: end.map(|e| e.time),
            end_signal: end.and_then(|e| e.signal),
            waiting_event: self.has_after(kinds::WAITING, killing),
            skipping_event: self.has_after(kinds::SKIPPING, killing),
            cut_short_event: self.has_after(kinds::CUT_SHORT, killing),
        })
    }

    /// When the task ended last (its last `Terminated` or `Killed` event).
    pub fn ended(&self) -> Option<i64> {
        self.events
            .iter()
            .rev()
            .find(|e| e.kind == kinds::TERMINATED || e.kind == kinds::KILLED)
            .map(|e| e.time)
    }
}

#[derive(Clone, Debug, Default)]
pub struct AllocView {
    pub id: String,
    pub node: String,
    pub desired: String,
    pub client: String,
    pub migrate: bool,
    pub reschedule: bool,
    /// `DesiredTransition.NoShutdownDelay`: absent, null, false or true.
    pub no_shutdown_delay: Option<bool>,
    pub tasks: BTreeMap<String, TaskView>,
    /// The index of its last write, as read.
    pub modify_index: u64,
}

impl AllocView {
    pub fn client_terminal(&self) -> bool {
        matches!(self.client.as_str(), "complete" | "failed" | "lost")
    }

    pub fn flagged(&self) -> bool {
        self.no_shutdown_delay == Some(true)
    }

    pub fn parse(value: &Value) -> Result<AllocView, String> {
        let text = |key: &str| value[key].as_str().unwrap_or_default().to_string();
        let id = text("ID");
        if id.is_empty() {
            return Err(format!(
                "an allocation without an ID: {}",
                super::api::shorten(&value.to_string(), 200)
            ));
        }
        let transition = &value["DesiredTransition"];
        let mut tasks = BTreeMap::new();
        if let Some(states) = value["TaskStates"].as_object() {
            for (name, state) in states {
                tasks.insert(name.clone(), task_view(state));
            }
        }
        Ok(AllocView {
            id,
            node: text("NodeID"),
            desired: text("DesiredStatus"),
            client: text("ClientStatus"),
            migrate: transition["Migrate"].as_bool() == Some(true),
            reschedule: transition["Reschedule"].as_bool() == Some(true),
            no_shutdown_delay: transition["NoShutdownDelay"].as_bool(),
            tasks,
            modify_index: value["ModifyIndex"].as_u64().unwrap_or(0),
        })
    }
}

/// A three-valued flag as the API showed it.
pub fn shown(flag: Option<bool>) -> &'static str {
    match flag {
        None => "absent or null",
        Some(true) => "true",
        Some(false) => "false",
    }
}

fn task_view(state: &Value) -> TaskView {
    let number = |event: &Value, detail: &str, field: &str| {
        event["Details"][detail]
            .as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| event[field].as_i64())
    };
    let events = state["Events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .map(|e| Event {
                    kind: e["Type"].as_str().unwrap_or_default().to_string(),
                    time: e["Time"].as_i64().unwrap_or(0),
                    exit_code: number(e, "exit_code", "ExitCode"),
                    signal: number(e, "signal", "Signal").filter(|s| *s != 0),
                })
                .collect()
        })
        .unwrap_or_default();
    TaskView {
        state: state["State"].as_str().unwrap_or_default().to_string(),
        failed: state["Failed"].as_bool() == Some(true),
        restarts: state["Restarts"].as_u64().unwrap_or(0),
        events,
    }
}

/// `GET /v1/allocation/:id`; `None` if the server no longer has it (404).
pub fn alloc(api: &Api, id: &str) -> Result<Option<AllocView>, String> {
    let answer = api.send("GET", &format!("/v1/allocation/{}", escape(id)), None)?;
    if answer.status == 404 {
        return Ok(None);
    }
    AllocView::parse(&answer.into_ok()?).map(Some)
}

/// The job's allocations (full records, in creation order).
pub fn job_allocs(api: &Api, job: &str) -> Result<Vec<AllocView>, String> {
    let listed = api.get(&format!("/v1/job/{}/allocations", escape(job)))?;
    let mut stubs: Vec<&Value> = listed
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    stubs.sort_by_key(|s| s["CreateIndex"].as_u64().unwrap_or(0));
    let mut allocs = Vec::new();
    for stub in stubs {
        if let Some(id) = stub["ID"].as_str() {
            if let Some(view) = alloc(api, id)? {
                allocs.push(view);
            }
        }
    }
    Ok(allocs)
}

/// One record of the witness (`quiesce-witness`), as it wrote it to its stdout.
#[derive(Clone, Debug, PartialEq)]
pub enum Witnessed {
    Start {
        unix_ns: i64,
    },
    Signal {
        unix_ns: i64,
        name: String,
        services: Option<BTreeMap<String, u64>>,
        error: Option<String>,
    },
    Exit {
        unix_ns: i64,
        signal: Option<i64>,
    },
}

/// Parses a witness's stdout; lines that are not its records are skipped.
pub fn witnessed(text: &str) -> Vec<Witnessed> {
    let mut records = Vec::new();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let unix_ns = record["unix_ns"].as_i64().unwrap_or(0);
        match record["event"].as_str() {
            Some("start") => records.push(Witnessed::Start { unix_ns }),
            Some("signal") => records.push(Witnessed::Signal {
                unix_ns,
                name: record["name"].as_str().unwrap_or_default().to_string(),
                services: record["services"].as_object().map(|services| {
                    services
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                        .collect()
                }),
                error: record["error"].as_str().map(str::to_string),
            }),
            Some("exit") => records.push(Witnessed::Exit {
                unix_ns,
                signal: record["signal"].as_i64(),
            }),
            _ => {}
        }
    }
    records
}

/// A task's stdout, read over the API (`/v1/client/fs/logs`, plain). An error (no client
/// filesystem API, the allocation gone) says why.
pub fn task_stdout(api: &Api, alloc: &str, task: &str) -> Result<String, String> {
    let answer = api.send(
        "GET",
        &format!(
            "/v1/client/fs/logs/{}?task={}&type=stdout&origin=start&plain=true",
            escape(alloc),
            escape(task)
        ),
        None,
    )?;
    if answer.ok() {
        Ok(answer.text)
    } else {
        Err(format!(
            "{}: {}",
            answer.sent,
            super::api::shorten(&answer.text, 200)
        ))
    }
}

/// The difference between a client's clock and the probe's (client − probe), bounded by an
/// event the probe caused: it happened after the request was sent and before the probe saw
/// it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Skew {
    pub low: i64,
    pub high: i64,
}

impl Skew {
    pub fn from_event(event_ns: i64, sent_ns: i64, seen_ns: i64) -> Skew {
        Skew {
            low: event_ns - seen_ns,
            high: event_ns - sent_ns,
        }
    }

    pub fn width(&self) -> i64 {
        self.high - self.low
    }

    /// The interval, on the client's clock, between a moment of the probe's and a client
    /// event: (at least, at most).
    pub fn gap(&self, probe_ns: i64, client_ns: i64) -> (i64, i64) {
        (
            client_ns - probe_ns - self.high,
            client_ns - probe_ns - self.low,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn witness_records_and_task_events_read_back() {
        let text = "noise\n{\"event\":\"start\",\"unix_ns\":5}\n{\"event\":\"signal\",\"name\":\"SIGINT\",\"unix_ns\":9,\"services\":{\"a\":0}}\n{\"event\":\"signal\",\"name\":\"SIGTERM\",\"unix_ns\":10,\"services\":null,\"error\":\"refused\"}\n{\"event\":\"exit\",\"unix_ns\":11,\"signal\":2}\n";
        let records = witnessed(text);
        assert_eq!(records.len(), 4);
        assert_eq!(
            records[1],
            Witnessed::Signal {
                unix_ns: 9,
                name: "SIGINT".into(),
                services: Some([("a".to_string(), 0)].into()),
                error: None
            }
        );
        assert!(
            matches!(&records[2], Witnessed::Signal { services: None, error: Some(e), .. } if e == "refused")
        );
        let alloc = AllocView::parse(&serde_json::json!({
            "ID": "a1", "DesiredStatus": "stop", "ClientStatus": "complete",
            "DesiredTransition": {"Migrate": true, "NoShutdownDelay": null},
            "TaskStates": {"t": {"State": "dead", "Events": [
                {"Type": "Killing", "Time": 10},
                {"Type": "Waiting for shutdown delay", "Time": 11},
                {"Type": "Terminated", "Time": 20, "Details": {"signal": "9"}},
                {"Type": "Killed", "Time": 21}]}}
        }))
        .unwrap();
        assert!(
            alloc.migrate
                && !alloc.flagged()
                && alloc.no_shutdown_delay.is_none()
                && alloc.client_terminal()
        );
        let kill = alloc.tasks["t"].kill().unwrap();
        assert_eq!(
            (kill.killing, kill.end, kill.end_signal, kill.waiting_event),
            (10, Some(20), Some(9), true)
        );
        assert!(AllocView::parse(&serde_json::json!({"ID": ""})).is_err());
    }
}
