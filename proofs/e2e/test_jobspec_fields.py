"""No silent drops (issue 13, part 4): every jobspec field is honoured, accepted with a
warning the register answer and the CLI show, or refused with a 400 naming it. The honoured
ones are judged by the task's process: its environment, the port it really listens on, the
file its template wrote, the services the agent lists for it."""

import json
import shutil
import urllib.request

from conftest import WITNESS

PYTHON = shutil.which("python3") or "/usr/bin/python3"

HCL = """
job "fields" {
  datacenters = ["dc*"]
  meta { team = "edge" }
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  update {
    max_parallel     = 2
    canary           = 1
    min_healthy_time = "500ms"
  }
  group "web" {
    meta { tier = "front" }
    network {
      port "http" {}
      port "admin" { static = %(admin)d }
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "%(python)s"
        args    = ["-u", "-m", "http.server", "--bind", "127.0.0.1", "${NOMAD_PORT_http}"]
      }
      meta { build = "42" }
      resources {
        cpu    = 250
        memory = 64
      }
      template {
        data        = "listen on the http port\\n"
        destination = "local/app.conf"
        perms       = "0640"
      }
      logs { max_files = 2 }
      service {
        name     = "fields-web"
        provider = "nomad"
        port     = "http"
        tags     = ["edge", "v1"]
      }
    }
    task "env" {
      driver = "raw_exec"
      config { command = "%(witness)s" }
      meta { build = "42" }
      resources {
        cpu    = 250
        memory = 64
      }
    }
  }
}
"""


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = (e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        return {k.decode(): v.decode() for k, v in pairs}


def test_honoured_fields_reach_the_task_and_warned_ones_are_said(agent, tmp_path):
    spec = tmp_path / "fields.nomad.hcl"
    spec.write_text(HCL % {"python": PYTHON, "admin": 28123, "witness": WITNESS})
    out = agent.cli("job", "run", str(spec)).stdout
    assert "Job Warnings:" in out, out
    # `max_parallel` and `canary` are honoured: neither is warned of.
    assert "Update.Canary" not in out and "Update.MaxParallel" not in out, out
    assert "TaskGroups[0].Tasks[0].LogConfig: accepted, not honoured" in out, out
    assert 'task "server" in group "web" defines services, but has no shutdown_delay set' in out, out
    [alloc] = agent.running("fields", 1)
    [start] = [r for r in agent.witness(alloc["ID"], "env") if r["event"] == "start"]
    env = environ(start["pid"])
    port = int(env["NOMAD_PORT_http"])
    assert 20000 <= port <= 32000, env
    assert env["NOMAD_ADDR_http"] == f"127.0.0.1:{port}"
    assert env["NOMAD_PORT_admin"] == "28123"
    # The operator sees both ports in `alloc status`, the static one not dynamic.
    status = agent.cli("alloc", "status", alloc["ID"][:8]).stdout
    addresses = status.split('Allocation Addresses (mode = "host"):\n', 1)[1].split("\n\n")[0]
    rows = sorted(line.split() for line in addresses.splitlines()[1:])
    assert rows == [["*admin", "no", "127.0.0.1:28123"], ["*http", "yes", f"127.0.0.1:{port}"]], status
    assert (env["NOMAD_META_team"], env["NOMAD_META_tier"], env["NOMAD_META_build"]) == ("edge", "front", "42")
    assert env["NOMAD_META_TEAM"] == "edge"
    assert (env["NOMAD_DC"], env["NOMAD_REGION"]) == ("dc1", "global")
    assert (env["NOMAD_CPU_LIMIT"], env["NOMAD_MEMORY_LIMIT"]) == ("250", "64")
    # The program really listens on its port.
    def answers():
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status == 200
        except OSError:
            return False

    agent.wait_until(f"http.server on port {port}", answers)
    conf = agent.task_dir(alloc["ID"], "server") / "local" / "app.conf"
    assert conf.read_text() == "listen on the http port\n"
    assert conf.stat().st_mode & 0o777 == 0o640
    [registration] = agent.get("/v1/service/fields-web")
    assert registration["Tags"] == ["edge", "v1"] and registration["Port"] == port
    shown = agent.get(f"/v1/allocation/{alloc['ID']}")["AllocatedResources"]
    assert {p["Label"]: p["Value"] for p in shown["Shared"]["Ports"]} == {"admin": 28123, "http": port}
    stored = agent.get("/v1/job/fields")
    assert stored["Meta"] == {"team": "edge"}
    assert stored["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] == 64
    # A second job that wants the same static port waits until the first lets it go.
    spec2 = tmp_path / "fields2.nomad.hcl"
    spec2.write_text((HCL % {"python": PYTHON, "admin": 28123, "witness": WITNESS}).replace('"fields"', '"fields2"')
                     .replace("fields-web", "fields2-web"))
    blocked = agent.cli("job", "run", str(spec2), check=False)
    out = blocked.stdout
    assert "failed to place all allocations" in out and "waiting for additional capacity" in out, out
    assert blocked.returncode == 2, "Nomad's exit status for placement issues"
    assert agent.allocs("fields2") == []
    agent.cli("job", "stop", "-no-shutdown-delay", "fields")
    [second] = agent.running("fields2", 1)
    assert [p["Value"] for p in agent.get(f"/v1/allocation/{second['ID']}")
            ["AllocatedResources"]["Shared"]["Ports"] if p["Label"] == "admin"] == [28123]
    agent.cli("job", "stop", "-no-shutdown-delay", "fields2")


def test_refused_fields_are_named_and_change_nothing(agent, tmp_path):
    before = agent.http("GET", "/v1/jobs")[2]["X-Nomad-Index"]
    base = {"ID": "x", "TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]}
    cases = [
        ({"Periodic": {"Spec": "* * * * *"}}, "Periodic: periodic jobs are not supported"),
        ({"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec",
           "Config": {"command": "/bin/true"},
           "Artifacts": [{"GetterSource": "https://example.com/app"}]}]}]},
         "TaskGroups[0].Tasks[0].Artifacts: artifacts are not supported"),
        ({"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec",
           "Config": {"command": "/bin/true"}, "Vault": {"Policies": ["db"]}}]}]},
         "TaskGroups[0].Tasks[0].Vault: this agent has no Vault integration"),
        ({"Frobnicate": 3}, "Frobnicate: unknown field"),
        ({"TaskGroups": [{"Name": "g", "Networks": [{"Mode": "bridge"}], "Tasks": [
           {"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]},
         "TaskGroups[0].Networks[0].Mode: only host networking is supported"),
        ({"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec",
           "Config": {"command": "/bin/true"},
           "Templates": [{"EmbeddedTmpl": "{{ key \"x\" }}", "DestPath": "local/x"}]}]}]},
         "TaskGroups[0].Tasks[0].Templates[0].EmbeddedTmpl: template directives"),
        ({"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec",
           "Config": {"command": "/bin/true"},
           "Templates": [{"EmbeddedTmpl": "x", "DestPath": "../../escape"}]}]}]},
         "Templates[0].DestPath: \"../../escape\" is not a path inside the task's local/ directory"),
        ({"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec",
           "Config": {"command": "/bin/true"},
           "Templates": [{"EmbeddedTmpl": "{}", "DestPath": "exit.json"}]}]}]},
         "Templates[0].DestPath: \"exit.json\" is not a path inside the task's local/ directory"),
        ({"Datacenters": ["*" * 20000 + "X"]}, "Datacenters: \""),
        ({"Datacenters": ["dc"] * 65}, "Datacenters: at most 64"),
        ({"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec",
           "Config": {"command": "/bin/true", "deep": json.loads('{"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"b": 1}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}')}}]}]},
         "TaskGroups[0].Tasks[0].Config: nested 40 deep, at most 32"),
        ({"Constraints": [{"LTarget": "${attr.kernel.name}", "Operand": "regexp", "RTarget": "l.*"}]},
         "Constraints[0].Operand: \"regexp\" is not an operand this agent judges"),
    ]
    for change, expected in cases:
        status, text, _ = agent.http("PUT", "/v1/jobs", {"Job": {**base, **change}})
        assert status == 400 and expected in text, (change, text)
    status, text, _ = agent.http("PUT", "/v1/jobs", b'{"Job": ' + json.dumps(base).encode()
                                 + b', "job": {"ID": "x", "Periodic": {"Spec": "x"}}}')
    assert status == 400 and "Job: given 2 times" in text, text
    hcl = tmp_path / "periodic.nomad.hcl"
    hcl.write_text('job "p" {\n periodic { crons = ["* * * * *"] }\n group "g" {\n'
                   ' task "t" {\n driver = "raw_exec"\n config { command = "/bin/true" }\n }\n }\n}\n')
    done = agent.cli("job", "run", str(hcl), check=False)
    assert done.returncode != 0 and "Periodic: periodic jobs are not supported" in done.stderr, done
    assert agent.http("GET", "/v1/jobs")[2]["X-Nomad-Index"] == before
    assert agent.get("/v1/jobs") == []


