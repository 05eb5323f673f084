"""`/v1/event/stream` on a real stop: the server's writes in index order — the flag written
with the stop itself, every service deregistered before the server hears the task ended —
checked against what the task (the witness) felt; the query's limits and the token's
rights; a replay from an index; and a deleted token ending its stream."""

import http.client
import json
import socket
import threading
import time
import urllib.parse

from conftest import SECOND, Agent, web_job


class Stream:
    """One subscription, read on its own thread: [(time.monotonic(), parsed line)]."""

    def __init__(self, agent, query, token=None):
        split = urllib.parse.urlsplit(agent.address)
        self.conn = http.client.HTTPConnection(split.hostname, split.port, timeout=60)
        headers = {"X-Nomad-Token": token} if token else {}
        self.conn.request("GET", f"/v1/event/stream?{query}", headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.lines = []
        self.ended = threading.Event()
        if self.status == 200:
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
        else:
            self.error = self.response.read().decode()
            self.ended.set()

    def _read(self):
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                self.lines.append((time.monotonic(), json.loads(line)))
        except (OSError, ValueError, http.client.HTTPException):
            pass
        self.ended.set()

    def close(self):
        # Shut down first: the reader thread is blocked reading the socket, holding it.
        if self.conn.sock is not None:
            try:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.ended.wait(10)
        self.conn.close()

    def batches(self):
        return [line for _, line in self.lines if line]

    def events(self, topic=None):
        return [e for b in self.batches() for e in b["Events"] if topic in (None, e["Topic"])]

    def wait_for(self, what, predicate, timeout=20):
        deadline = time.monotonic() + timeout
        while not predicate(self):
            assert time.monotonic() < deadline, f"the stream did not show {what}: {self.lines}"
            time.sleep(0.02)


def task_ended(event, task):
    state = (event["Payload"]["Allocation"].get("TaskStates") or {}).get(task) or {}
    return any(e["Type"] == "Terminated" for e in state.get("Events") or [])


def test_a_flagged_stop_streams_the_flag_with_the_stop_and_the_deregistrations_before_the_end(agent):
    stream = Stream(agent, "topic=Allocation:web&topic=Service:web&topic=Job:web")
    assert stream.status == 200
    stream.wait_for("its first heartbeat", lambda s: s.lines)
    assert stream.lines[0][1] == {}, "a heartbeat first, as Nomad's stream"
    status, _, _ = agent.http("PUT", "/v1/jobs", web_job(agent.address, group_delay_s=2, task_delay_s=2))
    assert status == 200
    [alloc] = agent.running("web", 1)
    stream.wait_for("both services registered",
                    lambda s: len([e for e in s.events("Service") if e["Type"] == "ServiceRegistration"]) == 2)
    status, answer, _ = agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
    assert status == 200
    stop = answer["Index"]
    agent.wait_terminal([alloc["ID"]])
    final = agent.get(f"/v1/allocation/{alloc['ID']}")["ModifyIndex"]
    stream.wait_for("the allocation's end",
                    lambda s: any(e["Index"] >= final for e in s.events("Allocation")))
    stream.close()

    batches = stream.batches()
    indexes = [b["Index"] for b in batches]
    assert indexes == sorted(set(indexes)), "one batch per index, in index order"
    assert all(e["Index"] == b["Index"] for b in batches for e in b["Events"])
    # The stop's own write: the stopped job, unchanged but for Stop, and the flag on the
    # allocation — in one index, the one the stop answered.
    at_stop = {e["Topic"]: e for b in batches if b["Index"] == stop for e in b["Events"]}
    assert at_stop["Job"]["Type"] == "JobDeregistered"
    job = at_stop["Job"]["Payload"]["Job"]
    assert job["Stop"] is True and job["TaskGroups"][0]["ShutdownDelay"] == 2 * SECOND
    assert job["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"] == 2 * SECOND
    flagged = at_stop["Allocation"]["Payload"]["Allocation"]
    assert flagged["ID"] == alloc["ID"] and flagged["Job"] is None
    assert flagged["DesiredTransition"]["NoShutdownDelay"] is True
    first_stopped = min(e["Index"] for e in stream.events("Allocation")
                        if e["Payload"]["Allocation"]["DesiredStatus"] == "stop")
    assert first_stopped > stop, "the flag reached the allocation before its desired stop"
    # Every service deregistered before the server heard the task had ended.
    deregistered = {e["Payload"]["Service"]["ServiceName"]: e["Index"]
                    for e in stream.events("Service") if e["Type"] == "ServiceDeregistration"}
    assert set(deregistered) == {"web-group", "server-web"}
    ended = min(e["Index"] for e in stream.events("Allocation") if task_ended(e, "server"))
    assert max(deregistered.values()) < ended, (deregistered, ended)
    last = stream.events("Allocation")[-1]["Payload"]["Allocation"]
    assert last["ClientStatus"] == "complete"
    # A stream opened now on an old index replays the same batches: each write's records as
    # it left them, not as they are now.
    replay = Stream(agent, "topic=Allocation:web&topic=Service:web&topic=Job:web&index=1")
    replay.wait_for("the allocation's end",
                    lambda s: any(e["Index"] >= final for e in s.events("Allocation")))
    replay.close()
    assert [b for b in replay.batches() if b["Index"] <= indexes[-1]] == batches
    # What the task felt: one SIGINT, with neither service listed, well inside the 4 s of
    # delays the flag skipped.
    signals = [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"]
    assert [s[1] for s in signals] == ["INT"], signals
    assert signals[0][3] == {"server-web": 0, "web-group": 0}, signals


def test_a_stream_opened_after_a_stop_replays_each_write_as_it_left_its_records(agent):
    # No stream is open through the run, the stop and the end.
    job = web_job(agent.address, job_id="past", group_delay_s=30, task_delay_s=30)
    status, answer, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200
    registered = answer["Index"]
    [alloc] = agent.running("past", 1)
    status, answer, _ = agent.http("DELETE", "/v1/job/past?no_shutdown_delay=true")
    assert status == 200
    stop = answer["Index"]
    agent.wait_terminal([alloc["ID"]])
    final = agent.get(f"/v1/allocation/{alloc['ID']}")["ModifyIndex"]
    replay = Stream(agent, f"topic=Allocation:past&topic=Job:past&index={registered}")
    replay.wait_for("the allocation's end",
                    lambda s: any(e["Index"] >= final for e in s.events("Allocation")))
    replay.close()
    allocs = [(e["Index"], e["Payload"]["Allocation"]) for e in replay.events("Allocation")]
    jobs = [(e["Index"], e["Payload"]["Job"]) for e in replay.events("Job")]
    # Each event carries its record as its own write left it.
    assert all(a["ModifyIndex"] == index for index, a in allocs), allocs
    assert all(j["ModifyIndex"] == index for index, j in jobs), jobs
    # The registration: the job as submitted, not stopped, nothing placed yet.
    assert jobs[0][0] == registered
    assert (jobs[0][1]["Stop"], jobs[0][1]["Status"]) == (False, "pending")
    # The placement: to run, pending, unflagged, no task started.
    placed = allocs[0][1]
    assert (placed["DesiredStatus"], placed["ClientStatus"]) == ("run", "pending")
    assert not placed["DesiredTransition"].get("NoShutdownDelay")
    # Running, before the stop: Started, and no Killing yet.
    running = next(a for index, a in allocs if a["ClientStatus"] == "running")
    kinds = [e["Type"] for e in running["TaskStates"]["server"]["Events"]]
    assert "Started" in kinds and "Killing" not in kinds, kinds
    # The stop's write: the job stopped with its delays as they were, and the flag on the
    # allocation while it is still to run; the job dead only in the last write.
    [stopped] = [j for index, j in jobs if index == stop]
    assert (stopped["Stop"], stopped["Status"]) == (True, "running")
    assert stopped["TaskGroups"][0]["ShutdownDelay"] == 30 * SECOND
    [flagged] = [a for index, a in allocs if index == stop]
    assert (flagged["DesiredStatus"], flagged["DesiredTransition"]["NoShutdownDelay"]) == ("run", True)
    ended = next(index for index, a in allocs if a["ClientStatus"] == "complete")
    assert [(index, j["Status"]) for index, j in jobs if j["Status"] == "dead"] == [(ended, "dead")]
    # What the task felt: one SIGINT, the 60 s of delays skipped.
    signals = [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"]
    assert [s[1] for s in signals] == ["INT"], signals


def test_a_subscription_from_an_index_replays_what_the_journal_kept(agent):
    status, answer, _ = agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id="early"))
    assert status == 200
    registered = answer["Index"]
    agent.running("early", 1)
    later = Stream(agent, f"topic=Job&topic=Evaluation&index={registered}")
    later.wait_for("the registration", lambda s: s.batches())
    first = later.batches()[0]
    assert first["Index"] == registered
    assert {e["Topic"] for e in first["Events"]} == {"Job", "Evaluation"}
    assert all(e["Type"] == "JobRegistered" for e in first["Events"])
    later.close()
    # Past the last write, nothing but the heartbeat, though writes wake the stream.
    index = int(agent.http("GET", "/v1/jobs")[2]["X-Nomad-Index"])
    quiet = Stream(agent, f"topic=Job&index={index + 1000}")
    quiet.wait_for("its heartbeat", lambda s: s.lines)
    status, _, _ = agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id="later"))
    assert status == 200
    agent.running("later", 1)
    assert [line for _, line in quiet.lines] == [{}]
    quiet.close()


