//! The event log: JSON lines, one object per applied step (DESIGN.md, "The event log"): a
//! sequence number, the time (virtual in the simulator, real in the daemon), the step's name
//! from the step-alphabet table, and its arguments.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    pub time_ns: i64,
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub alloc: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub task: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub purge: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub no_shutdown_delay: Option<bool>,
}

impl LogEntry {
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a log entry always serializes")
    }

    pub fn parse_line(line: &str) -> Result<LogEntry, String> {
        serde_json::from_str(line)
            .map_err(|error| format!("not an event-log line ({error}): {line}"))
    }
}

/// The log of one run, in order.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    entries: Vec<LogEntry>,
}

impl EventLog {
    pub fn push(&mut self, mut entry: LogEntry) {
        entry.seq = self.entries.len() as u64 + 1;
        self.entries.push(entry);
    }

    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    /// The whole log as JSON lines, each ending in a newline.
    pub fn to_json_lines(&self) -> String {
        self.entries
            .iter()
            .map(|entry| entry.to_json_line() + "\n")
            .collect()
    }
}
