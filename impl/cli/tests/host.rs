//! The daemon's host (`daemon/host/`) judged by what a real program experienced: a
//! `quiesce agent -dev` process runs a Python witness under raw_exec, and the witness
//! records each signal it gets, when (CLOCK_MONOTONIC), and how many registrations of its
//! allocation's services the agent still listed at that moment. The end-to-end suite
//! (`proofs/e2e`) covers the same ground with Nomad's clients; these run under `cargo test`,
//! so that mutation testing (README, "Mutation testing") reaches the host.

use quiesce_core::step::log::Event;
use quiesce_core::step::Step;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const SECOND_NS: i64 = 1_000_000_000;

/// How long any one wait of these tests may take before it fails (each waits for a second
/// or so at most when all is well).
const PATIENCE: Duration = Duration::from_secs(30);

/// The witness: `python3 -c WITNESS LOG AGENT SERVICES MODE TEST_PID`. It appends one JSON
/// line per start and per signal to LOG, with its allocation's ID; on a signal it counts
/// the registrations of SERVICES (comma separated) of its allocation that the agent at
/// AGENT lists, then, on SIGINT, dies of it — unless MODE is `ignore`: then it counts
/// nothing (its kill timeout is short) and goes on, so only SIGKILL ends it. It ends itself
/// once the test process TEST_PID is gone, so a test killed mid-way leaves nothing running.
const WITNESS: &str = r#"
import json, os, signal, sys, time, urllib.request
log, agent, services, mode, test_pid = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4], int(sys.argv[5])
alloc = os.environ["NOMAD_ALLOC_ID"]
def note(**line):
    line["alloc"] = alloc
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")
def listed():
    seen = {}
    for name in services:
        try:
            with urllib.request.urlopen(agent + "/v1/service/" + name, timeout=5) as answer:
                seen[name] = sum(1 for s in json.load(answer) if s["AllocID"] == alloc)
        except OSError:
            seen[name] = None
    return seen
def on_signal(number, frame):
    at = time.monotonic()
    note(event="signal", signal=number, at=at, listed=None if mode == "ignore" else listed())
    if number == signal.SIGINT and mode != "ignore":
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGUSR1, on_signal)
note(event="started", pid=os.getpid(), at=time.monotonic())
while True:
    time.sleep(0.5)
    try:
        os.kill(test_pid, 0)
    except ProcessLookupError:
        sys.exit(0)
"#;

/// CLOCK_MONOTONIC in seconds, the clock of the witness's `time.monotonic()`.
fn monotonic_s() -> f64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("a clock");
    now.tv_sec() as f64 + now.tv_nsec() as f64 / 1e9
}

/// Polls `f` every 10 ms until it gives a value; panics naming `what` after [`PATIENCE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One `quiesce agent -dev` process over one data dir, restartable on the same port.
struct Agent {
    dir: PathBuf,
    child: Option<Child>,
    address: String,
    http: ureq::Agent,
    /// What the agent wrote to stderr, read on a thread so it never blocks on a full pipe.
    stderr: Arc<Mutex<String>>,
}

