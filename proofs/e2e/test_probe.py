"""`quiesce-conform probe` against the reference agent: the whole probe conforms, with the
witness and without it (then what only the witness shows is not observable, never
holding); an interrupted probe purges its jobs; and the teeth — a faulty proxy between the
probe and the agent, one fault per invariant, each caught and named."""

import json
import signal
import subprocess
import time

import pytest

from conftest import CONFORM, QUIESCE, WITNESS, Agent, clean_env, free_port, validate_log
from faulty_proxy import FaultyProxy


# For a run of flagged stops alone, which skip the delay, so that a longer one costs
# nothing (kill-timeout, which waits twice the delay, runs nothing without the witness):
# the group delay is judged across the probe's and the node's clocks only when the node's
# clock is known to within a quarter of it, and that bound spans the job's whole placement
# (286 ms once in CI, on 2 loaded cores, over a quarter of the default 1 s).
FLAGGED_ONLY_DELAY = ("--delay", "4s")


def probe(address, *args, witness=True, timeout=240):
    """Runs the probe; its exit code, its output and its JSON report."""
    report = f"/tmp/probe-{time.monotonic_ns()}.json"
    command = [CONFORM, "probe", "--address", address, "--report", report, *args]
    if witness:
        command += ["--witness", WITNESS]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=clean_env())
    try:
        with open(report) as f:
            parsed = json.load(f)
    except FileNotFoundError:
        parsed = None
    return done.returncode, done.stdout + done.stderr, parsed


def judgement(report, scenario, invariant):
    """The report's whole judgement of one invariant in one scenario (for a failure's message)."""
    for s in report["scenarios"]:
        if s["name"] == scenario:
            return [j for j in s["invariants"] if j["invariant"] == invariant]
    return None


def verdicts(report):
    """{(scenario, invariant): verdict}"""
    return {
        (s["name"], j["invariant"]): j["verdict"]
        for s in report["scenarios"]
        for j in s["invariants"]
    }


def probe_jobs(agent):
    return [j["ID"] for j in agent.get("/v1/jobs") if j["ID"].startswith("quiesce-probe-")]


# What the probe must see hold on the reference agent with the witness: every scenario's
# invariants (flag_is_honoured of an unflagged stop is not observable by design).
MUST_HOLD = {
    "job-stop-flagged": ["flag_is_honoured", "delay_skipped_only_when_flagged",
                         "prestop_hooks_always_run", "jobspec_unchanged", "kill_order",
                         "stop_completes", "stop_recorded"],
    "job-stop": ["delay_skipped_only_when_flagged", "prestop_hooks_always_run",
                 "jobspec_unchanged", "kill_order", "stop_completes"],
    "alloc-stop-scoped": ["flag_is_honoured", "flag_scoped", "delay_skipped_only_when_flagged",
                          "prestop_hooks_always_run", "stop_recorded", "stop_completes"],
    "kill-timeout": ["kill_timeout_respected", "flag_is_honoured", "stop_completes"],
    "nomad-alloc-stop": ["stop_recorded", "flag_scoped"],
    "nomad-deregister": ["stop_recorded", "flag_is_honoured", "stop_completes"],
    "flag-values": ["stop_recorded"],
    "nomad-overlap": ["resources_held", "flag_is_honoured"],
    "restart-flag": ["flag_is_honoured", "restart_flag_one_shot", "prestop_hooks_always_run"],
}


def test_the_probe_conforms_against_the_reference_agent(agent):
    started = time.monotonic()
    code, output, report = probe(agent.address)
    took = time.monotonic() - started
    assert code == 0, output
    assert output.rstrip().splitlines()[-1].startswith("conforms"), output
    assert report["result"] == "conforms" and report["server"].startswith("quiesce")
    assert "restart-no-shutdown-delay" in report["extensions"]
    seen = verdicts(report)
    for scenario, invariants in MUST_HOLD.items():
        for invariant in invariants:
            assert seen.get((scenario, invariant)) == "holds", (
                scenario, invariant, judgement(report, scenario, invariant))
    assert all(s["error"] is None for s in report["scenarios"]), output
    # One line per scenario and invariant.
    for (scenario, invariant), verdict in seen.items():
        assert f"{scenario}  {invariant}  {verdict}" in output
    assert probe_jobs(agent) == [], "every job the probe made is purged"
    print(f"the probe against the reference agent: {took:.1f} s")


