//! The server's event stream (`/v1/event/stream`), where it offers one: one subscription
//! for the whole run, from the index the run started at, to the topics a stop writes
//! (allocations, jobs, services), read on its own thread. It keeps only the probe's own
//! jobs' events, each with when the probe received it, so a verdict can rest on the order
//! the server itself gave its writes — which polling can miss between two reads.
//!
//! A subscription that answers 200 but ends before its first line (Nomad refuses a token
//! past its headers) counts as not offered, and the header line says so. Before a stop is
//! judged, the probe waits (at most 5 s) until the stream shows each allocation as last
//! read; where it does not, the stream's findings for that scenario are left out, and its
//! lines say so.

use super::api::{escape, now_ns, Api};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest line (one write's events) the probe reads.
const MAX_LINE: u64 = 16 << 20;
/// The most events of its own jobs the probe keeps; past it the stream counts as ended.
const MAX_KEPT: usize = 200_000;
/// How long the probe waits for the stream to open.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// One event of the probe's jobs.
#[derive(Clone, Debug)]
pub struct StreamEvent {
    pub index: u64,
    pub topic: String,
    pub kind: String,
    /// The record: `Payload.Allocation`, `Payload.Job` or `Payload.Service`.
    pub record: Value,
    /// When the probe read it (its clock).
    pub received_ns: i64,
}

#[derive(Default)]
struct Shared {
    /// A replay's last index: the reader ends once it has read a write at it or later.
    through: Option<u64>,
    /// Lines read (a heartbeat included).
    lines: u64,
    events: Vec<StreamEvent>,
    /// Why the stream ended, once it has.
    ended: Option<String>,
}

/// The subscription, read on its own thread.
#[derive(Clone)]
pub struct EventStream {
    shared: Arc<Mutex<Shared>>,
    pub from_index: u64,
}

/// What the stream showed so far.
#[derive(Clone, Debug, Default)]
pub struct StreamView {
    pub events: Vec<StreamEvent>,
    pub ended: Option<String>,
}

impl EventStream {
    /// Subscribes from `from_index` to the events of jobs whose ID starts with `prefix`.
    /// An error says why the stream cannot be used (not offered, refused, …).
    pub fn open(api: &Api, prefix: &str, from_index: u64) -> Result<EventStream, String> {
        Self::subscribe(api, prefix, from_index, None)
    }

    /// A replay, opened after the writes it asks for: the events of `prefix`'s jobs from
    /// `from_index` through `through`, read until the stream shows a write at `through` or
    /// later (then closed), or until `limit`. A server that keeps its events as each write
    /// left them (Nomad's buffer, quiesce's journal) shows the same as a stream that was
    /// open through them.
    pub fn replay(
        api: &Api,
        prefix: &str,
        from_index: u64,
        through: u64,
        limit: Duration,
    ) -> Result<StreamView, String> {
        let stream = Self::subscribe(api, prefix, from_index, Some((through, limit)))?;
        let deadline = std::time::Instant::now() + limit;
        loop {
            let view = stream.view();
            if let Some(why) = &view.ended {
                if why.starts_with("read through") {
                    return Ok(view);
                }
                return Err(format!("the replay ended before index {through}: {why}"));
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "the replay from index {from_index} did not reach index {through} within {} s",
                    limit.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A live stream (`replay: None`), or a replay through an index within a limit.
    fn subscribe(
        api: &Api,
        prefix: &str,
        from_index: u64,
        replay: Option<(u64, Duration)>,
    ) -> Result<EventStream, String> {
        let (through, replay_limit) = (replay.map(|r| r.0), replay.map(|r| r.1));
        let mut path =
            format!("/v1/event/stream?topic=Allocation&topic=Job&topic=Service&index={from_index}");
        if api.namespace() != "default" {
            path.push_str(&format!("&namespace={}", escape(api.namespace())));
        }
        let url = format!("{}{path}", api.address());
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(OPEN_TIMEOUT))
            .timeout_recv_response(Some(OPEN_TIMEOUT));
        if let Some(limit) = replay_limit {
            // A replay that never reaches its index ends with its call, so its reader (and
            // the server's stream slot) is not left behind.
            config = config.timeout_global(Some(limit + OPEN_TIMEOUT));
        }
        let config = config.build();
        let agent: ureq::Agent = config.into();
        let response = agent
            .get(&url)
            .header("X-Nomad-Token", api.token())
            .call()
            .map_err(|e| format!("GET {path}: no answer: {e}"))?;
        let status = response.status().as_u16();
        if status != 200 {
            let mut response = response;
            let text = response
                .body_mut()
                .with_config()
                .limit(4096)
                .read_to_string()
                .unwrap_or_default();
            let why = match status {
                404 => "not offered".to_string(),
                403 => "the token may not read it".to_string(),
                _ => "refused".to_string(),
            };
            return Err(format!(
                "{why} (GET {path} → {status}: {})",
                super::api::shorten(&text, 200)
            ));
        }
        let shared = Arc::new(Mutex::new(Shared {
            through,
            ..Shared::default()
        }));
        let reader = response.into_body().into_reader();
        let (kept, prefix) = (Arc::clone(&shared), prefix.to_string());
        std::thread::Builder::new()
            .name("event-stream".into())
            .spawn(move || read(reader, &prefix, &kept))
            .map_err(|e| format!("cannot start the stream's reader: {e}"))?;
        // A subscription the server took sends a first line at once (Nomad's heartbeat,
        // `{}`); a server that refuses it after answering 200 (Nomad does, past its
        // headers) ends it before.
        let deadline = std::time::Instant::now() + OPEN_TIMEOUT;
        loop {
            {
                let state = shared.lock().expect("never poisoned");
                if state.lines > 0 {
                    break;
                }
                if let Some(why) = &state.ended {
                    return Err(format!(
                        "refused (GET {path} → 200, then it ended before its first line: {why})"
                    ));
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "GET {path} → 200, but no line within {} s",
                    OPEN_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(EventStream { shared, from_index })
    }

    pub fn view(&self) -> StreamView {
        let shared = self.shared.lock().expect("never poisoned");
        StreamView {
            events: shared.events.clone(),
            ended: shared.ended.clone(),
        }
    }

    /// Waits (up to `limit`) until the stream has shown `alloc` at `modify_index` or later,
    /// or has ended; whether it did show it.
    pub fn wait_for_alloc(&self, alloc: &str, modify_index: u64, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            {
                let shared = self.shared.lock().expect("never poisoned");
                let seen = shared.events.iter().any(|e| {
                    e.topic == "Allocation"
                        && e.record["ID"] == alloc
                        && e.record["ModifyIndex"].as_u64().unwrap_or(0) >= modify_index
                });
                if seen {
                    return true;
                }
                if shared.ended.is_some() {
                    return false;
                }
            }
            if std::time::Instant::now() > deadline
                || super::run::INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The job an event belongs to.
fn job_of<'a>(topic: &str, key: &'a str, record: &'a Value) -> &'a str {
    match topic {
        "Job" => key,
        _ => record["JobID"].as_str().unwrap_or_default(),
    }
}

fn read(reader: impl Read, prefix: &str, shared: &Mutex<Shared>) {
    let mut reader = BufReader::new(reader);
    let ended = loop {
        let mut line = Vec::new();
        match reader.by_ref().take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => break "the server ended it".to_string(),
            Ok(_) if line.last() != Some(&b'\n') && line.len() as u64 == MAX_LINE => {
                break format!("a line longer than {MAX_LINE} bytes");
            }
            Ok(_) => {}
            Err(e) => break format!("reading it: {e}"),
        }
        let received_ns = now_ns();
        let parsed: Value = match serde_json::from_slice(&line) {
            Ok(parsed) => parsed,
            Err(e) => break format!("a line that is not JSON: {e}"),
        };
        let index = parsed["Index"].as_u64().unwrap_or(0);
        let mut ours = Vec::new();
        for event in parsed["Events"].as_array().into_iter().flatten() {
            let topic = event["Topic"].as_str().unwrap_or_default();
            let key = event["Key"].as_str().unwrap_or_default();
            let record = &event["Payload"][match topic {
                "Allocation" => "Allocation",
                "Job" => "Job",
                "Service" => "Service",
                _ => continue,
            }];
            if !job_of(topic, key, record).starts_with(prefix) {
                continue;
            }
            ours.push(StreamEvent {
                index: event["Index"].as_u64().unwrap_or(index),
                topic: topic.to_string(),
                kind: event["Type"].as_str().unwrap_or_default().to_string(),
                record: record.clone(),
                received_ns,
            });
        }
        let mut shared = shared.lock().expect("never poisoned");
        shared.lines += 1;
        shared.events.extend(ours);
        if shared.events.len() > MAX_KEPT {
            break format!("more than {MAX_KEPT} events of the probe's jobs");
        }
        if shared.through.is_some_and(|through| index >= through) {
            // Dropping the reader closes the replay's connection.
            break format!("read through index {index}");
        }
    };
    shared.lock().expect("never poisoned").ended = Some(ended);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_probes_jobs_are_kept_and_the_end_is_told() {
        let lines = concat!(
            "{}\n",
            r#"{"Index":7,"Events":[{"Topic":"Allocation","Type":"PlanResult","Key":"a","Index":7,"Payload":{"Allocation":{"ID":"a","JobID":"quiesce-probe-x-one"}}},"#,
            r#"{"Topic":"Allocation","Type":"PlanResult","Key":"b","Index":7,"Payload":{"Allocation":{"ID":"b","JobID":"someone-else"}}}]}"#,
            "\n",
            r#"{"Index":9,"Events":[{"Topic":"Job","Type":"JobDeregistered","Key":"quiesce-probe-x-one","Index":9,"Payload":{"Job":{"ID":"quiesce-probe-x-one"}}},"#,
            r#"{"Topic":"Node","Type":"NodeRegistration","Key":"n","Index":9,"Payload":{"Node":{}}}]}"#,
            "\n",
            "not json\n",
        );
        let shared = Mutex::new(Shared::default());
        read(lines.as_bytes(), "quiesce-probe-x-", &shared);
        let shared = shared.lock().unwrap();
        let seen: Vec<(u64, &str)> = shared
            .events
            .iter()
            .map(|e| (e.index, e.topic.as_str()))
            .collect();
        assert_eq!(seen, vec![(7, "Allocation"), (9, "Job")]);
        assert!(shared.ended.as_deref().unwrap().contains("not JSON"));
        let shared = Mutex::new(Shared::default());
        read("{}\n".as_bytes(), "p", &shared);
        assert_eq!(
            shared.lock().unwrap().ended.as_deref(),
            Some("the server ended it")
        );
    }
}
