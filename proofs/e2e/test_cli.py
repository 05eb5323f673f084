"""The CLI a Nomad user types (issue 13, part 7): several jobs stopped at once, node status,
alloc logs, job inspect/history/validate, status, alloc stop -reschedule and its
replacement, a closed pipe, and errors in the user's own spelling of a flag."""

import json
import subprocess

from conftest import QUIESCE, SECOND, clean_env, web_job


def signals(agent, alloc_id):
    return [line for line in agent.task_log(alloc_id, "server") if line[0] == "signal"]


# invariant: stop_completes
def test_job_stop_stops_several_jobs_each_to_the_end(agent):
    for job_id in ["alpha", "beta"]:
        assert agent.http("PUT", "/v1/jobs", web_job(agent.address, job_id=job_id, task_delay_s=20))[0] == 200
    allocs = {job_id: agent.running(job_id, 1)[0]["ID"] for job_id in ["alpha", "beta"]}
    out = agent.cli("job", "stop", "-no-shutdown-delay", "alpha", "beta", timeout=15).stdout
    assert out.count("Stop complete") == 2, out
    for job_id, alloc_id in allocs.items():
        assert [s[1] for s in signals(agent, alloc_id)] == ["INT"], job_id
        assert agent.get(f"/v1/job/{job_id}")["Stop"] is True


def test_node_status_inspect_history_validate_and_status(agent, tmp_path):
    out = agent.cli("node", "status").stdout
    assert "ready" in out and "default" in out, out
    node_id = agent.get("/v1/nodes")[0]["ID"]
    out = agent.cli("node", "status", node_id[:8]).stdout
    assert node_id in out and "raw_exec" in out, out
    assert json.loads(agent.cli("node", "status", "-json", node_id[:8]).stdout)["ID"] == node_id
    assert node_id in agent.cli("node", "status", "-self").stdout
    assert agent.http("PUT", "/v1/jobs", web_job(agent.address))[0] == 200
    [alloc] = agent.running("web", 1)
    assert alloc["ID"][:8] in agent.cli("node", "status", node_id[:8]).stdout
    assert alloc["ID"] in agent.cli("job", "status", "-verbose", "web").stdout
    assert alloc["ID"] not in agent.cli("job", "status", "web").stdout
    assert json.loads(agent.cli("alloc", "status", "-json", alloc["ID"][:8]).stdout)["ID"] == alloc["ID"]
    assert json.loads(agent.cli("job", "status", "-json", "web").stdout)["ID"] == "web"
    inspected = json.loads(agent.cli("job", "inspect", "web").stdout)
    assert inspected["Job"]["ID"] == "web" and inspected["Job"]["TaskGroups"][0]["Name"] == "web"
    assert "web" in agent.cli("status").stdout
    agent.cli("job", "stop", "-no-shutdown-delay", "web")
    history = agent.cli("job", "history", "web").stdout
    assert "Version     = 1" in history and "Version     = 0" in history, history
    good = tmp_path / "good.json"
    good.write_text(json.dumps(web_job(agent.address, job_id="checked")))
    assert "Job validation successful" in agent.cli("job", "validate", str(good)).stdout
    bad = tmp_path / "bad.json"
    spec = web_job(agent.address, job_id="bad job")
    bad.write_text(json.dumps(spec))
    done = agent.cli("job", "validate", str(bad), check=False)
    assert done.returncode == 1 and "ID: must contain no ' '" in done.stderr, done
    assert agent.http("GET", "/v1/job/checked")[0] == 404, "validate registered nothing"


def test_alloc_logs_print_what_the_task_wrote(agent):
    assert agent.http("PUT", "/v1/jobs", web_job(agent.address))[0] == 200
    [alloc] = agent.running("web", 1)
    out = agent.cli("alloc", "logs", alloc["ID"][:8], "server").stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert records[0]["event"] == "start" and records[0]["alloc"] == alloc["ID"], records
    assert agent.cli("alloc", "logs", "-stderr", alloc["ID"][:8], "server").stdout == ""
    # Following: the lines the task writes later come too (its kill signal's record).
    follower = subprocess.Popen([QUIESCE, "alloc", "logs", "-f", alloc["ID"][:8], "server"],
                                stdout=subprocess.PIPE, text=True,
                                env=clean_env(NOMAD_ADDR=agent.address))
    try:
        assert json.loads(follower.stdout.readline())["event"] == "start"
        agent.cli("alloc", "stop", "-no-shutdown-delay", alloc["ID"][:8])
        assert json.loads(follower.stdout.readline())["event"] == "signal"
    finally:
        follower.kill()
        follower.wait()