def test_bad_queries_are_refused_naming_what_is_wrong_and_streams_are_bounded(agent):
    for query, status, named in [
        ("topic=Allocations", 400, 'unknown topic "Allocations"'),
        ("topic=Evaluation:::*", 400, "Invalid key value pair"),
        ("index=-3", 400, "Unable to parse index"),
        ("topic=Job:", 400, "empty key"),
        ("&".join(f"topic=Job:{i}" for i in range(65)), 400, "at most 64 topics"),
    ]:
        refused = Stream(agent, query)
        assert refused.status == status and named in refused.error, (query, refused.error)
        refused.close()
    status, body, _ = agent.http("POST", "/v1/event/stream")
    assert status == 405 and "Invalid method" in body
    opened = [Stream(agent, "topic=Node") for _ in range(64)]
    assert all(s.status == 200 for s in opened)
    over = Stream(agent, "topic=Node")
    assert over.status == 429 and "at most 64 event streams" in over.error
    for s in opened:
        s.close()
    # Closed streams give their places back.
    def reopened():
        again = Stream(agent, "topic=Node")
        again.close()
        return again.status == 200

    agent.wait_until("a stream's place given back", reopened)


def test_a_topic_needs_nomads_rights_and_a_deleted_token_ends_its_stream(tmp_path):
    agent = Agent(tmp_path / "data").start(args=["-acl-enabled"])
    try:
        status, boot, _ = agent.http("POST", "/v1/acl/bootstrap")
        assert status == 200
        agent.token = boot["SecretID"]
        status, _, _ = agent.http("POST", "/v1/acl/policy/read", {
            "Name": "read", "Rules": 'namespace "default" { policy = "read" }'})
        assert status == 200
        status, reader, _ = agent.http("POST", "/v1/acl/token", {
            "Name": "reader", "Type": "client", "Policies": ["read"]})
        assert status == 200
        anonymous = Stream(agent, "topic=Allocation")
        assert anonymous.status == 403, anonymous.error
        for query in ("topic=Node", "", "topic=ACLToken"):
            denied = Stream(agent, query, token=reader["SecretID"])
            assert denied.status == 403, (query, denied.error)
        allowed = Stream(agent, "topic=Allocation&topic=Job", token=reader["SecretID"])
        assert allowed.status == 200
        everything = Stream(agent, "", token=boot["SecretID"])
        assert everything.status == 200
        allowed.wait_for("its heartbeat", lambda s: s.lines)
        status, _, _ = agent.http("DELETE", f"/v1/acl/token/{reader['AccessorID']}")
        assert status == 200
        assert allowed.ended.wait(10), "the deleted token's stream ended"
        # The management token's stream goes on: it shows the next write.
        status, _, _ = agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id="after"))
        assert status == 200
        everything.wait_for("the job registered after the deletion",
                            lambda s: any(e["Key"] == "after" for e in s.events("Job")))
        assert not everything.ended.is_set()
        everything.close()
    finally:
        agent.close()