impl Agent {
    fn new(name: &str) -> Agent {
        let dir = std::env::temp_dir().join(format!("quiesce-host-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the test's dir");
        // As the agent names its data dir (canonical), so the clean-up finds its tasks.
        let dir = std::fs::canonicalize(&dir).expect("the test's dir");
        let mut agent = Agent {
            dir,
            child: None,
            address: String::new(),
            http: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .into(),
            stderr: Arc::default(),
        };
        agent.start(0);
        agent
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts the agent on `port` (0: a free one) and waits until its node is ready.
    fn start(&mut self, port: u16) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut child = Command::new(env!("CARGO_BIN_EXE_quiesce"))
                .args(["agent", "-dev", "-data-dir"])
                .arg(self.data_dir())
                .args(["-port", &port.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the agent starts");
            let stderr = Arc::clone(&self.stderr);
            let mut pipe = child.stderr.take().expect("its stderr");
            let drained = std::thread::spawn(move || {
                let mut buffer = [0; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buffer) {
                    let text = String::from_utf8_lossy(&buffer[..n]);
                    stderr.lock().expect("not poisoned").push_str(&text);
                }
            });
            // Its stdout is read on a thread too, to the end, so the wait below has a bound.
            let (lines, ready) = mpsc::channel();
            let stdout = child.stdout.take().expect("its stdout");
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = lines.send(line);
                }
            });
            let (mut address, mut node_ready) = (None, false);
            while address.is_none() || !node_ready {
                let left = deadline.saturating_duration_since(Instant::now());
                match ready.recv_timeout(left) {
                    Ok(line) => {
                        if let Some(at) = line.trim().strip_prefix("HTTP address: ") {
                            address = Some(at.to_string());
                        }
                        node_ready |= line.starts_with("==> Node ") && line.ends_with(" is ready");
                    }
                    Err(_) => break,
                }
            }
            if let (Some(address), true) = (address, node_ready) {
                self.address = address;
                self.child = Some(child);
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
            let _ = drained.join();
            let stderr = self.stderr.lock().expect("not poisoned").clone();
            // The port, free a moment ago, taken again by a connection of this machine's:
            // tried again until the deadline.
            assert!(
                stderr.contains("Address already in use") && Instant::now() < deadline,
                "the agent did not start: {stderr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn port(&self) -> u16 {
        self.address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    }

    /// Kills the agent as a crash would; its tasks live on under their supervisors.
    fn kill9(&mut self) {
        let mut child = self.child.take().expect("a running agent");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(|b| serde_json::to_vec(b).expect("JSON"));
        let url = format!("{}{path}", self.address);
        let (status, _, text) =
            quiesce_api::exchange(&self.http, method, &url, "", body.as_deref(), 1 << 22)
                .unwrap_or_else(|_| {
                    let stderr = self.stderr.lock().expect("not poisoned");
                    panic!("{method} {path}: no answer; the agent's stderr: {stderr}")
                });
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, value) = self.call(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {value}");
        value
    }

    fn alloc(&self, id: &str) -> Value {
        self.ok("GET", &format!("/v1/allocation/{id}"), None)
    }

    /// Registers `job` and waits until its one allocation's witness has started; the
    /// allocation's ID.
    fn run(&self, job: &Value, log: &Path) -> String {
        self.ok("PUT", "/v1/jobs", Some(job));
        let id = job["Job"]["ID"].as_str().expect("an ID");
        wait_for("the allocation to run", || {
            let allocs = self.ok("GET", &format!("/v1/job/{id}/allocations"), None);
            let alloc = allocs.as_array()?.first()?.clone();
            let id = alloc["ID"].as_str().expect("an ID");
            (alloc["ClientStatus"] == "running" && !lines(log, id, "started").is_empty())
                .then(|| id.to_string())
        })
    }

    fn wait_client_status(&self, id: &str, status: &str) -> Value {
        wait_for(&format!("allocation {id} to be {status}"), || {
            let alloc = self.alloc(id);
            (alloc["ClientStatus"] == status).then_some(alloc)
        })
    }

    /// The agent's event log so far, validated against the model as the end-to-end suite
    /// validates each test's: every step is one the model allows, with its effects (kill
    /// signals once per kill and after the services, SIGKILL after the kill timeout, no task
    /// launched twice).
    fn validate_log(&self) {
        let path = self.data_dir().join("events.jsonl");
        let text = std::fs::read_to_string(&path).expect("the event log");
        let entries = quiesce_proofs::trace::parse_log(&text).expect("the event log's lines");
        assert!(!entries.is_empty(), "an event log with no entry");
        if let Err(error) = quiesce_proofs::trace::validate(&entries) {
            panic!("{}: {error}", path.display());
        }
        // The agent says `bug:` when its host finds a state its design rules out.
        let stderr = self.stderr.lock().expect("not poisoned");
        assert!(!stderr.contains("bug:"), "the agent found a bug: {stderr}");
    }

    /// Waits until the first allocation of job `job` has the client status `status`; the
    /// allocation, whole.
    fn wait_first_alloc(&self, job: &str, status: &str) -> Value {
        let alloc = wait_for(&format!("job {job}'s allocation to be {status}"), || {
            let allocs = self.ok("GET", &format!("/v1/job/{job}/allocations"), None);
            let alloc = allocs.as_array()?.first()?.clone();
            (alloc["ClientStatus"] == status).then_some(alloc)
        });
        self.alloc(alloc["ID"].as_str().expect("an ID"))
    }

    /// Waits until the task `server` of allocation `id` has an event of `event_type`.
    fn wait_event(&self, id: &str, event_type: &str) {
        wait_for(&format!("a {event_type:?} event"), || {
            event_types(&self.alloc(id))
                .iter()
                .any(|t| t == event_type)
                .then_some(())
        });
    }

    /// The number of registrations of `service` the agent lists, every allocation's.
    fn listed(&self, service: &str) -> usize {
        let services = self.ok("GET", &format!("/v1/service/{service}"), None);
        services.as_array().expect("a list").len()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The tasks outlive the agent by design: what a test left running is ended here,
        // found by the alloc dir in its environment, and waited for (a supervisor may be
        // writing into the dir as it goes).
        let marker = format!("NOMAD_ALLOC_DIR={}/", self.data_dir().display());
        let mut killed = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            if environ
                .split(|b| *b == 0)
                .any(|var| var.starts_with(marker.as_bytes()))
            {
                let pid = nix::unistd::Pid::from_raw(pid);
                if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
                    killed.push(pid);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && killed
                .iter()
                .any(|pid| nix::sys::signal::kill(*pid, None).is_ok())
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The witness's lines of `event` (`started`, `signal`) in allocation `alloc`.
fn lines(log: &Path, alloc: &str, event: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["event"] == event && line["alloc"] == alloc)
        .collect()
}

/// What a test's job waits and how its witness takes the kill signal.
struct Shape {
    group_delay_ns: i64,
    task_delay_ns: i64,
    kill_timeout_ns: i64,
    /// The witness's MODE: `die` of SIGINT, or `ignore` it.
    mode: &'static str,
}

/// A service job `id`: one group with the service `<id>-group`, one raw_exec task `server`
/// running the witness with the service `<id>-server`, no restart on failure.
fn job(agent: &Agent, id: &str, log: &Path, shape: Shape) -> Value {
    let services = format!("{id}-group,{id}-server");
    let test_pid = std::process::id().to_string();
    json!({"Job": {
        "ID": id,
        "TaskGroups": [{
            "Name": "web",
            "Count": 1,
            "ShutdownDelay": shape.group_delay_ns,
            "Services": [{"Name": format!("{id}-group"), "Provider": "nomad"}],
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "Tasks": [{
                "Name": "server",
                "Driver": "raw_exec",
                "ShutdownDelay": shape.task_delay_ns,
                "KillTimeout": shape.kill_timeout_ns,
                "Config": {
                    "command": "python3",
                    "args": ["-c", WITNESS, log, agent.address, services, shape.mode, test_pid],
                },
                "Services": [{"Name": format!("{id}-server"), "Provider": "nomad"}],
            }],
        }],
    }})
}

fn dies(group_delay_ns: i64, task_delay_ns: i64) -> Shape {
    Shape {
        group_delay_ns,
        task_delay_ns,
        kill_timeout_ns: 5 * SECOND_NS,
        mode: "die",
    }
}

/// The types of the task `server`'s events.
fn event_types(alloc: &Value) -> Vec<String> {
    alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["Type"].as_str().expect("a type").to_string())
        .collect()
}

fn terminated(alloc: &Value) -> String {
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let [event] = &events
        .iter()
        .filter(|e| e["Type"] == "Terminated")
        .collect::<Vec<_>>()[..]
    else {
        panic!("one Terminated event: {events:?}");
    };
    event["DisplayMessage"]
        .as_str()
        .expect("a message")
        .to_string()
}

/// The one signal the witness of `alloc` recorded.
fn one_signal(log: &Path, alloc: &str) -> Value {
    let signals = lines(log, alloc, "signal");
    let [signal] = &signals[..] else {
        panic!("one signal: {signals:?}");
    };
    signal.clone()
}

// invariant: delay_skipped_only_when_flagged
// invariant: prestop_hooks_always_run
/// An unflagged job stop deregisters the group's services, waits the group's delay, then
/// deregisters the task's and waits the task's delay; the witness dies of its one SIGINT.
#[test]
fn an_unflagged_stop_waits_both_delays_with_the_services_gone() {
    let agent = Agent::new("unflagged");
    let log = agent.dir.join("witness.jsonl");
    let delays = dies(SECOND_NS / 2, SECOND_NS / 2);
    let id = agent.run(&job(&agent, "slow", &log, delays), &log);
    assert_eq!(agent.listed("slow-group"), 1);
    assert_eq!(agent.listed("slow-server"), 1);
    let requested = monotonic_s();
    agent.ok("DELETE", "/v1/job/slow", None);
    agent.wait_event(&id, "Waiting for group shutdown delay");
    // As in Nomad: the group's services go before the group's delay, the task's before
    // the task's.
    assert_eq!(agent.listed("slow-group"), 0, "gone before the group delay");
    assert_eq!(
        agent.listed("slow-server"),
        1,
        "the task's turn has not come"
    );
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    assert_eq!(signal["signal"], libc::SIGINT);
    let waited = signal["at"].as_f64().expect("a time") - requested;
    assert!(
        (1.0..20.0).contains(&waited),
        "signalled {waited:.2} s after the stop; the delays add up to 1 s"
    );
    assert_eq!(signal["listed"], json!({"slow-group": 0, "slow-server": 0}));
    let types = event_types(&alloc);
    let group = types
        .iter()
        .position(|t| t == "Waiting for group shutdown delay");
    let task = types.iter().position(|t| t == "Waiting for shutdown delay");
    assert!(group.is_some() && group < task, "{types:?}");
    assert_eq!(terminated(&alloc), "Exit Code: 130, Signal: 2");
    assert_eq!(alloc["TaskStates"]["server"]["State"], "dead");
    assert_eq!(alloc["TaskStates"]["server"]["Failed"], false);
    agent.validate_log();
}

// invariant: flag_is_honoured
/// A flagged alloc stop of a job whose delays add up to a minute kills at once, the
/// services gone.
#[test]
fn a_flagged_stop_skips_the_delays_and_keeps_the_hooks() {
    let agent = Agent::new("flagged");
    let log = agent.dir.join("witness.jsonl");
    // A kill timeout of a minute too: a signal sent only with the SIGKILL comes that late.
    let delays = Shape {
        kill_timeout_ns: 60 * SECOND_NS,
        ..dies(30 * SECOND_NS, 30 * SECOND_NS)
    };
    let id = agent.run(&job(&agent, "fast", &log, delays), &log);
    assert_eq!(agent.listed("fast-group"), 1);
    assert_eq!(agent.listed("fast-server"), 1);
    let requested = monotonic_s();
    let path = format!("/v1/allocation/{id}/stop?no_shutdown_delay=true");
    agent.ok("PUT", &path, None);
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    let waited = signal["at"].as_f64().expect("a time") - requested;
    assert!(
        waited < 10.0,
        "signalled {waited:.2} s after the stop; the delays add up to 60 s, the kill \
         timeout is 60 s"
    );
    assert_eq!(signal["listed"], json!({"fast-group": 0, "fast-server": 0}));
    let types = event_types(&alloc);
    assert!(
        types.contains(&"Skipping group shutdown delay".to_string()),
        "{types:?}"
    );
    assert!(
        types.contains(&"Skipping shutdown delay".to_string()),
        "{types:?}"
    );
    assert_eq!(alloc["DesiredTransition"]["NoShutdownDelay"], true);
    assert_eq!(terminated(&alloc), "Exit Code: 130, Signal: 2");
    agent.validate_log();
}

// invariant: kill_timeout_respected
/// A task that ignores its kill signal gets it once, then SIGKILL when its kill timeout
/// runs out.
#[test]
fn a_task_that_ignores_its_signal_is_killed_at_its_kill_timeout() {
    let agent = Agent::new("sigkill");
    let log = agent.dir.join("witness.jsonl");
    let shape = Shape {
        group_delay_ns: 0,
        task_delay_ns: 0,
        kill_timeout_ns: SECOND_NS / 2,
        mode: "ignore",
    };
    let id = agent.run(&job(&agent, "stubborn", &log, shape), &log);
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    assert_eq!(signal["signal"], libc::SIGINT);
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let time = |kind: &str| {
        events
            .iter()
            .find(|e| e["Type"] == kind)
            .and_then(|e| e["Time"].as_i64())
            .unwrap_or_else(|| panic!("a {kind} event: {events:?}"))
    };
    // The kill timeout runs from the signal (`Killing`) to the end: at least its 0.5 s.
    let lasted_ns = time("Terminated") - time("Killing");
    assert!(
        lasted_ns >= SECOND_NS / 2,
        "SIGKILLed {lasted_ns} ns after the signal, before its kill timeout"
    );
    assert_eq!(terminated(&alloc), "Exit Code: 137, Signal: 9");
    agent.validate_log();
}

/// An operator's signal reaches the task and ends nothing; an in-place restart kills the
/// task (there is no delay to wait here) and runs it again in the same allocation, a new
/// process.
#[test]
fn a_signal_and_a_restart_reach_the_task_in_place() {
    let agent = Agent::new("restart");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "again", &log, dies(0, 0)), &log);
    let body = json!({"Task": "server", "Signal": "SIGUSR1"});
    agent.ok(
        "PUT",
        &format!("/v1/client/allocation/{id}/signal"),
        Some(&body),
    );
    let usr1 = wait_for("the witness to get SIGUSR1", || {
        lines(&log, &id, "signal").first().cloned()
    });
    assert_eq!(usr1["signal"], libc::SIGUSR1);
    assert_eq!(agent.alloc(&id)["ClientStatus"], "running");

    let body = json!({"TaskName": "server"});
    agent.ok(
        "PUT",
        &format!("/v1/client/allocation/{id}/restart"),
        Some(&body),
    );
    let started = wait_for("the task to run again", || {
        let started = lines(&log, &id, "started");
        (started.len() == 2).then_some(started)
    });
    assert_ne!(started[0]["pid"], started[1]["pid"]);
    let signals = lines(&log, &id, "signal");
    assert_eq!(
        signals.len(),
        2,
        "SIGUSR1, then the restart's SIGINT: {signals:?}"
    );
    assert_eq!(signals[1]["signal"], libc::SIGINT);
    let alloc = wait_for("the task to be running", || {
        let alloc = agent.alloc(&id);
        (alloc["TaskStates"]["server"]["State"] == "running").then_some(alloc)
    });
    assert_eq!(alloc["ClientStatus"], "running");
    let types = event_types(&alloc);
    assert!(types.contains(&"Restart Signaled".to_string()), "{types:?}");
    assert_eq!(alloc["TaskStates"]["server"]["Restarts"], 1);
    agent.validate_log();
}

// invariant: stop_completes
/// A crash in the middle of a stored group delay: the restarted agent reattaches to the
/// task, waits the delay out (it is not lost, nor cut short), and the task gets its signal
/// once, without being started again.
#[test]
fn a_crash_mid_delay_reattaches_and_waits_the_delay_out() {
    let mut agent = Agent::new("crash");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "crash", &log, dies(3 * SECOND_NS, 0)), &log);
    let requested = monotonic_s();
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    agent.wait_event(&id, "Waiting for group shutdown delay");
    // The runner's progress is synced at most DURABILITY_LAG (20 ms) after its step: ten
    // times that, and the crash finds the delay stored.
    std::thread::sleep(Duration::from_millis(200));
    let port = agent.port();
    agent.kill9();
    assert!(
        lines(&log, &id, "signal").is_empty(),
        "the task was signalled before its delay ran out"
    );
    agent.start(port);
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    let waited = signal["at"].as_f64().expect("a time") - requested;
    assert!(
        (3.0..20.0).contains(&waited),
        "signalled {waited:.2} s after the stop; the delay is 3 s"
    );
    assert_eq!(
        lines(&log, &id, "started").len(),
        1,
        "the task was not started again"
    );
    assert_eq!(
        signal["listed"],
        json!({"crash-group": 0, "crash-server": 0})
    );
    assert_eq!(terminated(&alloc), "Exit Code: 130, Signal: 2");
    agent.validate_log();
}

