"""`alloc fs` (issue 27): an allocation's directory, read-only, through
`/v1/client/fs/{ls,stat,cat,readat}` — and the agent, root, reading inside a directory a
`nobody` task owns and rearranges as it likes, never reads anything outside it.

Tried as an attacker would: a `User = "nobody"` task puts a symbolic link to a root-only
file, a FIFO, a hard link and a subdirectory in its `local/` (and the test plants a
root-only file there, as a task's hard link could), and then, in a loop as fast as it can,
exchanges that subdirectory with a link to a root-only directory
(`renameat2(RENAME_EXCHANGE)`) while the test reads a file inside it again and again. Each
read must be the task's own file or a refusal — never root's secret, never a hang."""

import os
import urllib.error
import urllib.request

SECRET = "root's secret\n"

TASK = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
victim_dir = sys.argv[1]
os.makedirs("local/d", exist_ok=True)
with open("local/d/app.conf", "w") as f:
    f.write("the task's own\n")
with open("local/out.txt", "w") as f:
    f.write("".join(f"line {i}\n" for i in range(1, 101)))
os.symlink(victim_dir + "/secret", "local/link")
os.symlink(victim_dir, "local/e")
os.mkfifo("local/pipe")
with open("local/own", "w") as f:
    f.write("linked\n")
os.link("local/own", "local/own.link")
print("racing", flush=True)
fd = os.open("local", os.O_RDONLY | os.O_DIRECTORY)
# `d` a link half the time, the directory the other half.
while True:
    libc.renameat2(fd, b"d", fd, b"e", RENAME_EXCHANGE)
    time.sleep(0.0005)
    libc.renameat2(fd, b"d", fd, b"e", RENAME_EXCHANGE)
    time.sleep(0.0005)
