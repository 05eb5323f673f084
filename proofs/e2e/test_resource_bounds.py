"""Nothing a client holds may grow without bound, and nothing a client leaves behind may
hold a place (issue 24). Each test is the attack, driven as it was: real sockets, real
processes, the agent's own memory read from /proc."""

import json
import select
import socket
import time

QUIET_JOB = {"Job": {"ID": "quiet", "TaskGroups": [{"Name": "g", "Tasks": [{
    "Name": "main", "Driver": "raw_exec",
    "Config": {"command": "/bin/sleep", "args": ["1000"]}}]}]}}


def raw_get(agent, path, timeout=5):
    """A GET on a socket of its own; returns the socket and the answer's head."""
    host, port = agent.address.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head.decode(errors="replace")


def test_followers_that_go_free_their_places_at_once_and_a_quiet_stream_sends_heartbeats(agent):
    """Issue 24, finding 5: 64 `follow=true` streams of a task that writes nothing, opened
    and dropped, held every place until the allocation ended (a stream noticed its client's
    going only when it had data to send). Now the 65th opens within a second of the others'
    going, and a quiet stream sends Nomad's heartbeat frame `{}` every second."""
    agent.http("PUT", "/v1/jobs", QUIET_JOB)
    [alloc] = agent.running("quiet", 1)
    path = f"/v1/client/fs/logs/{alloc['ID']}?task=main&type=stdout&follow=true"
    held = [raw_get(agent, path) for _ in range(64)]
    assert all(head.startswith("HTTP/1.1 200") for _, head in held), [h for _, h in held][:1]
    sock, head = raw_get(agent, path)
    assert head.startswith("HTTP/1.1 429"), head
    sock.close()
    for sock, _ in held:
        sock.close()
    dropped = time.monotonic()

    def opens():
        sock, head = raw_get(agent, path)
        if head.startswith("HTTP/1.1 200"):
            return sock
        sock.close()
        return None

    sock = agent.wait_until("a place to follow the log", opens, timeout=10)
    freed_after = time.monotonic() - dropped
    assert freed_after < 2.0, f"the places came free {freed_after:.2f} s after the clients went"
    # A quiet stream: heartbeats, about one a second (chunked: each frame is a chunk).
    sock.settimeout(5)
    received = b""
    started = time.monotonic()
    while received.count(b"{}") < 2:
        chunk = sock.recv(4096)
        assert chunk, "the stream ended"
        received += chunk
    took = time.monotonic() - started
    assert 1.0 <= took < 4.0, f"two heartbeats in {took:.2f} s"
    sock.close()
    # The task's own bytes still come as frames, once it writes (here: never), and the
    # stream of a plain follow has no heartbeat bytes in it.
    plain, head = raw_get(agent, path + "&plain=true")
    assert head.startswith("HTTP/1.1 200"), head
    plain.settimeout(2.5)
    try:
        extra = plain.recv(4096)
    except socket.timeout:
        extra = b""
    assert b"{}" not in extra, extra
    plain.close()


