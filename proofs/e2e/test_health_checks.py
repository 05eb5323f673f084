"""`update { health_check = "checks" }` with a Nomad-native http check, judged by what real
processes felt: a replacement whose task runs but whose check fails is not healthy, so the
rollout stops no other old allocation; once its check passes for `min_healthy_time` it is
healthy, and only then is the next old task signalled (through the stop path: its service,
and its check, gone first). A `tcp` check passes once the task's port accepts a connection,
and holds the deployment until then. The checks endpoint answers each check's latest
result."""

import sys
import time

from conftest import SECOND
from test_deployments import unix_ns

# A task serving `/health` on its allocated port: 200 once the file `READY` exists, 503
# before; it writes the time it got its kill signal to `SIGNALLED`, then exits.
SERVER = r"""
import http.server, os, signal, sys, time
ready = os.environ["READY"]
signalled = os.path.join(os.environ["SIGNALLED_DIR"], "signalled-" + os.environ["NOMAD_ALLOC_ID"])
def stop(signum, frame):
    with open(signalled, "w") as f:
        f.write(str(time.time_ns()))
    os._exit(0)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health" and os.path.exists(ready)
        body = b"ok" if ok else b"not ready"
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
port = int(os.environ["NOMAD_PORT_http"])
http.server.HTTPServer((os.environ["NOMAD_IP_http"], port), Health).serve_forever()
"""

MIN_HEALTHY_S = 2


def checked_job(tmp_path, release, count=2):
    return {"Job": {"ID": "checked", "TaskGroups": [{
        "Name": "web",
        "Count": count,
        "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
        "Update": {"MaxParallel": 1, "HealthCheck": "checks",
                   "MinHealthyTime": MIN_HEALTHY_S * SECOND, "HealthyDeadline": 120 * SECOND},
        "Tasks": [{
            "Name": "server", "Driver": "raw_exec", "ShutdownDelay": SECOND // 2,
            "Config": {"command": sys.executable, "args": ["-c", SERVER]},
            "Env": {"READY": str(tmp_path / f"ready-{release}"),
                    "SIGNALLED_DIR": str(tmp_path),
                    "RELEASE": release},
            "Services": [{"Name": "checked", "Provider": "nomad", "PortLabel": "http",
                          "Checks": [{"Name": "alive", "Type": "http", "Path": "/health",
                                      "Interval": SECOND, "Timeout": SECOND}]}],
        }],
    }]}}


def checks(agent, alloc_id):
    return agent.get(f"/v1/client/allocation/{alloc_id}/checks")


def healthy(agent, alloc_id):
    return (agent.get(f"/v1/allocation/{alloc_id}")["DeploymentStatus"] or {}).get("Healthy")


def signalled_at(tmp_path, alloc_id):
    path = tmp_path / f"signalled-{alloc_id}"
    return int(path.read_text()) if path.exists() and path.read_text() else None


def test_a_failing_check_holds_the_rollout_until_it_passes_for_min_healthy_time(agent, tmp_path):
    (tmp_path / "ready-1").touch()
    assert agent.http("PUT", "/v1/jobs", checked_job(tmp_path, "1"))[0] == 200
    old = [a["ID"] for a in agent.running("checked", 2)]
    agent.wait_until("the first deployment to succeed",
                     lambda: (d := agent.get("/v1/job/checked/deployment")) and d["Status"] == "successful",
                     timeout=60)
    [result] = checks(agent, old[0]).values()
    assert (result["Status"], result["Mode"], result["StatusCode"]) == ("success", "healthiness", 200), result
    assert (result["Check"], result["Service"], result["Group"], result["Task"]) == (
        "alive", "checked", "web", "server"), result

    # Version 2 answers 503 until `ready-2` exists: its task runs, its check fails.
    assert agent.http("PUT", "/v1/jobs", checked_job(tmp_path, "2"))[0] == 200
    first_new = agent.wait_until("the first replacement to run", lambda: [
        a["ID"] for a in agent.allocs("checked")
        if a["ID"] not in old and a["ClientStatus"] == "running"])[0]
    stopped = [a for a in old if agent.get(f"/v1/allocation/{a}")["DesiredStatus"] == "stop"]
    assert len(stopped) == 1, stopped
    [kept] = [a for a in old if a not in stopped]
    # (Before the server listens, a failure without a status code: connection refused.)
    failing = agent.wait_until("the replacement's check to fail with a 503", lambda: [
        r for r in checks(agent, first_new).values() if r.get("StatusCode") == 503])
    assert failing[0]["Status"] == "failure" and failing[0]["Output"] == "not ready", failing
    time.sleep(MIN_HEALTHY_S * 2 + 1)
    assert not healthy(agent, first_new), "healthy while its check fails"
    assert signalled_at(tmp_path, kept) is None, "the next old task was signalled too early"
    assert agent.get(f"/v1/allocation/{kept}")["DesiredStatus"] == "run"
    assert agent.get("/v1/job/checked/deployment")["Status"] == "running"

    # The check passes from now on: healthy no sooner than min_healthy_time after.
    ready_at = time.time_ns()
    (tmp_path / "ready-2").touch()
    agent.wait_until("the replacement to be healthy", lambda: healthy(agent, first_new), timeout=30)
    healthy_at = unix_ns(agent.get(f"/v1/allocation/{first_new}")["DeploymentStatus"]["Timestamp"])
    assert healthy_at - ready_at >= MIN_HEALTHY_S * SECOND, (healthy_at - ready_at) / SECOND
    [passing] = checks(agent, first_new).values()
    assert passing["Status"] == "success", passing

    # Only then is the kept old task stopped, through the stop path.
    agent.wait_until("the kept old task to be signalled", lambda: signalled_at(tmp_path, kept), timeout=30)
    assert signalled_at(tmp_path, kept) > healthy_at
    agent.wait_terminal([kept])
    assert checks(agent, kept) == {}, "its check outlived its service"
    agent.wait_until("the deployment to succeed",
                     lambda: agent.get("/v1/job/checked/deployment")["Status"] == "successful",
                     timeout=60)
    assert agent.http("DELETE", "/v1/job/checked")[0] == 200
    agent.wait_terminal([a["ID"] for a in agent.allocs("checked")])


