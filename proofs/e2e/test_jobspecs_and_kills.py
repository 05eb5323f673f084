"""HCL jobspecs (python-nomad's jobs.parse, the CLI's job run) and a task that ignores its
kill signal: SIGKILL to its process group after kill_timeout, and the signal in the event."""

import subprocess
import time

import nomad

from conftest import QUIESCE, SECOND, WITNESS, clean_env

HCL = """
job "hcl-web" {
  datacenters = ["dc1"]
  group "web" {
    count          = 1
    shutdown_delay = "30s"
    # `job run` follows the registration's deployment: healthy after 500 ms, not 10 s.
    update {
      min_healthy_time = "500ms"
    }
    service {
      name     = "hcl-web"
      provider = "nomad"
    }
    network {
      port "http" {}
    }
    task "server" {
      driver         = "raw_exec"
      shutdown_delay = "30s"
      config {
        command = "%(witness)s"
        args    = ["--services", "hcl-web"]
      }
      env {
        QUIESCE_AGENT = "%(agent)s"
      }
      resources {
        cpu    = 100
        memory = 64
      }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "%(witness)s"
        args    = ["--exit-after", "50ms"]
      }
    }
  }
}
"""


def hcl(agent):
    return HCL % {"witness": WITNESS, "agent": agent.address}


def test_an_hcl_job_parsed_by_the_api_runs_and_stops(agent):
    host, port = agent.address.removeprefix("http://").rsplit(":", 1)
    n = nomad.Nomad(host=host, port=int(port))
    job = n.jobs.parse(hcl(agent))
    group = job["TaskGroups"][0]
    assert group["ShutdownDelay"] == 30 * SECOND and group["Tasks"][0]["ShutdownDelay"] == 30 * SECOND
    n.jobs.register_job({"Job": job})
    [alloc] = agent.running("hcl-web", 1)
    requested = time.monotonic()
    agent.cli("job", "stop", "-no-shutdown-delay", "hcl-web")
    assert agent.signalled_at(alloc["ID"], "server") - requested < 10
    assert [line[0] for line in agent.task_log(alloc["ID"], "cleanup")] == ["started", "exit"]
    status, text, _ = agent.http("POST", "/v1/jobs/parse", {"JobHCL": 'job "x" {\n sprocket {}\n}'})
    assert status == 400 and 'unsupported block "sprocket"' in text
    status, text, _ = agent.http("POST", "/v1/jobs/parse", {"JobHCL": ""})
    assert (status, text) == (400, "Job spec is empty")


def test_the_cli_runs_an_hcl_file_and_names_what_it_cannot_read(agent, tmp_path):
    spec = tmp_path / "web.nomad.hcl"
    spec.write_text(hcl(agent))
    out = agent.cli("job", "run", str(spec)).stdout
    assert "Monitoring evaluation" in out and "created" in out, out
    agent.running("hcl-web", 1)
    status = agent.cli("job", "status", "hcl").stdout  # a prefix, resolved as Nomad does
    assert "hcl-web" in status and "running" in status, status
    broken = tmp_path / "broken.hcl"
    broken.write_text('job "b" {\n group "g" {\n shutdown_delay = "soon"\n }\n}\n')
    failed = agent.cli("job", "run", str(broken), check=False)
    assert failed.returncode == 1 and '"soon" is not a duration' in failed.stderr, failed.stderr
    missing = agent.cli("job", "stop", "nope", check=False)
    assert missing.returncode == 1 and 'No job(s) with prefix or ID "nope" found' in missing.stderr



VARIABLES_HCL = """
variable "count" {
  type    = number
  default = 1
}
variable "witness" {
  type = string
}
job "hcl-vars" {
  group "g" {
    count = var.count
    task "t" {
      driver = "raw_exec"
      config {
        command = var.witness
        args    = ["--services", "hcl-vars"]
      }
      env {
        ALLOC = "${NOMAD_ALLOC_ID}"
      }
    }
  }
}
"""


