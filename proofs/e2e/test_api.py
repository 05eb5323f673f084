"""The HTTP API as Nomad's clients meet it: shapes, headers, 404 texts, blocking queries, and
bad input refused with a 400 naming what was wrong, changing nothing."""

import threading
import time

import nomad
import nomadpy

from conftest import web_job


def index_of(agent):
    return int(agent.http("GET", "/v1/jobs")[2]["X-Nomad-Index"])


def test_reads_answer_as_nomad_does(agent):
    host, port = agent.address.removeprefix("http://").rsplit(":", 1)
    n = nomad.Nomad(host=host, port=int(port))
    assert n.jobs.get_jobs() == []
    n.jobs.register_job(web_job(agent.address))
    assert "web" in n.job and "web" in n.jobs
    [alloc] = agent.running("web", 1)
    assert alloc["ID"] in n.allocation
    assert n.allocation[alloc["ID"]]["JobID"] == "web"
    assert n.job.get_allocations("web")[0]["JobID"] == "web"
    evals = n.job.get_evaluations("web")
    assert evals and evals[0]["ID"] in n.evaluation
    assert n.regions.get_regions() == ["global"]
    assert n.status.leader.get_leader() == agent.address.removeprefix("http://")
    assert "config" in n.agent.get_agent()
    for path, text in [
        ("/v1/job/nope", "job not found"),
        ("/v1/job/nope/versions", "job versions not found"),
        ("/v1/allocation/nope", "alloc not found"),
        ("/v1/evaluation/nope", "eval not found"),
    ]:
        status, body, _ = agent.http("GET", path)
        assert (status, body) == (404, text), path
    assert agent.http("POST", "/v1/allocation/nope/stop")[:2] == (404, "allocation not found")
    assert agent.http("GET", f"/v1/allocation/{alloc['ID']}/stop")[:2] == (405, "Invalid method")
    # Deregistering an unknown job is a 200 with an all-zero body, as in Nomad.
    status, body, headers = agent.http("DELETE", "/v1/job/nope")
    assert status == 200 and body["EvalID"] == "" and headers["X-Nomad-Index"] == "0"

    client = nomadpy.Client(nomadpy.Config(address=agent.address))
    stubs, meta = client.jobs.list()
    assert [s.id for s in stubs] == ["web"] and meta.last_index > 0
    versions, _, _ = client.jobs.versions("web")
    assert [v.version for v in versions] == [0]
    info, _ = client.allocations.info(alloc["ID"])
    assert info.id == alloc["ID"]


def test_a_blocking_query_returns_at_the_next_write(agent):
    # A first write, so that there is an index to wait past (`index=0` does not block).
    # (no allocation, so nothing else moves the list's index meanwhile).
    agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id="first", count=0))
    index = index_of(agent)
    assert index > 0
    answered = {}

    def query():
        started = time.monotonic()
        status, body, headers = agent.http("GET", f"/v1/jobs?index={index}&wait=20s")
        answered.update(status=status, body=body, index=int(headers["X-Nomad-Index"]),
                        after=time.monotonic() - started)

    waiter = threading.Thread(target=query)
    waiter.start()
    time.sleep(0.3)
    assert not answered, "the query returned before any write"
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    waiter.join(timeout=20)
    assert answered["status"] == 200 and answered["index"] > index
    assert [j["ID"] for j in answered["body"]] == ["first", "web"]
    assert answered["after"] < 10, "woken by the write, not by the 20 s wait"
    status, body, _ = agent.http("GET", "/v1/jobs?index=abc")
    assert (status, body) == (400, "Invalid index")
    status, body, _ = agent.http("GET", "/v1/jobs?index=1&wait=soon")
    assert (status, body) == (400, "Invalid wait time")


def test_bad_input_is_refused_by_name_and_changes_nothing(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    [alloc] = agent.running("web", 1)
    before = index_of(agent)
    cases = [
        ("DELETE", "/v1/job/web?no_shutdown_delay=yes", None, '"no_shutdown_delay" (yes)'),
        ("DELETE", "/v1/job/web?purge=maybe", None, '"purge" (maybe)'),
        ("DELETE", "/v1/job/web?eval_priority=high", None, '"eval_priority" (high)'),
        ("DELETE", "/v1/job/web?eval_priority=101", None, "Eval priority must be between 1 and 100"),
        ("POST", f"/v1/allocation/{alloc['ID']}/stop?no_shutdown_delay=nope", None, '"no_shutdown_delay" (nope)'),
        ("PUT", "/v1/jobs", b"", "Request body is empty"),
        ("PUT", "/v1/jobs", b"{not json", "invalid JSON"),
        ("PUT", "/v1/jobs", {"ID": "web"}, "Job must be specified"),
        ("PUT", "/v1/job/other", web_job(agent.address), "Job ID does not match name"),
    ]
    bad_driver = web_job(agent.address)
    bad_driver["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"] = "docker"
    cases.append(("PUT", "/v1/jobs", bad_driver, "TaskGroups[0].Tasks[0].Driver"))
    no_command = web_job(agent.address)
    del no_command["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["command"]
    cases.append(("PUT", "/v1/jobs", no_command, "TaskGroups[0].Tasks[0].Config.command"))
    string_delay = web_job(agent.address)
    string_delay["Job"]["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"] = "5s"
    cases.append(("PUT", "/v1/jobs", string_delay, "invalid type"))
    for method, path, body, names in cases:
        status, text, _ = agent.http(method, path, body)
        assert status == 400 and names in text, (method, path, status, text)
    assert index_of(agent) == before, "a refused request wrote something"
    assert agent.get(f"/v1/allocation/{alloc['ID']}")["DesiredStatus"] == "run"
    assert agent.get("/v1/job/web")["Version"] == 0


def test_a_blocking_read_of_one_object_waits_for_that_object(agent):
    agent.http("PUT", "/v1/jobs", web_job(agent.address))
    agent.running("web", 1)
    _, job, headers = agent.http("GET", "/v1/job/web")
    # The job's index covers its allocations too (its Status follows them).
    index = int(headers["X-Nomad-Index"])
    assert index >= job["ModifyIndex"]
    answered = {}

    def query():
        started = time.monotonic()
        status, body, _ = agent.http("GET", f"/v1/job/web?index={index}&wait=20s")
        answered.update(status=status, version=body["Version"], after=time.monotonic() - started)

    waiter = threading.Thread(target=query)
    waiter.start()
    # Writes to other records do not answer it ...
    agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id="other"))
    time.sleep(0.3)
    assert not answered, "answered by a write to another job"
    # ... a write to this job does.
    agent.http("DELETE", "/v1/job/web?no_shutdown_delay=true")
    waiter.join(timeout=20)
    assert answered["status"] == 200 and answered["version"] == 1
    assert answered["after"] < 10, "woken by the stop, not by the 20 s wait"