def test_without_the_witness_what_only_it_shows_is_not_observable(agent):
    # kill-timeout runs nothing without the witness, so the delay costs nothing here.
    code, output, report = probe(
        agent.address, "--scenario", "job-stop-flagged", "--scenario", "kill-timeout",
        *FLAGGED_ONLY_DELAY, witness=False)
    assert code == 0, output
    seen = verdicts(report)
    assert seen[("job-stop-flagged", "prestop_hooks_always_run")] == "not observable"
    assert seen[("kill-timeout", "kill_timeout_respected")] == "not observable"
    assert "give --witness PATH" in output
    # What the events show still holds.
    assert seen[("job-stop-flagged", "flag_is_honoured")] == "holds"
    assert seen[("job-stop-flagged", "kill_order")] == "holds"


# Each fault, the scenarios that meet it, the invariant it breaks, and every invariant the
# probe must then report violated — no more: the flag missing from what the API shows is
# also `stop_recorded`, the API contract.
@pytest.mark.parametrize("fault,scenarios,invariant,violated,evidence", [
    ("drop-flag", ["job-stop-flagged", "alloc-stop-scoped"], "flag_is_honoured",
     {"flag_is_honoured", "stop_recorded"}, "no_shutdown_delay=true → 200"),
    ("rewrite-delay", ["job-stop-flagged"], "jobspec_unchanged", {"jobspec_unchanged"},
     ".ShutdownDelay: 1000000000 became 2000000000"),
    ("strip-flag", ["job-stop-flagged"], "delay_skipped_only_when_flagged",
     {"delay_skipped_only_when_flagged", "stop_recorded"},
     "but the allocation never showed DesiredTransition.NoShutdownDelay=true"),
    ("stale-services", ["job-stop-flagged"], "prestop_hooks_always_run",
     {"prestop_hooks_always_run", "stop_completes"}, "while the server still listed"),
    ("late-leader", ["job-stop-flagged"], "kill_order", {"kill_order"},
     "before task leader ended"),
])
def test_a_faulty_server_is_caught_and_the_broken_invariant_named(agent, fault, scenarios,
                                                                  invariant, violated, evidence):
    with FaultyProxy(agent.address, fault) as proxy:
        args = [a for s in scenarios for a in ("--scenario", s)]
        code, output, report = probe(proxy.address, *args)
        assert proxy.rewritten > 0, f"the {fault} proxy changed nothing: {proxy.requests}"
    assert code == 1, output
    assert output.rstrip().splitlines()[-1].startswith("FAILED"), output
    seen = verdicts(report)
    for scenario in scenarios:
        assert seen[(scenario, invariant)] == "VIOLATED", (scenario, output)
        named = {i for (s, i), v in seen.items() if s == scenario and v == "VIOLATED"}
        assert named == violated, (scenario, named, output)
    line = next(l for l in output.splitlines() if f"  {invariant}  VIOLATED" in l)
    # The evidence names the request, the field or the times that show it.
    assert evidence in line, line
    assert report["result"] == "FAILED"
    assert probe_jobs(agent) == []


