"""A system job's deployments (issue 27), as Nomad 1.11's system scheduler has them: its
`max_parallel` is per group, so on this agent's one node each group's one allocation is
replaced at once, the groups together, each through the stop path, and the deployment
watches the new ones' health; a `canary` (a percentage) takes the place of the allocation
it updates, which is stopped for it through the stop path, and the deployment waits for a
promotion; an operator's flagged stop during the deployment skips every delay. Judged by
what the witness tasks received."""

import time

from conftest import SECOND, model_job, task, validate_log
from test_canaries import task_event_ns
from test_deployments import release_of, settled, signals

JOB = "agents"


def system_job(agent, release, delay_s=1.0, canary_b=0, auto_promote=False, min_healthy_s=1.0):
    """Groups `a` and `b`, each a witness `server` task with a service and `delay_s`."""

    def group(name):
        service = f"{name}-svc"
        spec = task("server", agent.address, services=[service], watch=[service], delay_s=delay_s)
        spec["Env"]["RELEASE"] = release
        return {"Name": name, "Tasks": [spec]}

    job = {
        "ID": JOB,
        "Type": "system",
        "Update": {"MaxParallel": 1, "MinHealthyTime": int(min_healthy_s * SECOND)},
        "TaskGroups": [group("a"), group("b")],
    }
    if canary_b:
        job["TaskGroups"][1]["Update"] = {"Canary": canary_b, "AutoPromote": auto_promote}
    return {"Job": job}


def by_group(allocs):
    return sorted(allocs, key=lambda a: a["TaskGroup"])


def live(agent):
    return by_group(a for a in agent.allocs(JOB) if a["DesiredStatus"] == "run")


def registered(agent, release, **kwargs):
    assert agent.http("PUT", "/v1/jobs", system_job(agent, release, **kwargs))[0] == 200


def test_an_update_replaces_both_groups_together_each_through_the_stop_path(agent):
    registered(agent, "1")
    old = [a["ID"] for a in by_group(agent.running(JOB, 2))]
    first = settled(agent, "successful", job=JOB)
    assert sorted(first["TaskGroups"]) == ["a", "b"], first

    registered(agent, "2")
    # Both groups' old tasks begin stopping together: max_parallel = 1 is per group.
    agent.wait_terminal(old)
    killing = sorted(task_event_ns(agent, a, "Killing") for a in old)
    killed_first = min(task_event_ns(agent, a, "Killed") for a in old)
    assert killing[1] < killed_first, "the second group waited for the first"
    for alloc_id in old:
        [(_, name, at, services)] = signals(agent, alloc_id)
        # Its service gone, its 1 s waited (Killing is the delay's start).
        assert name == "INT" and services == {f"{agent.get(f'/v1/allocation/{alloc_id}')['TaskGroup']}-svc": 0}
        assert task_event_ns(agent, alloc_id, "Killed") - task_event_ns(agent, alloc_id, "Killing") >= SECOND
    deployment = settled(agent, "successful", job=JOB)
    assert deployment["JobVersion"] == 1 and deployment["ID"] != first["ID"], deployment
    for group in ("a", "b"):
        state = deployment["TaskGroups"][group]
        assert (state["DesiredTotal"], state["HealthyAllocs"]) == (1, 1), state
    new = live(agent)
    assert [agent.get(f"/v1/allocation/{a['ID']}")["PreviousAllocation"] for a in new] == old
    assert all(release_of(agent, a["ID"]) == "2" for a in new)
    assert agent.get(f"/v1/job/{JOB}")["Stable"] is True


