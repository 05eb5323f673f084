"""Deployments as an operator drives them (issue 27): `deployment list|status|pause|resume|
fail`, `job deployments|allocs|revert|scale`, with Nomad's layouts — each rollout judged by
what the witness tasks received: an old task is signalled only through the stop path (its
services gone, its delays waited), and a paused deployment signals nothing more."""

import time

from conftest import SECOND, web_job


def rolling(agent, count, release, task_delay_s=0.5, min_healthy_s=1.0, auto_revert=False):
    job = web_job(agent.address, count=count, task_delay_s=task_delay_s)
    job["Job"]["TaskGroups"][0]["Update"] = {
        "MaxParallel": 1,
        "MinHealthyTime": int(min_healthy_s * SECOND),
        "AutoRevert": auto_revert,
    }
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = release
    return job


def signals(agent, alloc_id):
    return [line for line in agent.task_log(alloc_id, "server") if line[0] == "signal"]


def release_of(agent, alloc_id):
    [start] = [r for r in agent.witness(alloc_id, "server") if r["event"] == "start"]
    with open(f"/proc/{start['pid']}/environ", "rb") as f:
        env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    return env[b"RELEASE"].decode()


def unix_ns(rfc3339):
    """Unix nanoseconds of Go's RFC 3339 time (`2026-12-06T09:20:00.123456789Z`)."""
    import datetime
    whole, _, fraction = rfc3339.rstrip("Z").partition(".")
    seconds = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc).timestamp()
    return int(seconds) * SECOND + int((fraction or "0").ljust(9, "0")[:9])


def latest(agent, job="web"):
    return agent.get(f"/v1/job/{job}/deployment")


def settled(agent, status, job="web", timeout=60):
    return agent.wait_until(
        f"the deployment of {job} to be {status}",
        lambda: (d := latest(agent, job)) and d["Status"] == status and d,
        timeout=timeout,
    )


def test_an_agent_restart_starts_min_healthy_time_again(agent):
    # Nomad's health hook, run again for a restored allocation, makes a new tracker: the
    # allocation is healthy no sooner than min_healthy_time after the agent came back, not
    # after its tasks first ran (the stored due time was resumed before).
    min_healthy_s = 10
    job = web_job(agent.address, job_id="rehealth")
    job["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 1,
                                             "MinHealthyTime": min_healthy_s * SECOND}
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    [alloc] = agent.running("rehealth", 1)
    status = lambda: agent.get(f"/v1/allocation/{alloc['ID']}")["DeploymentStatus"] or {}
    # 3 s into min_healthy_time, the agent dies and comes back; the task runs on.
    time.sleep(3)
    assert not status().get("Healthy"), status()
    agent.kill9()
    restarted = time.time_ns()
    agent.start()
    agent.wait_until("the allocation to be healthy", lambda: status().get("Healthy"), timeout=60)
    healthy_at = unix_ns(status()["Timestamp"])
    assert healthy_at - restarted >= min_healthy_s * SECOND, (healthy_at - restarted) / SECOND
    # The same process ran through the restart: started once, never signalled.
    starts = [r for r in agent.witness(alloc["ID"], "server") if r["event"] == "start"]
    assert len(starts) == 1 and signals(agent, alloc["ID"]) == [], agent.task_log(alloc["ID"], "server")
    settled(agent, "successful", job="rehealth")


