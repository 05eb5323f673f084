"""In-place restarts on real processes, judged by what the witness task experienced: when its
restart signal came, whether its services were still listed then, that it ran again with
its services back, and that a restart's `-no-shutdown-delay` is spent on that restart only.
Every agent's event log is validated against the model when the test ends."""

import json
import time

from conftest import SECOND, web_job


def restart(agent, alloc_id, body=None, query=""):
    status, answer, _ = agent.http(
        "PUT", f"/v1/client/allocation/{alloc_id}/restart{query}", body if body is not None else {}
    )
    return status, answer


def lines(agent, alloc_id, kind):
    return [line for line in agent.task_log(alloc_id, "server") if line[0] == kind]


def wait_for_second_run(agent, alloc_id):
    agent.wait_until("the task to run again", lambda: len(lines(agent, alloc_id, "started")) == 2)
    agent.wait_until(
        "its service registered again",
        lambda: len(agent.get("/v1/service/server-web")) == 1,
    )


def job_version(agent):
    job = agent.get("/v1/job/web")
    return job["Version"], job["JobModifyIndex"], job["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"]


# invariant: services_restored
def test_an_unflagged_restart_waits_the_task_delay_and_leaves_the_group_alone(agent):
    """The task's service goes first, the task's 1 s delay is waited (the group's 10 s is
    not: the group's services and delay are untouched), one SIGINT, then the task runs again
    with its service back."""
    agent.http("PUT", "/v1/jobs", web_job(agent.address, group_delay_s=10, task_delay_s=1))
    [alloc] = agent.running("web", 1)
    before = job_version(agent)
    asked = time.monotonic()
    status, answer = restart(agent, alloc["ID"])
    assert status == 200, answer
    wait_for_second_run(agent, alloc["ID"])
    [signal] = lines(agent, alloc["ID"], "signal")
    _, name, at, services = signal
    assert name == "INT"
    assert at - asked >= 1.0, "the task delay was waited"
    assert at - asked < 10.0, "the group delay was not"
    assert services == {"server-web": 0, "web-group": 1}, services
    # The allocation's task states are the client's last report, which may come a moment
    # after the witness runs again and its service is back (CI, loaded: read once, they
    # still showed no restart).
    def restarted():
        state = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]
        return state if state["Restarts"] == 1 and state["State"] == "running" else None

    state = agent.wait_until("the restart in the task's reported state", restarted)
    kinds = [e["Type"] for e in state["Events"]]
    assert kinds[-5:] == [
        "Restart Signaled", "Waiting for shutdown delay", "Terminated", "Restarting", "Started",
    ], kinds
    assert len(agent.get("/v1/service/web-group")) == 1, "the group service stayed"
    assert job_version(agent) == before, "the stored job never changes"


def test_a_flagged_restart_skips_the_delay_that_once_and_a_later_stop_waits_it(agent):
    """`alloc restart -no-shutdown-delay`: the signal comes at once (the task's 3 s delay is
    skipped), after the service is gone; the flag is spent: the unflagged stop that follows
    waits the full 3 s again."""
    agent.http("PUT", "/v1/jobs", web_job(agent.address, task_delay_s=3))
    [alloc] = agent.running("web", 1)
    before = job_version(agent)
    asked = time.monotonic()
    agent.cli("alloc", "restart", "-no-shutdown-delay", alloc["ID"][:8])
    # The CLI returns once the agent counts the restart; the witness writes its start line
    # a moment later, once the program itself runs again.
    state = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]
    assert state["Restarts"] == 1, state
    agent.wait_until("the witness to start again", lambda: len(lines(agent, alloc["ID"], "started")) == 2)
    [(_, _, at, services)] = lines(agent, alloc["ID"], "signal")
    assert at - asked < 0.3, f"a 3 s delay skipped, signalled {at - asked:.3f} s after"
    assert services["server-web"] == 0, services
    kinds = [e["Type"] for e in agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Events"]]
    assert "Skipping shutdown delay" in kinds, kinds
    wait_for_second_run(agent, alloc["ID"])
    stopped = time.monotonic()
    agent.cli("job", "stop", "web")
    agent.wait_terminal([alloc["ID"]])
    signals = lines(agent, alloc["ID"], "signal")
    assert len(signals) == 2, signals
    assert signals[1][2] - stopped >= 3.0, "the later stop waited the whole delay"
    assert job_version(agent)[2] == before[2], "the stored delay is as registered"


def test_the_query_flag_restarts_at_once_too(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address, task_delay_s=5))
    [alloc] = agent.running("web", 1)
    asked = time.monotonic()
    status, answer = restart(agent, alloc["ID"], {"TaskName": "server"}, "?no_shutdown_delay=true")
    assert status == 200, answer
    wait_for_second_run(agent, alloc["ID"])
    [(_, _, at, _)] = lines(agent, alloc["ID"], "signal")
    assert at - asked < 0.5, f"a 5 s delay skipped, signalled {at - asked:.3f} s after"