def test_a_canary_replaces_its_allocation_through_the_stop_path_and_waits_for_the_promotion(agent):
    registered(agent, "1", canary_b=50)
    old = [a["ID"] for a in by_group(agent.running(JOB, 2))]
    settled(agent, "successful", job=JOB)

    registered(agent, "2", canary_b=50)
    agent.wait_terminal(old)
    [(_, name, _, services)] = signals(agent, old[1])
    assert name == "INT" and services == {"b-svc": 0}, services
    _, canary = by_group(agent.running(JOB, 2))
    assert canary["TaskGroup"] == "b" and canary["DeploymentStatus"]["Canary"] is True, canary
    assert release_of(agent, canary["ID"]) == "2"
    deployment = agent.get(f"/v1/job/{JOB}/deployment")
    assert deployment["StatusDescription"] == "Deployment is running but requires manual promotion"
    assert deployment["TaskGroups"]["b"]["DesiredCanaries"] == 1
    agent.wait_until(
        "the canary to be healthy",
        lambda: (agent.get(f"/v1/allocation/{canary['ID']}")["DeploymentStatus"] or {}).get("Healthy"),
    )
    assert agent.get(f"/v1/job/{JOB}/deployment")["Status"] == "running", "done before the promotion"

    out = agent.cli("deployment", "promote", deployment["ID"][:8]).stdout
    assert "Monitoring evaluation" in out, out
    settled(agent, "successful", job=JOB)
    promoted = agent.get(f"/v1/allocation/{canary['ID']}")
    assert promoted["DesiredStatus"] == "run" and promoted["DeploymentStatus"]["Canary"] is False
    assert [a["ID"] for a in live(agent)][1] == canary["ID"], "the promoted canary is replaced"


def test_a_flagged_stop_during_a_system_deployment_skips_every_delay(agent):
    registered(agent, "1", delay_s=30.0)
    agent.running(JOB, 2)
    settled(agent, "successful", job=JOB)

    registered(agent, "2", delay_s=30.0)
    spec = agent.get(f"/v1/job/{JOB}")
    old_stopping = [a["ID"] for a in agent.allocs(JOB) if a["DesiredStatus"] == "stop"]
    assert len(old_stopping) == 2
    agent.wait_until(
        "the old tasks to begin their 30 s",
        lambda: all(task_event_ns_or_none(agent, a, "Killing") for a in old_stopping),
    )
    asked = time.monotonic()
    out = agent.cli("job", "stop", "-no-shutdown-delay", JOB).stdout
    assert "Monitoring evaluation" in out, out
    everything = [a["ID"] for a in agent.allocs(JOB)]
    agent.wait_terminal(everything, timeout=20)
    for alloc_id in everything:
        for line in signals(agent, alloc_id):
            assert line[1] == "INT" and line[2] - asked < 5.0, (alloc_id, line)
    assert all(signals(agent, a) for a in old_stopping)
    assert agent.get(f"/v1/job/{JOB}/deployment")["Status"] == "cancelled"
    stopped = agent.get(f"/v1/job/{JOB}")
    assert stopped["Stop"] is True
    # The stored spec is version 2's, untouched by the flag.
    for field in ("TaskGroups", "Update", "Type"):
        assert stopped[field] == spec[field], field


def task_event_ns_or_none(agent, alloc_id, kind):
    alloc = agent.get(f"/v1/allocation/{alloc_id}")
    return any(e["Type"] == kind for e in (alloc["TaskStates"].get("server") or {}).get("Events", []))


def test_the_models_system_canary_part_on_real_processes_replays_against_the_model(agent):
    """`standard/system-canary-then-flagged-stop` on witness tasks: the update's canary
    waits for the first allocation's health (10 s), stops it for its place, and a flagged
    stop cuts its 30 s + 20 s short; the agent's event log replays against the model, every
    step judged."""
    body = model_job(agent, "standard/system-canary-then-flagged-stop")
    assert body["Job"]["Type"] == "system"
    assert agent.http("PUT", "/v1/jobs", body)[0] == 200
    [old] = agent.running("web", 1)
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "2"
    assert agent.http("PUT", "/v1/jobs", body)[0] == 200

    def canary():
        allocs = agent.allocs("web")
        placed = [a for a in allocs if (a.get("DeploymentStatus") or {}).get("Canary")]
        stopping = agent.get(f"/v1/allocation/{old['ID']}")["DesiredStatus"] == "stop"
        return placed if placed and stopping else None

    [placed] = agent.wait_until("the canary in the old one's place", canary, timeout=40)
    asked = time.monotonic()
    agent.cli("job", "stop", "-no-shutdown-delay", "web")
    agent.wait_terminal([old["ID"], placed["ID"]])
    [(_, name, at, _)] = signals_of(agent, old["ID"])
    assert at - asked < 5.0, "the old one's delays were not cut short"
    report = validate_log(agent, require_full=True)
    assert "judged" in report, report


def signals_of(agent, alloc_id):
    return [line for line in agent.task_log(alloc_id, "app") if line[0] == "signal"]
