//! What every scenario does with the cluster: register a job and wait for it to run (its
//! services listed), wait for a stop to end, read back what the witness recorded, and
//! purge. Judging what a stop left behind is `judge/`.

use super::api::{escape, now_ns, Api};
use super::jobs::{JobSpec, Role, Tasks};
use super::observe::{self, AllocView, Skew, Witnessed};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set by SIGINT or SIGTERM: every wait ends, and the jobs made so far are purged.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// What the server offers beyond Nomad's API, as it advertises it in `/v1/agent/self`.
#[derive(Clone, Debug, Default)]
pub struct Extensions {
    pub names: Vec<String>,
}

impl Extensions {
    pub const GROUP_DELAY_EVENTS: &'static str = "group-shutdown-delay-events";
    pub const RESTART_FLAG: &'static str = "restart-no-shutdown-delay";

    pub fn has(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

pub struct Ctx<'a> {
    pub api: &'a Api,
    /// The server's event stream, where it offers one.
    pub stream: Option<super::stream::EventStream>,
    /// Where the stream did not catch up with what was read, so that its findings were
    /// left out: told after the scenario.
    pub stream_missed: std::cell::RefCell<Vec<String>>,
    /// The server said it is quiesce (`/v1/agent/self`).
    pub quiesce: bool,
    /// Nomad's version (major, minor), if the server is Nomad and said it.
    pub nomad_version: Option<(u64, u64)>,
    pub delay_ns: i64,
    pub tasks: Tasks,
    pub extensions: Extensions,
    /// Unique per run: every job's ID starts with it.
    pub run_id: String,
    /// The jobs registered so far, purged when the scenario ends.
    pub created: Vec<String>,
    /// How long a wait may last beyond the delays it covers.
    pub patience: Duration,
}

const POLL: Duration = Duration::from_millis(25);
/// How long the probe waits for the event stream to catch up with what it read.
const STREAM_PATIENCE: Duration = Duration::from_secs(5);

/// A job the probe registered and saw running.
pub struct Running {
    pub spec: JobSpec,
    /// The job as the server stored it, read once it ran.
    pub stored: Value,
    pub allocs: Vec<AllocView>,
    /// Each node's clock against the probe's, from its allocations' first events (the
    /// narrowest bound of each node).
    pub skews: BTreeMap<String, Skew>,
}

impl Running {
    pub fn skew(&self, alloc: &AllocView) -> Option<Skew> {
        self.skews.get(&alloc.node).copied()
    }
}

impl Ctx<'_> {
    pub fn job_id(&self, scenario: &str, part: &str) -> String {
        format!("quiesce-probe-{}-{scenario}{part}", self.run_id)
    }

