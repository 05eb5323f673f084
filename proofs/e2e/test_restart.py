"""A `kill -9` of the agent in the middle of a stop: nothing stored is lost, the tasks are
reattached, the stop completes with the flag honoured, and no hook's effect happens twice."""

import http.client
import time

from conftest import model_job, validate_log

FAST = 10.0


def snapshot(agent):
    jobs = {j["ID"]: agent.get(f"/v1/job/{j['ID']}")["Version"] for j in agent.get("/v1/jobs")}
    allocs = {a["ID"]: (a["DesiredStatus"], a["DesiredTransition"]) for a in agent.get("/v1/allocations")}
    evals = {e["ID"]: e["Status"] for e in agent.get("/v1/evaluations")}
    return jobs, allocs, evals


def test_kill_9_during_the_group_delay_then_a_flagged_stop(agent):
    agent.http("POST", "/v1/jobs", model_job(agent, "small/count1-budget2"))
    [alloc] = agent.running("web", 1)
    alloc_id = alloc["ID"]
    status, answer, _ = agent.http("DELETE", "/v1/job/web")
    assert status == 200 and answer["EvalID"]

    def waiting():
        events = agent.get(f"/v1/allocation/{alloc_id}")["TaskStates"]["app"]["Events"]
        return any(e["Type"] == "Waiting for group shutdown delay" for e in events)

    agent.wait_until("the group delay to begin", waiting)
    # The group services are deregistered before the delay starts.
    assert agent.get("/v1/service/web") == []
    before = snapshot(agent)
    agent.kill9()
    agent.start()

    assert snapshot(agent) == before, "the restarted agent lost or changed stored records"
    record = agent.get(f"/v1/allocation/{alloc_id}")
    assert record["ClientStatus"] == "running", "the stop resumes where it was"
    assert agent.signalled_at(alloc_id, "app") is None

    requested = time.monotonic()
    out = agent.cli("job", "stop", "-no-shutdown-delay", "web").stdout
    assert "Stop complete" in out, out
    for task in ("app", "proxy"):
        lines = [line[0] for line in agent.task_log(alloc_id, task)]
        # One start (reattached, not restarted) and one signal, sent by the new agent.
        assert lines == ["started", "signal", "exit"], (task, lines)
        assert agent.signalled_at(alloc_id, task) - requested < FAST
    assert [line[0] for line in agent.task_log(alloc_id, "flush")] == ["started", "exit"], "poststop ran once"
    record = agent.get(f"/v1/allocation/{alloc_id}")
    terminated = [e for e in record["TaskStates"]["app"]["Events"] if e["Type"] == "Terminated"]
    assert terminated and terminated[0]["DisplayMessage"] == "Exit Code: 130, Signal: 2", "the exit status survived"
    types = [e["Type"] for e in record["TaskStates"]["app"]["Events"]]
    assert "Group shutdown delay cut short" in types, types

    steps = [e["step"] for e in agent.events() if e.get("alloc") == alloc_id]
    assert steps.count("GroupPreKill") == 1, "the group pre-kill hooks ran once"
    assert steps.count("TaskPreKill") == 2 and steps.count("PoststopStart") == 1
    assert "ClientRestart" in [e["step"] for e in agent.events()]
    validate_log(agent, require_full=True)


def test_kill_9_at_the_kill_signal_redoes_what_the_store_lost(agent, tmp_path):
    """The agent dies (kill -9) the moment a flagged stop's signal reaches a task: the task's
    trap kills it. The store may have lost the pull and the steps (runner progress is synced
    at most 20 ms late), not the stop (its plan is durable with the request); the restored
    runner applies the stop before its task's exit and redoes them. The stop completes, no
    task is started twice, the services stay gone, the poststop task runs once, and the
    agent's log, rewritten from the store and continued, is still a valid run of the
    model."""
    flag = tmp_path / "killed-once"
    job = model_job(agent, "small/count1-budget2", ["--crash-agent", f"{agent.proc.pid}:{flag}"])
    agent.http("POST", "/v1/jobs", job)
    [alloc] = agent.running("web", 1)
    alloc_id = alloc["ID"]
    requested = time.monotonic()
    try:
        status, _, _ = agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
        assert status == 200
    except (http.client.RemoteDisconnected, ConnectionResetError):
        # The stop is durable before anything acts on it, so the task's signal — and the
        # agent's death with it — may come before the answer is written: what follows
        # checks that the stop survived.
        pass
    agent.proc.wait(timeout=20)
    assert flag.exists(), "a task killed the agent"
    agent.start()

    agent.wait_terminal([alloc_id])
    for task in ("app", "proxy"):
        lines = [line[0] for line in agent.task_log(alloc_id, task)]
        assert lines.count("started") == 1, (task, lines)
        assert "signal" in lines, (task, lines)
        assert agent.signalled_at(alloc_id, task) - requested < FAST
    assert [line[0] for line in agent.task_log(alloc_id, "flush")] == ["started", "exit"], "poststop ran once"
    assert agent.get("/v1/service/web") == []
    assert "ClientRestart" in [e["step"] for e in agent.events()]
    validate_log(agent, require_full=True)