def test_the_cli_gives_an_hcl_job_its_variables_and_names_the_line_and_column_of_an_error(
        agent, tmp_path):
    """`job run -var count=2 -var-file F`: the file's `variable` blocks take their values
    from the flags (a -var string converted to the declared number), two allocations run,
    and the submission keeps the flags and the var-file as Nomad's CLI sends them. An
    error names file:line:column."""
    spec = tmp_path / "vars.nomad.hcl"
    spec.write_text(VARIABLES_HCL)
    var_file = tmp_path / "prod.vars.hcl"
    var_file.write_text(f'witness = "{WITNESS}"\n')
    agent.cli("job", "run", "-detach", "-var", "count=2", f"-var-file={var_file}", str(spec))
    agent.running("hcl-vars", 2)
    status, submission, _ = agent.http("GET", "/v1/job/hcl-vars/submission?version=0")
    assert status == 200, submission
    assert submission["VariableFlags"] == {"count": "2"}, submission
    assert submission["Variables"] == var_file.read_text(), submission
    assert submission["Source"] == VARIABLES_HCL
    task = agent.get("/v1/job/hcl-vars")["TaskGroups"][0]["Tasks"][0]
    assert task["Config"]["command"] == WITNESS and task["Env"]["ALLOC"] == "${NOMAD_ALLOC_ID}", task
    agent.cli("job", "stop", "hcl-vars")

    missing = agent.cli("job", "run", str(spec), check=False)
    assert missing.returncode == 1, missing.stderr
    assert f"{spec}:6:1: Required variable \"witness\" is not set" in missing.stderr, missing.stderr
    undeclared = agent.cli("job", "validate", "-var", "colour=red", f"-var-file={var_file}", str(spec),
                           check=False)
    assert undeclared.returncode == 1 and '-var "colour": no variable "colour"' in undeclared.stderr, \
        undeclared.stderr
    broken = tmp_path / "broken.hcl"
    broken.write_text('job "b" {\n  group "g" {\n    kil_timeout = "5s"\n  }\n}\n')
    failed = agent.cli("job", "run", str(broken), check=False)
    assert failed.returncode == 1, failed.stderr
    assert f'{broken}:3:5: job "b".group "g": unsupported attribute "kil_timeout"' in failed.stderr, \
        failed.stderr
    from_stdin = subprocess.run([QUIESCE, "job", "plan", "-"], input=broken.read_text(), capture_output=True,
                                text=True, timeout=60, env=clean_env(NOMAD_ADDR=agent.address))
    assert "<stdin>:3:5: " in from_stdin.stderr, from_stdin.stderr


def test_the_parse_endpoint_takes_a_var_file_s_text_and_names_errors_as_nomad_does(agent):
    job_hcl = 'variable "n" {\n  type = number\n}\njob "x" {\n  group "g" {\n    count = var.n\n  }\n}\n'
    status, job, _ = agent.http("POST", "/v1/jobs/parse", {"JobHCL": job_hcl, "Variables": "n = 3\n"})
    assert status == 200 and job["TaskGroups"][0]["Count"] == 3, (status, job)
    status, text, _ = agent.http("POST", "/v1/jobs/parse", {"JobHCL": job_hcl})
    assert (status, text) == (400, 'Failed to parse job: input.hcl:1,1-9: Required variable "n" is not set: '
                              "give it a default, -var 'n=…', a -var-file, or NOMAD_VAR_n"), text
    status, text, _ = agent.http("POST", "/v1/jobs/parse", {"JobHCL": job_hcl, "Variables": "n = 3\nm = 1\n"})
    assert status == 400 and text.startswith("Failed to parse job: variables.hcl:2,1-2: no variable \"m\""), text
    status, text, _ = agent.http("POST", "/v1/jobs/parse", {"JobHCL": job_hcl, "Variables": 3})
    assert (status, text) == (400, "Variables must be a string")
    status, text, _ = agent.http("POST", "/v1/jobs/parse",
                                 {"JobHCL": 'job "x" {\n  group "g" {\n    kil_timeout = "5s"\n  }\n}\n'})
    assert status == 400 and text.startswith(
        'Failed to parse job: input.hcl:3,5-16: job "x".group "g": unsupported attribute "kil_timeout"'), text


