"""The CLI's output has Nomad's layout (issue 27): for each command an operator types around
the stop path, the section headings, the keys of each `key = value` block and the columns
of each table, in order, are those of a sample of Nomad's output in `nomad_samples/` (one
file per command, written from the format strings in Nomad's command/*.go). Values are not
compared. A sample's comment lines may record where quiesce differs, and why:

    # except: KIND TEXT: why      Nomad prints this item; quiesce cannot
    # extra: KIND TEXT: why       quiesce prints this item; Nomad does not

KIND is `heading`, `key` or `columns`, TEXT the item as `layout()` extracts it."""

import difflib
import pathlib
import re

import pytest

from conftest import SECOND

SAMPLES = pathlib.Path(__file__).resolve().parent / "nomad_samples"

# `Key    = value` (Nomad's formatKV): the key is words, without parentheses, so a heading such
# as `Allocation Addresses (mode = "host"):` is not read as one.
KEY = re.compile(r"^([A-Za-z][A-Za-z0-9 /.-]*?) +=(?: |$)")
# Two spaces or more between cells: a table's line (Nomad's formatList, columnize).
GAP = re.compile(r"\S {2,}\S")


def normal_heading(line):
    """A heading without its values: quoted names become `"*"`, and words holding a digit
    (versions, dates, hashes) `*`."""
    line = re.sub(r'"[^"]*"', '"*"', line.strip())
    return " ".join("*" if re.search(r"\d", word) else word for word in line.split())


def layout(text):
    """The layout of a command's output: `(kind, text)` items in order, kind `heading` (a
    line of its own), `key` (of a `key = value` line) or `columns` (a table's header, its
    cells joined by `|`). A table's rows, up to the next blank line, are values: skipped."""
    items = []
    in_table = False
    for line in text.splitlines():
        if not line.strip():
            in_table = False
            continue
        if in_table:
            continue
        key = KEY.match(line)
        if key:
            items.append(("key", key.group(1).strip()))
        elif GAP.search(line):
            items.append(("columns", "|".join(re.split(r" {2,}", line.strip()))))
            in_table = True
        else:
            items.append(("heading", normal_heading(line)))
    return items


def sample(name):
    """(the layout Nomad's sample has, with its exceptions applied; the exceptions)"""
    text = (SAMPLES / f"{name}.txt").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    expected = layout(body)
    exceptions = re.findall(r"^# (except|extra): (heading|key|columns) (.+?): (.+)$", text, re.M)
    for what, kind, item, _why in exceptions:
        if what == "except":
            assert (kind, item) in expected, f"{name}: no {kind} {item!r} in Nomad's sample"
            expected.remove((kind, item))
    return expected, exceptions


def compare(name, actual_text):
    """Asserts that `actual_text` has the layout of Nomad's sample `name`; an `extra` item
    quiesce prints goes where it is printed."""
    expected, exceptions = sample(name)
    actual = layout(actual_text)
    extras = [(kind, item) for what, kind, item, _ in exceptions if what == "extra"]
    for extra in extras:
        assert extra in actual, f"{name}: the recorded extra {extra} is not printed:\n{actual_text}"
    kept = [item for item in actual if item not in extras]
    if kept != expected:
        diff = "\n".join(difflib.unified_diff(
            [f"{k}: {t}" for k, t in expected], [f"{k}: {t}" for k, t in kept],
            "nomad_samples/" + name + ".txt", "quiesce", lineterm=""))
        pytest.fail(f"{name}: the layout differs from Nomad's\n{diff}\n\nquiesce printed:\n{actual_text}")


# -- the extractor itself --------------------------------------------------------------------

def test_the_extractor_reads_headings_keys_and_columns_and_skips_values():
    text = ('ID     = x\nName   = a = b\nEmpty  =\n\nSummary\nTask Group  Queued\nweb         0\n'
            'one-cell-row\n\nTask "server" (poststop) is "dead"\n'
            'Allocation Addresses (mode = "host"):\nLabel  Address\n*http  1:2\n\nNomad v1.9.0\n')
    assert layout(text) == [
        ("key", "ID"), ("key", "Name"), ("key", "Empty"),
        ("heading", "Summary"), ("columns", "Task Group|Queued"),
        ("heading", 'Task "*" (poststop) is "*"'),
        ("heading", 'Allocation Addresses (mode = "*"):'), ("columns", "Label|Address"),
        ("heading", "Nomad *"),
    ]