def test_a_flagged_stop_cuts_a_restarts_delay_short_and_nothing_runs_again(agent):
    """A restart waits out a 20 s delay; `job stop -no-shutdown-delay` arrives in the middle:
    the wait ends at once, the task is signalled once and is not started again."""
    agent.http("PUT", "/v1/jobs", web_job(agent.address, task_delay_s=20))
    [alloc] = agent.running("web", 1)
    status, _ = restart(agent, alloc["ID"])
    assert status == 200

    def waiting():
        events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Events"]
        return any(e["Type"] == "Waiting for shutdown delay" for e in events)

    agent.wait_until("the restart's delay to begin", waiting)
    stopped = time.monotonic()
    agent.cli("job", "stop", "-no-shutdown-delay", "web")
    agent.wait_terminal([alloc["ID"]])
    [(_, _, at, _)] = lines(agent, alloc["ID"], "signal")
    assert at - stopped < 2.0, f"a 20 s wait cut short {at - stopped:.3f} s after the stop"
    assert len(lines(agent, alloc["ID"], "started")) == 1, "not started again"
    kinds = [e["Type"] for e in agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Events"]]
    assert "Shutdown delay cut short" in kinds, kinds
    assert agent.get("/v1/service/server-web") == []


def test_a_restart_of_a_stopping_allocation_is_refused(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address, group_delay_s=5))
    [alloc] = agent.running("web", 1)
    agent.http("DELETE", "/v1/job/web")

    def stopping():
        events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Events"]
        return any(e["Type"] == "Waiting for group shutdown delay" for e in events)

    agent.wait_until("the stop to begin", stopping)
    status, answer = restart(agent, alloc["ID"])
    assert status == 400 and "stopping" in answer, (status, answer)
    done = agent.cli("alloc", "restart", alloc["ID"], check=False)
    assert done.returncode == 1 and "Failed to restart allocation" in done.stderr, done.stderr
    agent.wait_terminal([alloc["ID"]])
    assert len(lines(agent, alloc["ID"], "signal")) == 1, "only the stop's signal"
    assert len(lines(agent, alloc["ID"], "started")) == 1


def test_bad_restart_requests_are_named(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    [alloc] = agent.running("web", 1)
    cases = [
        ({"TaskName": "nope"}, 404, "nope"),
        ({"TaskName": "server", "AllTasks": True}, 400, "cannot both be set"),
        ({"AllTasks": "yes"}, 400, "AllTasks must be a boolean"),
        ({"Tasks": ["server"]}, 400, 'unknown field "Tasks"'),
    ]
    for body, code, text in cases:
        status, answer = restart(agent, alloc["ID"], body)
        assert status == code and text in answer, (body, status, answer)
    status, answer = restart(agent, "00000000-0000-0000-0000-000000000000")
    assert status == 404 and "Unknown allocation" in answer, answer
    status, answer = restart(agent, alloc["ID"], query="?no_shutdown_delay=maybe")
    assert status == 400 and "no_shutdown_delay" in answer, answer
    assert len(lines(agent, alloc["ID"], "signal")) == 0, "nothing was restarted"
    done = agent.cli("alloc", "restart", "-all-tasks", alloc["ID"], "server", check=False)
    assert done.returncode == 1 and "-all-tasks option is not allowed" in done.stderr


def test_job_restart_restarts_each_allocation_in_place_with_nomads_lines(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address, count=2, task_delay_s=2))
    allocs = agent.running("web", 2)
    asked = time.monotonic()
    done = agent.cli("job", "restart", "-yes", "-batch-size", "2", "-no-shutdown-delay", "web")
    out = done.stdout
    assert "Restarting 2 allocations" in out and "Restarting 1st batch of 2 allocations" in out, out
    assert out.count("Restarting running tasks in allocation") == 2, out
    assert out.rstrip().endswith("Job restarted successfully!"), out
    for alloc in allocs:
        [(_, _, at, services)] = lines(agent, alloc["ID"], "signal")
        assert at - asked < 1.0, "the flag reached the in-place restarts"
        assert services["server-web"] <= 1, services  # its own registration was gone
        # The command returns once the restart is asked for, not once the program has
        # started again and written so.
        agent.wait_until(
            "the task to run again", lambda: len(lines(agent, alloc["ID"], "started")) == 2
        )
    done = agent.cli("job", "restart", "web", check=False)
    assert done.returncode == 1 and "cannot be used when terminal is not interactive" in done.stderr


