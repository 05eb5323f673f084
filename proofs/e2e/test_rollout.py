"""Updates roll out (issue 13, part 3): a changed spec replaces the allocations through the
stop path — each old task signalled once, after its services are gone and its delay waited —
with new ones at the new version running the new spec; a count change only scales; the
same spec again changes nothing. Judged by the witness tasks and their processes."""

import time

from conftest import SECOND, web_job


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


def signal_of(agent, alloc_id):
    """The one kill signal the witness `server` of `alloc_id` received: (name, at, services)."""
    [signal] = [line for line in agent.task_log(alloc_id, "server") if line[0] == "signal"]
    _, name, at, services = signal
    return name, at, services


def exit_of(agent, alloc_id):
    [(_, at)] = [line for line in agent.task_log(alloc_id, "server") if line[0] == "exit"]
    return at


def rolling(job, max_parallel=1, min_healthy_s=1.0):
    job["Job"]["TaskGroups"][0]["Update"] = {
        "MaxParallel": max_parallel,
        "MinHealthyTime": int(min_healthy_s * SECOND),
    }
    return job


# invariant: rollout_bounded
def test_a_rollout_stops_one_old_allocation_at_a_time_each_after_its_delays_and_health(agent):
    job = rolling(web_job(agent.address, count=3, group_delay_s=0.5, task_delay_s=1.0), min_healthy_s=3.0)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "1"
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    old = {a["ID"] for a in agent.running("web", 3)}
    for alloc_id in old:
        assert environ(start_record(agent, alloc_id)["pid"])[b"RELEASE"] == b"1"
    # The registration's own deployment: every allocation placed at once, healthy after
    # 3 s; its success makes version 0 stable.
    first = agent.wait_until(
        "the first deployment to succeed",
        lambda: (d := agent.get("/v1/job/web/deployment"))["Status"] == "successful" and d,
        timeout=30,
    )
    assert (first["JobVersion"], first["TaskGroups"]["web"]["HealthyAllocs"]) == (0, 3), first
    assert agent.get("/v1/job/web/versions")["Versions"][0]["Stable"] is True

    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "2"
    asked = time.monotonic()
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200 and body["JobModifyIndex"] > 0, body
    assert agent.get("/v1/job/web")["Version"] == 1
    agent.wait_terminal(list(old), timeout=60)
    agent.wait_until(
        "the deployment to succeed",
        lambda: agent.get("/v1/job/web/deployment")["Status"] == "successful",
        timeout=30,
    )

    deployment = agent.get("/v1/job/web/deployment")
    assert deployment["JobVersion"] == 1, deployment
    state = deployment["TaskGroups"]["web"]
    assert (state["DesiredTotal"], state["PlacedAllocs"], state["HealthyAllocs"]) == (3, 3, 3), state
    assert agent.get(f"/v1/deployment/{deployment['ID']}")["ID"] == deployment["ID"]
    # Newest first: the rollout's, then the registration's.
    assert [d["ID"] for d in agent.get("/v1/job/web/deployments")] == [deployment["ID"], first["ID"]]
    assert deployment["ID"] in {d["ID"] for d in agent.get("/v1/deployments")}

    # What each old task got: one SIGINT, after its services were gone and 1.5 s of delays.
    stops = []
    for alloc_id in old:
        alloc = agent.get(f"/v1/allocation/{alloc_id}")
        assert alloc["DesiredStatus"] == "stop"
        assert alloc["DesiredDescription"] == "alloc is being updated due to job update"
        name, at, services = signal_of(agent, alloc_id)
        assert name == "INT"
        assert services == {"web-group": 0, "server-web": 0}, services
        stops.append((at, alloc_id, alloc["NextAllocation"]))
    stops.sort()
    assert stops[0][0] - asked >= 1.5, f"signalled {stops[0][0] - asked:.3f}s after the update"
    # One at a time: each old task is signalled only after the one before it has exited and
    # its own delays were waited, and after the replacement of the one before it was
    # healthy (3 s of running, longer than a stop) and its own delays were waited. Health
    # is when the agent logged it (CLOCK_REALTIME, as the witness's `unix_ns`).
    healthy_at = {
        entry["alloc"]: entry["time_ns"] / SECOND
        for entry in agent.events()
        if entry["step"] == "AllocHealthy"
    }
    signalled_unix = {}
    for alloc_id in old:
        [record] = [r for r in agent.witness(alloc_id, "server") if r["event"] == "signal"]
        signalled_unix[alloc_id] = record["unix_ns"] / SECOND
    for (_, before, replacement), (at, alloc_id, _) in zip(stops, stops[1:]):
        after_exit = at - exit_of(agent, before)
        assert after_exit >= 1.5, f"{alloc_id} signalled {after_exit:.3f}s after {before} exited"
        after_health = signalled_unix[alloc_id] - healthy_at[replacement]
        assert after_health >= 1.5, f"{alloc_id} signalled {after_health:.3f}s after {replacement} was healthy"
    for _, alloc_id, replacement in stops:
        new = agent.get(f"/v1/allocation/{replacement}")
        assert (new["Job"]["Version"], new["PreviousAllocation"]) == (1, alloc_id)
        assert (new["DeploymentID"], new["DeploymentStatus"]["Healthy"]) == (deployment["ID"], True)
        assert environ(start_record(agent, replacement)["pid"])[b"RELEASE"] == b"2"
        assert not [line for line in agent.task_log(replacement, "server") if line[0] == "signal"]
    # The stored spec is the one submitted.
    assert agent.get("/v1/job/web")["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] == "2"


# invariant: delay_skipped_only_when_flagged
def test_a_flagged_stop_during_a_rollout_skips_the_delays_and_a_later_rollout_waits_them(agent):
    job = rolling(web_job(agent.address, count=2, group_delay_s=0.5, task_delay_s=10.0))
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    old = [a["ID"] for a in agent.running("web", 2)]
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "2"
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200

    def in_task_delay():
        for alloc_id in old:
            events = agent.get(f"/v1/allocation/{alloc_id}")["TaskStates"]["server"]["Events"]
            if "Waiting for shutdown delay" in [e["Type"] for e in events]:
                return [alloc_id]
        return None

    # The rollout's first stop is in its 10 s task delay: the stop below cuts it short.
    [first] = agent.wait_until("the rollout's first stop, in its task delay", in_task_delay)
    second = next(a for a in old if a != first)
    assert agent.get(f"/v1/allocation/{second}")["DesiredStatus"] == "run", "one at a time"
    flagged = time.monotonic()
    assert agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")[0] == 200
    everything = [a["ID"] for a in agent.allocs("web")]
    agent.wait_terminal(everything)
    for alloc_id in everything:
        name, at, services = signal_of(agent, alloc_id)
        assert services == {"web-group": 0, "server-web": 0}, services
        assert at - flagged < 4.0, f"{alloc_id} signalled {at - flagged:.3f}s after the flagged stop"
    events = [e["Type"] for e in agent.get(f"/v1/allocation/{first}")["TaskStates"]["server"]["Events"]]
    assert "Shutdown delay cut short" in events, events
    events = [e["Type"] for e in agent.get(f"/v1/allocation/{second}")["TaskStates"]["server"]["Events"]]
    assert "Skipping shutdown delay" in events, events
    assert agent.get("/v1/job/web/deployment")["Status"] == "cancelled"
    # The stored spec kept its delays: started again and rolled out again, the old
    # allocation waits them in full.
    stored = agent.get("/v1/job/web")
    assert stored["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"] == 10 * SECOND
    agent.cli("job", "start", "web")
    running = [a["ID"] for a in agent.running("web", 2) if a["DesiredStatus"] == "run"]
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "3"
    asked = time.monotonic()
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200

    def signalled():
        return [a for a in running if agent.signalled_at(a, "server") is not None] or None

    [waited] = agent.wait_until("the later rollout's first signal", signalled, timeout=30)
    name, at, services = signal_of(agent, waited)
    assert services == {"web-group": 0, "server-web": 0}, services
    assert at - asked >= 10.5, f"the later rollout signalled {at - asked:.3f}s after its update"
    assert agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")[0] == 200


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
