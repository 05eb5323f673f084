"""Canaries (issue 27): an update of a group with `update { canary }` first places canaries
beside the running allocations and replaces none of them until the canaries are promoted —
by the deployment itself once they are healthy (`auto_promote`) or by the operator — then
replaces the old ones `max_parallel` at a time through the stop path. Judged by what the
witness tasks received: an old task is signalled only after the promotion, with its services
gone and its delay waited; a canary of a failed deployment is stopped and the old tasks
never hear of it. The agent's log is validated against the model after each test."""

import os
import signal
import time

from conftest import SECOND, validate_log
from test_deployments import latest, release_of, rolling, settled, signals


def canary_job(agent, count, release, canary=1, auto_promote=True, min_healthy_s=1.0):
    job = rolling(agent, count, release, min_healthy_s=min_healthy_s)
    job["Job"]["TaskGroups"][0]["Update"].update({"Canary": canary, "AutoPromote": auto_promote})
    return job


def canaries(agent, job="web"):
    return [
        a for a in agent.allocs(job)
        if (a.get("DeploymentStatus") or {}).get("Canary") and a["DesiredStatus"] == "run"
    ]


def task_event_ns(agent, alloc_id, kind, task="server"):
    """The Unix nanoseconds of `task`'s first event of `kind` (`Killing`, `Killed`)."""
    alloc = agent.get(f"/v1/allocation/{alloc_id}")
    times = [e["Time"] for e in alloc["TaskStates"][task]["Events"] if e["Type"] == kind]
    assert times, f"{alloc_id} {task} has no {kind} event"
    return times[0]


def health_ns(alloc):
    from test_deployments import unix_ns
    return unix_ns(alloc["DeploymentStatus"]["Timestamp"])


def test_a_canary_promoted_by_itself_goes_first_and_the_old_tasks_follow_one_at_a_time(agent):
    assert agent.http("PUT", "/v1/jobs", canary_job(agent, 2, "1"))[0] == 200
    old = [a["ID"] for a in agent.running("web", 2)]
    settled(agent, "successful")  # the registration's own deployment: no canaries there
    assert not canaries(agent)

    assert agent.http("PUT", "/v1/jobs", canary_job(agent, 2, "2"))[0] == 200
    deployment = latest(agent)
    assert deployment["StatusDescription"] == "Deployment is running pending automatic promotion"
    [canary] = agent.wait_until("the canary to be placed", lambda: canaries(agent))
    agent.running("web", 3)
    assert release_of(agent, canary["ID"]) == "2"
    status = agent.cli("deployment", "status", deployment["ID"][:8]).stdout
    assert "Task Group  Promoted  Desired  Canaries  Placed  Healthy  Unhealthy" in status, status

    settled(agent, "successful")
    deployment = latest(agent)
    group = deployment["TaskGroups"]["web"]
    assert (group["DesiredCanaries"], group["Promoted"]) == (1, True), group
    assert group["PlacedCanaries"] == [canary["ID"]], group
    promoted = agent.get(f"/v1/allocation/{canary['ID']}")
    assert promoted["DesiredStatus"] == "run" and promoted["DeploymentStatus"]["Canary"] is False

    # The old tasks: each stopped only after the canary was healthy, the second only once
    # the first had finished stopping, each signalled once with its services gone.
    healthy_at = health_ns(promoted)
    agent.wait_terminal(old)
    killing = sorted((task_event_ns(agent, a, "Killing"), a) for a in old)
    assert killing[0][0] >= healthy_at, "an old task was stopped before the canary was healthy"
    first, second = killing[0][1], killing[1][1]
    assert killing[1][0] >= task_event_ns(agent, first, "Killed"), "two old tasks stopped at once"
    for alloc_id in old:
        [(_, name, _, services)] = signals(agent, alloc_id)
        assert name == "INT" and services == {"web-group": 0, "server-web": 0}, services
    running = [a["ID"] for a in agent.allocs("web") if a["DesiredStatus"] == "run"]
    assert canary["ID"] in running and len(running) == 2, running
    assert all(release_of(agent, a) == "2" for a in running)
    # The model followed every step: its canaries, its promotion, the stops after it.
    verdict = validate_log(agent, require_full=True)
    assert "judged" in verdict, verdict


