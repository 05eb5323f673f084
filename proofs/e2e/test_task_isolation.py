"""A task must never become root (issue 24): what the agent, as root, does on a task's
behalf inside the task's directory cannot be redirected by the task, whatever it races.

Tried as the attack was: a `User = "nobody"` task (Python, through ctypes) exchanges the
directories its sibling's templates go into with symbolic links to a root-only directory
(`renameat2(RENAME_EXCHANGE)`, in a loop, as fast as it can), while the test restarts the
sibling again and again — every restart writes its templates again. Before the fix, root
truncated and rewrote the root-only file with the template's text and chowned it to
`nobody`."""

import os
import pathlib
import stat

from conftest import SECOND

# Templates per launch; each restart writes them all.
TEMPLATES = 8
# Restarts attempted (CI); QUIESCE_RACE_RESTARTS sets more.
RESTARTS = int(os.environ.get("QUIESCE_RACE_RESTARTS", "150"))

ATTACKER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
local, victim, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
while not all(os.path.isdir(f"{local}/d{i}") for i in range(count)):
    time.sleep(0.001)
fd = os.open(local, os.O_RDONLY | os.O_DIRECTORY)
for i in range(count):
    os.symlink(victim, f"{local}/e{i}")
print("racing", flush=True)
# Each directory is a link for a moment (an exchange and its undoing), then a directory
# again for a while: most launches get their templates, and some writes meet the link.
while True:
    for i in range(count):
        d, e = f"d{i}".encode(), f"e{i}".encode()
        libc.renameat2(fd, d, fd, e, RENAME_EXCHANGE)
        libc.renameat2(fd, d, fd, e, RENAME_EXCHANGE)
    time.sleep(0.0002)