# Faults only the event stream shows: the order of the server's writes. `late-deregistration`
# runs without the witness, so that the stream is the only evidence.
@pytest.mark.parametrize("fault,invariant,witness,evidence", [
    ("late-flag", "stop_recorded", True, "after the write of"),
    ("late-deregistration", "prestop_hooks_always_run", False, "deregistered only at index"),
])
def test_a_fault_only_the_event_stream_shows_is_caught(agent, fault, invariant, witness, evidence):
    scenarios = ["job-stop-flagged", "alloc-stop-scoped"]
    with FaultyProxy(agent.address, fault) as proxy:
        args = [a for s in scenarios for a in ("--scenario", s)]
        code, output, report = probe(proxy.address, *args, witness=witness)
        assert proxy.rewritten > 0, f"the {fault} proxy changed nothing"
    assert code == 1, output
    assert report["event_stream"].startswith("read from index"), report["event_stream"]
    seen = verdicts(report)
    for scenario in scenarios:
        named = {i for (s, i), v in seen.items() if s == scenario and v == "VIOLATED"}
        assert named == {invariant}, (scenario, named, output)
    line = next(l for l in output.splitlines() if f"  {invariant}  VIOLATED" in l)
    assert evidence in line, line
    assert probe_jobs(agent) == []


@pytest.mark.parametrize("fault,said", [
    ("hide-event-stream", "event stream: not used: not offered (GET /v1/event/stream"),
    # Nomad refuses a token past its headers: 200, then the end.
    ("end-event-stream", "then it ended before its first line"),
])
def test_without_the_event_stream_the_probe_says_so_and_still_conforms(agent, fault, said):
    with FaultyProxy(agent.address, fault) as proxy:
        code, output, report = probe(proxy.address, "--scenario", "job-stop-flagged", *FLAGGED_ONLY_DELAY)
        assert proxy.rewritten > 0
    assert code == 0, output
    assert said in output, output
    seen = verdicts(report)
    assert all(seen[("job-stop-flagged", i)] == "holds" for i in MUST_HOLD["job-stop-flagged"])
    # No finding of the stream's.
    assert "the stream" not in json.dumps(report["scenarios"])


def test_where_no_node_offers_raw_exec_the_probe_runs_mock_tasks(agent):
    with FaultyProxy(agent.address, "hide-raw-exec") as proxy:
        # Mock tasks have no witness: kill-timeout runs nothing, so the delay costs nothing.
        code, output, report = probe(proxy.address, "--scenario", "job-stop-flagged",
                                     "--scenario", "kill-timeout", *FLAGGED_ONLY_DELAY)
        assert proxy.rewritten > 0
    assert code == 0, output
    assert report["driver"] == "mock_driver" and report["witness"] is None, report
    assert "tasks: mock_driver" in output
    seen = verdicts(report)
    assert seen[("job-stop-flagged", "flag_is_honoured")] == "holds", output
    assert seen[("job-stop-flagged", "kill_order")] == "holds", output
    assert seen[("job-stop-flagged", "prestop_hooks_always_run")] == "not observable"
    assert seen[("kill-timeout", "kill_timeout_respected")] == "not observable"
    assert probe_jobs(agent) == []
    # What the agent was asked to run: mock_driver tasks only.
    specs = [json.dumps(e["spec"]) for e in agent.events()
             if e.get("step") == "RegisterJob" and "quiesce-probe-" in json.dumps(e["spec"])]
    assert specs and all("mock_driver" in s and "raw_exec" not in s for s in specs), specs


NAMESPACE_ONLY = """
namespace "default" {
  capabilities = ["list-jobs", "submit-job", "read-job", "alloc-lifecycle", "read-logs"]
}
"""