def test_job_restart_reschedule_waits_for_the_replacement_and_honours_the_flag(agent):
    """Nomad's `TestJobRestartCommand_shutdownDelay_reschedule` on real processes: each
    allocation is stopped and replaced; from `Killing` to `Killed` takes at least the 3 s
    delay without the flag, and well under it with."""
    agent.http("PUT", "/v1/jobs", web_job(agent.address, task_delay_s=3))
    [first] = agent.running("web", 1)
    for flag, check in [((), lambda took: took >= 3.0), (("-no-shutdown-delay",), lambda took: took < 1.0)]:
        [alloc] = [a for a in agent.running("web", 1) if a["DesiredStatus"] == "run"]
        done = agent.cli("job", "restart", "-yes", "-reschedule", *flag, "web")
        assert f'Rescheduling allocation "{alloc["ID"][:8]}"' in done.stdout, done.stdout
        assert 'is "running"' in done.stdout, done.stdout
        agent.wait_terminal([alloc["ID"]])
        events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Events"]
        killing = [e["Time"] for e in events if e["Type"] == "Killing"][-1]
        killed = [e["Time"] for e in events if e["Type"] == "Killed"][-1]
        took = (killed - killing) / SECOND
        assert check(took), (flag, took)
        replacement = agent.get(f"/v1/allocation/{alloc['ID']}")["NextAllocation"]
        assert agent.client_status(replacement) == "running"
    assert first["ID"] != replacement


def test_a_restart_whose_task_ignores_its_signal_is_sigkilled_then_runs_again(agent):
    """The task ignores SIGINT: its kill timeout (1 s) runs from the signal, SIGKILL ends
    it, and it runs again — the forced exit is a step of its own in the log, which the
    fixture validates."""
    spec = web_job(agent.address, task_delay_s=0)
    task = spec["Job"]["TaskGroups"][0]["Tasks"][0]
    task["Config"]["args"] += ["--ignore-kill-signal"]
    task["KillTimeout"] = SECOND
    agent.http("PUT", "/v1/jobs", spec)
    [alloc] = agent.running("web", 1)
    status, _ = restart(agent, alloc["ID"], {"NoShutdownDelay": True})
    assert status == 200
    wait_for_second_run(agent, alloc["ID"])
    record = agent.exit_record(alloc["ID"], "server")
    assert record is not None and record["signal"] == 9, record
    delivered = [d["signal"] for d in record["delivered"]]
    assert delivered == [2, 9], delivered
    assert len(lines(agent, alloc["ID"], "signal")) == 1, "one SIGINT, then SIGKILL"
    steps = [(e["step"], [x["effect"] for x in e.get("effects", [])])
             for e in agent.events() if e.get("alloc") == alloc["ID"]]
    names = [name for name, _ in steps]
    restart_at = names.index("RestartAlloc")
    assert names[restart_at:restart_at + 3] == ["RestartAlloc", "KillTimeout", "TaskExit"], steps
    assert steps[restart_at + 1][1] == ["SigKill"], steps
    assert "Launch" in steps[restart_at + 2][1] and "Register" in steps[restart_at + 2][1], steps


def run_exit_record(agent, alloc_id, task, run):
    """The exit record of a task's run `run` (0 the first), or None if it has none yet: the
    first run's is in the task directory, a restart's in that run's own state directory,
    `run-N-…`."""
    if run == 0:
        return agent.exit_record(alloc_id, task)
    paths = list(agent.task_dir(alloc_id, task).glob(f"run-{run}-*/exit.json"))
    assert len(paths) <= 1, paths
    text = paths[0].read_text() if paths else ""
    return json.loads(text) if text else None