def test_a_changed_order_a_missing_key_or_column_fails(tmp_path):
    assert layout("A = 1\nB = 2") != layout("B = 2\nA = 1")
    assert layout("ID  Status\nx   y") != layout("ID  Status  Created\nx   y   z")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)-key: Description.*\+key: Status"):
        compare("deployment_status", "ID = x\nJob ID = w\nJob Version = 0\nStatus = s\n"
                "Status = t\n\nDeployed\nTask Group  Desired  Placed  Healthy  Unhealthy  "
                "Progress Deadline\n")


def test_every_sample_s_exceptions_name_items_of_the_sample():
    names = sorted(p.stem for p in SAMPLES.glob("*.txt"))
    assert len(names) == 14, names
    for name in names:
        text = (SAMPLES / f"{name}.txt").read_text()
        assert layout("\n".join(l for l in text.splitlines() if not l.startswith("#"))), name
        _, exceptions = sample(name)  # asserts each `except` names an item of Nomad's sample
        assert all(why.strip() for *_, why in exceptions), f"{name}: an exception without a why"


# -- the commands, against a real agent --------------------------------------------------------

def layout_job(agent):
    """A service job whose task is /bin/sleep, with a dynamic port, a service with tags and
    an update block (so its registration opens a deployment)."""
    return {"Job": {
        "ID": "web",
        "Datacenters": ["*"],
        "TaskGroups": [{
            "Name": "web",
            "Count": 1,
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [{"Name": "web-http", "Provider": "nomad", "PortLabel": "http",
                          "Tags": ["http", "v1"]}],
            "Update": {"MaxParallel": 1, "MinHealthyTime": SECOND // 10,
                       "HealthyDeadline": 60 * SECOND, "ProgressDeadline": 600 * SECOND},
            "Tasks": [{
                "Name": "server",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["600"]},
                "Resources": {"CPU": 100, "MemoryMB": 64},
            }],
        }],
    }}


@pytest.fixture
def placed(agent):
    """The agent with the job running and its deployment successful: (agent, allocation,
    registration's evaluation, deployment)."""
    status, answer, _ = agent.http("PUT", "/v1/jobs", layout_job(agent))
    assert status == 200, answer
    [alloc] = agent.running("web", 1)
    deployment = agent.wait_until(
        "the deployment to succeed",
        lambda: [d for d in agent.get("/v1/job/web/deployments") if d["Status"] == "successful"])
    yield agent, alloc, answer["EvalID"], deployment[0]
    agent.cli("job", "stop", "-purge", "-no-shutdown-delay", "web")


def test_job_commands_have_nomads_layout(placed):
    agent, _, _, _ = placed
    compare("job_status", agent.cli("job", "status", "web").stdout)
    compare("job_status_list", agent.cli("job", "status").stdout)
    compare("job_history", agent.cli("job", "history", "web").stdout)
    compare("job_allocs", agent.cli("job", "allocs", "web").stdout)
    compare("job_deployments", agent.cli("job", "deployments", "web").stdout)


def test_alloc_eval_and_deployment_commands_have_nomads_layout(placed):
    agent, alloc, eval_id, deployment = placed
    agent.wait_until("the allocation's health",
                     lambda: (agent.get(f"/v1/allocation/{alloc['ID']}").get("DeploymentStatus")
                              or {}).get("Healthy") is not None)
    compare("alloc_status", agent.cli("alloc", "status", alloc["ID"][:8]).stdout)
    compare("eval_status", agent.cli("eval", "status", eval_id[:8]).stdout)
    compare("deployment_status", agent.cli("deployment", "status", deployment["ID"][:8]).stdout)
    compare("deployment_list", agent.cli("deployment", "list").stdout)


def test_node_server_service_and_version_have_nomads_layout(placed):
    agent, _, _, _ = placed
    compare("node_status_list", agent.cli("node", "status").stdout)
    compare("node_status", agent.cli("node", "status", "-self").stdout)
    node_id = agent.get("/v1/nodes")[0]["ID"]
    compare("node_status", agent.cli("node", "status", node_id[:8]).stdout)
    compare("service_list", agent.cli("service", "list").stdout)
    compare("server_members", agent.cli("server", "members").stdout)
    compare("version", agent.cli("version").stdout)