def test_a_token_with_namespace_rights_only_still_probes_and_says_what_it_cannot_see(tmp_path):
    """No agent:read (so no server facts), no node:read (so no drivers), and a witness with
    no token (so no services at its signal): the probe goes on, and says so."""
    agent = Agent(tmp_path / "data").start(args=["-acl-enabled"])
    try:
        status, root, _ = agent.http("POST", "/v1/acl/bootstrap")
        assert status == 200, root
        agent.token = root["SecretID"]
        status, body, _ = agent.http("POST", "/v1/acl/policy/probe",
                                     {"Name": "probe", "Rules": NAMESPACE_ONLY})
        assert status == 200, body
        status, token, _ = agent.http("POST", "/v1/acl/token",
                                      {"Name": "probe", "Type": "client", "Policies": ["probe"]})
        assert status == 200, token
        # nomad-alloc-stop's jobs have no delay, and restart-flag is not run for this token.
        code, output, report = probe(
            agent.address, "--token", token["SecretID"], "--scenario", "job-stop-flagged",
            "--scenario", "nomad-alloc-stop", "--scenario", "restart-flag", *FLAGGED_ONLY_DELAY)
        assert code == 0, output
        assert "/v1/agent/self refused (403)" in output and "lacks node:read" in output, output
        seen = verdicts(report)
        assert seen[("job-stop-flagged", "flag_is_honoured")] == "holds", output
        assert seen[("nomad-alloc-stop", "stop_recorded")] == "holds", output
        # The witness may not list the services without a token: not observable, never held.
        assert seen[("job-stop-flagged", "prestop_hooks_always_run")] == "not observable"
        assert "could not list the services" in output
        # The restart flag is not advertised to this token.
        assert seen[("restart-flag", "restart_flag_one_shot")] == "not observable"
        assert probe_jobs(agent) == []
    finally:
        agent.close()
    validate_log(agent)


def test_an_interrupted_probe_purges_its_jobs(agent):
    process = subprocess.Popen(
        [CONFORM, "probe", "--address", agent.address, "--scenario", "job-stop", "--delay", "20s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
    agent.wait_until("the probe's job", lambda: probe_jobs(agent), timeout=30)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert "interrupted" in output and "FAILED" in output, output
    assert probe_jobs(agent) == [], output


def test_bad_arguments_are_named(agent):
    for args, words in [
        (["--scenario", "no-such"], "unknown scenario \"no-such\""),
        (["--delay", "soon"], "--delay \"soon\""),
        (["--delay", "0s"], "--delay \"0s\""),
    ]:
        done = subprocess.run([CONFORM, "probe", "--address", agent.address, *args],
                              capture_output=True, text=True, env=clean_env())
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
    # --list needs no cluster.
    done = subprocess.run([CONFORM, "probe", "--list"], capture_output=True, text=True,
                          env=clean_env())
    assert done.returncode == 0 and "nomad-overlap" in done.stdout, done.stderr
    assert "restart_flag_one_shot" in done.stdout
    done = subprocess.run([CONFORM, "probe"], capture_output=True, text=True, env=clean_env())
    assert done.returncode == 2 and "--address" in done.stderr, done.stderr
    done = subprocess.run([CONFORM, "probe", "--address", "https://x"],
                          capture_output=True, text=True, env=clean_env())
    assert done.returncode == 2 and "not an http:// URL" in done.stderr, done.stderr
    assert probe_jobs(agent) == []


def test_a_probe_started_with_its_agent_waits_for_a_ready_node(tmp_path):
    """As scripts start them: `quiesce agent -dev & quiesce-conform probe …` at once. The
    agent is not listening yet and its node is ready only at its first heartbeat; the probe
    says what it waits for, and runs once the node is ready."""
    agent = Agent(tmp_path / "data")
    agent.port = free_port()
    agent.address = f"http://127.0.0.1:{agent.port}"
    agent.proc = subprocess.Popen(
        [QUIESCE, "agent", "-dev", "-data-dir", str(agent.data_dir), "-port", str(agent.port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    try:
        code, output, report = probe(agent.address, "--scenario", "job-stop-flagged",
                                     *FLAGGED_ONLY_DELAY, "--patience", "30s")
        assert code == 0, output
        assert "waiting up to 30 s for " in output, output
        assert verdicts(report)[("job-stop-flagged", "flag_is_honoured")] == "holds", output
    finally:
        agent.close()


def test_a_probe_whose_patience_runs_out_says_what_it_waited_for():
    port = free_port()
    started = time.monotonic()
    code, output, _ = probe(f"http://127.0.0.1:{port}", "--patience", "1s", timeout=60)
    took = time.monotonic() - started
    assert code != 0, output
    assert "waiting up to 1 s for the agent to answer" in output, output
    assert "waited" in output and "--patience 1 s" in output, output
    # It gave up once its patience ran out, not at the first refusal nor much later.
    assert 1.0 <= took < 20, took