# invariant: kill_timeout_respected
def test_a_restarts_kill_timeout_runs_from_its_own_signal_not_an_earlier_restarts(agent):
    """Two restarts 3 s apart, kill_timeout 12 s. The first run dies of its SIGINT at once,
    which ends its kill timeout; the second runs on after its SIGINT (its switch file is
    there by then) and gets SIGKILL no sooner than 12 s after it. The agent, too, decides on
    the kill (its `KillTimeout` step) no sooner than 12 s after the second restart — not 9 s
    after it, when the first restart's kill timeout would have come: a cancelled timer's
    entry stays queued, and the agent once fired it for the timer armed after it (c4fedda).
    The task was safe even then: its supervisor holds a SIGKILL until the timeout has run
    from the signal it delivered, so only the agent's log shows that bug."""
    spec = web_job(agent.address, task_delay_s=0)
    task = spec["Job"]["TaskGroups"][0]["Tasks"][0]
    task["Config"]["args"] += ["--ignore-kill-signal-if", "local/ignore-sigint"]
    task["KillTimeout"] = 12 * SECOND
    agent.http("PUT", "/v1/jobs", spec)
    [alloc] = agent.running("web", 1)
    status, answer = restart(agent, alloc["ID"])
    assert status == 200, answer
    # Its start record, not its service: the second restart must come well inside the
    # first's kill timeout, and the witness's handlers are set once it has written it.
    agent.wait_until("the task to run again", lambda: len(lines(agent, alloc["ID"], "started")) == 2)
    first = run_exit_record(agent, alloc["ID"], "server", 0)
    assert first["delivered"][0]["signal"] == 2 and len(first["delivered"]) == 1, first
    first_sigint = first["delivered"][0]["monotonic_ns"] / SECOND
    (agent.task_dir(alloc["ID"], "server") / "local" / "ignore-sigint").touch()
    time.sleep(max(0.0, first_sigint + 3.0 - time.monotonic()))
    status, answer = restart(agent, alloc["ID"])
    assert status == 200, answer
    agent.wait_until(
        "the task to run a third time",
        lambda: len(lines(agent, alloc["ID"], "started")) == 3,
        timeout=40,
    )
    second = run_exit_record(agent, alloc["ID"], "server", 1)
    assert second is not None and second["signal"] == 9, second
    sigint, sigkill = [d["monotonic_ns"] / SECOND for d in second["delivered"]]
    assert [d["signal"] for d in second["delivered"]] == [2, 9], second
    assert sigint < first_sigint + 12.0 - 1.0, (
        f"the second restart's signal came {sigint - first_sigint:.2f} s after the first's: "
        "not within the first's kill timeout, so this run tested nothing"
    )
    assert sigkill - sigint >= 12.0, f"SIGKILL {sigkill - sigint:.3f} s after SIGINT; kill_timeout is 12 s"
    steps = [(e["step"], e["time_ns"] / SECOND) for e in agent.events() if e.get("alloc") == alloc["ID"]]
    restarts = [at for step, at in steps if step == "RestartAlloc"]
    kills = [at for step, at in steps if step == "KillTimeout"]
    assert len(restarts) == 2 and len(kills) == 1, steps
    assert kills[0] - restarts[1] >= 12.0, (
        f"the agent's KillTimeout came {kills[0] - restarts[1]:.3f} s after the restart that "
        f"armed it; kill_timeout is 12 s: {steps}"
    )
    signals = lines(agent, alloc["ID"], "signal")
    assert [name for _, name, _, _ in signals] == ["INT", "INT"], signals
    ran_on = [r.get("ran_on", False) for r in agent.witness(alloc["ID"], "server") if r["event"] == "signal"]
    assert ran_on == [False, True], f"the first run should die of its SIGINT, the second run on: {ran_on}"


def test_a_prestart_task_that_ends_cleanly_is_not_restarted(agent):
    """A prestart task (not a sidecar) runs once to its end: exit 0 is not a crash, the
    allocation keeps running, nothing is restarted."""
    spec = web_job(agent.address)
    spec["Job"]["TaskGroups"][0]["Tasks"].append({
        "Name": "init", "Driver": "raw_exec",
        "Lifecycle": {"Hook": "prestart", "Sidecar": False},
        "Config": {"command": "/bin/sh", "args": ["-c", 'echo ran >> "$NOMAD_ALLOC_DIR/init-ran"']},
    })
    agent.http("PUT", "/v1/jobs", spec)
    [alloc] = agent.running("web", 1)

    def ended():
        state = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["init"]
        return state if state["State"] == "dead" else None

    state = agent.wait_until("the prestart task to end", ended)
    assert not state["Failed"] and state["Restarts"] == 0, state
    assert [e["Type"] for e in state["Events"]][-1] == "Not Restarting", state["Events"]
    assert (agent.alloc_dir(alloc["ID"]) / "init-ran").read_text() == "ran\n"
    assert agent.client_status(alloc["ID"]) == "running"
