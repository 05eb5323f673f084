"""Real programs as tasks — /bin/sleep, python3 -m http.server and the witness — each with
kill_signal SIGTERM and SIGINT. They start with no signal blocked or ignored by the agent,
and a flagged stop (30 s + 30 s of delays, kill_timeout 30 s) ends each by its own kill
signal, delivered once, in well under its kill timeout: never by SIGKILL."""

import os
import shutil
import time

import pytest

from conftest import SECOND, WITNESS

PYTHON = shutil.which("python3") or "/usr/bin/python3"

# program: (command, args, how it ends on SIGTERM, on SIGINT)
PROGRAMS = {
    "sleep": ("/bin/sleep", ["1000"], {"TERM": "Exit Code: 143, Signal: 15", "INT": "Exit Code: 130, Signal: 2"}),
    # http.server turns SIGINT's KeyboardInterrupt into a clean exit; SIGTERM kills it.
    "http.server": (
        PYTHON,
        ["-u", "-m", "http.server", "--bind", "127.0.0.1", "0"],
        {"TERM": "Exit Code: 143, Signal: 15", "INT": "Exit Code: 0"},
    ),
    "witness": (WITNESS, [], {"TERM": "Exit Code: 143, Signal: 15", "INT": "Exit Code: 130, Signal: 2"}),
}
SIGNALS = {"TERM": 15, "INT": 2}


def signal_masks(pid):
    """(blocked, ignored) from /proc/PID/status, as integers."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return int(fields["SigBlk"], 16), int(fields["SigIgn"], 16)


def task_pid(alloc_id):
    """The pid of the allocation's task process: the process with the allocation's ID in
    its environment that is not its supervisor (`quiesce supervise`)."""
    marker = f"NOMAD_ALLOC_ID={alloc_id}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                ours = marker in environ.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if ours and b"supervise" not in argv[1:2]:
            return int(pid)
    return None


def ready(agent, alloc_id, program):
    """The program is past its start-up: signal handlers (if any) are in place."""
    stdout = agent.task_dir(alloc_id, "main") / "stdout.log"
    text = stdout.read_text() if stdout.exists() else ""
    if program == "http.server":
        return "Serving HTTP" in text
    if program == "witness":
        return '"event":"start"' in text
    return task_pid(alloc_id) is not None


@pytest.mark.parametrize("signal", ["TERM", "INT"])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_a_real_program_dies_of_its_kill_signal_under_the_flag(agent, program, signal):
    command, args, endings = PROGRAMS[program]
    if program == "witness":
        args = ["--kill-signal", signal, "--services", "real-group,real-main"]
    job = {"Job": {"ID": "real", "TaskGroups": [{
        "Name": "g", "ShutdownDelay": 30 * SECOND,
        "Services": [{"Name": "real-group", "Provider": "nomad"}],
        "Tasks": [{
            "Name": "main", "Driver": "raw_exec", "ShutdownDelay": 30 * SECOND,
            "KillSignal": f"SIG{signal}", "KillTimeout": 30 * SECOND,
            "Config": {"command": command, "args": args},
            "Env": {"QUIESCE_AGENT": agent.address},
            "Services": [{"Name": "real-main", "Provider": "nomad"}],
        }],
    }]}}
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200, body
    [alloc] = agent.running("real", 1)
    alloc_id = alloc["ID"]
    agent.wait_until(f"{program} to be ready", lambda: ready(agent, alloc_id, program))
    pid = task_pid(alloc_id)
    assert pid, "the task's process"
    # The witness reports what it inherited itself (it blocks and waits for signals, and
    # Rust's runtime ignores SIGPIPE); CPython ignores SIGPIPE and SIGXFSZ by itself.
    if program != "witness":
        blocked, ignored = signal_masks(pid)
        assert blocked == 0, f"{program} started with signals blocked: {blocked:#x}"
        if program == "sleep":
            assert ignored == 0, f"{program} started with signals ignored: {ignored:#x}"

    requested = time.monotonic()
    out = agent.cli("job", "stop", "-no-shutdown-delay", "real").stdout
    took = time.monotonic() - requested
    assert "Stop complete" in out, out
    # SIGKILL would come 30 s after the signal, after 60 s of delays without the flag.
    assert took < 3, f"{program} took {took:.2f}s to die of SIG{signal}"
    events = agent.get(f"/v1/allocation/{alloc_id}")["TaskStates"]["main"]["Events"]
    terminated = [e["DisplayMessage"] for e in events if e["Type"] == "Terminated"]
    assert terminated == [endings[signal]], terminated
    record = agent.exit_record(alloc_id, "main")
    assert [(d["kill"], d["signal"]) for d in record["delivered"]] == [(1, SIGNALS[signal])], record
    assert record["refused"] == 0
    if program == "http.server" and signal == "INT":
        assert "Keyboard interrupt received" in (agent.task_dir(alloc_id, "main") / "stdout.log").read_text()
    if program == "witness":
        [start, received, end] = agent.witness(alloc_id, "main")
        assert (start["blocked"], start["ignored"]) == ([], []), start
        assert received["name"] == f"SIG{signal}" and received["services"] == {"real-group": 0, "real-main": 0}
        assert received["monotonic_ns"] >= record["delivered"][0]["monotonic_ns"]
        assert end == {"event": "exit", "monotonic_ns": end["monotonic_ns"],
                       "unix_ns": end["unix_ns"], "signal": SIGNALS[signal]}


def test_a_draining_witness_runs_its_drain_and_gets_one_signal(agent):
    """A witness that drains 1 s after its kill signal: the allocation ends about then,
    the witness records exactly one SIGINT, and it dies of it."""
    job = {"Job": {"ID": "drain", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "main", "Driver": "raw_exec", "KillTimeout": 20 * SECOND,
        "Config": {"command": WITNESS, "args": ["--drain", "1s"]},
    }]}]}}
    agent.http("PUT", "/v1/jobs", job)
    [alloc] = agent.running("drain", 1)
    requested = time.monotonic()
    agent.cli("job", "stop", "-no-shutdown-delay", "drain")
    took = time.monotonic() - requested
    assert 1.0 <= took < 10, f"the 1 s drain ended {took:.2f}s after the stop"
    records = agent.witness(alloc["ID"], "main")
    assert [r["event"] for r in records] == ["start", "signal", "exit"], records
    drained = (records[2]["monotonic_ns"] - records[1]["monotonic_ns"]) / SECOND
    assert 1.0 <= drained < 10, drained
    events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["main"]["Events"]
    assert [e["DisplayMessage"] for e in events if e["Type"] == "Terminated"] == ["Exit Code: 130, Signal: 2"]


def credentials(pid):
    """(uids, gids, groups) from /proc/PID/status, each a list of integers."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = [int(x) for x in value.split()] if name in ("Uid", "Gid", "Groups") else None
    return fields["Uid"], fields["Gid"], fields["Groups"]


