"""Scaling events (Nomad's `Job.Scale`): each scale request is recorded for its group — a
count changed, or an event alone — at most 20 per group, newest first; they survive an
agent restart, go with a purged job, and `job scaling-events` prints them as Nomad's CLI
does."""

import time

from conftest import SECOND
from test_deployments import rolling, settled


def scale(agent, **body):
    return agent.http("PUT", "/v1/job/web/scale", {"Target": {"Job": "web", "Group": "web"}, **body})


def events(agent):
    return agent.get("/v1/job/web/scale")["TaskGroups"]["web"]["Events"]


def newest_first(recorded):
    indexes = [e["CreateIndex"] for e in recorded]
    times = [e["Time"] for e in recorded]
    return indexes == sorted(indexes, reverse=True) and len(set(indexes)) == len(indexes) \
        and times == sorted(times, reverse=True)


def test_scaling_events_are_bounded_newest_first_kept_over_a_restart_and_purged(agent):
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 0, "1"))[0] == 200
    assert agent.get("/v1/job/web/scale")["TaskGroups"]["web"]["Events"] is None

    # A count changed: a registration, then the event naming its evaluation.
    status, up, _ = scale(agent, Count=1, Message="up", Meta={"by": "e2e"})
    assert status == 200 and up["EvalID"] and up["Index"] > up["EvalCreateIndex"] > 0, up
    [alloc] = agent.running("web", 1)
    settled(agent, "successful")  # Nomad refuses a count during a deployment
    status, down, _ = scale(agent, Count=0, Message="down")
    assert status == 200, down
    agent.wait_terminal([alloc["ID"]])
    recorded = events(agent)
    assert [(e["Message"], e["Count"], e["PreviousCount"], e["EvalID"]) for e in recorded] == [
        ("down", 0, 1, down["EvalID"]), ("up", 1, 0, up["EvalID"])], recorded
    assert recorded[1]["Meta"] == {"by": "e2e"} and recorded[1]["CreateIndex"] == up["Index"]
    assert all(abs(e["Time"] - time.time_ns()) < 120 * SECOND for e in recorded), recorded

    # Refused, naming what was wrong; nothing recorded.
    for body, words in [
        ({"Message": "x" * 5000}, "Message is 5000 bytes"),
        ({"Meta": {"k": "x" * 20000}}, "Meta is "),
        ({"Count": 1, "Error": True}, "scaling action should not contain count if error is true"),
        ({"Meta": "not an object"}, "Meta is an object"),
        ({"Target": {"Group": "db"}}, 'task group "db" specified for scaling does not exist in job'),
    ]:
        status, text, _ = scale(agent, **body)
        assert status == 400 and words in text, (body, status, text)
    assert events(agent) == recorded

    # Events alone change no job; 22 of them leave the newest 20 of the group.
    version = agent.get("/v1/job/web")["Version"]
    for n in range(22):
        status, answer, _ = scale(agent, Message=f"note-{n}", Error=n % 2 == 1, Meta={"n": n})
        assert status == 200 and (answer["EvalID"], answer["EvalCreateIndex"]) == ("", 0), answer
    assert agent.get("/v1/job/web")["Version"] == version
    recorded = events(agent)
    assert [e["Message"] for e in recorded] == [f"note-{n}" for n in range(21, 1, -1)]
    assert newest_first(recorded), recorded
    assert all(e["Count"] is None and e["EvalID"] is None for e in recorded)

    # Nomad's layout: one row per event, newest first; -verbose adds Error, Message, Eval ID.
    lines = agent.cli("job", "scaling-events", "web").stdout.splitlines()
    assert lines[0].split() == ["Task", "Group", "Count", "PrevCount", "Date"], lines
    assert len(lines) == 21 and all(l.split()[:3] == ["web", "<none>", "0"] for l in lines[1:]), lines
    lines = agent.cli("job", "scaling-events", "-verbose", "web").stdout.splitlines()
    assert lines[0].split() == ["Task", "Group", "Count", "PrevCount", "Error", "Message", "Eval",
                                "ID", "Date"], lines
    assert lines[1].split()[:6] == ["web", "<none>", "0", "true", "note-21", "<none>"], lines
    assert lines[2].split()[:6] == ["web", "<none>", "0", "false", "note-20", "<none>"], lines

    # Stored: a restarted agent shows the same events.
    agent.close()
    agent.start()
    assert events(agent) == recorded

    # Gone with the purged job, from the store too: the same ID registered again has none.
    assert agent.http("DELETE", "/v1/job/web?purge=true")[0] == 200
    assert agent.http("GET", "/v1/job/web/scale")[0] == 404
    gone = agent.cli("job", "scaling-events", "web", check=False)
    assert gone.returncode == 1 and 'No job(s) with prefix or ID "web" found' in gone.stderr, gone
    assert agent.http("PUT", "/v1/jobs", rolling(agent, 0, "1"))[0] == 200
    assert events(agent) is None
    assert agent.cli("job", "scaling-events", "web").stdout == "No events found\n"
    agent.close()
    agent.start()
    assert events(agent) is None
