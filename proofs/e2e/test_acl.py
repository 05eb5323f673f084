"""ACLs as Nomad has them (issue 12, part 1), driven by Nomad's own clients with tokens:
without a token nothing is allowed, a second bootstrap is refused, a client token may do
what its policies grant and no more (403 `Permission denied`), an unknown token is
`ACL token not found`, and tokens and policies survive a restart. Before this, anyone who
reached the port could run commands as root."""

import json
import os
import subprocess

import nomad
import nomadpy
import pytest

from conftest import QUIESCE, Agent, clean_env, validate_log, web_job

OPERATOR = """
namespace "default" {
  policy       = "read"
  capabilities = ["alloc-lifecycle"]
}
"""
DEPLOYER = 'namespace "default" { policy = "write" }'


@pytest.fixture
def acl_agent(tmp_path):
    agent = Agent(tmp_path / "data")
    agent.start(args=["-acl-enabled"])
    yield agent
    agent.close()
    validate_log(agent)


def python_nomad(agent, token=None):
    host, port = agent.address.removeprefix("http://").rsplit(":", 1)
    return nomad.Nomad(host=host, port=int(port), token=token)


def cli(agent, *args, token=None, stdin=None):
    env = clean_env(NOMAD_ADDR=agent.address, **({"NOMAD_TOKEN": token} if token else {}))
    return subprocess.run([QUIESCE, *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=60)


def output_fields(text):
    """The `Key = value` lines of Nomad-style output."""
    pairs = (line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    return {key.strip(): value.strip() for key, value in pairs}


def test_without_a_token_nothing_is_allowed_and_the_bootstrap_is_once(acl_agent):
    agent = acl_agent
    job = web_job(agent.address)
    for method, path, body in [
            ("GET", "/v1/jobs", None), ("PUT", "/v1/jobs", job), ("POST", "/v1/job/web", job),
            ("DELETE", "/v1/job/web?purge=true", None), ("GET", "/v1/job/web", None),
            ("GET", "/v1/job/web/allocations", None), ("GET", "/v1/job/web/versions", None),
            ("POST", "/v1/jobs/parse", {"JobHCL": 'job "x" {}'}),
            ("GET", "/v1/allocations", None), ("GET", "/v1/allocation/0123", None),
            ("POST", "/v1/allocation/0123/stop?no_shutdown_delay=true", None),
            ("GET", "/v1/evaluations", None), ("GET", "/v1/evaluation/0123", None),
            ("GET", "/v1/services", None), ("GET", "/v1/service/web", None),
            ("GET", "/v1/agent/self", None), ("GET", "/v1/acl/tokens", None),
            ("POST", "/v1/acl/token", {"Name": "x", "Type": "management"}),
            ("POST", "/v1/acl/policy/p", {"Rules": 'namespace "*" { policy = "write" }'}),
            ("GET", "/v1/acl/token/self", None)]:
        status, text, _ = agent.http(method, path, body)
        denied = "ACL token not found" if path.endswith("token/self") else "Permission denied"
        assert (status, text) == (403, denied), (method, path, status, text)
    # The leader needs no token, as in Nomad.
    assert agent.http("GET", "/v1/status/leader")[0] == 200
    root = python_nomad(agent).acl.generate_bootstrap()
    assert root["Type"] == "management" and root["Name"] == "Bootstrap Token"
    status, text, _ = agent.http("POST", "/v1/acl/bootstrap")
    assert status == 400 and text.startswith("ACL bootstrap already done"), text
    status, text, _ = agent.http("GET", "/v1/jobs", headers={"X-Nomad-Token": "nope"})
    assert (status, text) == (403, "ACL token not found")
    # Bearer works as X-Nomad-Token does.
    status, jobs, _ = agent.http("GET", "/v1/jobs",
                                 headers={"Authorization": f"Bearer {root['SecretID']}"})
    assert (status, jobs) == (200, [])


def test_client_tokens_may_do_what_their_policies_grant(acl_agent):
    agent = acl_agent
    root = python_nomad(agent).acl.generate_bootstrap()["SecretID"]
    admin = python_nomad(agent, token=root)
    assert admin.acl.create_policy("operator", {"Name": "operator", "Rules": OPERATOR}).ok
    assert admin.acl.create_policy("deployer", {"Name": "deployer", "Rules": DEPLOYER}).ok
    operator = admin.acl.create_token({"Name": "on-call", "Type": "client",
                                       "Policies": ["operator"]})
    deployer = admin.acl.create_token({"Name": "ci", "Type": "client",
                                       "Policies": ["deployer"]})
    assert {t["Name"] for t in admin.acl.get_tokens()} == {"Bootstrap Token", "on-call", "ci"}

    # The deployer registers a job (python-nomad); the operator may not.
    python_nomad(agent, token=deployer["SecretID"]).jobs.register_job(web_job(agent.address))
    agent.token = root
    [alloc] = agent.running("web", 1)
    with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException):
        python_nomad(agent, token=operator["SecretID"]).jobs.register_job(
            web_job(agent.address, job_id="other"))

    # The operator reads and stops an allocation (nomadpy), but may not stop the job.
    client = nomadpy.Client(nomadpy.Config(address=agent.address,
                                           secret_id=operator["SecretID"]))
    stubs, _ = client.jobs.list()
    assert [s.id for s in stubs] == ["web"]
    with pytest.raises(nomadpy.UnexpectedResponseError) as denied:
        client.jobs.deregister("web", no_shutdown_delay=True)
    assert denied.value.status_code == 403
    assert agent.get("/v1/job/web")["Stop"] is False
    # A client token manages nothing: no token, no policy, not even the list.
    for method, path, body in [
            ("POST", "/v1/acl/token", {"Name": "x", "Type": "management"}),
            ("POST", "/v1/acl/policy/operator", {"Rules": 'namespace "*" { policy = "write" }'}),
            ("DELETE", "/v1/acl/policy/operator", None), ("GET", "/v1/acl/tokens", None),
            ("GET", f"/v1/acl/token/{deployer['AccessorID']}", None),
            ("DELETE", f"/v1/acl/token/{deployer['AccessorID']}", None)]:
        status, text, _ = agent.http(method, path, body,
                                     headers={"X-Nomad-Token": operator["SecretID"]})
        assert (status, text) == (403, "Permission denied"), (method, path, status, text)
    client.allocations.stop(alloc["ID"])
    # The task itself received its kill signal.
    agent.wait_terminal([alloc["ID"]])
    record = agent.exit_record(alloc["ID"], "server")
    assert [d["forced"] for d in record["delivered"]] == [False], record

    # Self, and a token that is deleted stops working at once.
    me = python_nomad(agent, token=operator["SecretID"]).acl.get_self_token()
    assert me["AccessorID"] == operator["AccessorID"] and me["Policies"] == ["operator"]
    assert admin.acl.delete_token(operator["AccessorID"])
    status, text, _ = agent.http("GET", "/v1/jobs",
                                 headers={"X-Nomad-Token": operator["SecretID"]})
    assert (status, text) == (403, "ACL token not found")

    # A policy with bad rules is refused by name and the old one stays.
    status, text, _ = agent.http(
        "POST", "/v1/acl/policy/deployer",
        {"Name": "deployer", "Rules": 'namespace "default" { policy = "admin" }'},
        headers={"X-Nomad-Token": root})
    assert status == 400 and '"admin"' in text, text
    assert admin.acl.get_policy("deployer")["Rules"] == DEPLOYER

    # Everything survives a restart: tokens, policies, a deletion and the bootstrap.
    agent.close()
    agent.start(args=["-acl-enabled"])
    again = python_nomad(agent, token=deployer["SecretID"]).acl.get_self_token()
    assert again["Name"] == "ci"
    assert python_nomad(agent, token=root).acl.get_policy("operator")["Rules"] == OPERATOR
    status, text, _ = agent.http("GET", "/v1/jobs",
                                 headers={"X-Nomad-Token": operator["SecretID"]})
    assert (status, text) == (403, "ACL token not found")
    status, text, _ = agent.http("POST", "/v1/acl/bootstrap", headers={"X-Nomad-Token": ""})
    assert status == 400 and "already done" in text, text


def test_rights_in_another_namespace_grant_nothing(acl_agent):
    """The review's bypass: every object is in `default`, so a token with rights only in
    `sandbox` (or an anonymous policy with them) may not reach jobs by saying
    `?namespace=sandbox`, and no job can be registered outside `default`."""
    agent = acl_agent
    root = python_nomad(agent).acl.generate_bootstrap()["SecretID"]
    agent.token = root
    agent.http("POST", "/v1/acl/policy/sandbox",
               {"Rules": 'namespace "sandbox" { policy = "write" }'})
    agent.http("POST", "/v1/acl/policy/anonymous",
               {"Rules": 'namespace "sandbox" { policy = "write" }'})
    _, sandboxed, _ = agent.http("POST", "/v1/acl/token",
                                 {"Name": "s", "Type": "client", "Policies": ["sandbox"]})
    for token in [sandboxed["SecretID"], ""]:
        for method, path, body in [
                ("GET", "/v1/jobs?namespace=sandbox", None),
                ("PUT", "/v1/jobs?namespace=sandbox", web_job(agent.address)),
                ("DELETE", "/v1/job/web?namespace=sandbox", None)]:
            status, text, _ = agent.http(method, path, body, headers={"X-Nomad-Token": token})
            assert (status, text) == (403, "Permission denied"), (token, method, path)
    elsewhere = web_job(agent.address)
    elsewhere["Job"]["Namespace"] = "sandbox"
    status, text, _ = agent.http("PUT", "/v1/jobs", elsewhere)
    assert status == 400 and 'nonexistent namespace "sandbox"' in text, text
    assert agent.get("/v1/jobs") == []


def test_the_cli_bootstraps_applies_policies_and_creates_tokens(acl_agent, tmp_path):
    agent = acl_agent
    done = cli(agent, "acl", "bootstrap")
    assert done.returncode == 0, done.stderr
    fields = output_fields(done.stdout)
    root = fields["Secret ID"]
    assert fields["Type"] == "management"
    rules = tmp_path / "deployer.hcl"
    rules.write_text(DEPLOYER)
    applied = cli(agent, "acl", "policy", "apply", "-description", "CI", "deployer", str(rules),
                  token=root)
    assert applied.returncode == 0, applied.stderr
    assert "Successfully wrote" in applied.stdout
    created = cli(agent, "acl", "token", "create", "-name", "ci", "-policy", "deployer",
                  token=root)
    assert created.returncode == 0, created.stderr
    secret = output_fields(created.stdout)["Secret ID"]
    jobfile = tmp_path / "web.json"
    jobfile.write_text(json.dumps(web_job(agent.address)))
    # -token as NOMAD_TOKEN.
    ran = cli(agent, "job", "run", "-detach", "-token", secret, str(jobfile))
    assert ran.returncode == 0, ran.stderr
    agent.token = root
    agent.running("web", 1)
    agent.token = None
    refused = cli(agent, "job", "status")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    stopped = cli(agent, "job", "stop", "-no-shutdown-delay", "web", token=secret)
    assert stopped.returncode == 0, stopped.stderr
    agent.token = root
    assert agent.get("/v1/job/web")["Stop"] is True


def test_tasks_do_not_inherit_the_operators_token_or_cloud_secrets(tmp_path):
    """An agent started from a shell with NOMAD_TOKEN (an operator's, likely management)
    and cloud credentials passed them to every task it ran: a task could then drive the
    agent, ACLs or not, with the operator's rights. Tasks inherit the agent's environment
    without Nomad's default `env.denylist` and NOMAD_TOKEN; the job's own `Env` still
    reaches them, and so does the rest."""
    agent = Agent(tmp_path / "data")
    agent.start(args=["-acl-enabled"], env={
        "NOMAD_TOKEN": "00000000-0000-4000-8000-00000000beef",
        "AWS_SECRET_ACCESS_KEY": "hunter2", "VAULT_TOKEN": "s.vault", "QUIESCE_PLAIN": "kept"})
    try:
        agent.token = python_nomad(agent).acl.generate_bootstrap()["SecretID"]
        job = {"Job": {"ID": "env", "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Env": {"VAULT_TOKEN": "the-jobs-own"},
            "Config": {"command": "/bin/sleep", "args": ["1000"]}}]}]}}
        assert agent.http("PUT", "/v1/jobs", job)[0] == 200
        [alloc] = agent.running("env", 1)
        marker = f"NOMAD_ALLOC_ID={alloc['ID']}".encode()

        def task_environ():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as environ:
                        found = environ.read()
                    with open(f"/proc/{pid}/comm") as comm:
                        if marker in found and comm.read().strip() == "sleep":
                            return dict(item.split(b"=", 1) for item in found.split(b"\0")
                                        if b"=" in item)
                except OSError:
                    continue
            return None

        environ = agent.wait_until("the task's environment", task_environ)
        assert b"NOMAD_TOKEN" not in environ and b"AWS_SECRET_ACCESS_KEY" not in environ
        assert environ[b"VAULT_TOKEN"] == b"the-jobs-own"
        assert environ[b"QUIESCE_PLAIN"] == b"kept"
        assert agent.http("DELETE", "/v1/job/env?no_shutdown_delay=true")[0] == 200
        agent.wait_terminal([alloc["ID"]])
    finally:
        agent.close()
    validate_log(agent)