# A task that listens on its allocated port only once the file `READY` exists: before, a
# connection to the port is refused. It accepts and closes connections until killed.
LISTENER = r"""
import os, socket, time
ready = os.environ["READY"]
while not os.path.exists(ready):
    time.sleep(0.1)
server = socket.create_server((os.environ["NOMAD_IP_db"], int(os.environ["NOMAD_PORT_db"])))
while True:
    connection, _ = server.accept()
    connection.close()
"""


def tcp_checked_job(tmp_path):
    return {"Job": {"ID": "tcp-checked", "TaskGroups": [{
        "Name": "db",
        "Count": 1,
        "Networks": [{"DynamicPorts": [{"Label": "db"}]}],
        "Update": {"MaxParallel": 1, "HealthCheck": "checks",
                   "MinHealthyTime": MIN_HEALTHY_S * SECOND, "HealthyDeadline": 120 * SECOND},
        "Tasks": [{
            "Name": "listener", "Driver": "raw_exec",
            "Config": {"command": sys.executable, "args": ["-c", LISTENER]},
            "Env": {"READY": str(tmp_path / "listening")},
            "Services": [{"Name": "db", "Provider": "nomad", "PortLabel": "db",
                          "Checks": [{"Name": "accepts", "Type": "tcp",
                                      "Interval": SECOND, "Timeout": SECOND}]}],
        }],
    }]}}


def test_a_tcp_check_holds_the_deployment_until_the_port_accepts(agent, tmp_path):
    # The first registration's deployment waits for its allocation's health.
    assert agent.http("PUT", "/v1/jobs", tcp_checked_job(tmp_path))[0] == 200
    [alloc] = [a["ID"] for a in agent.running("tcp-checked", 1)]
    refused = agent.wait_until("the tcp check to fail while nothing listens", lambda: [
        r for r in checks(agent, alloc).values() if r["Status"] == "failure"])
    assert refused[0]["Mode"] == "healthiness" and "StatusCode" not in refused[0], refused
    assert refused[0]["Output"].startswith("nomad: dial tcp"), refused
    time.sleep(MIN_HEALTHY_S * 2 + 1)
    assert not healthy(agent, alloc), "healthy while its port refuses connections"
    assert agent.get("/v1/job/tcp-checked/deployment")["Status"] == "running"

    # The task listens from now on: healthy no sooner than min_healthy_time after.
    listening_at = time.time_ns()
    (tmp_path / "listening").touch()
    agent.wait_until("the allocation to be healthy", lambda: healthy(agent, alloc), timeout=30)
    healthy_at = unix_ns(agent.get(f"/v1/allocation/{alloc}")["DeploymentStatus"]["Timestamp"])
    assert healthy_at - listening_at >= MIN_HEALTHY_S * SECOND, (healthy_at - listening_at) / SECOND
    [passing] = checks(agent, alloc).values()
    assert (passing["Status"], passing["Output"], passing["Check"]) == (
        "success", "nomad: tcp ok", "accepts"), passing
    agent.wait_until("the deployment to succeed",
                     lambda: agent.get("/v1/job/tcp-checked/deployment")["Status"] == "successful",
                     timeout=30)
    assert agent.http("DELETE", "/v1/job/tcp-checked")[0] == 200
    agent.wait_terminal([alloc])


def test_a_check_endpoint_of_an_unknown_allocation_is_a_404(agent):
    status, *_ = agent.http("GET", "/v1/client/allocation/00000000-0000-0000-0000-000000000000/checks")
    assert status == 404