/// A task whose program does not exist fails at start: its allocation fails, and nothing
/// is left registered.
#[test]
fn a_task_that_cannot_start_fails_its_allocation() {
    let agent = Agent::new("nostart");
    let log = agent.dir.join("witness.jsonl");
    let mut spec = job(&agent, "missing", &log, dies(0, 0));
    spec["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["command"] = json!("/nonexistent/program");
    agent.ok("PUT", "/v1/jobs", Some(&spec));
    let alloc = agent.wait_first_alloc("missing", "failed");
    let types = event_types(&alloc);
    assert!(types.contains(&"Driver Failure".to_string()), "{types:?}");
    assert_eq!(alloc["TaskStates"]["server"]["Failed"], true);
    assert_eq!(agent.listed("missing-group"), 0);
    assert_eq!(agent.listed("missing-server"), 0);
    agent.validate_log();
}

// invariant: restart_policy_respected
/// A `mock_driver` task that exits on its own with a failure is restarted by its policy,
/// then, the attempts used, fails its allocation.
#[test]
fn a_mock_task_that_fails_is_restarted_then_fails_the_allocation() {
    let agent = Agent::new("mock");
    let spec = json!({"Job": {
        "ID": "flaky",
        "TaskGroups": [{
            "Name": "web",
            "RestartPolicy": {
                "Attempts": 1,
                "Delay": SECOND_NS / 10,
                "Interval": 60 * SECOND_NS,
                "Mode": "fail",
            },
            "Tasks": [{
                "Name": "server",
                "Driver": "mock_driver",
                "Config": {"run_for": "100ms", "exit_code": 3},
            }],
        }],
    }});
    agent.ok("PUT", "/v1/jobs", Some(&spec));
    let alloc = agent.wait_first_alloc("flaky", "failed");
    assert_eq!(alloc["TaskStates"]["server"]["Restarts"], 1);
    let types = event_types(&alloc);
    let started = types.iter().filter(|t| *t == "Started").count();
    assert_eq!(started, 2, "{types:?}");
    assert!(types.contains(&"Restarting".to_string()), "{types:?}");
    assert!(types.contains(&"Not Restarting".to_string()), "{types:?}");
    agent.validate_log();
}

/// The parent of process `pid` (from `/proc/<pid>/stat`: the field after the command's
/// closing parenthesis and the state).
fn parent_of(pid: i64) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the task's stat");
    let after = &stat[stat.rfind(')').expect("a command") + 1..];
    after
        .split_whitespace()
        .nth(1)
        .expect("a ppid")
        .parse()
        .expect("a number")
}

