"""Updates roll out (issue 13, part 3): a changed spec replaces the allocations through the
stop path — each old task signalled once, after its services are gone and its delay waited —
with new ones at the new version running the new spec; a count change only scales; the
same spec again changes nothing. Judged by the witness tasks and their processes."""

import time

from conftest import web_job


def start_record(agent, alloc_id, task="server"):
    [start] = [r for r in agent.witness(alloc_id, task) if r["event"] == "start"]
    return start


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(
            entry.split(b"=", 1) for entry in f.read().split(b"\0") if b"=" in entry
        )


def live(agent, job):
    return [a for a in agent.allocs(job) if a["DesiredStatus"] == "run"]


def test_a_changed_spec_replaces_the_allocations_through_the_stop_path(agent):
    job = web_job(agent.address, count=2, task_delay_s=1.0)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "1"
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    old = {a["ID"] for a in agent.running("web", 2)}
    for alloc_id in old:
        assert environ(start_record(agent, alloc_id)["pid"])[b"RELEASE"] == b"1"

    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "2"
    asked = time.monotonic()
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200 and body["JobModifyIndex"] > 0, body
    assert agent.get("/v1/job/web")["Version"] == 1

    def rolled_out():
        new = [a for a in live(agent, "web") if a["ID"] not in old and a["ClientStatus"] == "running"]
        started = [a for a in new if agent.started(a["ID"], "server")]
        return new if len(started) == 2 else None

    new = agent.wait_until("two new allocations at version 1", rolled_out)
    agent.wait_terminal(list(old))
    for alloc_id in old:
        alloc = agent.get(f"/v1/allocation/{alloc_id}")
        assert alloc["DesiredStatus"] == "stop"
        assert alloc["DesiredDescription"] == "alloc not needed due to job update"
        assert alloc["NextAllocation"] in {a["ID"] for a in new}
        [signal] = [line for line in agent.task_log(alloc_id, "server") if line[0] == "signal"]
        _, name, at, services = signal
        assert name == "INT"
        assert services == {"web-group": 0, "server-web": 0}, services
        assert at - asked >= 1.0, f"signalled {at - asked:.3f}s after the update, inside the 1 s delay"
    for alloc in new:
        full = agent.get(f"/v1/allocation/{alloc['ID']}")
        assert alloc["JobVersion"] == 1 and full["PreviousAllocation"] in old
        assert environ(start_record(agent, alloc["ID"])["pid"])[b"RELEASE"] == b"2"
        assert not [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"]
    # The stored spec is the one submitted.
    assert agent.get("/v1/job/web")["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] == "2"


def test_a_count_change_scales_and_the_same_spec_changes_nothing(agent):
    job = web_job(agent.address, count=1)
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    [first] = agent.running("web", 1)
    pid = start_record(agent, first["ID"])["pid"]

    job["Job"]["TaskGroups"][0]["Count"] = 3
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    allocs = agent.running("web", 3)
    assert first["ID"] in {a["ID"] for a in allocs}
    assert start_record(agent, first["ID"])["pid"] == pid, "the running task was restarted"
    assert agent.get(f"/v1/allocation/{first['ID']}")["Job"]["Version"] == 1, "updated in place"

    before = agent.get("/v1/job/web")
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200
    after = agent.get("/v1/job/web")
    assert (after["Version"], after["JobModifyIndex"]) == (before["Version"], before["JobModifyIndex"])
    # Its evaluation is processed before the write is answered; it placed nothing.
    assert agent.get(f"/v1/evaluation/{body['EvalID']}")["Status"] == "complete"
    assert agent.get(f"/v1/evaluation/{body['EvalID']}/allocations") == []
    assert len(live(agent, "web")) == 3
    for alloc in allocs:
        assert not [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"]

    job["Job"]["TaskGroups"][0]["Count"] = 1
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    agent.wait_until("two allocations stopped", lambda: len(live(agent, "web")) == 1)
    [kept] = live(agent, "web")
    assert kept["ID"] == first["ID"]
