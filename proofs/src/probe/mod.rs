//! `quiesce-conform probe`: the invariants taken to any Nomad-API cluster. Scenarios run
//! over the HTTP API alone — no event log, no access to the host — each with its own
//! uniquely named job, purged at the end (also when it fails or the probe is interrupted);
//! each invariant a scenario observes is reported `holds`, `VIOLATED` with the evidence, or
//! `not observable` with the reason. [`verdict`] says what each invariant's outside evidence
//! is and where it is weaker than the model's.
//!
//! * [`api`]: the HTTP client, which remembers every request for the evidence;
//! * [`observe`]: allocations, task events and witness records read into values;
//! * [`jobs`]: the scenarios' jobs;
//! * [`run`]: registering a job and waiting for it to run, waiting for a stop, purging;
//! * [`judge`]: a stop judged from what it left (its delays in `judge/delays.rs`; pre-kill,
//!   kill order, completion, the stored job);
//! * [`stream`]: the server's event stream, where it offers one, read on its own thread;
//! * [`scenarios`]: the scenarios (the stop path's in `stops.rs`, Nomad's tests in
//!   `nomad.rs`);
//! * [`verdict`]: verdicts and the pure rules behind them.
//!
//! Server facts: `/v1/agent/self` tells Nomad from quiesce and gives Nomad's version
//! (alloc stop's `reschedule` is Nomad 1.11's: before it, its absence is *not observable*).
//! A token without `agent:read` gets a 403 there: the server is then taken for a Nomad of
//! unknown version offering no extension. quiesce lists its extensions there
//! (`quiesce.extensions`: `group-shutdown-delay-events`, `restart-no-shutdown-delay`); the
//! probe uses one only where it is advertised, and its first lines say which.
//!
//! Tasks are raw_exec's where a ready node offers it healthy, else mock_driver's (Nomad's
//! dev builds, this agent), and then what only a process can show is *not observable*. A
//! probe started together with its agent finds it not yet listening, then its node ready
//! only at its first heartbeat: it retries both within `--patience`, says once what it
//! waits for, and fails only when the patience runs out, with the last reason.
//!
//! Teeth (`proofs/e2e/test_probe.py`): `faulty_proxy.py` sits between the probe and the
//! reference agent, and each fault must be caught with exactly the invariants it breaks
//! named: `drop-flag` (drops `no_shutdown_delay` from requests: `flag_is_honoured`,
//! `stop_recorded`); `rewrite-delay` (a stored delay rewritten after a stop:
//! `jobspec_unchanged`); `strip-flag` (`NoShutdownDelay` stripped from allocations:
//! `delay_skipped_only_when_flagged`, `stop_recorded`); `stale-services` (a service listed
//! after the server's list emptied: `prestop_hooks_always_run`, `stop_completes`);
//! `late-leader` (the leader's `Terminated` and `Killed` 10 s later: `kill_order`);
//! `late-flag` (the stream hides the flag until it has shown the stop: `stop_recorded`);
//! `late-deregistration` (the stream holds deregistrations back past the allocation's end:
//! `prestop_hooks_always_run`, without the witness). `hide-event-stream`,
//! `end-event-stream` and `hide-raw-exec` are no faults: the probe says what it cannot
//! use, and conforms. The same file runs the probe against the agent with and without the
//! witness, with raw_exec hidden, interrupted (its jobs must be purged), and with bad
//! arguments.

pub mod api;
pub mod jobs;
pub mod judge;
pub mod observe;
pub mod run;
pub mod scenarios;
pub mod stream;
pub mod verdict;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use verdict::{Judgement, Verdict, INVARIANTS};

pub struct Options {
    pub address: String,
    pub token: Option<String>,
    pub namespace: Option<String>,
    pub scenarios: Vec<String>,
    pub delay_ns: i64,
    /// The witness's path on the cluster's nodes.
    pub witness: Option<String>,
    pub patience: Duration,
}

pub struct ScenarioReport {
    pub name: &'static str,
    pub about: &'static str,
    pub judgements: Vec<Judgement>,
    pub error: Option<String>,
    /// Where the event stream did not catch up, so that its findings were left out.
    pub stream_missed: Vec<String>,
    pub seconds: f64,
}