# invariant: kill_timeout_respected
def test_a_task_that_ignores_its_signal_is_killed_after_kill_timeout(agent):
    """A witness that ignores its kill signal: it records the one SIGINT, and its supervisor
    delivers SIGKILL to its process group no sooner than kill_timeout (1 s) after it."""
    body = {"Job": {"ID": "stubborn", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec", "KillTimeout": 1 * SECOND,
        "Config": {"command": WITNESS, "args": ["--ignore-kill-signal"]},
    }]}]}}
    agent.http("PUT", "/v1/jobs", body)
    [alloc] = agent.running("stubborn", 1)
    requested = time.monotonic()
    agent.http("DELETE", "/v1/job/stubborn")
    agent.wait_terminal([alloc["ID"]])
    took = time.monotonic() - requested
    assert 1.0 <= took < 10, f"killed {took:.2f}s after the stop; kill_timeout is 1 s"
    events = agent.get(f"/v1/allocation/{alloc['ID']}")["TaskStates"]["t"]["Events"]
    terminated = [e for e in events if e["Type"] == "Terminated"]
    assert terminated[0]["DisplayMessage"] == "Exit Code: 137, Signal: 9", terminated
    killing = [e for e in events if e["Type"] == "Killing"]
    assert killing[0]["Details"]["kill_timeout"] == "1s"
    signals = [line for line in agent.task_log(alloc["ID"], "t") if line[0] == "signal"]
    assert [line[1] for line in signals] == ["INT"], signals
    delivered = agent.exit_record(alloc["ID"], "t")["delivered"]
    assert [(d["kill"], d["signal"], d["forced"]) for d in delivered] == [(1, 2, False), (1, 9, True)], delivered
    gap = (delivered[1]["monotonic_ns"] - delivered[0]["monotonic_ns"]) / SECOND
    assert 1.0 <= gap < 10, f"SIGKILL {gap:.3f}s after the kill signal; kill_timeout is 1 s"
    assert delivered[0]["monotonic_ns"] / SECOND <= signals[0][2], "the witness got what was sent"


def test_mock_driver_tasks_stay_selectable(agent):
    """A scripted task (no process): it exits with code 3, 2 s after its signal; the flag
    skips the 30 s delays but not that exit."""
    body = {"Job": {"ID": "mock", "TaskGroups": [{"Name": "g", "ShutdownDelay": 30 * SECOND, "Tasks": [{
        "Name": "t", "Driver": "mock_driver", "ShutdownDelay": 30 * SECOND,
        "Config": {"exit_after_signal": 2 * SECOND, "exit_code": 3},
    }]}]}}
    agent.http("PUT", "/v1/jobs", body)
    [alloc] = agent.wait_until(
        "the mock task to run", lambda: [a for a in agent.allocs("mock") if a["ClientStatus"] == "running"]
    )
    requested = time.monotonic()
    agent.http("DELETE", "/v1/job/mock?no_shutdown_delay=true")
    agent.wait_terminal([alloc["ID"]])
    took = time.monotonic() - requested
    assert 2.0 <= took < 10, f"the mock task ended {took:.2f}s after the stop"
    record = agent.get(f"/v1/allocation/{alloc['ID']}")
    # As in Nomad, a task that exits non-zero while being killed has not failed.
    assert record["ClientStatus"] == "complete"
    terminated = [e for e in record["TaskStates"]["t"]["Events"] if e["Type"] == "Terminated"]
    assert terminated[0]["DisplayMessage"] == "Exit Code: 3"