def test_a_constraint_the_node_does_not_meet_places_nothing(agent):
    job = {"Job": {"ID": "win", "Constraints": [
        {"LTarget": "${attr.kernel.name}", "Operand": "=", "RTarget": "windows"}],
        "TaskGroups": [{"Name": "g", "Tasks": [
            {"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/sleep", "args": ["60"]}}]}]}}
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200, body
    first = agent.get(f"/v1/evaluation/{body['EvalID']}")
    assert first["QueuedAllocations"] == {"g": 1} and first["BlockedEval"], first
    assert agent.get(f"/v1/evaluation/{first['BlockedEval']}")["Status"] == "blocked"
    assert agent.allocs("win") == []
    assert agent.get("/v1/job/win")["Status"] == "pending"
    # A datacenter the node is not in: the same.
    job["Job"]["ID"], job["Job"]["Constraints"], job["Job"]["Datacenters"] = "east", None, ["east-1"]
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert agent.get(f"/v1/evaluation/{body['EvalID']}")["BlockedEval"]
    assert agent.allocs("east") == []


def test_a_command_that_does_not_exist_is_a_driver_failure(agent):
    job = {"Job": {"ID": "missing", "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "t", "Driver": "raw_exec", "Config": {"command": "/no/such/program"}}]}]}}
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    [alloc] = agent.wait_until("the allocation", lambda: agent.allocs("missing"))
    agent.wait_terminal([alloc["ID"]])
    events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["t"]["Events"]
    types = [e["Type"] for e in events]
    assert "Driver Failure" in types and types.index("Driver Failure") < types.index("Terminated"), types
    failure = events[types.index("Driver Failure")]
    assert "/no/such/program" in failure["DisplayMessage"], failure
    assert "No such file" in failure["DisplayMessage"], failure
    out = agent.cli("alloc", "status", alloc["ID"]).stdout
    assert "Driver Failure" in out and "/no/such/program" in out, out


def test_an_evaluation_that_cannot_place_everything_places_nothing(agent):
    """Two allocations that want the same static port on one node: neither is placed (an
    evaluation places all or nothing), and the event log the model judges shows no half
    plan; once the count fits, both of the new version's one runs."""
    job = {"Job": {"ID": "twice", "TaskGroups": [{"Name": "g", "Count": 2,
        "Networks": [{"ReservedPorts": [{"Label": "admin", "Value": 28124}]}],
        "Tasks": [{"Name": "t", "Driver": "raw_exec",
                   "Config": {"command": "/bin/sleep", "args": ["60"]}}]}]}}
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert status == 200, body
    first = agent.get(f"/v1/evaluation/{body['EvalID']}")
    assert first["QueuedAllocations"] == {"g": 2} and first["BlockedEval"], first
    assert agent.allocs("twice") == []
    blocked = first["BlockedEval"]
    job["Job"]["TaskGroups"][0]["Count"] = 1
    status, body, _ = agent.http("PUT", "/v1/jobs", job)
    assert agent.get(f"/v1/evaluation/{blocked}")["Status"] == "canceled"
    [alloc] = agent.running("twice", 1)
    assert agent.http("DELETE", "/v1/job/twice?purge=true&no_shutdown_delay=true")[0] == 200
    agent.wait_until("the sleep to end", lambda: agent.exit_record(alloc["ID"], "t"))


def test_a_replacement_never_gets_the_dynamic_port_its_predecessor_still_holds(agent):
    job = {"Job": {"ID": "ported", "TaskGroups": [{"Name": "g",
        "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
        # Longer than any wait below: the old allocation is still in its delay at the checks.
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "ShutdownDelay": 60 * 10**9,
                   "Env": {"V": "1"}, "Services": [{"Name": "ported", "Provider": "nomad"}],
                   "Config": {"command": "/bin/sleep", "args": ["60"]}}]}]}}
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    [old] = agent.running("ported", 1)
    old_port = agent.get(f"/v1/allocation/{old['ID']}")["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["V"] = "2"
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    def replacement():
        return [a for a in agent.allocs("ported") if a["ID"] != old["ID"]]
    [new] = agent.wait_until("the replacement", replacement)
    # Its task launched, so that the purge below has a process to end in each allocation
    # (a replacement purged while still pending never starts, and leaves no exit record:
    # this test once read it so, under CI's load, and waited in vain).
    agent.wait_until("the replacement's task to start", lambda: agent.started(new["ID"], "t"))
    new_port = agent.get(f"/v1/allocation/{new['ID']}")["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
    assert agent.get(f"/v1/allocation/{old['ID']}")["ClientStatus"] == "running", "the old one is in its delay"
    assert new_port != old_port
    agent.http("DELETE", "/v1/job/ported?purge=true&no_shutdown_delay=true")
    agent.wait_until("both to end", lambda: all(
        agent.exit_record(a, "t") for a in (old["ID"], new["ID"])))