def test_alloc_stop_reschedule_shows_the_replacement(agent):
    assert agent.http("PUT", "/v1/jobs", web_job(agent.address))[0] == 200
    [alloc] = agent.running("web", 1)
    out = agent.cli("alloc", "stop", "-reschedule", "-no-shutdown-delay", alloc["ID"][:8]).stdout
    stopped = agent.get(f"/v1/allocation/{alloc['ID']}")
    assert stopped["DesiredTransition"]["Reschedule"] is True
    assert f'replaced by "{stopped["NextAllocation"][:8]}"' in out, out


def test_a_closed_pipe_and_a_misspelt_flag(agent):
    assert agent.http("PUT", "/v1/jobs", web_job(agent.address))[0] == 200
    agent.running("web", 1)
    done = subprocess.run(f"{QUIESCE} job status web | head -1", shell=True, capture_output=True,
                          text=True, env=clean_env(NOMAD_ADDR=agent.address))
    assert "panicked" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr
    assert done.stdout.startswith("ID"), done.stdout
    done = agent.cli("job", "status", "-verbosity", check=False)
    assert done.returncode != 0 and "'-verbosity'" in done.stderr and "--verbosity" not in done.stderr, done.stderr


def test_a_purge_s_monitor_ends_when_the_tasks_are_dead(agent):
    assert agent.http("PUT", "/v1/jobs", web_job(agent.address, task_delay_s=1.5))[0] == 200
    [alloc] = agent.running("web", 1)
    out = agent.cli("job", "stop", "-purge", "web", timeout=30).stdout
    assert "Stop complete: 1 allocation(s)" in out, out
    # The CLI came back only once the task had died (after its 1.5 s delay).
    assert agent.exit_record(alloc["ID"], "server"), "the CLI returned with the task alive"
    assert [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "exit"]
    assert agent.http("GET", "/v1/job/web")[0] == 404


def test_job_plan_shows_the_diff_and_changes_nothing_then_run_checks_the_index(agent, tmp_path):
    job = web_job(agent.address, count=1)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "1"
    # `job run` follows each version's deployment: healthy after 500 ms, not 10 s.
    job["Job"]["TaskGroups"][0]["Update"] = {"MinHealthyTime": SECOND // 2}
    spec = tmp_path / "web.json"
    spec.write_text(json.dumps(job))
    agent.cli("job", "run", str(spec))
    [alloc] = agent.running("web", 1)
    same = agent.cli("job", "plan", str(spec), check=False)
    assert same.returncode == 0 and '(1 ignore)' in same.stdout, same
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] = "2"
    spec.write_text(json.dumps(job))
    planned = agent.cli("job", "plan", str(spec), check=False)
    out = planned.stdout
    assert planned.returncode == 1, planned
    assert '+/- Job: "web"' in out and '(1 create/destroy update)' in out, out
    assert '+/- Env[RELEASE]: "1" => "2"' in out, out
    assert "All tasks successfully allocated" in out, out
    # Nothing changed: the same version, the same task, untouched.
    stored = agent.get("/v1/job/web")
    assert stored["Version"] == 0 and stored["TaskGroups"][0]["Tasks"][0]["Env"]["RELEASE"] == "1"
    assert not signals(agent, alloc["ID"])
    raw = agent.http("PUT", "/v1/job/web/plan", {**job, "Diff": True})[1]
    assert raw["Diff"]["TaskGroups"][0]["Updates"] == {"create/destroy update": 1}, raw["Diff"]
    assert raw["Annotations"]["DesiredTGUpdates"]["web"]["DestructiveUpdate"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"Job": {**job["Job"], "Periodic": {"Spec": "x"}}}))
    refused = agent.cli("job", "plan", str(bad), check=False)
    assert refused.returncode == 255 and "Periodic" in refused.stderr, refused
    index = out.split("Job Modify Index: ")[1].split()[0]
    stale = agent.cli("job", "run", "-check-index", str(int(index) + 5), str(spec), check=False)
    assert stale.returncode == 1 and "Enforcing job modify index" in stale.stderr, stale
    agent.cli("job", "run", "-check-index", index, str(spec))
    assert agent.get("/v1/job/web")["Version"] == 1


def test_a_followed_log_streams_until_the_allocation_ends(agent):
    import urllib.request

    assert agent.http("PUT", "/v1/jobs", web_job(agent.address))[0] == 200
    [alloc] = agent.running("web", 1)
    url = f"{agent.address}/v1/client/fs/logs/{alloc['ID']}?task=server&type=stdout&follow=true&plain=true"
    stream = urllib.request.urlopen(url, timeout=30)
    assert json.loads(stream.readline())["event"] == "start"
    agent.cli("alloc", "stop", "-no-shutdown-delay", alloc["ID"][:8])
    rest = stream.read().decode()  # ends once the allocation has ended
    events = [json.loads(line)["event"] for line in rest.splitlines()]
    assert "signal" in events and events[-1] == "exit", events
    # Not plain: frames of base64 data.
    frames = urllib.request.urlopen(url.replace("&plain=true", ""), timeout=30).read().decode()
    assert '"Data":' in frames and '"Offset":' in frames, frames[:200]


