"""The end-to-end harness: a real `quiesce agent -dev` on a free loopback port with a
temporary data dir, jobs whose tasks are real programs — the project's witness
(`quiesce-witness`, which records from inside the process what it received: its signal
mask at start, each signal with its time on CLOCK_MONOTONIC and how many of its
allocation's services the agent still listed), `/bin/sleep`, `python3 -m http.server` — and
helpers to read what the tasks and their supervisors recorded. Times are
`time.monotonic()`, the witness's clock. Run through proofs/e2e/run, which builds the
binaries and installs the clients."""

import json
import os
import re
import pathlib
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
QUIESCE = os.environ.get("QUIESCE_BIN", str(ROOT / "target/release/quiesce"))
CONFORM = os.environ.get("QUIESCE_CONFORM", str(ROOT / "target/release/quiesce-conform"))
WITNESS = os.environ.get("QUIESCE_WITNESS", str(ROOT / "target/release/quiesce-witness"))
SECOND = 1_000_000_000


def fill_disk(path):
    """Writes `path` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * (1 << 16))
    except OSError:
        pass
    finally:
        os.close(fd)


def clean_env(**extra):
    """The environment without NOMAD_* variables (the clients read them), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOMAD_")}
    env.update(extra)
    return env


def free_port():
    """A free loopback port below the kernel's ephemeral range (32768 and up) and the tasks'
    dynamic ports (20000-32000): an agent restarted on its port must find it free, and an
    outgoing connection's ephemeral port could otherwise have taken it meanwhile."""
    import random
    import socket
    for _ in range(1000):
        port = random.randrange(10000, 20000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 10000-19999")


class Agent:
    """One agent process over one data dir; restartable on the same port."""

    def __init__(self, data_dir):
        self.data_dir = pathlib.Path(data_dir)
        self.port = 0
        self.proc = None
        self.address = None
        self.starts = 0
        # Sent as X-Nomad-Token (and NOMAD_TOKEN to the CLI) once a test sets it.
        self.token = None
        # (allocation ID, task) -> whether its job runs the witness there.
        self.witness_tasks = {}

    def start(self, prefix=(), args=(), env=None):
        """Starts the agent; `prefix` runs it under another program (`prlimit ...`), `args`
        go after the agent's own, `env` adds to its environment."""
        if self.port == 0:
            self.port = free_port()
        self.starts += 1
        stderr = open(self.data_dir.parent / f"agent-{self.starts}.err", "w")
        self.proc = subprocess.Popen(
            [*prefix, QUIESCE, "agent", "-dev", "-data-dir", str(self.data_dir),
             "-port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=clean_env(**(env or {})),
        )
        # Until the HTTP address is known and the node is ready (a new node turns ready at
        # its first heartbeat, the next whole second; placements wait for it).
        ready = addressed = False
        for line in self.proc.stdout:
            if "HTTP address:" in line:
                self.address = line.split()[-1]
                self.port = int(self.address.rsplit(":", 1)[1])
                addressed = True
            ready |= line.startswith("==> Node ") and line.rstrip().endswith(" is ready")
            if addressed and ready:
                break
        else:
            holders = ""
            if "Address already in use" in self.stderr():
                # Who holds the port, and what they are: the test's failure should say.
                listed = subprocess.run(["ss", "-Hltnp", f"sport = :{self.port}"],
                                        capture_output=True, text=True).stdout
                holders = f"\nlistening on {self.port}: {listed}"
                for pid in set(re.findall(r"pid=(\d+)", listed)):
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            command = f.read().replace(b"\0", b" ").decode()
                        holders += f"\n{pid}: {command}"
                    except OSError:
                        pass
            raise RuntimeError(f"the agent exited: {self.stderr()}{holders}")
        return self

    def stderr(self):
        return "".join(p.read_text() for p in sorted(self.data_dir.parent.glob("agent-*.err")))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        # A child the agent forked a moment before (a supervisor, between fork and exec)
        # holds a copy of the listening socket until its exec closes it: on a busy machine
        # that outlived the agent, and the restart found the port in use (seen once in a
        # full run beside a build). An operator's restart comes later; this one waits for it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and subprocess.run(
                ["ss", "-Hltn", f"sport = :{self.port}"], capture_output=True,
                text=True).stdout.strip():
            time.sleep(0.01)

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        # The tasks outlive the agent by design (their supervisors are in their own process
        # groups); whatever a test left running is ended here, found by the alloc dir in its
        # environment.
        marker = f"NOMAD_ALLOC_DIR={self.data_dir}/".encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    if marker in environ.read():
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass

    # -- HTTP -------------------------------------------------------------------------------

    def http(self, method, path, body=None, headers=None):
        """(status, parsed JSON body or text, headers)"""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = dict(headers or {})
        if self.token and "X-Nomad-Token" not in headers and "Authorization" not in headers:
            headers["X-Nomad-Token"] = self.token
        request = urllib.request.Request(self.address + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                text = answer.read().decode()
                return answer.status, json.loads(text), answer.headers
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), error.headers

    def get(self, path):
        status, body, _ = self.http("GET", path)
        assert status == 200, f"GET {path}: {status} {body}"
        return body

    def cli(self, *args, check=True, timeout=60):
        done = subprocess.run(
            [QUIESCE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=clean_env(NOMAD_ADDR=self.address, **({"NOMAD_TOKEN": self.token} if self.token else {})),
        )
        if check:
            assert done.returncode == 0, f"quiesce {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def wait_until(self, what, predicate, timeout=20):
        """Polls `predicate` until it returns a true value (which is returned); fails naming
        `what` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)

    # -- jobs and what their tasks recorded ------------------------------------------------

    def allocs(self, job):
        return self.get(f"/v1/job/{job}/allocations")

    def running(self, job, count):
        """Waits until `count` allocations of `job` run and their tasks have started."""

        def ready():
            allocs = [a for a in self.allocs(job) if a["ClientStatus"] == "running"]
            started = [a for a in allocs if all(self.started(a["ID"], t) for t in self.main_tasks(a))]
            return allocs if len(started) >= count else None

        return self.wait_until(f"{count} running allocation(s) of {job}", ready)

    def started(self, alloc_id, task):
        """The task's program runs: a witness once it has recorded its start, any other
        program once its supervisor has started it (its exit file is created then). The
        supervisor creates that file before it forks, so for a witness it says too little:
        a signal sent before the witness's handlers are set kills it with nothing recorded
        (seen under load: a stop 39 ms after the allocation was reported running)."""
        if self.is_witness(alloc_id, task):
            return bool(self.witness(alloc_id, task))
        return (self.task_dir(alloc_id, task) / "exit.json").exists()

    def is_witness(self, alloc_id, task):
        """The allocation's job runs the witness as `task` (its spec's command)."""
        key = (alloc_id, task)
        if key not in self.witness_tasks:
            alloc = self.get(f"/v1/allocation/{alloc_id}")
            [group] = [g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"]]
            [spec] = [t for t in group["Tasks"] if t["Name"] == task]
            self.witness_tasks[key] = (spec.get("Config") or {}).get("command") == WITNESS
        return self.witness_tasks[key]

    def main_tasks(self, alloc_stub):
        return [
            name
            for name, state in alloc_stub["TaskStates"].items()
            if state["State"] == "running"
        ]

    def alloc_dir(self, alloc_id):
        return self.data_dir / "alloc" / alloc_id

    def task_dir(self, alloc_id, task):
        return self.alloc_dir(alloc_id) / task

    def witness(self, alloc_id, task):
        """The witness's records, oldest first: dicts with "event" start, signal or exit."""
        path = self.task_dir(alloc_id, task) / "stdout.log"
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
        return records

    def task_log(self, alloc_id, task):
        """What a witness task recorded, as [("started", t), ("signal", "INT", t, services),
        ("exit", t)], t in seconds on CLOCK_MONOTONIC, services {name: registrations of
        this allocation}."""
        lines = []
        for record in self.witness(alloc_id, task):
            at = record["monotonic_ns"] / SECOND
            if record["event"] == "start":
                lines.append(("started", at))
            elif record["event"] == "signal":
                lines.append(("signal", record["name"].removeprefix("SIG"), at, record["services"]))
            else:
                lines.append(("exit", at))
        return lines

    def signalled_at(self, alloc_id, task):
        signals = [line for line in self.task_log(alloc_id, task) if line[0] == "signal"]
        return signals[0][2] if signals else None

    def exit_record(self, alloc_id, task):
        """The supervisor's exit.json: the exit status and the signals it delivered."""
        path = self.task_dir(alloc_id, task) / "exit.json"
        text = path.read_text() if path.exists() else ""
        return json.loads(text) if text else None

    def client_status(self, alloc_id):
        return self.get(f"/v1/allocation/{alloc_id}")["ClientStatus"]

    def wait_terminal(self, alloc_ids, timeout=30):
        def done():
            return all(self.client_status(a) in ("complete", "failed") for a in alloc_ids)

        self.wait_until(f"allocations {alloc_ids} to finish", done, timeout)

    def events(self):
        """The agent's event log, in sequence order."""
        path = self.data_dir / "events.jsonl"
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return sorted(entries, key=lambda entry: entry["seq"])


@pytest.fixture
def agent(tmp_path):
    """An agent for the test; when the test is done, the agent's event log must validate
    against the model (`quiesce-conform validate-log`): every step the model can follow,
    and every effect (launches, service changes, signals) against the rules."""
    running = Agent(tmp_path / "data").start()
    yield running
    running.close()
    validate_log(running)
    bugs = [line for line in running.stderr().splitlines() if "bug:" in line]
    assert not bugs, bugs


def job_processes(agent):
    """Every live process of the agent's tasks, from /proc: {(alloc, task): [(pid, kind)]}
    with kind "supervisor" or "task" (both carry the task's NOMAD_ALLOC_DIR and
    NOMAD_TASK_NAME in their environment)."""
    prefix = f"NOMAD_ALLOC_DIR={agent.data_dir}/alloc/".encode()
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as stat:
                zombie = stat.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        alloc = next((v[len(prefix):].decode() for v in variables if v.startswith(prefix)), None)
        name = next((v.split(b"=", 1)[1].decode() for v in variables
                     if v.startswith(b"NOMAD_TASK_NAME=")), None)
        if alloc is None or name is None or zombie:
            continue
        kind = "supervisor" if len(argv) > 1 and argv[1] == b"supervise" else "task"
        found.setdefault((alloc, name), []).append((int(pid), kind))
    return found


def task(name, address, services=(), watch=(), delay_s=0, leader=False, kill_timeout_s=None,
         kill_signal=None, args=()):
    """A raw_exec task running the witness, registering `services`; when it is signalled it
    records how many registrations of the services in `watch` the agent still listed."""
    witness_args = ["--services", ",".join(watch)]
    if kill_signal:
        witness_args += ["--kill-signal", kill_signal]
    spec = {
        "Name": name,
        "Driver": "raw_exec",
        "Leader": leader,
        "ShutdownDelay": int(delay_s * SECOND),
        "Config": {"command": WITNESS, "args": witness_args + list(args)},
        "Env": {"QUIESCE_AGENT": address},
        "Services": [{"Name": s, "Provider": "nomad"} for s in services] or None,
    }
    if kill_signal:
        spec["KillSignal"] = kill_signal
    if kill_timeout_s is not None:
        spec["KillTimeout"] = int(kill_timeout_s * SECOND)
    return spec


def poststop(name="cleanup"):
    """A poststop witness: it records its start and ends on its own."""
    return {
        "Name": name,
        "Driver": "raw_exec",
        "Lifecycle": {"Hook": "poststop", "Sidecar": False},
        "Config": {"command": WITNESS, "args": ["--exit-after", "50ms"]},
    }


def web_job(address, job_id="web", count=1, group_delay_s=0.0, task_delay_s=0.0):
    """A service job: one group with a group service and a delay, a `server` task with its
    own service and delay, and a poststop `cleanup` task."""
    group_service = f"{job_id}-group"
    task_service = "server-" + job_id
    return {
        "Job": {
            "ID": job_id,
            "TaskGroups": [
                {
                    "Name": "web",
                    "Count": count,
                    "ShutdownDelay": int(group_delay_s * SECOND) if group_delay_s else None,
                    "Services": [{"Name": group_service, "Provider": "nomad"}],
                    "Tasks": [
                        task(
                            "server",
                            address,
                            services=[task_service],
                            watch=[task_service, group_service],
                            delay_s=task_delay_s,
                        ),
                        poststop(),
                    ],
                }
            ],
        }
    }


def model_job(agent, part, witness_args=()):
    """The job of a model part (`CONFIG/PART`, printed by `quiesce-conform jobspec`) with
    raw_exec witness tasks, so the agent's event log can be validated against that part."""
    config, part = part.split("/")
    text = subprocess.run(
        [CONFORM, "jobspec", "--config", config, "--part", part],
        capture_output=True, text=True, check=True,
    ).stdout
    body = json.loads(text)
    group = body["Job"]["TaskGroups"][0]
    names = [s["Name"] for s in group.get("Services") or []]
    for spec in group["Tasks"]:
        names += [s["Name"] for s in spec.get("Services") or []]
    for spec in group["Tasks"]:
        spec["Driver"] = "raw_exec"
        if (spec.get("Lifecycle") or {}).get("Hook") == "poststop":
            spec["Config"] = poststop()["Config"]
        else:
            args = ["--services", ",".join(names), *witness_args]
            spec["Config"] = {"command": WITNESS, "args": args}
            spec["Env"] = {"QUIESCE_AGENT": agent.address}
    return body


def validate_log(agent, require_full=False):
    """Validates the agent's event log; with `require_full`, the model must have followed
    every step (a model part's job, say)."""
    command = [CONFORM, "validate-log", str(agent.data_dir / "events.jsonl")]
    if require_full:
        command.append("--require-full")
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}{log_around(agent, done.stdout)}"
    return done.stdout


def log_around(agent, verdict, before=40):
    """The event log's entries up to the step a verdict names (`step N`), for the failure
    message: CI keeps only what a test prints."""
    found = re.search(r"step (\d+)", verdict)
    if not found:
        return ""
    last = int(found.group(1))
    kept = []
    with open(agent.data_dir / "events.jsonl") as log:
        for line in log:
            seq = json.loads(line).get("seq", 0)
            if last - before <= seq <= last:
                kept.append(line.rstrip()[:400])
    return "\nthe log up to that step:\n" + "\n".join(kept)