/// SIGKILLs `pid` and waits until it is gone (reaped by its parent, or a zombie of it).
fn kill_and_wait(pid: i32) {
    let pid = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("SIGKILL");
    wait_for("the process to be gone", || {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let gone = state.is_empty()
            || state
                .rsplit(')')
                .next()
                .is_some_and(|s| s.starts_with(" Z"));
        gone.then_some(())
    });
}

// invariant: stop_completes
/// A crash of the agent, then of the task's supervisor: the restarted agent finds the run
/// launched (its supervisor had created `exit.json`) but nothing left to reattach to, and
/// fails the task as lost, exit code -1, rather than start it a second time.
#[test]
fn a_task_whose_supervisor_died_with_the_agent_is_lost_not_started_again() {
    let mut agent = Agent::new("lost");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "lost", &log, dies(0, 0)), &log);
    let [started] = &lines(&log, &id, "started")[..] else {
        panic!("one start");
    };
    let task = started["pid"].as_i64().expect("a pid");
    let supervisor = parent_of(task);
    let port = agent.port();
    agent.kill9();
    kill_and_wait(supervisor);
    let task = i32::try_from(task).expect("a pid");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(task),
        nix::sys::signal::Signal::SIGKILL,
    );
    agent.start(port);
    let alloc = agent.wait_client_status(&id, "failed");
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let said = |text: &str| {
        events.iter().any(|e| {
            e["DisplayMessage"]
                .as_str()
                .is_some_and(|m| m.contains(text))
        })
    };
    assert!(said("the task's supervisor is gone"), "{events:?}");
    assert!(said("Exit Code: -1"), "{events:?}");
    assert_eq!(alloc["TaskStates"]["server"]["Failed"], true);
    assert_eq!(
        lines(&log, &id, "started").len(),
        1,
        "the task was not started again"
    );
    assert!(
        lines(&log, &id, "signal").is_empty(),
        "nothing was signalled"
    );
    assert_eq!(agent.listed("lost-group"), 0);
    assert_eq!(agent.listed("lost-server"), 0);
    agent.validate_log();
}

