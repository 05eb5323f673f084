"""Nothing a client holds may grow without bound, and nothing a client leaves behind may
hold a place (issue 24). Each test is the attack, driven as it was: real sockets, real
processes, the agent's own memory read from /proc."""

import json
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