def test_kill_9_before_the_stop_is_pulled_loses_nothing(agent):
    """Registered jobs, allocations and evaluations survive a kill -9 with no stop running;
    a stop issued after the restart finds the same tasks."""
    agent.http("POST", "/v1/jobs", model_job(agent, "small/count1-budget2"))
    [alloc] = agent.running("web", 1)
    before = snapshot(agent)
    agent.kill9()
    agent.start()
    assert snapshot(agent) == before
    agent.cli("job", "stop", "-no-shutdown-delay", "web")
    assert [line[0] for line in agent.task_log(alloc["ID"], "app")] == ["started", "signal", "exit"]
    validate_log(agent, require_full=True)


def test_a_restart_resumes_a_delay_where_it_was(agent):
    """kill -9 five seconds into an 8 s group delay: the restarted agent waits out the rest
    (3 s), not the whole delay again (which would make it 13 s or more)."""
    from conftest import web_job

    agent.http("PUT", "/v1/jobs", web_job(agent.address, group_delay_s=8))
    [alloc] = agent.running("web", 1)
    agent.http("DELETE", "/v1/job/web")

    def wait_began():
        events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]["Events"]
        began = [e["Time"] for e in events if e["Type"] == "Waiting for group shutdown delay"]
        return began[0] / 1e9 if began else None

    began = agent.wait_until("the group delay to begin", wait_began)
    time.sleep(max(0.0, began + 5 - time.time()))
    agent.kill9()
    agent.start()
    agent.wait_until("the task's signal", lambda: agent.signalled_at(alloc["ID"], "server"), 30)
    # The event's time is Unix time, the witness's CLOCK_MONOTONIC.
    began_monotonic = began - (time.time() - time.monotonic())
    waited = agent.signalled_at(alloc["ID"], "server") - began_monotonic
    assert 8 <= waited < 11, f"signalled {waited:.2f}s after the 8 s delay began"
    agent.wait_terminal([alloc["ID"]])


def test_kill_9_as_a_task_starts_keeps_the_placement_it_started_from(agent, tmp_path):
    """The agent dies (kill -9) the moment its first task starts: the task's first act is
    to kill it. The placement the task was launched from is durable (it was committed with
    the registration), so the restarted agent has the same allocation and reattaches to the
    same task process; it places no second allocation beside an orphaned task."""
    flag = tmp_path / "killed-once"
    script = (
        'echo "started $(date +%s.%N)" >> "$NOMAD_ALLOC_DIR/t.log"; '
        'if [ ! -e "$FLAG" ]; then : > "$FLAG"; kill -9 "$AGENT_PID"; fi; '
        "exec sleep 300"
    )
    job = {
        "Job": {
            "ID": "crash",
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "raw_exec",
                            "Config": {"command": "/bin/sh", "args": ["-c", script]},
                            "Env": {"FLAG": str(flag), "AGENT_PID": str(agent.proc.pid)},
                        }
                    ],
                }
            ],
        }
    }
    status, _, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200
    agent.proc.wait(timeout=20)
    assert flag.exists(), "the task killed the agent"
    agent.start()

    [alloc] = agent.running("crash", 1)
    assert [a["ID"] for a in agent.allocs("crash")] == [alloc["ID"]], "no second placement"
    started = sorted(p.parent.name for p in (agent.data_dir / "alloc").glob("*/t.log"))
    assert started == [alloc["ID"]], "the only task ever started is the allocation's"
    lines = (agent.alloc_dir(alloc["ID"]) / "t.log").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["started"], "reattached, not started again"


def test_a_lost_state_file_is_refused_never_a_fresh_start(agent):
    """A missing or empty `state.redb` beside the task directories of an earlier agent
    (issue 12: an empty one started an empty agent without a word, its tasks running on as
    orphans): the agent refuses to start, says why and how to start fresh, and touches
    nothing; with the state back, it reattaches as usual."""
    import shutil
    import subprocess
    from conftest import QUIESCE, clean_env, web_job
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    [alloc] = agent.running("web", 1)
    agent.kill9()
    state = agent.data_dir / "state.redb"
    kept = agent.data_dir.parent / "state.redb.kept"
    shutil.copy(state, kept)
    for lose, word in [(lambda: state.write_bytes(b""), "empty"), (state.unlink, "missing")]:
        lose()
        tried = subprocess.run(
            [QUIESCE, "agent", "-dev", "-data-dir", str(agent.data_dir), "-port", "0"],
            capture_output=True, text=True, timeout=30, env=clean_env())
        assert tried.returncode != 0, tried.stdout
        assert f"state.redb is {word}" in tried.stderr and "1 allocation directory" in tried.stderr, tried.stderr
        assert "To start fresh" in tried.stderr and "-data-dir" in tried.stderr, tried.stderr
        # Nothing was created or written in its place.
        assert (state.stat().st_size == 0) if word == "empty" else not state.exists()
    shutil.copy(kept, state)
    agent.start()
    assert [a["ID"] for a in agent.running("web", 1)] == [alloc["ID"]], "reattached, not placed again"
    assert "Stop complete" in agent.cli("job", "stop", "-no-shutdown-delay", "web").stdout