"""


def racing_job(victim_dir):
    templates = [{"DestPath": f"local/d{i}/app.conf", "EmbeddedTmpl": f"template {i}\n",
                  "Perms": "0644"} for i in range(TEMPLATES)]
    return {"Job": {"ID": "race", "TaskGroups": [{
        "Name": "g",
        "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Tasks": [
            {"Name": "main", "Driver": "raw_exec", "User": "nobody", "KillTimeout": SECOND,
             "Config": {"command": "/bin/sleep", "args": ["1000"]}, "Templates": templates},
            # Its working directory is its own task directory: `../main/local` is its
            # sibling's, which it owns (both run as nobody).
            {"Name": "attacker", "Driver": "raw_exec", "User": "nobody",
             "Config": {"command": "/usr/bin/python3",
                        "args": ["-c", ATTACKER, "../main/local", str(victim_dir),
                                 str(TEMPLATES)]}},
        ],
    }]}}


def main_state(agent, alloc_id):
    record = agent.get(f"/v1/allocation/{alloc_id}")
    return record["ClientStatus"], record["TaskStates"]["main"]


def test_a_nobody_task_racing_its_siblings_restarts_cannot_redirect_the_template_writes(agent, tmp_path):
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir(mode=0o700)
    victim = victim_dir / "app.conf"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    before = victim.stat()

    restarts = refused = allocations = 0
    while restarts + refused < RESTARTS:
        allocations += 1
        status, answer, _ = agent.http("PUT", "/v1/jobs", racing_job(victim_dir))
        assert status == 200, answer
        [alloc] = agent.running("race", 1)
        alloc_id = alloc["ID"]
        agent.wait_until("the attacker to race", lambda: "racing" in (
            agent.task_dir(alloc_id, "attacker") / "stdout.log").read_text())
        while restarts + refused < RESTARTS:
            _, state = main_state(agent, alloc_id)
            seen = state["Restarts"]
            status, answer, _ = agent.http("POST", f"/v1/client/allocation/{alloc_id}/restart",
                                           {"TaskName": "main"})
            assert status == 200, answer

            def next_run():
                client, state = main_state(agent, alloc_id)
                if client == "failed" or state["Failed"]:
                    return "refused"
                # Launched: this run's supervisor has started (its directory holds its
                # exit.json). A refused template write fails the launch before that.
                run = state["Restarts"]
                launched = agent.task_dir(alloc_id, "main").glob(f"run-{run}-*/exit.json")
                if run > seen and any(launched):
                    return "restarted"
                return None

            outcome = agent.wait_until("the restart to end", next_run, timeout=30)
            if outcome == "restarted":
                restarts += 1
                continue
            # A template write that met a link is refused, and the task does not start: it
            # sabotaged its own templates. The allocation fails, saying why.
            refused += 1
            _, state = main_state(agent, alloc_id)
            messages = " ".join(e.get("DisplayMessage", "") for e in state["Events"])
            assert "not followed" in messages or "not a plain file" in messages, state["Events"]
            break
        status, _, _ = agent.http("DELETE", "/v1/job/race?purge=true")
        assert status == 200
        agent.wait_until("the purge", lambda: agent.http("GET", f"/v1/allocation/{alloc_id}")[0] == 404)

    after = victim.stat()
    assert victim.read_text() == "root's secret\n", "root rewrote the victim"
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (0, 0, 0o600)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(os.listdir(victim_dir)) == ["app.conf"], "nothing was made in the victim's directory"
    print(f"\n{restarts} restarts ({restarts * TEMPLATES} template writes) and {refused} refused "
          f"launches over {allocations} allocations; the victim untouched")
    assert restarts > 0 and refused > 0, "the race must have run both ways"


def forking_job(job_id):
    from conftest import WITNESS
    return {"Job": {"ID": job_id, "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "main", "Driver": "raw_exec", "KillTimeout": SECOND,
        "Config": {"command": WITNESS, "args": ["--fork-child"]}}]}]}}


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(agent, alloc_id):
    return [r["child"] for r in agent.witness(alloc_id, "main") if r["event"] == "start"]


def test_a_tasks_child_in_a_session_of_its_own_ends_with_the_task(agent):
    """Issue 24, finding 7: a `setsid` child of a task (out of its process group, as a
    daemonizing program's) survived stop, purge and the agent's stop, re-parented to init.
    Each task now runs in a cgroup of its own: the child ends with its run — an in-place
    restart, a stop, a purge — and nothing is left of the task's cgroups."""
    agent.http("PUT", "/v1/jobs", forking_job("forks"))
    [alloc] = agent.running("forks", 1)
    [first] = agent.wait_until("the child", lambda: children(agent, alloc["ID"]))
    assert alive(first)
    # The child's cgroup (cgroup2's line of /proc/PID/cgroup), under the agent's.
    [line] = [line for line in open(f"/proc/{first}/cgroup").read().splitlines()
              if line.startswith("0::")]
    path = line.removeprefix("0::")
    assert path.count("/") == 2 and path.split("/")[1].startswith("quiesce-"), path
    mount = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    root = mount + "/" + path.split("/")[1]
    status, answer, _ = agent.http("POST", f"/v1/client/allocation/{alloc['ID']}/restart", {})
    assert status == 200, answer
    agent.wait_until("the second run's child", lambda: len(children(agent, alloc["ID"])) == 2)
    second = children(agent, alloc["ID"])[1]
    agent.wait_until("the first run's child to end with its run", lambda: not alive(first), timeout=5)
    assert alive(second)
    out = agent.cli("job", "stop", "-no-shutdown-delay", "forks").stdout
    assert "Stop complete" in out, out
    agent.wait_until("the child to end with the task", lambda: not alive(second), timeout=5)

    agent.http("PUT", "/v1/jobs", forking_job("purged"))
    [purged] = agent.running("purged", 1)
    [third] = agent.wait_until("the child", lambda: children(agent, purged["ID"]))
    agent.cli("job", "stop", "-purge", "purged")
    agent.wait_until("the purged task's child to end", lambda: not alive(third), timeout=10)
    agent.wait_until("the tasks' cgroups to go", lambda: not [
        d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))], timeout=10)
