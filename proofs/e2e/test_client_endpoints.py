"""The endpoints third-party clients call on every screen (issue 25, build 4), each judged
by what a client and the task's processes see: `alloc signal` reaches each task once and
leaves the stop path as it was; `alloc stats` measures the task's real processes; the job's
source comes back as submitted, version by version, across a restart; the job's services;
and the read-only answers (namespaces, volumes, deployments, raft) as Nomad gives them."""

import os
import sys
import time

from conftest import SECOND, task, web_job


def signals(agent, alloc_id, name="server"):
    return [line[1] for line in agent.task_log(alloc_id, name) if line[0] == "signal"]


def test_alloc_signal_reaches_each_running_task_once_and_the_stop_after_it_is_unchanged(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    [alloc] = agent.running("web", 1)
    path = f"/v1/client/allocation/{alloc['ID']}/signal"
    # No task named: every task with a process (the poststop task has none yet).
    status, body, _ = agent.http("PUT", path, {"Signal": "SIGUSR1"})
    assert (status, body) == (200, {}), body
    agent.wait_until("the SIGUSR1", lambda: signals(agent, alloc["ID"]) == ["USR1"])
    # One task by name, its signal named without the prefix.
    status, body, _ = agent.http("PUT", path, {"Task": "server", "Signal": "hup"})
    assert (status, body) == (200, {}), body
    agent.wait_until("the SIGHUP", lambda: signals(agent, alloc["ID"]) == ["USR1", "HUP"])
    # Refusals name what was wrong, and nothing is sent.
    for request, code, text in [
        ({"Signal": "SIGNOPE"}, 400, 'unknown signal "SIGNOPE"'),
        ({}, 400, "Signal is required"),
        ({"Task": "nosuch", "Signal": "SIGHUP"}, 404, 'Task not found: "nosuch"'),
        ({"Task": "cleanup", "Signal": "SIGHUP"}, 400, "Task not running"),
        ({"Signal": 9}, 400, "Signal must be a string"),
    ]:
        status, body, _ = agent.http("PUT", path, request)
        assert status == code and text in body, (request, status, body)
    status, body, _ = agent.http("PUT", "/v1/client/allocation/nosuch/signal", {"Signal": "HUP"})
    assert status == 404 and "Unknown allocation" in body, body
    # The agent says what it sent.
    agent.wait_until("the agent's log of the signals", lambda: agent.stderr().count(
        f"allocation {alloc['ID']} task server: SIG") == 2)
    # The stop after it: the kill signal once, the poststop task run; the supervisor's
    # record of the kill's deliveries holds the kill signal alone.
    status, _, _ = agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
    assert status == 200
    agent.wait_terminal([alloc["ID"]])
    assert signals(agent, alloc["ID"]) == ["USR1", "HUP", "INT"]
    record = agent.exit_record(alloc["ID"], "server")
    assert [(d["signal"], d["forced"]) for d in record["delivered"]] == [(2, False)], record
    assert [line[0] for line in agent.task_log(alloc["ID"], "cleanup")] == ["started", "exit"]
    # A stopped allocation's tasks have no process left to signal.
    status, body, _ = agent.http("PUT", path, {"Signal": "SIGHUP"})
    assert status == 400, body
    assert signals(agent, alloc["ID"]) == ["USR1", "HUP", "INT"]


HOG = """
import sys, time
block = bytearray(64 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
end = time.monotonic() + 3600
while time.monotonic() < end:
    sum(range(20000))
    time.sleep(0.002)
"""


def vm_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_alloc_stats_measure_the_memory_and_cpu_of_the_tasks_processes(agent):
    job = {"Job": {"ID": "hog", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "hog", "Driver": "raw_exec",
        "Config": {"command": sys.executable, "args": ["-c", HOG]}}]}]}}
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200, body
    [alloc] = agent.running("hog", 1)
    stdout = agent.task_dir(alloc["ID"], "hog") / "stdout.log"
    agent.wait_until("the hog's 64 MiB", lambda: stdout.exists() and "ready" in stdout.read_text())
    time.sleep(0.5)  # some CPU time to measure
    stats = agent.get(f"/v1/client/allocation/{alloc['ID']}/stats")
    hog = stats["Tasks"]["hog"]
    [pid] = hog["Pids"]
    # The process the task really is: its own /proc says the same within a tenth.
    measured = hog["ResourceUsage"]["MemoryStats"]["RSS"]
    own = vm_rss(pid)
    assert measured >= 64 << 20, measured
    assert abs(measured - own) < own / 10, (measured, own)
    cpu = hog["ResourceUsage"]["CpuStats"]
    assert 0 < cpu["Percent"] <= 100 * os.cpu_count(), cpu
    assert abs(cpu["Percent"] - cpu["UserMode"] - cpu["SystemMode"]) < 1e-6, cpu
    assert stats["ResourceUsage"]["MemoryStats"]["RSS"] == measured
    assert abs(stats["Timestamp"] - time.time_ns()) < 60 * SECOND
    # A stopped allocation has no process to measure.
    agent.http("DELETE", "/v1/job/hog?no_shutdown_delay=true")
    agent.wait_terminal([alloc["ID"]])
    after = agent.get(f"/v1/client/allocation/{alloc['ID']}/stats")
    assert after["Tasks"] == {}, after
    status, body, _ = agent.http("GET", "/v1/client/allocation/nosuch/stats")
    assert status == 404, body