def agent_rss_mb(agent):
    for line in open(f"/proc/{agent.proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def hold_unread(agent, paths, seconds):
    """Sends each GET on a socket with a 4 KB receive buffer that is never read, and waits
    until every one has its answer's head (or `seconds` pass after the last is sent, which
    fails): the agent's pace must not decide how many answers it holds at once. Returns the
    agent's peak RSS meanwhile, and the sockets."""
    host, port = agent.address.removeprefix("http://").rsplit(":", 1)
    held = []
    peak = agent_rss_mb(agent)
    for path in paths:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        held.append(sock)
    waiting = {sock.fileno(): sock for sock in held}
    poller = select.poll()
    for fd in waiting:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + seconds
    while waiting:
        assert time.monotonic() < deadline, f"{len(waiting)} of {len(held)} never answered"
        for fd, _ in poller.poll(50):
            poller.unregister(fd)
            del waiting[fd]
        peak = max(peak, agent_rss_mb(agent))
    # A moment more: the agent's memory after the last answer is encoded.
    for _ in range(5):
        time.sleep(0.05)
        peak = max(peak, agent_rss_mb(agent))
    return peak, held


def statuses(held):
    counts = {}
    for sock in held:
        sock.settimeout(5)
        head = sock.recv(4096).decode(errors="replace")
        code = head.split(" ")[1]
        counts[code] = counts.get(code, 0) + 1
        if code == "503":
            assert "retry-after: 1" in head.lower(), head
        sock.close()
    return counts


def test_clients_that_never_read_hold_one_shared_copy_within_a_budget(agent):
    """Issue 24, finding 3: 300 sockets asking for /v1/allocations (1,000 allocations) with a
    4 KB receive buffer, never reading, took the agent from 40 MB to 1.56 GB. The same
    answer is now one encoded copy however many hold it (+200 MB at most, the issue's
    bound), a reader meanwhile is answered, and 300 different URLs — no sharing — are held
    to the agent-wide budget of unsent answers: past it, a 503 with Retry-After."""
    agent.http("PUT", "/v1/jobs", {"Job": {"ID": "many", "TaskGroups": [{
        "Name": "g", "Count": 1000, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"}}]}]}})
    agent.wait_until("1,000 allocations to run", lambda: agent.get(
        "/v1/job/many/summary")["Summary"]["g"]["Running"] == 1000, timeout=60)
    size = len(json.dumps(agent.get("/v1/allocations")))
    assert size > 500_000, size
    before = agent_rss_mb(agent)
    peak, held = hold_unread(agent, ["/v1/allocations"] * 300, 60)
    started = time.monotonic()
    assert len(agent.get("/v1/allocations")) == 1000
    took = time.monotonic() - started
    assert statuses(held) == {"200": 300}
    assert peak - before <= 200, f"RSS {before} MB, then {peak} MB with 300 non-readers"
    assert took < 5, f"a reader meanwhile took {took:.2f} s"
    shared_growth = peak - before

    before = agent_rss_mb(agent)
    peak, held = hold_unread(agent, [f"/v1/allocations?attempt={i}" for i in range(300)], 60)
    counts = statuses(held)
    assert peak - before <= 200, f"RSS {before} MB, then {peak} MB with 300 distinct non-readers"
    # At most the budget's worth were encoded (64 MiB of 0.9 MB answers), the rest refused.
    assert counts.get("503", 0) >= 150 and counts.get("200", 0) >= 30, counts
    print(f"\nanswers of {size / 1e6:.2f} MB; 300 shared: +{shared_growth} MB; "
          f"300 distinct: +{peak - before} MB, {counts}")


def test_log_reads_that_are_never_taken_are_held_to_the_same_budget(agent):
    """Issue 24 review: a log read (up to a MiB a request) was counted against the budget
    of unsent answers but never refused past it, so non-readers of logs held what the
    shared reads no longer could. 300 sockets asking for a task's 1 MiB of stdout, never
    reading: within the budget, the rest refused with Retry-After."""
    agent.http("PUT", "/v1/jobs", {"Job": {"ID": "loud", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "main", "Driver": "raw_exec", "Config": {
            "command": "/bin/sh",
            "args": ["-c", "head -c 1048576 /dev/zero | tr '\\0' x; exec sleep 1000"]}}]}]}})
    [alloc] = agent.running("loud", 1)
    agent.wait_until("a MiB of stdout", lambda: (
        agent.task_dir(alloc["ID"], "main") / "stdout.log").stat().st_size >= 1 << 20)
    path = f"/v1/client/fs/logs/{alloc['ID']}?task=main&type=stdout&origin=start&offset=0"
    before = agent_rss_mb(agent)
    peak, held = hold_unread(agent, [f"{path}&attempt={i}" for i in range(300)], 60)
    counts = statuses(held)
    # Before: every read answered, ~1.4 MB each held (+400 MB).
    assert peak - before <= 200, f"RSS {before} MB, then {peak} MB with 300 log non-readers"
    assert counts.get("503", 0) >= 150 and counts.get("200", 0) >= 20, counts
    agent.http("DELETE", "/v1/job/loud?no_shutdown_delay=true")
    print(f"\n300 log non-readers: +{peak - before} MB, {counts}")


def test_idle_connections_cannot_lock_out_the_api_and_tasks_keep_the_agents_first_limit(tmp_path):
    """Issue 24, finding 6: ~16,500 idle connections timed out 8 of 11 `/v1/status/leader`
    probes at 5 s, and tasks inherited the agent's raised descriptor limit (20,000), so a task
    could do it. Now the connection idle the longest makes room for each new one, and a task
    starts with the limit the agent was started with."""
    import resource
    from conftest import Agent, validate_log
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 17_000, f"this test holds 16,500 connections: the hard limit is {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    agent = Agent(tmp_path / "data")
    # Started with a soft limit of 1,024, which it raises for itself.
    agent.start(prefix=("prlimit", f"--nofile=1024:{hard}"))
    held = []
    try:
        agent.http("PUT", "/v1/jobs", {"Job": {"ID": "limits", "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "main", "Driver": "raw_exec", "User": "nobody", "Config": {
                "command": "/bin/sh", "args": ["-c", "ulimit -n; ulimit -Hn; "
                                               "(ulimit -n 4096) 2>/dev/null && echo raised "
                                               "|| echo refused; exec sleep 1000"]}}]}]}})
        [alloc] = agent.running("limits", 1)
        out = agent.wait_until("the task's limits", lambda: (
            agent.task_dir(alloc["ID"], "main") / "stdout.log").read_text().split())
        # The hard limit too: a task that could raise its own could take every connection.
        assert out == ["1024", "1024", "refused"], out
        agent_limit = [line for line in open(f"/proc/{agent.proc.pid}/limits")
                       if line.startswith("Max open files")][0].split()[3]
        assert agent_limit == str(hard), agent_limit

        def gauges_now():
            return {g["Name"]: g["Value"] for g in agent.get("/v1/metrics")["Gauges"]}

        # Admitted so far, this request's own connection included.
        admitted_before = gauges_now()["quiesce.http.connections_admitted"]
        host, port = agent.address.removeprefix("http://").rsplit(":", 1)
        started = time.monotonic()
        for _ in range(16_500):
            held.append(socket.create_connection((host, int(port))))
        opened = time.monotonic() - started
        took = []
        for _ in range(11):
            before = time.monotonic()
            sock, head = raw_get(agent, "/v1/status/leader", timeout=5)
            sock.close()
            took.append(time.monotonic() - before)
            assert head.startswith("HTTP/1.1 200"), head
        assert max(took) < 1.0, f"the leader answered in {sorted(took)}"
        # Each connection admitted at the cap sheds the one idle the longest, so the agent
        # never holds many more than the cap (those being shed count until they close). A
        # connection the kernel has completed waits in the listen backlog until the agent
        # admits it, so the test awaits the agent's count of admissions. On a loaded machine
        # (eight end-to-end workers and a build beside them) the last may be admitted 30 s
        # after the first, and then the idle timeout, not shedding, has closed the first: in
        # one CI run 4,808 were shed, not 6,500. So the bound is judged by the most
        # connections open at once, and the shedding by there being some.
        # The agent's cap: half its descriptors, at most its maximum (server.rs).
        cap = min(16_384, hard // 2)
        last = {}
        polls = []

        def all_admitted():
            # Each look is a connection too, admitted before it is answered.
            polls.append(1)
            last.update(gauges_now())
            expected = admitted_before + 16_500 + len(took) + len(polls)
            return last["quiesce.http.connections_admitted"] >= expected and dict(last)

        try:
            gauges = agent.wait_until("the agent to admit every connection", all_admitted,
                                      timeout=60)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}: {last}") from None
        assert cap <= gauges["quiesce.http.connections_peak"] <= cap + 20, gauges
        assert gauges["quiesce.http.connections_shed"] > 0, gauges
        assert gauges["quiesce.http.connections"] <= cap + 20, gauges
        print(f"\n16,500 idle connections opened in {opened:.1f} s; 11 leader probes, the "
              f"slowest {max(took) * 1000:.0f} ms; {gauges['quiesce.http.connections_shed']:.0f} "
              f"shed, at most {gauges['quiesce.http.connections_peak']:.0f} open at once")
    finally:
        for sock in held:
            sock.close()
        agent.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    validate_log(agent)


