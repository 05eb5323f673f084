"""The end-to-end harness: a real `quiesce agent -dev` on a free loopback port with a
temporary data dir, jobs whose tasks are shell scripts (tasks/), and helpers to read what the
tasks recorded. Run through proofs/e2e/run, which builds the binaries and installs the
clients."""

import json
import os
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
TASKS = pathlib.Path(__file__).resolve().parent / "tasks"
SECOND = 1_000_000_000


def clean_env(**extra):
    """The environment without NOMAD_* variables (the clients read them), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOMAD_")}
    env.update(extra)
    return env


class Agent:
    """One agent process over one data dir; restartable on the same port."""

    def __init__(self, data_dir):
        self.data_dir = pathlib.Path(data_dir)
        self.port = 0
        self.proc = None
        self.address = None
        self.starts = 0

    def start(self):
        self.starts += 1
        stderr = open(self.data_dir.parent / f"agent-{self.starts}.err", "w")
        self.proc = subprocess.Popen(
            [QUIESCE, "agent", "-dev", "-data-dir", str(self.data_dir), "-port", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=clean_env(),
        )
        for line in self.proc.stdout:
            if "HTTP address:" in line:
                self.address = line.split()[-1]
                self.port = int(self.address.rsplit(":", 1)[1])
                break
        else:
            raise RuntimeError(f"the agent exited: {self.stderr()}")
        return self

    def stderr(self):
        return "".join(p.read_text() for p in sorted(self.data_dir.parent.glob("agent-*.err")))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

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
        request = urllib.request.Request(self.address + path, data=data, method=method, headers=headers or {})
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
            env=clean_env(NOMAD_ADDR=self.address),
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
            started = [a for a in allocs if all(self.task_log(a["ID"], t) for t in self.main_tasks(a))]
            return allocs if len(started) >= count else None

        return self.wait_until(f"{count} running allocation(s) of {job}", ready)

    def main_tasks(self, alloc_stub):
        return [
            name
            for name, state in alloc_stub["TaskStates"].items()
            if state["State"] == "running"
        ]

    def alloc_dir(self, alloc_id):
        return self.data_dir / "alloc" / alloc_id

    def task_log(self, alloc_id, task):
        """The lines a task script wrote: [("started", t), ("signal", "INT", t, services)]."""
        path = self.alloc_dir(alloc_id) / f"{task}.log"
        if not path.exists():
            return []
        lines = []
        for line in path.read_text().splitlines():
            kind, rest = line.split(" ", 1)
            if kind == "signal":
                name, at, seen = rest.split(" ", 2)
                lines.append(("signal", name, float(at), json.loads(seen)))
            else:
                lines.append((kind, float(rest)))
        return lines

    def signalled_at(self, alloc_id, task):
        signals = [line for line in self.task_log(alloc_id, task) if line[0] == "signal"]
        return signals[0][2] if signals else None

    def client_status(self, alloc_id):
        return self.get(f"/v1/allocation/{alloc_id}")["ClientStatus"]

    def wait_terminal(self, alloc_ids, timeout=30):
        def done():
            return all(self.client_status(a) in ("complete", "failed") for a in alloc_ids)

        self.wait_until(f"allocations {alloc_ids} to finish", done, timeout)

    def events(self):
        path = self.data_dir / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def agent(tmp_path):
    running = Agent(tmp_path / "data").start()
    yield running
    running.close()


def task(name, address, services=(), watch=(), delay_s=0, leader=False, kill_timeout_s=None):
    """A raw_exec task running tasks/task.sh, registering `services`; when it is signalled it
    records the agent's registrations of the services in `watch`."""
    spec = {
        "Name": name,
        "Driver": "raw_exec",
        "Leader": leader,
        "ShutdownDelay": int(delay_s * SECOND),
        "Config": {"command": "/bin/sh", "args": [str(TASKS / "task.sh")]},
        "Env": {"QUIESCE_AGENT": address, "QUIESCE_SERVICES": " ".join(watch)},
        "Services": [{"Name": s, "Provider": "nomad"} for s in services] or None,
    }
    if kill_timeout_s is not None:
        spec["KillTimeout"] = int(kill_timeout_s * SECOND)
    return spec


def poststop(name="cleanup"):
    return {
        "Name": name,
        "Driver": "raw_exec",
        "Lifecycle": {"Hook": "poststop", "Sidecar": False},
        "Config": {"command": "/bin/sh", "args": [str(TASKS / "poststop.sh")]},
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


def model_job(agent, part):
    """The job of a model part (`CONFIG/PART`, printed by `quiesce-conform jobspec`) with
    raw_exec tasks, so the agent's event log can be validated against that part."""
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
        poststop_task = (spec.get("Lifecycle") or {}).get("Hook") == "poststop"
        script = "poststop.sh" if poststop_task else "task.sh"
        spec["Config"] = {"command": "/bin/sh", "args": [str(TASKS / script)]}
        spec["Env"] = {"QUIESCE_AGENT": agent.address, "QUIESCE_SERVICES": " ".join(names)}
    return body


def validate_log(agent, part):
    config, part = part.split("/")
    done = subprocess.run(
        [CONFORM, "validate-log", str(agent.data_dir / "events.jsonl"), "--config", config, "--part", part],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, f"{done.stdout}{done.stderr}"
    return done.stdout
