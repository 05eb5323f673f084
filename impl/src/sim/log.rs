//! The event log: JSON lines, one object per applied step (DESIGN.md, "The event log"): a
//! sequence number, the time (virtual in the simulator, real in the daemon), the step's name
//! from the step-alphabet table, and its arguments.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