def test_garbage_is_collected_after_nomads_thresholds_and_job_versions_are_bounded(tmp_path):
    """Issue 24, finding 4: nothing was ever collected — 3 evaluations per register, stop
    and purge, every job version (300 re-registers kept 300; Nomad keeps 6), terminal
    allocations, their directories. With Nomad's settings shortened in -config, a dead job
    goes after `job_gc_threshold`, a terminal evaluation and its allocations after
    `eval_gc_threshold`, a forgotten allocation's directory once `gc_max_allocs` newer ones
    are kept, and `job_max_versions` bounds the versions; `PUT /v1/system/gc` collects
    what is collectable at once."""
    from conftest import Agent, validate_log
    config = tmp_path / "gc.hcl"
    config.write_text("""
server {
  job_gc_threshold  = "3s"
  eval_gc_threshold = "1s"
  job_gc_interval   = "200ms"
  job_max_versions  = 6
}
client {
  gc_max_allocs = 3
}
""")
    agent = Agent(tmp_path / "data")
    agent.start(args=("-config", str(config)))

    def job(job_id, version=0, driver="mock_driver"):
        config = {"run_for": "1h"} if driver == "mock_driver" else {
            "command": "/bin/sleep", "args": ["1000"]}
        return {"Job": {"ID": job_id, "Meta": {"v": str(version)}, "TaskGroups": [{
            "Name": "g", "Tasks": [{"Name": "t", "Driver": driver, "Config": config}]}]}}

    def running(job_id):
        return agent.wait_until(f"{job_id} to run", lambda: [
            a for a in agent.allocs(job_id) if a["ClientStatus"] == "running"])

    try:
        for version in range(20):
            assert agent.http("PUT", "/v1/jobs", job("versions", version))[0] == 200
        versions = agent.get("/v1/job/versions/versions")["Versions"]
        assert [v["Version"] for v in versions] == list(range(19, 13, -1)), versions
        for cycle in range(8):
            agent.http("PUT", "/v1/jobs", job("cycle", cycle, "raw_exec"))
            running("cycle")
            agent.cli("job", "stop", "-purge", "cycle")
        stopped = job("stopped")
        agent.http("PUT", "/v1/jobs", stopped)
        [kept] = running("stopped")
        agent.cli("job", "stop", "stopped")
        assert agent.get("/v1/job/stopped")["Status"] == "dead"

        def evals_of(job_id):
            return [e for e in agent.get("/v1/evaluations") if e["JobID"] == job_id]

        # The purged jobs' evaluations, after eval_gc_threshold; their directories but 3.
        agent.wait_until("the purged jobs' evaluations to go", lambda: not evals_of("cycle"))
        dirs = [d.name for d in (agent.data_dir / "alloc").iterdir()]
        assert len(dirs) == 3, dirs
        # The stopped job, dead, after job_gc_threshold, with its allocation and evaluations.
        agent.wait_until("the dead job to go", lambda: agent.http("GET", "/v1/job/stopped")[0] == 404)
        assert agent.http("GET", f"/v1/allocation/{kept['ID']}")[0] == 404
        assert not evals_of("stopped")
        # A forced collection takes what is collectable now.
        agent.cli("job", "stop", "versions")
        agent.wait_until("the stop", lambda: agent.get("/v1/job/versions")["Status"] == "dead")
        assert agent.http("PUT", "/v1/system/gc")[0] == 200
        assert agent.http("GET", "/v1/job/versions")[0] == 404
        gauges = {g["Name"]: g["Value"] for g in agent.get("/v1/metrics")["Gauges"]}
        assert gauges["quiesce.state.evaluations"] == 0, gauges
        assert gauges["nomad.nomad.state.allocations"] == 0, gauges
        assert gauges["quiesce.gc.jobs"] == 2 and gauges["quiesce.gc.evals"] >= 8, gauges
    finally:
        agent.close()
    validate_log(agent)