COUNTER = """job "count" {
  group "g" {
    update {
      min_healthy_time = "500ms"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "for i in $(seq 1 40); do echo line $i; done; exec sleep 3600"]
      }
    }
  }
}
"""


def test_the_flags_and_aliases_tools_wrapping_the_cli_use(agent, tmp_path):
    """Issue 25, build 6: `run`/`stop`/`status`/`logs` at the top, `job run -output`,
    `-verbose`, `job inspect -hcl`, `job status -short`, `alloc logs -tail -n/-c`."""
    spec = tmp_path / "count.nomad.hcl"
    spec.write_text("# as the operator wrote it\n" + COUNTER)
    # -output: the JSON that would be registered, and nothing registered.
    output = json.loads(agent.cli("run", "-output", str(spec)).stdout)
    assert output["Job"]["ID"] == "count" and set(output) == {"Job"}, output
    assert agent.get("/v1/jobs") == []
    # -verbose: full IDs in the monitor.
    out = agent.cli("run", "-verbose", str(spec)).stdout
    [alloc] = agent.running("count", 1)
    assert f'Allocation "{alloc["ID"]}" created' in out, out
    # The source as submitted, comment and all, for the version that has it.
    assert agent.cli("job", "inspect", "-hcl", "count").stdout == spec.read_text()
    assert agent.cli("job", "inspect", "-hcl", "-version", "0", "count").stdout == spec.read_text()
    # -short: the job's own fields, no allocations.
    short = agent.cli("status", "-short", "count").stdout
    assert ["Status", "=", "running"] in [line.split() for line in short.splitlines()], short
    assert "Allocations" not in short, short
    # Nomad's fields, in Nomad's order; then the summary and the allocations.
    keys = [line.split("=")[0].strip() for line in short.splitlines() if "=" in line]
    assert keys == [
        "ID", "Name", "Submit Date", "Type", "Priority", "Datacenters", "Namespace",
        "Node Pool", "Status", "Periodic", "Parameterized",
    ], short
    full = agent.cli("status", "count").stdout
    summary = full.split("\nSummary\n", 1)[1].splitlines()
    assert summary[0].split() == [
        "Task", "Group", "Queued", "Starting", "Running", "Failed", "Complete", "Lost", "Unknown"
    ], full
    assert summary[1].split() == ["g", "0", "0", "1", "0", "0", "0", "0"], full
    assert alloc["ID"][:8] in agent.cli("status", "count").stdout
    # The top-level status finds an allocation by its prefix too.
    assert alloc["ID"] in agent.cli("status", alloc["ID"][:8]).stdout
    missing = agent.cli("status", "zzzz", check=False)
    assert missing.returncode == 1 and "No matches found" in missing.stderr, missing
    # The log's last lines, or bytes; and the whole log from the start.
    agent.wait_until("the 40 lines", lambda: "line 40" in agent.cli("logs", alloc["ID"][:8]).stdout)
    assert agent.cli("logs", "-tail", "-n", "3", alloc["ID"][:8]).stdout == "line 38\nline 39\nline 40\n"
    assert agent.cli("alloc", "logs", "-tail", alloc["ID"][:8]).stdout.splitlines() == [
        f"line {i}" for i in range(31, 41)]
    assert agent.cli("logs", "-tail", "-c", "8", alloc["ID"][:8], "t").stdout == "line 40\n"
    bad = agent.cli("logs", "-n", "3", alloc["ID"][:8], check=False)
    assert bad.returncode == 1 and "-tail" in bad.stderr, bad
    # `stop` at the top stops it, to the end; the stopped version keeps its source.
    out = agent.cli("stop", "-no-shutdown-delay", "count", timeout=30).stdout
    assert "Stop complete" in out, out
    assert agent.cli("job", "inspect", "-hcl", "count").stdout == spec.read_text()
    # `job start` registers the same specification again, and its version keeps the source.
    agent.cli("job", "start", "count", timeout=30)
    assert agent.get("/v1/job/count")["Version"] == 2
    assert agent.cli("job", "inspect", "-hcl", "count").stdout == spec.read_text()


