//! The harness: a `quiesce agent -dev` process with its HTTP calls and waits, the Python
//! witness a test's job runs, what the witness wrote, and the processes a test ends.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const SECOND_NS: i64 = 1_000_000_000;

/// How long any one wait of these tests may take before it fails (each waits for a second
/// or so at most when all is well).
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// The witness: `python3 -c WITNESS LOG AGENT SERVICES MODE TEST_PID`. It appends one JSON
/// line per start and per signal to LOG, with its allocation's ID; on a signal it counts
/// the registrations of SERVICES (comma separated) of its allocation that the agent at
/// AGENT lists, then, on SIGINT, dies of it — unless MODE is `ignore`: then it counts
/// nothing (its kill timeout is short) and goes on, so only SIGKILL ends it. It ends itself
/// once the test process TEST_PID is gone, so a test killed mid-way leaves nothing running.
pub(crate) const WITNESS: &str = r#"
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
pub(crate) fn monotonic_s() -> f64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("a clock");
    now.tv_sec() as f64 + now.tv_nsec() as f64 / 1e9
}

/// Polls `f` every 10 ms until it gives a value; panics naming `what` after [`PATIENCE`].
pub(crate) fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
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
pub(crate) struct Agent {
    pub(crate) dir: PathBuf,
    pub(crate) child: Option<Child>,
    pub(crate) address: String,
    pub(crate) http: ureq::Agent,
    /// What the agent wrote to stderr, read on a thread so it never blocks on a full pipe.
    pub(crate) stderr: Arc<Mutex<String>>,
}

impl Agent {
    pub(crate) fn new(name: &str) -> Agent {
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

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts the agent on `port` (0: a free one) and waits until its node is ready.
    pub(crate) fn start(&mut self, port: u16) {
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

    pub(crate) fn port(&self) -> u16 {
        self.address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    }

    /// Kills the agent as a crash would; its tasks live on under their supervisors.
    pub(crate) fn kill9(&mut self) {
        let mut child = self.child.take().expect("a running agent");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    pub(crate) fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
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

    pub(crate) fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, value) = self.call(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {value}");
        value
    }

    pub(crate) fn alloc(&self, id: &str) -> Value {
        self.ok("GET", &format!("/v1/allocation/{id}"), None)
    }

    /// Registers `job` and waits until its one allocation's witness has started; the
    /// allocation's ID.
    pub(crate) fn run(&self, job: &Value, log: &Path) -> String {
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

    pub(crate) fn wait_client_status(&self, id: &str, status: &str) -> Value {
        wait_for(&format!("allocation {id} to be {status}"), || {
            let alloc = self.alloc(id);
            (alloc["ClientStatus"] == status).then_some(alloc)
        })
    }

    /// The agent's event log so far, validated against the model as the end-to-end suite
    /// validates each test's: every step is one the model allows, with its effects (kill
    /// signals once per kill and after the services, SIGKILL after the kill timeout, no task
    /// launched twice).
    pub(crate) fn validate_log(&self) {
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
    pub(crate) fn wait_first_alloc(&self, job: &str, status: &str) -> Value {
        let alloc = wait_for(&format!("job {job}'s allocation to be {status}"), || {
            let allocs = self.ok("GET", &format!("/v1/job/{job}/allocations"), None);
            let alloc = allocs.as_array()?.first()?.clone();
            (alloc["ClientStatus"] == status).then_some(alloc)
        });
        self.alloc(alloc["ID"].as_str().expect("an ID"))
    }

    /// Waits until the task `server` of allocation `id` has an event of `event_type`.
    pub(crate) fn wait_event(&self, id: &str, event_type: &str) {
        wait_for(&format!("a {event_type:?} event"), || {
            event_types(&self.alloc(id))
                .iter()
                .any(|t| t == event_type)
                .then_some(())
        });
    }

    /// Crashes the agent (`kill -9`), then the supervisor of allocation `id`'s one task and
    /// the task, as a host that lost them all would; the agent's port, for its restart.
    pub(crate) fn crash_with_the_supervisor(&mut self, log: &Path, id: &str) -> u16 {
        let task = one_start(log, id)["pid"].as_i64().expect("a pid");
        let supervisor = parent_of(task);
        let port = self.port();
        self.kill9();
        kill_and_wait(supervisor);
        kill_and_wait(i32::try_from(task).expect("a pid"));
        port
    }

    /// Restarts allocation `id`'s task `server` in place and waits for its second run; the
    /// witness's two starts.
    pub(crate) fn restart_in_place(&self, id: &str, log: &Path) -> Vec<Value> {
        let body = json!({"TaskName": "server"});
        let path = format!("/v1/client/allocation/{id}/restart");
        self.ok("PUT", &path, Some(&body));
        wait_for("the task to run again", || {
            let started = lines(log, id, "started");
            (started.len() == 2).then_some(started)
        })
    }

    /// The number of registrations of `service` the agent lists, every allocation's.
    pub(crate) fn listed(&self, service: &str) -> usize {
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
pub(crate) fn lines(log: &Path, alloc: &str, event: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["event"] == event && line["alloc"] == alloc)
        .collect()
}

/// What a test's job waits and how its witness takes the kill signal.
pub(crate) struct Shape {
    pub(crate) group_delay_ns: i64,
    pub(crate) task_delay_ns: i64,
    pub(crate) kill_timeout_ns: i64,
    /// The witness's MODE: `die` of SIGINT, or `ignore` it.
    pub(crate) mode: &'static str,
}

/// A service job `id`: one group with the service `<id>-group`, one raw_exec task `server`
/// running the witness with the service `<id>-server`, no restart on failure.
pub(crate) fn job(agent: &Agent, id: &str, log: &Path, shape: Shape) -> Value {
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

pub(crate) fn dies(group_delay_ns: i64, task_delay_ns: i64) -> Shape {
    Shape {
        group_delay_ns,
        task_delay_ns,
        kill_timeout_ns: 5 * SECOND_NS,
        mode: "die",
    }
}

/// The types of the task `server`'s events.
pub(crate) fn event_types(alloc: &Value) -> Vec<String> {
    alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["Type"].as_str().expect("a type").to_string())
        .collect()
}

pub(crate) fn terminated(alloc: &Value) -> String {
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

/// The one start the witness of `alloc` recorded.
pub(crate) fn one_start(log: &Path, alloc: &str) -> Value {
    let starts = lines(log, alloc, "started");
    let [start] = &starts[..] else {
        panic!("one start: {starts:?}");
    };
    start.clone()
}

/// The one signal the witness of `alloc` recorded.
pub(crate) fn one_signal(log: &Path, alloc: &str) -> Value {
    let signals = lines(log, alloc, "signal");
    let [signal] = &signals[..] else {
        panic!("one signal: {signals:?}");
    };
    signal.clone()
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

/// SIGKILLs `pid` (if it is still there) and waits until it is gone (reaped by its parent,
/// or a zombie of it).
fn kill_and_wait(pid: i32) {
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
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

/// A supervisor as an agent before user signals started them: `python3 -c OLD_SUPERVISOR
/// DIR LOG`. It listens on the control socket of the task directory DIR (an abstract name
/// from DIR's FNV-1a hash, as `raw_exec` names it), says a hello without `user_signals`
/// (its own pid standing for the task's), and appends each line a daemon sends it to LOG.
pub(crate) const OLD_SUPERVISOR: &str = r#"
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