pub struct Report {
    pub address: String,
    pub server: String,
    pub extensions: Vec<String>,
    pub witness: Option<String>,
    pub driver: &'static str,
    /// The event stream: read from an index, or why not.
    pub event_stream: String,
    pub scenarios: Vec<ScenarioReport>,
    pub interrupted: bool,
    pub seconds: f64,
}

impl Report {
    pub fn conforms(&self) -> bool {
        !self.interrupted
            && self.scenarios.iter().all(|s| {
                s.error.is_none() && !s.judgements.iter().any(|j| j.verdict.is_violation())
            })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "address": self.address,
            "server": self.server,
            "extensions": self.extensions,
            "witness": self.witness,
            "driver": self.driver,
            "event_stream": self.event_stream,
            "scenarios": self.scenarios.iter().map(|s| json!({
                "name": s.name,
                "about": s.about,
                "seconds": (s.seconds * 10.0).round() / 10.0,
                "error": s.error,
                "event_stream_missed": s.stream_missed,
                "invariants": s.judgements.iter().map(Judgement::to_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "interrupted": self.interrupted,
            "seconds": (self.seconds * 10.0).round() / 10.0,
            "result": if self.conforms() { "conforms" } else { "FAILED" },
        })
    }
}

/// The names `--scenario` takes.
pub fn scenario_names() -> Vec<&'static str> {
    scenarios::SCENARIOS.iter().map(|s| s.name).collect()
}

/// What the server is and offers, as `/v1/agent/self` says: its name and version, and
/// quiesce's extensions if it advertises them (`quiesce.extensions`).
pub struct ServerFacts {
    pub told: String,
    pub quiesce: bool,
    pub nomad_version: Option<(u64, u64)>,
    pub extensions: run::Extensions,
}

/// Reads the server's facts. A token that may not read the agent (`agent:read`) gets none:
/// the server is taken for a Nomad of unknown version, offering no extension.
fn server_facts(answer: api::Answer) -> Result<ServerFacts, String> {
    if answer.status == 403 {
        return Ok(ServerFacts {
            told: "a Nomad-API server; /v1/agent/self refused (403): no extensions assumed".into(),
            quiesce: false,
            nomad_version: None,
            extensions: run::Extensions::default(),
        });
    }
    let me = answer.into_ok()?;
    let version = me["config"]["Version"]["Version"]
        .as_str()
        .unwrap_or("unknown version");
    let names: Vec<String> = me["quiesce"]["extensions"]
        .as_array()
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let quiesce = me["quiesce"].is_object();
    let nomad_version = if quiesce { None } else { major_minor(version) };
    Ok(ServerFacts {
        told: if quiesce {
            format!("quiesce {version}")
        } else {
            format!("Nomad {version}")
        },
        quiesce,
        nomad_version,
        extensions: run::Extensions { names },
    })
}

/// `1.10.3` (or `1.10.3-dev`, `v1.10`) as (1, 10).
pub fn major_minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.trim_start_matches('v').split(['.', '-', '+']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// raw_exec where a ready node offers it healthy (the witness if its path was given), else
/// mock_driver where one offers that; else no scenario can run yet (the inner error: a node
/// becomes ready at its first heartbeat).
/// A token that may not read the nodes (`node:read`) gets raw_exec assumed.
fn choose_tasks(api: &api::Api, witness: Option<&str>) -> Attempt<(jobs::Tasks, bool)> {
    let raw_exec = || witness.map_or(jobs::Tasks::Sleep, |w| jobs::Tasks::Witness(w.to_string()));
    let answer = match api.send("GET", "/v1/nodes", None) {
        Ok(answer) => answer,
        Err(unreachable) => return Ok(Err(unreachable)),
    };
    if answer.status == 403 {
        return Ok(Ok((raw_exec(), true)));
    }
    // A Nomad agent started a moment ago answers so until its leader is elected.
    if answer.status == 500 && answer.text.contains("No cluster leader") {
        return Ok(Err(format!("{}: no cluster leader yet", answer.sent)));
    }
    let nodes = answer.into_ok()?;
    let offers = |driver: &str| {
        nodes.as_array().into_iter().flatten().any(|node| {
            node["Status"] == "ready"
                && node["SchedulingEligibility"] != "ineligible"
                && node["Drain"].as_bool() != Some(true)
                && node["Drivers"][driver]["Detected"].as_bool() == Some(true)
                && node["Drivers"][driver]["Healthy"].as_bool() == Some(true)
        })
    };
    if offers("raw_exec") {
        return Ok(Ok((raw_exec(), false)));
    }
    Ok(choose_without_raw_exec(offers("mock_driver")).map(|tasks| (tasks, false)))
}

/// One try at something that may come within the patience: the outer error ends the probe,
/// the inner one says why it has not come yet.
type Attempt<T> = Result<Result<T, String>, String>;

/// Tries `attempt` until it comes, or `patience` runs out: a script that starts an agent and
/// the probe at once (`quiesce agent -dev & quiesce-conform probe …`) finds the agent not yet
/// listening, and its node ready only at its first heartbeat. Says once what it waits for.
fn patiently<T>(
    what: &str,
    patience: Duration,
    print: &mut impl FnMut(&str),
    mut attempt: impl FnMut() -> Attempt<T>,
) -> Result<T, String> {
    let started = Instant::now();
    let mut said = false;
    loop {
        let why = match attempt()? {
            Ok(found) => return Ok(found),
            Err(why) => why,
        };
        if run::INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        if started.elapsed() >= patience {
            return Err(format!(
                "{why} (waited {:.1} s for {what}: --patience {} s)",
                started.elapsed().as_secs_f64(),
                patience.as_secs_f64()
            ));
        }
        if !said {
            print(&format!(
                "waiting up to {} s for {what}: {why}",
                patience.as_secs_f64()
            ));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn choose_without_raw_exec(mock: bool) -> Result<jobs::Tasks, String> {
    if mock {
        Ok(jobs::Tasks::Mock)
    } else {
        Err(
            "no ready node offers raw_exec (or mock_driver) healthy: the probe's tasks cannot run \
             (Nomad: enable the raw_exec plugin on a client)"
                .into(),
        )
    }
}

/// Runs the chosen scenarios (all by default), printing each line as it is decided.
pub fn probe(options: &Options, mut print: impl FnMut(&str)) -> Result<Report, String> {
    for name in &options.scenarios {
        if !scenario_names().contains(&name.as_str()) {
            return Err(format!(
                "unknown scenario {name:?}; the scenarios are {}",
                scenario_names().join(", ")
            ));
        }
    }
    install_interrupt_handler();
    let started = Instant::now();
    let api = api::Api::new(
        &options.address,
        options.token.clone(),
        options.namespace.clone(),
    )?;
    let ServerFacts {
        told: server,
        quiesce,
        nomad_version,
        extensions,
    } = patiently("the agent to answer", options.patience, &mut print, || {
        Ok(api.send("GET", "/v1/agent/self", None).map(server_facts))
    })??;
    print(&format!(
        "probing {} ({server}) in namespace {}",
        api.address(),
        api.namespace()
    ));
    let (tasks, assumed) = patiently("a ready node", options.patience, &mut print, || {
        choose_tasks(&api, options.witness.as_deref())
    })?;
    if assumed {
        print("the nodes could not be read (403: the token lacks node:read): raw_exec assumed");
    }
    print(&match &tasks {
        jobs::Tasks::Witness(path) => format!(
            "tasks: raw_exec, the witness at {path} on the nodes (evidence from inside the process)"
        ),
        jobs::Tasks::Sleep => "tasks: raw_exec /bin/sleep (no witness: give --witness PATH for \
                               evidence from inside the process)"
            .into(),
        jobs::Tasks::Mock => "tasks: mock_driver (no node offers raw_exec: nothing from inside \
                              a process)"
            .into(),
    });
    print(&if extensions.names.is_empty() {
        "quiesce extensions: none advertised (probing Nomad's documented API only)".to_string()
    } else {
        format!(
            "quiesce extensions advertised, and used: {}",
            extensions.names.join(", ")
        )
    });
    let run_id = run_id();
    let prefix = format!("quiesce-probe-{run_id}-");
    // From the index the server is at now: every write of the probe's jobs comes after.
    let stream = api
        .send("GET", "/v1/jobs", None)
        .and_then(|answer| stream::EventStream::open(&api, &prefix, answer.index));
    let event_stream = match &stream {
        Ok(stream) => format!("read from index {}", stream.from_index),
        Err(why) => format!("not used: {why}"),
    };
    print(&format!("event stream: {event_stream}"));
    let mut ctx = run::Ctx {
        api: &api,
        stream: stream.ok(),
        stream_missed: Default::default(),
        quiesce,
        nomad_version,
        delay_ns: options.delay_ns,
        tasks: tasks.clone(),
        extensions,
        run_id,
        created: Vec::new(),
        patience: options.patience,
    };
    let mut reports = Vec::new();
    for scenario in scenarios::SCENARIOS
        .iter()
        .filter(|s| options.scenarios.is_empty() || options.scenarios.iter().any(|n| n == s.name))
    {
        if run::INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let began = Instant::now();
        let outcome = (scenario.run)(&mut ctx);
        let cleanup = ctx.clean_up();
        let (judgements, mut error) = match outcome {
            Ok(judgements) => (judgements, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        if !cleanup.is_empty() {
            let left = cleanup.join("; ");
            error = Some(error.map_or(left.clone(), |e| format!("{e}; {left}")));
        }
        let report = ScenarioReport {
            name: scenario.name,
            about: scenario.about,
            judgements,
            error,
            stream_missed: ctx.stream_missed.take(),
            seconds: began.elapsed().as_secs_f64(),
        };
        for line in lines(&report) {
            print(&line);
        }
        reports.push(report);
    }
    let report = Report {
        address: api.address().to_string(),
        server,
        extensions: ctx.extensions.names.clone(),
        witness: tasks.witness().map(str::to_string),
        driver: if tasks == jobs::Tasks::Mock {
            "mock_driver"
        } else {
            "raw_exec"
        },
        event_stream,
        scenarios: reports,
        interrupted: run::INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
    };
    if report.interrupted {
        print("interrupted: the jobs made so far were purged");
    }
    print(&format!(
        "{} ({} scenarios, {:.1} s)",
        if report.conforms() {
            "conforms"
        } else {
            "FAILED"
        },
        report.scenarios.len(),
        report.seconds
    ));
    Ok(report)
}

/// One line per invariant the scenario observes; an error is a line of its own.
pub fn lines(report: &ScenarioReport) -> Vec<String> {
    let mut out = vec![format!(
        "== {} ({:.1} s): {}",
        report.name, report.seconds, report.about
    )];
    let mut judgements: Vec<&Judgement> = report.judgements.iter().collect();
    judgements.sort_by_key(|j| INVARIANTS.iter().position(|(n, _)| *n == j.invariant));
    for judgement in judgements {
        let detail = match &judgement.verdict {
            Verdict::NotObservable(why) => format!(": {why}"),
            Verdict::Holds(what) => format!(" — {}", summary(what)),
            Verdict::Violated(what) => format!(" — {what}"),
        };
        out.push(format!(
            "{}  {}  {}{detail}",
            report.name,
            judgement.invariant,
            judgement.verdict.word()
        ));
    }
    for missed in &report.stream_missed {
        out.push(format!("{}  event stream left out: {missed}", report.name));
    }
    if let Some(error) = &report.error {
        out.push(format!("{}  error: {error}", report.name));
    }
    out
}

/// The first two findings of a verdict that holds, and how many there were (the report
/// file has them all).
fn summary(findings: &str) -> String {
    let parts: Vec<&str> = findings.split("; ").collect();
    if parts.len() <= 2 {
        findings.to_string()
    } else {
        format!("{}; {}; … ({} findings)", parts[0], parts[1], parts.len())
    }
}

/// Eight hex digits from std's randomly seeded hasher: jobs of two probes never collide.
fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_i64(api::now_ns());
    hasher.write_u32(std::process::id());
    format!("{:08x}", hasher.finish() as u32)
}

extern "C" fn on_interrupt(_: libc::c_int) {
    run::INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// SIGINT and SIGTERM end the waits, so that the jobs are purged before the probe exits.
fn install_interrupt_handler() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                signal,
                on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nomad_versions_read_as_major_and_minor() {
        assert_eq!(super::major_minor("1.10.3"), Some((1, 10)));
        assert_eq!(super::major_minor("2.0.1-dev"), Some((2, 0)));
        assert_eq!(super::major_minor("v1.6"), Some((1, 6)));
        assert_eq!(super::major_minor("unknown version"), None);
    }
}