def test_the_small_commands_nomad_users_type(agent, tmp_path):
    """Issue 27, build 2: version, job init, eval list, server members, service list|info,
    system gc and alloc signal — each answered as Nomad's, judged by what the task got."""
    version = agent.cli("version").stdout
    assert version.startswith("Quiesce v"), version
    example = tmp_path / "example.nomad.hcl"
    out = agent.cli("job", "init", str(example)).stdout
    assert out.strip() == f"Example job file written to {example}"
    assert 'shutdown_delay = "10s"' in example.read_text()
    assert "Job validation successful" in agent.cli("job", "validate", str(example)).stdout
    again = agent.cli("job", "init", str(example), check=False)
    assert again.returncode == 1 and "already exists" in again.stderr, again

    job = web_job(agent.address)
    job["Job"]["TaskGroups"][0]["Services"][0]["Tags"] = ["edge", "v1"]
    assert agent.http("PUT", "/v1/jobs", job)[0] == 200
    [alloc] = agent.running("web", 1)
    [listed] = agent.get("/v1/services")
    tags = {s["ServiceName"]: s["Tags"] for s in listed["Services"]}
    assert tags == {"web-group": ["edge", "v1"], "server-web": []}, tags
    services = agent.cli("service", "list").stdout.splitlines()
    assert services[0].split() == ["Service", "Name", "Tags"], services
    assert any(line.split() == ["web-group", "[edge,v1]"] for line in services), services
    info = agent.cli("service", "info", "web-group").stdout.splitlines()
    assert info[0].split() == ["Job", "ID", "Address", "Tags", "Node", "ID", "Alloc", "ID"], info
    assert info[1].split()[0] == "web" and info[1].split()[2] == "[edge,v1]", info

    evals = agent.cli("eval", "list").stdout.splitlines()
    assert evals[0].split()[:3] == ["ID", "Priority", "Triggered"], evals
    assert any(" job-register " in f" {line} " and " web " in f" {line} " for line in evals[1:]), evals
    members = agent.cli("server", "members").stdout.splitlines()
    assert members[0].split()[:5] == ["Name", "Address", "Port", "Status", "Leader"], members
    assert len(members) == 2 and members[1].split()[3:5] == ["alive", "true"], members

    agent.cli("alloc", "signal", "-s", "SIGHUP", alloc["ID"][:8], "server")
    agent.wait_until(
        "the task to get SIGHUP",
        lambda: [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"],
    )
    [(_, name, _, _)] = [line for line in agent.task_log(alloc["ID"], "server") if line[0] == "signal"]
    assert name == "HUP"
    assert agent.client_status(alloc["ID"]) == "running", "SIGHUP is not the task's kill signal"
    agent.cli("system", "gc")


def test_job_run_reads_a_jobspec_from_standard_input(agent):
    done = subprocess.run(
        [QUIESCE, "job", "run", "-detach", "-"],
        input=COUNTER, capture_output=True, text=True, timeout=60,
        env=clean_env(NOMAD_ADDR=agent.address),
    )
    assert done.returncode == 0 and "Job registration successful" in done.stdout, done
    agent.running("count", 1)
    assert agent.cli("job", "inspect", "-hcl", "count").stdout == COUNTER


BAD_COUNT = """job "bad" {
  group "g" {
    count = -1
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "200h"
      config { command = "/bin/sleep" }
    }
  }
}
"""


def test_an_hcl_jobspec_s_validation_errors_name_the_file_line_and_column(agent, tmp_path):
    """Issue 27, build 4: each validation error of an HCL file names where its field was
    written, for job validate, run and plan alike; nothing is registered."""
    spec = tmp_path / "bad.nomad.hcl"
    spec.write_text(BAD_COUNT)
    count = f"{spec}:3:5: TaskGroups[0].Count: must not be negative (got -1)"
    kill_timeout = f"{spec}:6:7: TaskGroups[0].Tasks[0].KillTimeout: "
    done = agent.cli("job", "validate", str(spec), check=False)
    assert done.returncode == 1, done
    assert f"* {count}" in done.stderr and f"* {kill_timeout}" in done.stderr, done.stderr
    for command, code in [("run", 1), ("plan", 255)]:
        done = agent.cli("job", command, str(spec), check=False)
        assert done.returncode == code and count in done.stderr, (command, done)
        assert kill_timeout in done.stderr, (command, done.stderr)
    assert agent.get("/v1/jobs") == [], "nothing registered"
    assert agent.http("GET", "/v1/job/bad")[0] == 404
    # A JSON file's errors name the field only, as the agent's do.
    as_json = tmp_path / "bad.json"
    as_json.write_text(agent.cli("run", "-output", str(spec)).stdout)
    done = agent.cli("job", "validate", str(as_json), check=False)
    assert done.returncode == 1 and "* TaskGroups[0].Count: must not be" in done.stderr, done
