"""A seeded crash campaign around launches (issue 24: a task launched less than ~20 ms
before a `kill -9` of the agent lost its "started" record — 3 orphans and 3 allocations
failed for good in 40 rounds). The agent is killed at a random moment in the first 50 ms
after a request that launches tasks — a registration (new allocations) or an in-place
restart of every task (a new run of each) — restarted on the same data dir; in a third of the runs a flagged stop follows the
registration at once, so that the crash also catches launches whose allocation the
restarted agent must stop (the orphans of the issue: the allocation `complete`, its task
running on, never signalled). Then:

* 0 lost allocations: every allocation of the job runs, none failed, every task running;
* 0 double starts: counted over /proc, exactly one process of each task and one supervisor
  of it (no run launched twice, none left from an earlier run), and the witness's own
  records show no start the agent does not know of;
* 0 orphans: after a flagged stop and a purge, nothing of the job is left in /proc — no
  task, no supervisor; a stopped allocation is `complete` (none failed), and every task
  that started was signalled once.

CI runs QUIESCE_CRASH_LAUNCH_RUNS=20 (the default; a run takes about a second);
`QUIESCE_CRASH_LAUNCH_RUNS=200 proofs/e2e/run -k crash_launch -s` runs more and prints the
tally. QUIESCE_CRASH_SEED picks another seed (default 1)."""

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import SECOND, WITNESS, job_processes

RUNS = int(os.environ.get("QUIESCE_CRASH_LAUNCH_RUNS", "20"))
SEED = int(os.environ.get("QUIESCE_CRASH_SEED", "1"))
COUNT = 4
TASKS = ["server", "sleeper"]

TALLY = {"runs": 0, "registered_before_crash": 0, "restarted_before_crash": 0,
         "stopped_before_crash": 0, "stopped_tasks_started": 0,
         "tasks_counted": 0, "task_processes": 0, "supervisors": 0, "witness_starts": 0}


def launch_job(address):
    return {"Job": {"ID": "launches", "TaskGroups": [{
        "Name": "g", "Count": COUNT,
        # A task the crash caught mid-kill (an in-place restart's signal delivered, its
        # record lost) ends as if on its own: the policy starts it again.
        "RestartPolicy": {"Attempts": 5, "Interval": 600 * SECOND, "Delay": 0, "Mode": "fail"},
        "Services": [{"Name": "launches", "Provider": "nomad"}],
        "Tasks": [
            {"Name": "server", "Driver": "raw_exec", "Leader": True, "KillTimeout": 2 * SECOND,
             "Config": {"command": WITNESS, "args": ["--services", "launches"]},
             "Env": {"QUIESCE_AGENT": address}},
            {"Name": "sleeper", "Driver": "raw_exec", "KillSignal": "SIGTERM",
             "Config": {"command": "/bin/sleep", "args": ["1000"]}},
        ],
    }]}}


def send_and_crash(agent, requests, delay_s):
    """Sends the requests, one after the other, on a thread and kill -9s the agent `delay_s`
    after the first; returns how many were answered."""
    answered = []

    def send():
        for method, path, body in requests:
            data = None if body is None else json.dumps(body).encode()
            try:
                with urllib.request.urlopen(urllib.request.Request(
                        agent.address + path, data=data, method=method), timeout=10) as answer:
                    answer.read()
                    answered.append(answer.status)
            except (urllib.error.URLError, ConnectionError, OSError):
                return  # the agent died under it

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(delay_s)
    agent.kill9()
    sender.join()
    return len(answered)


def all_running(agent):
    allocs = agent.allocs("launches")
    live = [a for a in allocs if a["DesiredStatus"] == "run"]
    if len(live) != COUNT:
        return None
    for alloc in live:
        assert alloc["ClientStatus"] != "failed", f"allocation {alloc['ID']} failed: {alloc}"
        if alloc["ClientStatus"] != "running":
            return None
        for name in TASKS:
            state = alloc["TaskStates"].get(name)
            assert not (state and state["Failed"]), f"{alloc['ID']}/{name} failed: {state}"
            if not state or state["State"] != "running":
                return None
    return live