def test_a_paused_deployment_signals_nothing_more_until_it_is_resumed(agent):
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 2, "1"))[0] == 200
    old = [a["ID"] for a in agent.running("web", 2)]
    settled(agent, "successful")  # the registration's own deployment
    first = latest(agent)
    assert (first["JobVersion"], first["Status"]) == (0, "successful"), first
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 2, "2"))[0] == 200
    deployment = latest(agent)
    short = deployment["ID"][:8]
    listed = agent.cli("deployment", "list").stdout.splitlines()
    assert listed[0].split() == ["ID", "Job", "ID", "Job", "Version", "Status", "Description"]
    assert listed[1].split()[:4] == [short, "web", "1", "running"], listed
    assert agent.cli("deployment", "pause", short).stdout.strip() == f'Deployment "{short}" paused'
    status = agent.cli("deployment", "status", short).stdout
    assert "Status      = paused" in status and "Description = Deployment is paused" in status, status
    assert "Deployed\nTask Group  Desired  Placed  Healthy  Unhealthy  Progress Deadline" in status, status

    # The first batch, placed before the pause, finishes; the second old task gets nothing.
    [first] = [a for a in old if agent.get(f"/v1/allocation/{a}")["DesiredStatus"] == "stop"]
    second = next(a for a in old if a != first)
    agent.wait_terminal([first])
    replacement = agent.get(f"/v1/allocation/{first}")["NextAllocation"]
    agent.wait_until(
        "the first replacement to be healthy",
        lambda: (agent.get(f"/v1/allocation/{replacement}")["DeploymentStatus"] or {}).get("Healthy"),
    )
    ready = time.monotonic()
    # Unpaused, the second stop would begin now and signal within its 0.5 s delay (a few
    # hundred ms more on a loaded machine); 5 s is ten times that.
    while time.monotonic() - ready < 5.0:
        assert agent.get(f"/v1/allocation/{second}")["DesiredStatus"] == "run", "a paused rollout went on"
        time.sleep(0.2)
    assert not signals(agent, second)

    out = agent.cli("deployment", "resume", short).stdout
    assert out.startswith(f'Deployment "{short}" resumed'), out
    agent.wait_terminal([second])
    [(_, name, _, services)] = signals(agent, second)
    assert name == "INT" and services == {"web-group": 0, "server-web": 0}, services
    settled(agent, "successful")
    history = agent.cli("job", "deployments", "web").stdout.splitlines()
    assert history[1].split()[:4] == [short, "web", "1", "successful"], history
    allocs = agent.cli("job", "allocs", "web").stdout.splitlines()
    assert allocs[0].split() == [
        "ID", "Node", "ID", "Task", "Group", "Version", "Desired", "Status", "Created", "Modified"
    ], allocs
    assert len(allocs) == 5 and all(line.endswith("ago") for line in allocs[1:]), allocs
    assert agent.get("/v1/job/web/versions")["Versions"][0]["Stable"] is True
    status = agent.cli("job", "status", "web").stdout
    assert f"Latest Deployment\nID          = {short}\nStatus      = successful\n" in status, status