def test_an_operator_promotes_healthy_canaries_only_and_a_failed_deployment_stops_its_canary(agent):
    assert agent.http("PUT", "/v1/jobs", canary_job(agent, 2, "1", auto_promote=False))[0] == 200
    old = [a["ID"] for a in agent.running("web", 2)]
    settled(agent, "successful")

    # Healthy only after 5 s of running: a promotion asked for before is refused.
    update = canary_job(agent, 2, "2", auto_promote=False, min_healthy_s=5.0)
    assert agent.http("PUT", "/v1/jobs", update)[0] == 200
    deployment = latest(agent)
    short = deployment["ID"][:8]
    assert deployment["StatusDescription"] == "Deployment is running but requires manual promotion"
    [canary] = agent.wait_until("the canary to be placed", lambda: canaries(agent))
    refused = agent.cli("deployment", "promote", short, check=False)
    assert refused.returncode == 1, refused
    assert 'Task group "web" has 0/1 healthy allocations' in refused.stderr, refused.stderr

    agent.wait_until(
        "the canary to be healthy",
        lambda: (agent.get(f"/v1/allocation/{canary['ID']}")["DeploymentStatus"] or {}).get("Healthy"),
    )
    # Healthy, but not promoted by itself: nothing old is stopped. The next batch would
    # begin within a second of the health report; 3 s is past that many times over.
    waited = time.monotonic()
    while time.monotonic() - waited < 3.0:
        assert all(agent.get(f"/v1/allocation/{a}")["DesiredStatus"] == "run" for a in old)
        time.sleep(0.2)
    promoted_at = time.time_ns()
    out = agent.cli("job", "promote", "web").stdout  # Nomad's other way to the same write
    assert "Monitoring evaluation" in out, out
    settled(agent, "successful")
    agent.wait_terminal(old)
    killing = sorted((task_event_ns(agent, a, "Killing"), a) for a in old)
    assert killing[0][0] >= promoted_at, "an old task was stopped before the promotion"
    assert killing[1][0] >= task_event_ns(agent, killing[0][1], "Killed"), "two stopped at once"
    for alloc_id in old:
        [(_, name, _, services)] = signals(agent, alloc_id)
        assert name == "INT" and services == {"web-group": 0, "server-web": 0}, services

    # A third release whose deployment the operator fails: its canary is stopped through
    # the stop path, and the tasks of release 2 hear nothing.
    current = [a["ID"] for a in agent.allocs("web") if a["DesiredStatus"] == "run"]
    assert agent.http("PUT", "/v1/jobs", canary_job(agent, 2, "3", auto_promote=False))[0] == 200
    short = latest(agent)["ID"][:8]
    [third] = agent.wait_until("the third release's canary", lambda: canaries(agent))
    agent.running("web", 3)
    agent.cli("deployment", "fail", short)
    assert settled(agent, "failed")["TaskGroups"]["web"]["Promoted"] is False
    agent.wait_terminal([third["ID"]])
    [(_, name, _, services)] = signals(agent, third["ID"])
    assert name == "INT" and services == {"web-group": 0, "server-web": 0}, services
    assert agent.get(f"/v1/allocation/{third['ID']}")["DesiredDescription"] == (
        "alloc not needed due to job update"
    )
    for alloc_id in current:
        assert agent.get(f"/v1/allocation/{alloc_id}")["DesiredStatus"] == "run"
        assert not signals(agent, alloc_id), f"{alloc_id} of release 2 was signalled"


def test_an_old_task_that_fails_beside_a_waiting_canary_comes_back_at_its_release_and_goes_first(agent):
    """Nomad's `downgradeNonCanary`: while the canary waits for its promotion, the old
    allocation whose program died is placed again at the stable release, not the canary's;
    after the promotion it is the first stopped, through the stop path, with nothing placed
    for it (the model's part `canary-with-older-failed`)."""
    def versioned(release, min_healthy_s):
        job = canary_job(agent, 1, release, auto_promote=False, min_healthy_s=min_healthy_s)
        job["Job"]["TaskGroups"][0]["RestartPolicy"] = {
            "Attempts": 0, "Interval": 60 * SECOND, "Delay": SECOND, "Mode": "fail",
        }
        return job

    assert agent.http("PUT", "/v1/jobs", versioned("1", 1.0))[0] == 200
    [old] = [a["ID"] for a in agent.running("web", 1)]
    settled(agent, "successful")
    # The canary is healthy only after 5 s: the old program dies well before.
    assert agent.http("PUT", "/v1/jobs", versioned("2", 5.0))[0] == 200
    [canary] = agent.wait_until("the canary to be placed", lambda: canaries(agent))
    agent.running("web", 2)
    [start] = [r for r in agent.witness(old, "server") if r["event"] == "start"]
    os.kill(start["pid"], signal.SIGKILL)
    agent.wait_until("the old allocation to fail", lambda: agent.client_status(old) == "failed")
    assert not (agent.get(f"/v1/allocation/{canary['ID']}")["DeploymentStatus"] or {}).get("Healthy"), (
        "the canary was healthy before the old program died: the test proves nothing"
    )

    # The canary's health asks for an evaluation (no promotion by itself), which fills the
    # failed one's index beside it, at release 1.
    def placed_again():
        return [
            a for a in agent.allocs("web")
            if a["ID"] not in (old, canary["ID"]) and a["ClientStatus"] == "running"
        ]
    [again] = agent.wait_until("the failed one placed again", placed_again, timeout=30)
    agent.running("web", 2)
    assert again["Name"] == "web.web[0]" and again["JobVersion"] == 0, again
    assert release_of(agent, again["ID"]) == "1"
    assert latest(agent)["TaskGroups"]["web"]["Promoted"] is False

    agent.wait_until(
        "the one placed again to be healthy",
        lambda: (agent.get(f"/v1/allocation/{again['ID']}")["DeploymentStatus"] or {}).get("Healthy"),
    )
    promoted_at = time.time_ns()
    agent.cli("job", "promote", "web")
    settled(agent, "successful")
    agent.wait_terminal([again["ID"]])
    assert task_event_ns(agent, again["ID"], "Killing") >= promoted_at
    [(_, name, _, services)] = signals(agent, again["ID"])
    assert name == "INT" and services == {"web-group": 0, "server-web": 0}, services
    assert not any(a.get("PreviousAllocation") == again["ID"] for a in agent.allocs("web")), (
        "the one beside the promoted canary was replaced"
    )
    running = [
        a["ID"] for a in agent.allocs("web")
        if a["DesiredStatus"] == "run" and a["ClientStatus"] == "running"
    ]
    assert running == [canary["ID"]], running
    assert agent.client_status(old) == "failed"
    assert release_of(agent, canary["ID"]) == "2"
    # Promoted by hand: the model judges up to there.
    verdict = validate_log(agent)
    assert "judged" in verdict, verdict