// invariant: restart_policy_respected
/// A task restarted in place runs its second run under a supervisor of its own (the run's
/// directory): a crash of the agent then finds that run, reattaches to it, and a stop
/// signals the second process once, never starting a third.
#[test]
fn a_crash_after_a_restart_reattaches_to_the_second_run() {
    let mut agent = Agent::new("rerun");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "rerun", &log, dies(0, 0)), &log);
    let body = json!({"TaskName": "server"});
    agent.ok(
        "PUT",
        &format!("/v1/client/allocation/{id}/restart"),
        Some(&body),
    );
    let started = wait_for("the task to run again", || {
        let started = lines(&log, &id, "started");
        (started.len() == 2).then_some(started)
    });
    wait_for("the task to be running", || {
        (agent.alloc(&id)["TaskStates"]["server"]["State"] == "running").then_some(())
    });
    // As in `a_crash_mid_delay_reattaches_and_waits_the_delay_out`: ten times the lag
    // after which the runner's progress is synced.
    std::thread::sleep(Duration::from_millis(200));
    let port = agent.port();
    agent.kill9();
    agent.start(port);
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    let alloc = agent.wait_client_status(&id, "complete");
    assert_eq!(
        lines(&log, &id, "started").len(),
        2,
        "the second run was reattached, not started again"
    );
    let signals = lines(&log, &id, "signal");
    let [restart, stop] = &signals[..] else {
        panic!("the restart's signal and the stop's: {signals:?}");
    };
    assert_eq!(restart["signal"], libc::SIGINT);
    assert_eq!(stop["signal"], libc::SIGINT);
    assert!(
        stop["at"].as_f64() > started[1]["at"].as_f64(),
        "the stop's signal reached the second run: {signals:?}"
    );
    assert_eq!(alloc["TaskStates"]["server"]["Restarts"], 1);
    let ends: Vec<_> = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["Type"] == "Terminated")
        .map(|e| e["DisplayMessage"].clone())
        .collect();
    let interrupted = json!("Exit Code: 130, Signal: 2");
    assert_eq!(ends, [interrupted.clone(), interrupted], "each run's end");
    agent.validate_log();
}

