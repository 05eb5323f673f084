"""A full disk (issue 12, part 6): before, a write got a 500 and then the agent exited. Now
writes fail with a 5xx naming the OS error, reads keep answering, tasks run on, and writes
succeed again once there is room, without a restart; nothing acknowledged is lost."""

import os
import subprocess

import pytest

from conftest import Agent, fill_disk, validate_log


def padded_job(job_id, pad_bytes):
    """A job with no allocation, whose spec is `pad_bytes` of a task's Env: it takes room
    and starts nothing."""
    return {"Job": {"ID": job_id, "TaskGroups": [{
        "Name": "g", "Count": 0, "Tasks": [{"Name": "t", "Driver": "raw_exec",
                                            "Env": {"PAD": "x" * pad_bytes},
                                            "Config": {"command": "/bin/true"}}]}]}}


def sleep_job(job_id):
    return {"Job": {"ID": job_id, "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sleep", "args": ["1000"]}}]}]}}


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "data"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_refuses_writes_keeps_reads_and_recovers_without_a_restart(small_disk):
    # The data dir is the small disk itself; the agent's stderr is beside it, on a disk with
    # room.
    agent = Agent(small_disk)
    agent.start()
    try:
        agent.http("PUT", "/v1/jobs", sleep_job("first"))
        [alloc] = agent.running("first", 1)
        pid = int(next(p for p in os.listdir("/proc") if p.isdigit() and _is_task(p, alloc)))
        fill_disk(small_disk / "filler")
        assert agent.proc.poll() is None, agent.stderr()
        # Writes until one fails (the store may have room left in its own file).
        failed, acknowledged = None, []
        for n in range(40):
            status, text, _ = agent.http("PUT", "/v1/jobs", padded_job(f"pad-{n}", 200_000))
            if status != 200:
                failed = (status, text, f"pad-{n}")
                break
            acknowledged.append(f"pad-{n}")
        assert failed, "no write failed on a full disk"
        assert failed[0] >= 500 and "No space left on device" in failed[1], failed
        # The write in flight when the disk filled is kept for the retry (a 500); had another
        # commit failed first, it would have been refused up front (a 503).
        kept = [failed[2]] if failed[0] == 500 else []
        assert failed[0] == 503 or "keeps it" in failed[1], failed
        status, text, _ = agent.http("PUT", "/v1/jobs", padded_job("refused", 10))
        assert status == 503 and "No space left on device" in text, (status, text)
        assert agent.proc.poll() is None, "the agent exited"
        # Reads answer, and the task runs on.
        assert agent.get("/v1/job/first")["ID"] == "first"
        assert agent.get(f"/v1/allocation/{alloc['ID']}")["ClientStatus"] == "running"
        os.kill(pid, 0)
        # Room again: writes are taken, without a restart.
        os.unlink(small_disk / "filler")
        agent.wait_until("a write to succeed",
                         lambda: agent.http("PUT", "/v1/jobs", padded_job("after", 10))[0] == 200)
        assert "storing state again" in agent.stderr()
        # Nothing acknowledged is lost: a restart (kill -9) has every job answered 200, and
        # the one kept for a retry; not the one refused.
        agent.kill9()
        agent.start()
        for job in ["first", *acknowledged, *kept, "after"]:
            assert agent.get(f"/v1/job/{job}")["ID"] == job
        assert agent.http("GET", "/v1/job/refused")[0] == 404
        assert agent.http("DELETE", "/v1/job/first?no_shutdown_delay=true")[0] == 200
        agent.wait_terminal([alloc["ID"]])
        # The task itself is gone: the stop reached it after the outage and the restart.
        agent.wait_until("the task to die", lambda: not _is_task(str(pid), alloc))
    finally:
        agent.close()
    validate_log(agent)


def _is_task(pid, alloc):
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            found = f"NOMAD_ALLOC_ID={alloc['ID']}".encode() in environ.read()
        with open(f"/proc/{pid}/comm") as comm:
            return found and comm.read().strip() == "sleep"
    except OSError:
        return False