def test_a_batch_job_whose_task_ends_completes(agent):
    """A task ending on its own ends its allocation through the stop path, as in Nomad (its
    group services deregistered, the poststop task run); quiesce restarts no task."""
    body = {"Job": {"ID": "once", "Type": "batch", "TaskGroups": [{
        "Name": "g", "Services": [{"Name": "once-svc", "Provider": "nomad"}],
        # With nothing left to kill, no group delay is waited.
        "ShutdownDelay": 30 * SECOND,
        "Tasks": [
            {"Name": "work", "Driver": "raw_exec",
             "Config": {"command": "/bin/sh", "args": ["-c", "sleep 0.3; exit 0"]}},
            {"Name": "cleanup", "Driver": "raw_exec", "Lifecycle": {"Hook": "poststop"},
             "Config": {"command": WITNESS, "args": ["--exit-after", "50ms"]}},
        ],
    }]}}
    agent.http("PUT", "/v1/jobs", body)
    started = time.monotonic()
    [alloc] = agent.wait_until("the allocation", lambda: agent.allocs("once"))
    agent.wait_terminal([alloc["ID"]])
    assert time.monotonic() - started < 10, "the 30 s group delay was waited with nothing to kill"
    record = agent.get(f"/v1/allocation/{alloc['ID']}")
    assert record["ClientStatus"] == "complete" and record["DesiredStatus"] == "run"
    assert [line[0] for line in agent.task_log(alloc["ID"], "cleanup")] == ["started", "exit"]
    assert agent.get("/v1/service/once-svc") == []
    assert agent.get("/v1/job/once")["Status"] == "dead"
    # A completed batch allocation is not placed again.
    assert len(agent.allocs("once")) == 1


# invariant: restart_policy_respected
def test_a_failing_leader_is_restarted_by_its_policy_then_fails_the_allocation(agent):
    """A leader that keeps failing: its restart policy (one attempt, after 1 s) runs it a
    second time, then — the attempts used up — the allocation fails and the helper is killed
    through the stop path (`Leader Task Dead`), signalled once."""
    body = {"Job": {"ID": "crash", "TaskGroups": [{"Name": "g",
        "RestartPolicy": {"Attempts": 1, "Delay": SECOND, "Interval": 10 * SECOND,
                          "Mode": "fail"},
        "Tasks": [
        {"Name": "leader", "Driver": "raw_exec", "Leader": True,
         "Config": {"command": "/bin/sh",
                    "args": ["-c", 'echo ran >> "$NOMAD_ALLOC_DIR/runs"; sleep 0.3; exit 4']}},
        {"Name": "helper", "Driver": "raw_exec",
         "Config": {"command": WITNESS},
         "Env": {"QUIESCE_AGENT": agent.address}},
    ]}]}}
    agent.http("PUT", "/v1/jobs", body)
    [alloc] = agent.wait_until("the allocation", lambda: agent.allocs("crash"))
    agent.wait_terminal([alloc["ID"]])
    record = agent.get(f"/v1/allocation/{alloc['ID']}")
    assert record["ClientStatus"] == "failed"
    assert (agent.alloc_dir(alloc["ID"]) / "runs").read_text() == "ran\nran\n"
    leader = record["TaskStates"]["leader"]
    assert leader["Restarts"] == 1 and leader["Failed"], leader
    kinds = [e["Type"] for e in leader["Events"]]
    assert "Restarting" in kinds and kinds[-1] == "Not Restarting", kinds
    assert "Exceeded allowed attempts 1" in leader["Events"][-1]["DisplayMessage"], leader
    helper = [e["Type"] for e in record["TaskStates"]["helper"]["Events"]]
    assert "Leader Task Dead" in helper and "Killing" in helper, helper
    assert [line[0] for line in agent.task_log(alloc["ID"], "helper")] == ["started", "signal", "exit"]