// invariant: kill_timeout_respected
/// A kill signal the task's supervisor delivered before the agent's record of it (as when
/// a crash loses the batch after the signal went out, here sent by the test through the
/// supervisor's control connection while the agent was down): the restarted agent's stop
/// sends no second signal, and runs the kill timeout from the delivery, so the SIGKILL
/// comes when the timeout has run from the signal the task really got.
#[test]
fn a_kill_signal_delivered_before_a_crash_runs_its_timeout_from_the_delivery() {
    let mut agent = Agent::new("delivered");
    let log = agent.dir.join("witness.jsonl");
    let kill_timeout_s = 4.0;
    let shape = Shape {
        group_delay_ns: 0,
        task_delay_ns: 0,
        kill_timeout_ns: 4 * SECOND_NS,
        mode: "ignore",
    };
    let id = agent.run(&job(&agent, "delivered", &log, shape), &log);
    let port = agent.port();
    agent.kill9();
    // As the agent's first kill of the task would have: kill 1, SIGINT, its timeout.
    let task_dir = agent.data_dir().join("alloc").join(&id).join("server");
    let Ok(quiesce_agent::raw_exec::Reattach::Running(attached)) =
        quiesce_agent::raw_exec::reattach(&task_dir)
    else {
        panic!("the task's supervisor outlives the agent");
    };
    let request = quiesce_agent::raw_exec::Request::Kill {
        kill: 1,
        signal: libc::SIGINT,
        timeout_ns: 4 * SECOND_NS,
    };
    attached
        .signaller()
        .and_then(|signaller| signaller.send(request))
        .expect("the kill request sent");
    let delivered = wait_for("the witness to get its kill signal", || {
        lines(&log, &id, "signal").first().cloned()
    });
    let delivered_at = delivered["at"].as_f64().expect("a time");
    drop(attached);
    // The supervisor's own record of the delivery, on the agent's clock, as the restarted
    // agent will read it in the hello.
    let Ok(quiesce_agent::raw_exec::Reattach::Running(attached)) =
        quiesce_agent::raw_exec::reattach(&task_dir)
    else {
        panic!("the task's supervisor outlives the agent");
    };
    let delivered_ns = attached
        .delivered
        .iter()
        .find(|d| d.kill == 1 && !d.forced)
        .map(|d| d.unix_ns)
        .expect("the supervisor recorded kill 1");
    drop(attached);
    agent.start(port);
    // Halfway through the kill timeout as it runs from the delivery.
    while monotonic_s() < delivered_at + kill_timeout_s / 2.0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped = monotonic_s();
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    let alloc = agent.wait_client_status(&id, "complete");
    let ended = monotonic_s() - stopped;
    // From the delivery, the SIGKILL is due 2 s after the stop; from the stop, 4 s.
    assert!(
        (1.0..3.5).contains(&ended),
        "SIGKILLed {ended:.2} s after the stop; the kill timeout (4 s) ran out 2 s after it"
    );
    assert_eq!(
        one_signal(&log, &id)["signal"],
        libc::SIGINT,
        "no second kill signal"
    );
    assert_eq!(terminated(&alloc), "Exit Code: 137, Signal: 9");
    // The agent's own kill timeout (the supervisor would hold an early SIGKILL anyway) ran
    // from the delivery, not from the stop, nor less than its length.
    let events = std::fs::read_to_string(agent.data_dir().join("events.jsonl")).expect("a log");
    let entries = quiesce_proofs::trace::parse_log(&events).expect("its entries");
    let fired: Vec<i64> = entries
        .iter()
        .filter(
            |e| matches!(&e.event, Event::Step(Step::KillTimeout { alloc, .. }) if *alloc == id),
        )
        .map(|e| e.time_ns)
        .collect();
    let [fired_ns] = fired[..] else {
        panic!("one kill timeout: {fired:?}");
    };
    let after_ns = fired_ns - delivered_ns;
    assert!(
        after_ns >= 4 * SECOND_NS,
        "the kill timeout fired {after_ns} ns after the delivery, before its 4 s"
    );
    agent.validate_log();
}