    pub fn wait_until<T>(
        &self,
        what: &str,
        limit: Duration,
        mut probe: impl FnMut() -> Result<Option<T>, String>,
    ) -> Result<T, String> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if INTERRUPTED.load(Ordering::Relaxed) {
                return Err("interrupted".into());
            }
            if let Some(found) = probe()? {
                return Ok(found);
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("{what}: not within {} s", limit.as_secs()));
            }
            std::thread::sleep(POLL);
        }
    }

    pub fn register(&mut self, spec: &JobSpec) -> Result<super::api::Answer, String> {
        let body = spec.body(self.api.namespace(), &self.tasks, self.api.address());
        self.created.push(spec.id.clone());
        let answer = self.api.send("PUT", "/v1/jobs", Some(&body))?;
        if !answer.ok() {
            return Err(format!(
                "the server refused the probe's job: {}",
                answer.clone().into_ok().unwrap_err()
            ));
        }
        Ok(answer)
    }

    /// Registers the job and waits until `count` allocations run every task that should be
    /// running and list their services.
    pub fn run_job(&mut self, spec: JobSpec) -> Result<Running, String> {
        let sent = now_ns();
        self.register(&spec)?;
        let mut first_seen: BTreeMap<String, i64> = BTreeMap::new();
        let allocs = self.wait_until(&format!("job {} running", spec.id), self.patience, || {
            let allocs = observe::job_allocs(self.api, &spec.id)?;
            for alloc in &allocs {
                if alloc.tasks.values().any(|t| !t.events.is_empty()) {
                    first_seen.entry(alloc.id.clone()).or_insert_with(now_ns);
                }
            }
            let running: Vec<AllocView> = allocs
                .into_iter()
                .filter(|a| a.desired == "run" && a.client == "running")
                .filter(|a| {
                    spec.tasks
                        .iter()
                        .filter(|t| t.role != Role::Poststop)
                        .all(|t| a.tasks.get(t.name).is_some_and(|s| s.state == "running"))
                })
                .collect();
            Ok((running.len() == spec.count as usize).then_some(running))
        })?;
        // The services listed (else a stop's deregistration would prove nothing).
        for name in spec.service_names() {
            self.wait_until(&format!("service {name} registered"), self.patience, || {
                let listed = self.api.get(&format!("/v1/service/{}", escape(&name)))?;
                let ours = listed.as_array().map_or(0, |l| {
                    l.iter()
                        .filter(|r| allocs.iter().any(|a| r["AllocID"] == a.id.as_str()))
                        .count()
                });
                Ok((ours >= allocs.len()).then_some(()))
            })?;
        }
        let mut skews: BTreeMap<String, Skew> = BTreeMap::new();
        for alloc in &allocs {
            let first = alloc
                .tasks
                .values()
                .flat_map(|t| t.events.first())
                .map(|e| e.time)
                .min();
            let (Some(first), Some(seen)) = (first, first_seen.get(&alloc.id)) else {
                continue;
            };
            let skew = Skew::from_event(first, sent, *seen);
            let narrowest = skews.entry(alloc.node.clone()).or_insert(skew);
            if skew.width() < narrowest.width() {
                *narrowest = skew;
            }
        }
        let stored = self.api.get(&format!("/v1/job/{}", escape(&spec.id)))?;
        Ok(Running {
            spec,
            stored,
            allocs,
            skews,
        })
    }

    /// Waits until each of `ids` is client-terminal; the allocations as last read, and
    /// whether they all got there.
    pub fn wait_terminal(
        &self,
        ids: &[String],
        limit: Duration,
    ) -> Result<(Vec<AllocView>, bool), String> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if INTERRUPTED.load(Ordering::Relaxed) {
                return Err("interrupted".into());
            }
            let mut views = Vec::new();
            for id in ids {
                match observe::alloc(self.api, id)? {
                    Some(view) => views.push(view),
                    None => {
                        return Err(format!(
                            "allocation {id} disappeared (404) before its stop ended"
                        ))
                    }
                }
            }
            let done = views.iter().all(AllocView::client_terminal);
            if done || std::time::Instant::now() > deadline {
                return Ok((views, done));
            }
            std::thread::sleep(POLL);
        }
    }

    /// How long a stop of `spec` may take: every delay and kill timeout, plus patience.
    pub fn stop_limit(&self, spec: &JobSpec) -> Duration {
        let ns: i64 = spec.group_delay_ns
            + spec
                .tasks
                .iter()
                .map(|t| t.delay_ns + t.kill_timeout_ns.unwrap_or(5_000_000_000))
                .sum::<i64>();
        self.patience + Duration::from_nanos(ns.max(0) as u64)
    }

    /// What the event stream showed, once it has shown each of `allocs` as last read:
    /// `None` where there is no stream, or where it did not catch up (within
    /// [`STREAM_PATIENCE`]; said in `stream_missed`, and its findings are left out).
    pub fn streamed(&self, allocs: &[AllocView]) -> Option<super::stream::StreamView> {
        let stream = self.stream.as_ref()?;
        for alloc in allocs {
            if !stream.wait_for_alloc(&alloc.id, alloc.modify_index, STREAM_PATIENCE) {
                let view = stream.view();
                self.stream_missed.borrow_mut().push(format!(
                    "it did not show alloc {} at index {} within {} s{}",
                    super::judge::short(&alloc.id),
                    alloc.modify_index,
                    STREAM_PATIENCE.as_secs(),
                    view.ended
                        .map_or(String::new(), |why| format!(" (it ended: {why})"))
                ));
                return None;
            }
        }
        Some(stream.view())
    }

    /// The event stream of the probe's jobs from index `from` through `through`, opened
    /// now, after those writes (see [`super::stream::EventStream::replay`]).
    pub fn replayed(&self, from: u64, through: u64) -> Result<super::stream::StreamView, String> {
        let prefix = format!("quiesce-probe-{}-", self.run_id);
        super::stream::EventStream::replay(self.api, &prefix, from, through, STREAM_PATIENCE)
    }

    /// Each task's witness records, where the witness ran (`None`: no witness, or its log
    /// could not be read, with why).
    pub fn witnessed(
        &self,
        spec: &JobSpec,
        alloc: &str,
    ) -> BTreeMap<&'static str, Result<Vec<Witnessed>, String>> {
        spec.tasks
            .iter()
            .map(|t| {
                let records = match self.tasks.witness() {
                    None => Err(self.tasks.no_witness_reason().to_string()),
                    Some(_) => observe::task_stdout(self.api, alloc, t.name)
                        .map(|text| observe::witnessed(&text)),
                };
                (t.name, records)
            })
            .collect()
    }

    /// Purges every job this scenario made.
    pub fn clean_up(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for id in std::mem::take(&mut self.created) {
            let path = format!("/v1/job/{}?purge=true&no_shutdown_delay=true", escape(&id));
            match self.api.send("DELETE", &path, None) {
                Ok(answer) if answer.ok() || answer.status == 404 => {}
                Ok(answer) => {
                    errors.push(format!("purging {id}: {}", answer.into_ok().unwrap_err()))
                }
                Err(e) => errors.push(format!("purging {id}: {e}")),
            }
        }
        errors
    }
}