def test_revert_rolls_the_old_spec_out_through_the_stop_path(agent):
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 1, "1"))[0] == 200
    agent.running("web", 1)
    settled(agent, "successful")  # the registration's own deployment
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 1, "2"))[0] == 200
    settled(agent, "successful")
    [current] = [a["ID"] for a in agent.running("web", 1) if a["DesiredStatus"] == "run"]
    assert release_of(agent, current) == "2"

    asked = time.monotonic()
    out = agent.cli("job", "revert", "web", "0").stdout
    assert "Monitoring evaluation" in out, out
    stored = agent.get("/v1/job/web")
    assert stored["Version"] == 2
    assert stored["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] == "1"
    agent.wait_terminal([current])
    [(_, _, at, services)] = signals(agent, current)
    assert services == {"web-group": 0, "server-web": 0}, services
    assert at - asked >= 0.5, f"the revert's stop signalled {at - asked:.3f}s after it, inside its delay"
    [back] = [a["ID"] for a in agent.running("web", 1) if a["DesiredStatus"] == "run"]
    assert release_of(agent, back) == "1"
    assert settled(agent, "successful")["JobVersion"] == 2

    history = agent.cli("job", "history", "-p", "web").stdout
    newest = history.split("\n\n")[0]
    assert newest.splitlines()[:2] == ["Version     = 2", "Stable      = true"], history
    assert '+/- Env[RELEASE]: "2" => "1"' in newest, history
    assert "Diff" not in history.split("\n\n")[-1], "the oldest version has nothing to differ from"
    refused = agent.cli("job", "revert", "web", "2", check=False)
    assert refused.returncode == 1 and "can't revert to current version" in refused.stderr, refused
    status, body, _ = agent.http("PUT", "/v1/job/web/revert", {"JobID": "web", "JobVersion": 9})
    assert status == 404 and 'job "web" in namespace "default" at version 9 not found' in body, (status, body)


def test_a_failed_deployment_with_auto_revert_goes_back_to_the_stable_version(agent):
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 1, "1", auto_revert=True))[0] == 200
    agent.running("web", 1)
    settled(agent, "successful")  # the registration's own deployment
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 1, "2", auto_revert=True))[0] == 200
    settled(agent, "successful")
    # A third version, failed by the operator at once: back to version 1's spec.
    slow = rolling(agent, 1, "3", min_healthy_s=30.0, auto_revert=True)
    assert agent.http("PUT", "/v1/jobs", slow)[0] == 200
    short = latest(agent)["ID"][:8]
    out = agent.cli("deployment", "fail", short).stdout
    assert out.startswith(f'Deployment "{short}" failed. Auto-reverted to job version 1.'), out
    deployments = agent.get("/v1/job/web/deployments")
    assert deployments[1]["StatusDescription"] == "Deployment marked as failed - rolling back to job version 1"
    stored = agent.get("/v1/job/web")
    assert (stored["Version"], stored["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"]) == (3, "2")
    settled(agent, "successful")
    [back] = [a["ID"] for a in agent.running("web", 1) if a["DesiredStatus"] == "run"]
    assert release_of(agent, back) == "2"
    refused = agent.cli("deployment", "fail", short, check=False)
    assert refused.returncode == 1 and "can't fail terminal deployment" in refused.stderr, refused


def test_scale_changes_a_count_and_waits_for_no_deployment(agent):
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 1, "1"))[0] == 200
    [first] = agent.running("web", 1)
    settled(agent, "successful")  # the registration's own deployment
    out = agent.cli("job", "scale", "web", "3").stdout
    assert "Monitoring evaluation" in out, out
    agent.running("web", 3)
    # A count's change places allocations: a deployment of its own, which must end before
    # the next change (Nomad refuses a scale during one).
    settled(agent, "successful")
    status = agent.get("/v1/job/web/scale")
    assert status["TaskGroups"]["web"]["Desired"] == 3 and status["TaskGroups"]["web"]["Placed"] == 3
    assert not signals(agent, first["ID"]), "a count change replaced nothing"
    agent.cli("job", "scale", "web", "web", "1")
    agent.wait_until("two allocations stopped", lambda: agent.get("/v1/job/web/scale")["TaskGroups"]["web"]["Placed"] == 1)
    refused = agent.cli("job", "scale", "web", "api", "2", check=False)
    assert refused.returncode == 1 and "Group api not found within job" in refused.stderr, refused
    # During a deployment, refused as Nomad refuses it.
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 1, "2", min_healthy_s=30.0))[0] == 200
    status, body, _ = agent.http("PUT", "/v1/job/web/scale", {"Count": 2, "Target": {"Group": "web"}})
    assert status == 400 and "job scaling blocked due to active deployment" in body, (status, body)
    agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")


def test_a_nomad_command_this_agent_does_not_serve_says_so(agent):
    for args, named in [(("var", "list"), "var"), (("job", "dispatch", "web"), "job dispatch")]:
        done = agent.cli(*args, check=False)
        assert done.returncode == 1, done
        assert f'"nomad {named}" is not supported by this agent' in done.stderr, done.stderr
        assert "supervise" not in done.stderr