/// An allocation of three tasks: a prestart task that has run and exited, the witness, and
/// a `mock_driver` task. Its stats list the witness's process group alone (the exited
/// task has no process, the mock none ever); a user's signal to every task reaches the
/// witness once and passes the exited task over; one to the mock by name is taken.
#[test]
fn stats_and_signals_reach_the_tasks_that_run_and_only_them() {
    let agent = Agent::new("running");
    let log = agent.dir.join("witness.jsonl");
    let mut spec = job(&agent, "three", &log, dies(0, 0));
    let tasks = spec["Job"]["TaskGroups"][0]["Tasks"]
        .as_array_mut()
        .expect("tasks");
    tasks.push(json!({
        "Name": "init",
        "Driver": "raw_exec",
        "Lifecycle": {"Hook": "prestart", "Sidecar": false},
        "Config": {"command": "/bin/true"},
    }));
    tasks.push(json!({"Name": "idle", "Driver": "mock_driver", "Config": {}}));
    let id = agent.run(&spec, &log);
    let [started] = &lines(&log, &id, "started")[..] else {
        panic!("one start");
    };
    let witness = started["pid"].as_i64().expect("a pid").to_string();
    let alloc = agent.alloc(&id);
    assert_eq!(alloc["TaskStates"]["init"]["State"], "dead");
    assert_eq!(alloc["TaskStates"]["idle"]["State"], "running");

    let stats = agent.ok("GET", &format!("/v1/client/allocation/{id}/stats"), None);
    let tasks = stats["Tasks"].as_object().expect("tasks");
    assert_eq!(tasks.keys().collect::<Vec<_>>(), ["server"], "{stats}");
    let pids = tasks["server"]["Pids"].as_object().expect("pids");
    assert!(
        pids.contains_key(&witness),
        "the witness {witness} in {pids:?}"
    );
    let rss = tasks["server"]["ResourceUsage"]["MemoryStats"]["RSS"].as_u64();
    assert!(rss.is_some_and(|bytes| bytes > 0), "{stats}");

    let every = json!({"Signal": "SIGUSR1"});
    let path = format!("/v1/client/allocation/{id}/signal");
    agent.ok("PUT", &path, Some(&every));
    let usr1 = wait_for("the witness to get SIGUSR1", || {
        lines(&log, &id, "signal").first().cloned()
    });
    assert_eq!(usr1["signal"], libc::SIGUSR1);
    let to_the_mock = json!({"Task": "idle", "Signal": "SIGUSR1"});
    agent.ok("PUT", &path, Some(&to_the_mock));
    let to_the_exited = json!({"Task": "init", "Signal": "SIGUSR1"});
    let (status, answer) = agent.call("PUT", &path, Some(&to_the_exited));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("Task not running"), "{answer}");
    assert_eq!(
        lines(&log, &id, "signal").len(),
        1,
        "one signal reached the witness"
    );
    assert_eq!(agent.alloc(&id)["ClientStatus"], "running");
    agent.validate_log();
}

