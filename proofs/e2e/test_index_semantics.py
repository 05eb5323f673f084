"""Index and time semantics as third-party clients rely on them (issue 25, builds 1 and 2):
a job's status derived from its allocations moves its `ModifyIndex` in the write that
changes it, so a client that waits for a stopped job to be `dead` with blocking queries
wakes with it — and the job says `dead` only once its tasks have really ended; and every
record carries Nomad's timestamps, real ones, in Nomad's encodings."""

import datetime
import json
import threading
import time
import urllib.request

import pytest

from conftest import web_job

FAST = 10.0


def blocking(agent, path, index, wait="20s"):
    """One blocking query: (body, X-Nomad-Index, seconds it took)."""
    started = time.monotonic()
    status, body, headers = agent.http("GET", f"{path}?index={index}&wait={wait}")
    assert status == 200, (path, status, body)
    return body, int(headers["X-Nomad-Index"]), time.monotonic() - started


# invariant: job_dead_only_when_tasks_ended
@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "unflagged"])
def test_a_blocking_query_on_a_stopped_job_wakes_with_dead_once_its_tasks_ended(agent, flagged):
    agent.http("PUT", "/v1/jobs", web_job(agent.address, count=2, group_delay_s=1.0,
                                          task_delay_s=1.0))
    allocs = agent.running("web", 2)
    _, job, headers = agent.http("GET", "/v1/job/web")
    assert job["Status"] == "running"
    index = int(headers["X-Nomad-Index"])
    stream = JobEvents(agent, index)
    requested = time.monotonic()
    query = "?no_shutdown_delay=true" if flagged else ""
    status, stop, _ = agent.http("DELETE", f"/v1/job/web{query}")
    assert status == 200, stop
    # A client's "stop and watch": blocking queries until the job says dead.
    seen = []
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"never dead: {seen}"
        job, index, took = blocking(agent, "/v1/job/web", index)
        seen.append((job["Status"], job["ModifyIndex"], index, round(took, 2)))
        if job["Status"] == "dead":
            break
        # Each answer woke on a change, not at the end of its wait.
        assert took < 15, seen
    dead_at = time.monotonic()
    # What the processes experienced: by the time the job said dead, every task had been
    # signalled once with its kill signal, and its supervisor had reaped it; the poststop
    # task had run and ended.
    for alloc in allocs:
        signals = [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"]
        assert [line[1] for line in signals] == ["INT"], signals
        record = agent.exit_record(alloc["ID"], "server")
        assert record and [d["forced"] for d in record["delivered"]] == [False], record
        cleanup = [line[0] for line in agent.task_log(alloc["ID"], "cleanup")]
        assert cleanup == ["started", "exit"], cleanup
        waited = signals[0][2] - requested
        if flagged:
            assert waited < FAST, f"signalled {waited:.2f} s after a flagged stop"
        else:
            assert waited >= 2.0, f"signalled {waited:.2f} s after the stop; delays add up to 2 s"
    # The dead job carries the index of the write that made it dead, past the stop's own.
    assert job["ModifyIndex"] > stop["Index"], (job["ModifyIndex"], stop)
    assert job["JobModifyIndex"] == stop["JobModifyIndex"], "only the status changed"
    statuses = [status for status, *_ in seen]
    assert statuses[-1] == "dead" and set(statuses) <= {"running", "dead"}, seen
    # The summary moved with it.
    summary = agent.get("/v1/job/web/summary")
    assert summary["Summary"]["web"]["Complete"] == 2, summary
    assert summary["ModifyIndex"] >= job["ModifyIndex"], (summary, job)
    # The jobs list shows it too, at an index at least the job's.
    _, listed, headers = agent.http("GET", "/v1/jobs")
    assert [j["Status"] for j in listed if j["ID"] == "web"] == ["dead"]
    assert int(headers["X-Nomad-Index"]) >= job["ModifyIndex"]
    # The event stream, open since before the stop, published the job as that write left
    # it: dead, at its index.
    events = stream.until_dead()
    dead = [e for e in events if e["Payload"]["Job"]["Status"] == "dead"]
    assert dead and dead[0]["Index"] == job["ModifyIndex"], [
        (e["Type"], e["Index"], e["Payload"]["Job"]["Status"]) for e in events]
    assert dead[0]["Payload"]["Job"]["ModifyIndex"] == job["ModifyIndex"]
    print(f"\n{'flagged' if flagged else 'unflagged'}: dead "
          f"{dead_at - requested:.2f} s after the stop, {len(seen)} blocking answers {seen}")


class JobEvents:
    """The Job events from an index on, read by a thread from a stream opened before the
    stop (a replay opened later shows each job as it is now, not as its write left it)."""

    def __init__(self, agent, since):
        self.events = []
        self.dead = threading.Event()
        self.stream = urllib.request.urlopen(
            f"{agent.address}/v1/event/stream?topic=Job&index={since}", timeout=60)
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        try:
            for line in self.stream:
                for event in json.loads(line).get("Events") or []:
                    self.events.append(event)
                    if event["Payload"]["Job"]["Status"] == "dead":
                        self.dead.set()
                        return
        except (OSError, ValueError):
            pass

    def until_dead(self):
        self.dead.wait(30)
        self.stream.close()
        return list(self.events)


def go_time(text):
    """Go's `time.Time` JSON (RFC 3339, up to nanoseconds, UTC) as Unix nanoseconds; Go's
    zero time as 0."""
    if text == "0001-01-01T00:00:00Z":
        return 0
    assert text.endswith("Z"), text
    whole, _, fraction = text[:-1].partition(".")
    assert len(fraction) <= 9 and not fraction.endswith("0"), text
    seconds = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    return int(seconds) * 10**9 + int(fraction.ljust(9, "0") or 0)


def test_records_carry_nomads_timestamps_from_the_writes_and_the_task_that_made_them(agent):
    """What clients read and parse (finding 2: three raised KeyError/AttributeError): a
    job's SubmitTime, an allocation's and an evaluation's CreateTime/ModifyTime (Unix
    nanoseconds, in lists and full objects), a task state's StartedAt/FinishedAt/LastRestart
    (RFC 3339, Go's zero time while unset) — each inside the time the test saw it happen."""
    before = time.time_ns()
    agent.http("PUT", "/v1/jobs", web_job(agent.address, count=1))
    alloc = agent.running("web", 1)[0]
    running = agent.get(f"/v1/allocation/{alloc['ID']}")
    job = agent.get("/v1/job/web")
    assert before <= job["SubmitTime"] <= running["CreateTime"] <= running["ModifyTime"]
    [listed_job] = [j for j in agent.get("/v1/jobs") if j["ID"] == "web"]
    assert listed_job["SubmitTime"] == job["SubmitTime"]
    server = running["TaskStates"]["server"]
    assert server["State"] == "running"
    assert before <= go_time(server["StartedAt"]) <= time.time_ns(), server
    assert server["FinishedAt"] == server["LastRestart"] == "0001-01-01T00:00:00Z", server
    # A user's restart: LastRestart is the restart's, StartedAt moves to the new run.
    status, body, _ = agent.http("PUT", f"/v1/client/allocation/{alloc['ID']}/restart",
                                 {"TaskName": "server"})
    assert status == 200, body
    def restarted():
        state = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["server"]
        return state if state["Restarts"] == 1 and state["State"] == "running" else None
    again = agent.wait_until("the restart", restarted)
    assert go_time(again["LastRestart"]) >= go_time(server["StartedAt"]), again
    assert go_time(again["StartedAt"]) >= go_time(again["LastRestart"]), again
    stopped_at = time.time_ns()
    agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
    agent.wait_terminal([alloc["ID"]])
    ended = agent.get(f"/v1/allocation/{alloc['ID']}")
    assert ended["CreateTime"] == running["CreateTime"], "created once"
    assert stopped_at <= ended["ModifyTime"] <= time.time_ns()
    state = ended["TaskStates"]["server"]
    assert state["State"] == "dead"
    assert stopped_at <= go_time(state["FinishedAt"]) <= ended["ModifyTime"], state
    [stub] = [a for a in agent.get("/v1/allocations") if a["ID"] == alloc["ID"]]
    assert (stub["CreateTime"], stub["ModifyTime"]) == (ended["CreateTime"], ended["ModifyTime"])
    assert stub["TaskStates"]["server"]["FinishedAt"] == state["FinishedAt"]
    # The stop wrote no new specification: its version keeps the register's SubmitTime.
    assert agent.get("/v1/job/web")["SubmitTime"] == job["SubmitTime"]
    for listed in agent.get("/v1/job/web/evaluations"):
        full = agent.get(f"/v1/evaluation/{listed['ID']}")
        assert before <= full["CreateTime"] <= full["ModifyTime"] <= time.time_ns(), full
        assert (listed["CreateTime"], listed["ModifyTime"]) == (full["CreateTime"],
                                                                full["ModifyTime"])
    print(f"\nsubmit {job['SubmitTime']}, task {state}")