def test_a_task_runs_as_its_user_and_an_unknown_user_is_refused(agent, tmp_path):
    """`User` is honoured (issue 12: `User = "nobody"` ran the task as root): the task's
    real, effective, saved and filesystem ids are the user's, its groups the user's, and it
    still dies of its kill signal; an HCL jobspec's `user` says the same; a user this host
    does not have is a 400 naming the field, at registration."""
    import grp
    import pwd
    nobody = pwd.getpwnam("nobody")
    hcl = tmp_path / "user.nomad.hcl"
    hcl.write_text("""
job "as-nobody" {
  group "g" {
    task "main" {
      driver = "raw_exec"
      user   = "nobody"
      config {
        command = "/bin/sleep"
        args    = ["1000"]
      }
    }
  }
}
""")
    agent.cli("job", "run", "-detach", str(hcl))
    [alloc] = agent.running("as-nobody", 1)
    assert agent.get("/v1/job/as-nobody")["TaskGroups"][0]["Tasks"][0]["User"] == "nobody"
    pid = agent.wait_until("the task to be sleep", lambda: ready(agent, alloc["ID"], "sleep") and task_pid(alloc["ID"]))
    uids, gids, groups = credentials(pid)
    member_of = {g.gr_gid for g in grp.getgrall() if "nobody" in g.gr_mem} | {nobody.pw_gid}
    assert (uids, gids, set(groups)) == ([nobody.pw_uid] * 4, [nobody.pw_gid] * 4, member_of)
    out = agent.cli("job", "stop", "-no-shutdown-delay", "as-nobody").stdout
    assert "Stop complete" in out, out
    events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["main"]["Events"]
    assert [e["DisplayMessage"] for e in events if e["Type"] == "Terminated"] == ["Exit Code: 130, Signal: 2"]

    unknown = {"Job": {"ID": "ghost", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "main", "Driver": "raw_exec", "User": "quiesce-no-such-user",
        "Config": {"command": "/bin/sleep", "args": ["1"]}}]}]}}
    status, text, _ = agent.http("PUT", "/v1/jobs", unknown)
    assert status == 400 and 'TaskGroups[0].Tasks[0].User: no user "quiesce-no-such-user"' in text, text
    assert agent.http("GET", "/v1/job/ghost")[0] == 404