"""


def job(victim_dir):
    return {"Job": {"ID": "files", "TaskGroups": [{
        "Name": "g",
        "Tasks": [{"Name": "main", "Driver": "raw_exec", "User": "nobody",
                   "Config": {"command": "/usr/bin/python3",
                              "args": ["-c", TASK, str(victim_dir)]}}],
    }]}}


def raw(agent, path):
    """(status, bytes) of a GET whose answer is not JSON."""
    request = urllib.request.Request(agent.address + path)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def started(agent, tmp_path):
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir(mode=0o700)
    (victim_dir / "secret").write_text(SECRET)
    (victim_dir / "secret").chmod(0o600)
    (victim_dir / "app.conf").write_text(SECRET)
    (victim_dir / "app.conf").chmod(0o600)
    status, answer, _ = agent.http("PUT", "/v1/jobs", job(victim_dir))
    assert status == 200, answer
    [alloc] = agent.running("files", 1)
    alloc_id = alloc["ID"]
    agent.wait_until("the task to race", lambda: "racing" in (
        agent.task_dir(alloc_id, "main") / "stdout.log").read_text())
    return alloc_id


def test_alloc_fs_lists_prints_and_stats_as_nomad_and_refuses_links_fifos_and_dotdot(agent, tmp_path):
    alloc_id = started(agent, tmp_path)

    # The allocation's directory: the task's directory in it.
    top = agent.cli("alloc", "fs", alloc_id[:8]).stdout.splitlines()
    assert top[0].split() == ["Mode", "Size", "Modified", "Time", "Name"], top
    assert any(line.split()[-1] == "main/" for line in top[1:]), top

    listed = agent.get(f"/v1/client/fs/ls/{alloc_id}?path=/main/local")
    modes = {entry["Name"]: entry["FileMode"] for entry in listed}
    assert modes["link"].startswith("L"), modes
    assert modes["pipe"].startswith("p"), modes
    assert modes["out.txt"] == "-rw-r--r--", modes
    assert [entry["Name"] for entry in listed] == sorted(modes), "sorted by name"

    # A file printed whole, its end with -tail, its description with -stat.
    printed = agent.cli("alloc", "fs", alloc_id, "main/local/out.txt").stdout
    assert printed == "".join(f"line {i}\n" for i in range(1, 101))
    assert agent.cli("alloc", "fs", "-tail", "-n", "2", alloc_id,
                     "main/local/out.txt").stdout == "line 99\nline 100\n"
    assert agent.cli("alloc", "fs", "-tail", "-c", "4", alloc_id,
                     "main/local/out.txt").stdout == "100\n"
    stat = agent.cli("alloc", "fs", "-stat", "-H", alloc_id, "main/local/out.txt").stdout
    assert stat.splitlines()[1].split()[1] == str(len(printed)), stat

    # A link is listed, never followed: neither read nor stat'ed through.
    refused = agent.cli("alloc", "fs", alloc_id, "main/local/link", check=False)
    assert refused.returncode == 1 and SECRET.strip() not in refused.stdout + refused.stderr
    assert "symbolic link" in refused.stderr, refused.stderr
    status, body = raw(agent, f"/v1/client/fs/readat/{alloc_id}?path=main/local/e/secret"
                              "&offset=0&limit=100")
    assert status in (400, 404) and SECRET.encode() not in body, (status, body)

    # A FIFO is not opened (the read would hang on an empty one): refused at once.
    status, body = raw(agent, f"/v1/client/fs/cat/{alloc_id}?path=main/local/pipe")
    assert status == 400 and b"not a plain file" in body, (status, body)
    refused = agent.cli("alloc", "fs", alloc_id, "main/local/pipe", check=False)
    assert refused.returncode == 1 and "not a plain file (prw" in refused.stderr, refused

    # A hard link of the task's own file is its own to read; a file of the host its user
    # cannot read — here linked in by root, as a task could with fs.protected_hardlinks
    # off — is not read, whatever its link count.
    status, body = raw(agent, f"/v1/client/fs/cat/{alloc_id}?path=main/local/own.link")
    assert (status, body) == (200, b"linked\n"), (status, body)
    planted = agent.task_dir(alloc_id, "main") / "local" / "planted"
    try:
        os.link(tmp_path / "victim" / "secret", planted)
    except OSError:
        planted.write_text(SECRET)
        planted.chmod(0o600)
    status, body = raw(agent, f"/v1/client/fs/cat/{alloc_id}?path=main/local/planted")
    assert status == 403 and SECRET.encode() not in body, (status, body)
    assert b"not readable by the task's user" in body, body

    # `..` never leaves the allocation, however it is spelled.
    for path in ["..", "/main/../..", "main/local/d/../../../..", "%2e%2e"]:
        status, body = raw(agent, f"/v1/client/fs/ls/{alloc_id}?path={path}")
        assert status == 400 and b"escapes" in body, (path, status, body)

    # A missing path and a missing file name are Nomad's errors.
    status, body = raw(agent, f"/v1/client/fs/cat/{alloc_id}")
    assert status == 400 and b"must provide a file name" in body
    status, body = raw(agent, f"/v1/client/fs/stat/{alloc_id}?path=main/none")
    assert status == 404, (status, body)


def test_a_nobody_task_swapping_links_in_mid_read_never_makes_root_read_outside_it(agent, tmp_path):
    alloc_id = started(agent, tmp_path)
    reads = dict(own=0, refused=0)
    for _ in range(int(os.environ.get("QUIESCE_FS_RACE_READS", "400"))):
        status, body = raw(agent, f"/v1/client/fs/cat/{alloc_id}?path=main/local/d/app.conf")
        assert SECRET.encode() not in body, "root read the file behind the link"
        if status == 200:
            assert body == b"the task's own\n", body
            reads["own"] += 1
        else:
            assert status in (400, 404), (status, body)
            reads["refused"] += 1
    # Both sides of the race were met: the exchange really raced the reads.
    assert reads["own"] > 0, reads
    assert reads["refused"] > 0, reads