def sleeper(job_id, meta):
    return {"Job": {"ID": job_id, "Meta": {"v": meta}, "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sleep", "args": ["3600"]}}]}]}}


def test_the_job_source_comes_back_as_submitted_version_by_version_across_a_restart(agent):
    def submit(meta, submission):
        body = sleeper("src", meta)
        body["Submission"] = submission
        return agent.http("PUT", "/v1/jobs", body)

    def source(version):
        return agent.http("GET", f"/v1/job/src/submission?version={version}")

    status, body, _ = source(0)
    assert status == 404 and body == "job source not found", body
    first = {"Source": 'job "src" { meta { v = "0" } }', "Format": "hcl2",
             "VariableFlags": {"X": "x", "Y": "42"}, "Variables": "var file content"}
    assert submit("0", first)[0] == 200
    second = {"Source": '{"Job": {"ID": "src"}}', "Format": "json", "VariableFlags": {},
              "Variables": ""}
    assert submit("1", second)[0] == 200
    # Bad submissions: refused, naming what was wrong, and nothing stored changes.
    for bad, text in [({"Source": 5}, "Submission.Source must be a string"),
                      ("text", "Submission must be an object"),
                      ({"Format": "yaml"}, "Submission.Format"),
                      ({"VariableFlags": {"a": 1}}, "Submission.VariableFlags")]:
        status, body, _ = submit("2", bad)
        assert status == 400 and text in body, (bad, status, body)
    assert [v["Version"] for v in agent.get("/v1/job/src/versions")["Versions"]] == [1, 0]
    # Each version's source as it was sent (an empty map of flags reads null, as Nomad's).
    assert source(0)[1] == first
    assert source(1)[1] == dict(second, VariableFlags=None)
    # The job's own JSON does not carry it.
    assert "Submission" not in agent.get("/v1/job/src")
    # A stop's version keeps its source; a restart keeps every version's.
    agent.http("DELETE", "/v1/job/src?no_shutdown_delay=true")
    assert source(2)[1] == dict(second, VariableFlags=None)
    agent.kill9()
    agent.start()
    assert source(0)[1] == first
    assert source(2)[1] == dict(second, VariableFlags=None)
    # A register without a source stores none for its version, even with the spec unchanged
    # (the stopped version's source is the CLI's `job start`'s to send, as Nomad's UI does).
    assert agent.http("PUT", "/v1/jobs", sleeper("src", "1"))[0] == 200
    assert agent.get("/v1/job/src")["Version"] == 3
    assert source(3)[:2] == (404, "job source not found")
    assert source(2)[1] == dict(second, VariableFlags=None)
    # A source past the limit is discarded with Nomad's warning; the job is registered.
    status, body, _ = submit("3", {"Source": "x" * ((1 << 20) + 1), "Format": "hcl2"})
    assert status == 200 and "exceeds the maximum" in body["Warnings"], body
    assert source(4)[:2] == (404, "job source not found")
    # The version is required.
    status, body, _ = agent.http("GET", "/v1/job/src/submission")
    assert status == 400 and "version" in body, body
    # A purge takes every source with the job.
    agent.http("DELETE", "/v1/job/src?purge=true")
    assert source(0)[:2] == (404, "job source not found")