def check_one_of_each(agent, live):
    """Exactly one task process and one supervisor per task of every live allocation,
    and no other process of the job; the witness started no more often than it was run."""
    def settled():
        found = job_processes(agent)
        counts = {key: sorted(kind for _, kind in procs) for key, procs in found.items()}
        want = {(a["ID"], t): ["supervisor", "task"] for a in live for t in TASKS}
        return (found, counts) if counts == want else None

    try:
        found, _ = agent.wait_until("one task process and one supervisor per task", settled,
                                    timeout=15)
    except AssertionError:
        found = job_processes(agent)
        raise AssertionError(f"processes per task: {found}") from None
    for alloc in live:
        for name in TASKS:
            TALLY["tasks_counted"] += 1
            TALLY["task_processes"] += 1
            TALLY["supervisors"] += 1
        def runs_and_starts():
            runs = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Restarts"] + 1
            starts = [r for r in agent.witness(alloc["ID"], "server") if r["event"] == "start"]
            return runs, starts

        # One start per run the agent knows of (the first, and one per restart: an in-place
        # restart's, or the policy's for a task whose restart kill a crash made look like
        # its own end); the last one's record may still be on its way to the log, and the
        # agent's count to the server.
        agent.wait_until("the witness's start records",
                         lambda: len(runs_and_starts()[1]) >= runs_and_starts()[0])
        runs, starts = runs_and_starts()
        assert len(starts) == runs, (alloc["ID"], starts, runs)
        TALLY["witness_starts"] += runs
        [(task_pid, _)] = [p for p in found[(alloc["ID"], "server")] if p[1] == "task"]
        assert starts[-1]["pid"] == task_pid, "the running witness is the last one started"


def check_stopped(agent):
    """Every allocation of the stopped job is complete, nothing of it runs, and each task
    that started got its kill signal once (its supervisor's record)."""
    allocs = agent.allocs("launches")
    agent.wait_terminal([a["ID"] for a in allocs])
    for alloc in allocs:
        record = agent.get(f"/v1/allocation/{alloc['ID']}")
        assert record["ClientStatus"] == "complete", (alloc["ID"], record["TaskStates"])
        for name in TASKS:
            exit_record = agent.exit_record(alloc["ID"], name)
            if exit_record is None:
                continue  # never started: the stop came first
            TALLY["stopped_tasks_started"] += 1
            signals = [d for d in exit_record["delivered"] if not d["forced"]]
            assert len(signals) == 1 and exit_record["error"] is None, (alloc["ID"], name, exit_record)


def no_orphans(agent):
    try:
        agent.wait_until("nothing of the job left in /proc", lambda: not job_processes(agent),
                         timeout=15)
    except AssertionError:
        raise AssertionError(f"orphans: {job_processes(agent)}") from None


@pytest.mark.parametrize("run", range(RUNS))
def test_crash_launch_campaign(agent, run):
    rng = random.Random(SEED * 7_000_003 + run)
    scenario = ["register", "register-then-stop", "restart"][run % 3]
    delay = rng.uniform(0, 0.05)
    flagged = "/v1/job/launches?no_shutdown_delay=true"
    if scenario in ("register", "register-then-stop"):
        requests = [("PUT", "/v1/jobs", launch_job(agent.address))]
        if scenario == "register-then-stop":
            requests.append(("DELETE", flagged, None))
        answered = send_and_crash(agent, requests, delay)
        TALLY["registered_before_crash"] += answered >= 1
        TALLY["stopped_before_crash"] += answered >= 2
        agent.start()
        if agent.http("GET", "/v1/job/launches")[0] == 404:
            # Never answered: the operator asks again, as a client would.
            assert answered == 0, "an acknowledged registration was lost"
            agent.http("PUT", "/v1/jobs", launch_job(agent.address))
        if scenario == "register-then-stop":
            if not agent.get("/v1/job/launches")["Stop"]:
                assert answered < 2, "an acknowledged stop was lost"
                agent.http("DELETE", flagged)
            check_stopped(agent)
            no_orphans(agent)
            count_run()
            return
    else:
        agent.http("PUT", "/v1/jobs", launch_job(agent.address))
        agent.wait_until("every task to run", lambda: all_running(agent))
        # Every allocation restarted in place at once, the crash among the new runs.
        allocs = agent.allocs("launches")
        def restart(alloc_id):
            try:
                agent.http("POST", f"/v1/client/allocation/{alloc_id}/restart", {})
            except (urllib.error.URLError, ConnectionError, OSError):
                pass  # the agent died under it

        threads = [threading.Thread(target=restart, args=(a["ID"],)) for a in allocs[1:]]
        for thread in threads:
            thread.start()
        answered = send_and_crash(
            agent, [("POST", f"/v1/client/allocation/{allocs[0]['ID']}/restart", {})], delay)
        for thread in threads:
            thread.join()
        TALLY["restarted_before_crash"] += answered
        agent.start()
    live = agent.wait_until("every task to run", lambda: all_running(agent), timeout=30)
    check_one_of_each(agent, live)
    out = agent.cli("job", "stop", "-no-shutdown-delay", "launches").stdout
    assert "complete" in out.lower(), out
    check_stopped(agent)
    agent.cli("job", "stop", "-purge", "launches")
    no_orphans(agent)
    count_run()


def count_run():
    """One run done; the campaign's figures once the last is (whichever scenario it was)."""
    TALLY["runs"] += 1
    if TALLY["runs"] == RUNS:
        print(f"\ncrash launch campaign: {TALLY}")