ROLLING_HCL = """job "hcl" {
  group "g" {
    update {
      max_parallel     = 1
      min_healthy_time = "1s"
    }
    task "server" {
      driver         = "raw_exec"
      shutdown_delay = "500ms"
      config {
        command = "%(witness)s"
      }
      env { RELEASE = "%(release)s" }
    }
  }
}
"""


def test_job_run_of_a_changed_spec_monitors_its_deployment_to_the_end(agent, tmp_path):
    from conftest import WITNESS

    spec = tmp_path / "hcl.nomad.hcl"
    spec.write_text(ROLLING_HCL % {"witness": WITNESS, "release": "1"})
    out = agent.cli("job", "run", str(spec)).stdout
    # The registration's own deployment, followed to its success (as Nomad's job run).
    assert "Monitoring deployment" in out, out
    assert latest(agent, "hcl")["Status"] == "successful"
    [old] = agent.running("hcl", 1)
    spec.write_text(ROLLING_HCL % {"witness": WITNESS, "release": "2"})
    asked = time.monotonic()
    done = agent.cli("job", "run", str(spec))
    # The command returns once the rollout is over: the old task was signalled after its
    # delay, and the deployment's last status is printed.
    assert agent.client_status(old["ID"]) in ("complete", "failed")
    [(_, name, at, _)] = signals(agent, old["ID"])
    assert at - asked >= 0.5, f"signalled {at - asked:.3f}s after the run, inside its delay"
    deployment = latest(agent, "hcl")
    assert deployment["Status"] == "successful"
    assert f'Monitoring deployment "{deployment["ID"][:8]}"' in done.stdout, done.stdout
    statuses = [line.split("=", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("Status      =")]
    assert statuses and statuses[-1] == "successful", done.stdout
    header, row = done.stdout.rstrip().splitlines()[-2:]
    assert header == "Task Group  Desired  Placed  Healthy  Unhealthy  Progress Deadline", done.stdout
    # The progress deadline: 10 minutes (the default) after the replacement turned healthy.
    assert row.split()[:5] == ["g", "1", "1", "1", "0"], done.stdout
    assert unix_ns(row.split()[5]) > time.time_ns() + 9 * 60 * SECOND, row


def test_a_replacement_never_healthy_by_its_healthy_deadline_fails_the_deployment_and_reverts(agent):
    def versioned(release, **update):
        job = rolling(agent, 2, release, auto_revert=True)
        job["Job"]["TaskGroups"][0]["Update"].update(update)
        return job

    assert agent.http("PUT", "/v1/jobs", versioned("1"))[0] == 200
    agent.running("web", 2)
    settled(agent, "successful")  # the registration's own deployment
    assert agent.http("PUT", "/v1/jobs", versioned("2"))[0] == 200
    settled(agent, "successful")
    good = [a["ID"] for a in agent.running("web", 2) if a["DesiredStatus"] == "run"]

    # Release 3 (job version 2): its task exits after 0.3 s and is restarted again and again (mode "delay"):
    # it never runs the 1 s its health needs, and never fails for good either.
    bad = versioned("3", HealthyDeadline=3 * SECOND)
    group = bad["Job"]["TaskGroups"][0]
    group["RestartPolicy"] = {"Attempts": 1000, "Interval": 3600 * SECOND,
                              "Delay": SECOND // 5, "Mode": "delay"}
    group["Tasks"][0]["Config"] = {"command": "/bin/sleep", "args": ["0.3"]}
    assert agent.http("PUT", "/v1/jobs", bad)[0] == 200
    deployment_id = latest(agent)["ID"]
    failed = agent.wait_until(
        "release 3's deployment to fail",
        lambda: (d := agent.get(f"/v1/deployment/{deployment_id}"))["Status"] == "failed" and d,
        timeout=30,
    )
    assert failed["StatusDescription"] == (
        "Failed due to unhealthy allocations - rolling back to job version 1"), failed
    assert failed["TaskGroups"]["web"]["UnhealthyAllocs"] == 1, failed
    [replacement] = agent.get(f"/v1/deployment/allocations/{deployment_id}")
    record = agent.get(f"/v1/allocation/{replacement['ID']}")
    assert record["DeploymentStatus"]["Healthy"] is False, record["DeploymentStatus"]
    # Unhealthy at its deadline, not before: 3 s after it was placed (and well before 30).
    waited = (unix_ns(record["DeploymentStatus"]["Timestamp"]) - replacement["CreateTime"]) / SECOND
    assert 3.0 <= waited < 30, f"declared unhealthy {waited:.2f}s after placement"
    assert record["TaskStates"]["server"]["Restarts"] >= 2, "the task really kept restarting"

    # max_parallel = 1: one good allocation went through the stop path, the other was never
    # signalled; the revert brings release 2's spec (version 1) back and it rolls out.
    signalled = [alloc for alloc in good if signals(agent, alloc)]
    assert len(signalled) == 1, f"{len(signalled)} of the good allocations were stopped"
    stored = agent.get("/v1/job/web")
    assert stored["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] == "2", "reverted to release 2's spec"
    settled(agent, "successful", timeout=60)
    releases = sorted(release_of(agent, a["ID"]) for a in agent.running("web", 2)
                      if a["DesiredStatus"] == "run")
    assert releases == ["2", "2"], releases


def test_a_deployment_without_progress_by_its_progress_deadline_fails_and_replaces_nothing_more(agent):
    def versioned(release):
        job = rolling(agent, 2, release, task_delay_s=8.0, min_healthy_s=0.5)
        job["Job"]["TaskGroups"][0]["Update"].update(
            HealthyDeadline=2 * SECOND, ProgressDeadline=3 * SECOND)
        return job

    assert agent.http("PUT", "/v1/jobs", versioned("1"))[0] == 200
    old = [a["ID"] for a in agent.running("web", 2)]
    settled(agent, "successful")  # the registration's own deployment
    # The first batch stops one old allocation, whose task waits its 8 s delay; its
    # replacement turns healthy at once. The next batch waits for that stop (this agent's
    # rule), and 3 s after the last progress the deployment fails.
    assert agent.http("PUT", "/v1/jobs", versioned("2"))[0] == 200
    deployment_id = latest(agent)["ID"]
    failed = agent.wait_until(
        "the deployment to fail",
        lambda: (d := agent.get(f"/v1/deployment/{deployment_id}"))["Status"] == "failed" and d,
        timeout=20,
    )
    assert failed["StatusDescription"] == "Failed due to progress deadline", failed
    [replacement] = agent.get(f"/v1/deployment/allocations/{deployment_id}")
    healthy_at = unix_ns(agent.get(f"/v1/allocation/{replacement['ID']}")["DeploymentStatus"]["Timestamp"])
    waited = (failed["ModifyTime"] - healthy_at) / SECOND
    assert 3.0 <= waited < 30, f"failed {waited:.2f}s after the last progress"

    # The stop already begun goes on through its delay; the other old task is never
    # signalled: a failed deployment replaces nothing more.
    stopped = [alloc for alloc in old if signals(agent, alloc)]
    assert len(stopped) <= 1, stopped
    agent.wait_until("the first batch's stop to end", lambda: any(
        agent.client_status(alloc) == "complete" for alloc in old), timeout=20)
    [kept] = [alloc for alloc in old if agent.client_status(alloc) == "running"]
    # Every evaluation since (the end of that stop asks for one) has been processed.
    agent.wait_until("the job's evaluations to be processed", lambda: all(
        e["Status"] != "pending" for e in agent.get("/v1/job/web/evaluations")))
    record = agent.get(f"/v1/allocation/{kept}")
    assert record["DesiredStatus"] == "run", "the failed deployment stopped another allocation"
    assert not signals(agent, kept)
    assert latest(agent)["ID"] == deployment_id, "no auto_revert: no new deployment"