# invariant: stop_completes
def test_a_jobs_services_are_its_registrations_and_go_with_its_stop(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id="other"))
    [alloc] = agent.running("web", 1)
    agent.running("other", 1)
    services = agent.get("/v1/job/web/services")
    assert sorted(s["ServiceName"] for s in services) == ["server-web", "web-group"], services
    assert {(s["JobID"], s["AllocID"], s["Namespace"]) for s in services} == {
        ("web", alloc["ID"], "default")}
    agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
    agent.wait_terminal([alloc["ID"]])
    assert agent.get("/v1/job/web/services") == []
    assert len(agent.get("/v1/job/other/services")) == 2
    status, body, _ = agent.http("GET", "/v1/job/nosuch/services")
    assert (status, body) == (404, "job not found")


def test_the_read_only_endpoints_answer_as_nomads_do(agent):
    # `max_parallel = 0`: no update strategy, so no deployment (the table stays empty).
    job = sleeper("s", "0")
    job["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 0}
    agent.http("PUT", "/v1/jobs", job)
    namespaces = agent.get("/v1/namespaces")
    assert [n["Name"] for n in namespaces] == ["default"], namespaces
    assert namespaces[0]["Description"] == "Default shared namespace"
    assert agent.get("/v1/namespaces?prefix=nope") == []
    assert agent.get("/v1/namespace/default")["Name"] == "default"
    assert agent.http("GET", "/v1/namespace/other")[:2] == (404, "namespace not found")
    assert agent.get("/v1/volumes?type=host") == []
    assert agent.get("/v1/volumes?type=csi") == []
    status, body, _ = agent.http("GET", "/v1/volumes")
    assert status == 400 and "type=host" in body, body
    assert agent.get("/v1/deployments") == []
    assert agent.get("/v1/job/s/deployments") == []
    assert agent.get("/v1/job/s/deployment") is None
    raft = agent.get("/v1/operator/raft/configuration")
    [server] = raft["Servers"]
    assert server["Leader"] and server["Voter"] and server["Address"] == agent.address.split("//")[1]
    # An index that never moves: a blocking query past it waits its whole wait.
    started = time.monotonic()
    status, body, headers = agent.http("GET", "/v1/deployments?index=1&wait=1s")
    took = time.monotonic() - started
    assert (status, body, headers["X-Nomad-Index"]) == (200, [], "1")
    assert took >= 0.9, took
    # Writes to them are not taken.
    assert agent.http("PUT", "/v1/namespaces", {})[0] == 405
    health = agent.get("/v1/agent/health")
    assert health["server"]["ok"] and health["client"]["ok"], health
    scheduler = agent.get("/v1/operator/scheduler/configuration")
    assert scheduler["SchedulerConfig"]["SchedulerAlgorithm"] == "binpack", scheduler
    assert agent.get(f"/v1/node/{agent.get('/v1/nodes')[0]['ID']}")["SecretID"] == ""


def test_a_forced_evaluation_evaluates_the_stored_job_and_changes_nothing_that_runs(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    [alloc] = agent.running("web", 1)
    [started] = [r for r in agent.witness(alloc["ID"], "server") if r["event"] == "start"]
    before = agent.get("/v1/job/web")
    status, body, _ = agent.http("PUT", "/v1/job/web/evaluate", {"JobID": "web"})
    assert status == 200, body
    evals = {e["ID"]: e for e in agent.get("/v1/job/web/evaluations")}
    assert evals[body["EvalID"]]["TriggeredBy"] == "job-register", evals[body["EvalID"]]
    agent.wait_until("the evaluation done",
                     lambda: agent.get(f"/v1/evaluation/{body['EvalID']}")["Status"] == "complete")
    after = agent.get("/v1/job/web")
    assert (after["Version"], after["JobModifyIndex"]) == (before["Version"], before["JobModifyIndex"])
    # The task the allocation runs is the one it ran, never signalled.
    assert [a["ID"] for a in agent.allocs("web")] == [alloc["ID"]]
    assert [r for r in agent.witness(alloc["ID"], "server") if r["event"] == "start"] == [started]
    assert signals(agent, alloc["ID"]) == []
    # Refused: an unknown job, a stopped one.
    assert agent.http("PUT", "/v1/job/nosuch/evaluate", {})[:2] == (404, "job not found")
    agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
    status, body, _ = agent.http("PUT", "/v1/job/web/evaluate", {})
    assert (status, body) == (400, "can't evaluate stopped job"), body