/// A task whose directory cannot be made as its job asks (one template's file is where
/// another's directory must be) fails to start: the driver's failure names the cause, the
/// task ends with Nomad's exit code -1 for it, and nothing ran.
#[test]
fn a_task_whose_directory_cannot_be_made_fails_to_start() {
    let agent = Agent::new("nodir");
    let log = agent.dir.join("witness.jsonl");
    let mut spec = job(&agent, "nodir", &log, dies(0, 0));
    spec["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = json!([
        {"EmbeddedTmpl": "a file", "DestPath": "local/conf"},
        {"EmbeddedTmpl": "beneath a file", "DestPath": "local/conf/inner"},
    ]);
    agent.ok("PUT", "/v1/jobs", Some(&spec));
    let alloc = agent.wait_first_alloc("nodir", "failed");
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let failure = events
        .iter()
        .find(|e| e["Type"] == "Driver Failure")
        .unwrap_or_else(|| panic!("a driver failure: {events:?}"));
    let message = failure["DisplayMessage"].as_str().expect("a message");
    assert!(message.contains("directory"), "{message}");
    assert_eq!(terminated(&alloc), "Exit Code: -1");
    let id = alloc["ID"].as_str().expect("an ID");
    assert!(lines(&log, id, "started").is_empty(), "nothing ran");
    assert_eq!(agent.listed("nodir-server"), 0);
    agent.validate_log();
}

/// A supervisor as an agent before user signals started them: `python3 -c OLD_SUPERVISOR
/// DIR LOG`. It listens on the control socket of the task directory DIR (an abstract name
/// from DIR's FNV-1a hash, as `raw_exec` names it), says a hello without `user_signals`
/// (its own pid standing for the task's), and appends each line a daemon sends it to LOG.
const OLD_SUPERVISOR: &str = r#"
import json, os, select, socket, sys
directory, log = sys.argv[1].encode(), sys.argv[2]
digest = 0xcbf29ce484222325
for byte in directory:
    digest = ((digest ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0quiesce-supervisor-%016x" % digest)
listener.listen(8)
print("listening", flush=True)
connections = []
while True:
    readable, _, _ = select.select([listener] + connections, [], [])
    for ready in readable:
        if ready is listener:
            connection, _ = listener.accept()
            connection.sendall((json.dumps({"pid": os.getpid(), "delivered": []}) + "\n").encode())
            connections.append(connection)
        else:
            data = ready.recv(4096)
            if not data:
                connections.remove(ready)
                continue
            with open(log, "a") as f:
                f.write(data.decode())
"#;

/// A task whose supervisor an older agent started (its hello offers no user signals) is
/// reattached, and refused a user's signal by name, rather than sent a line its supervisor
/// would ignore while the user heard it was delivered.
#[test]
fn a_task_under_an_older_supervisor_is_refused_a_users_signal() {
    let mut agent = Agent::new("older");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "older", &log, dies(0, 0)), &log);
    let [started] = &lines(&log, &id, "started")[..] else {
        panic!("one start");
    };
    let task = started["pid"].as_i64().expect("a pid");
    let supervisor = parent_of(task);
    let port = agent.port();
    agent.kill9();
    kill_and_wait(supervisor);
    kill_and_wait(i32::try_from(task).expect("a pid"));
    let task_dir = agent.data_dir().join("alloc").join(&id).join("server");
    let heard = agent.dir.join("heard.txt");
    // Its environment marks it as the allocation's, so the test's clean-up ends it.
    let mut older = Command::new("python3")
        .args(["-c", OLD_SUPERVISOR])
        .arg(&task_dir)
        .arg(&heard)
        .env("NOMAD_ALLOC_DIR", agent.data_dir().join("alloc").join(&id))
        .stdout(Stdio::piped())
        .spawn()
        .expect("the older supervisor starts");
    let mut said = String::new();
    BufReader::new(older.stdout.take().expect("its stdout"))
        .read_line(&mut said)
        .expect("its first line");
    assert_eq!(said.trim(), "listening");
    agent.start(port);
    assert_eq!(agent.alloc(&id)["ClientStatus"], "running", "reattached");
    let path = format!("/v1/client/allocation/{id}/signal");
    let body = json!({"Task": "server", "Signal": "SIGUSR1"});
    let (status, answer) = agent.call("PUT", &path, Some(&body));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("older agent"), "{answer}");
    let heard = std::fs::read_to_string(&heard).unwrap_or_default();
    assert!(
        !heard.contains("signal"),
        "the supervisor was sent: {heard:?}"
    );
    let _ = older.kill();
    let _ = older.wait();
}
