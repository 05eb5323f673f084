"""A deliberately faulty HTTP proxy for the probe's teeth tests: put between
`quiesce-conform probe` and the reference agent, it forwards the Nomad API faithfully except
for one fault, each of which breaks exactly one invariant the probe must catch and name:

* `drop-flag` removes `no_shutdown_delay` from request URLs and `NoShutdownDelay` from JSON
  request bodies — a server that ignores the flag (`flag_is_honoured`);
* `rewrite-delay` adds 1 s to every group and task `ShutdownDelay` of a stopped job as read
  from `/v1/job/:id` and `/v1/job/:id/versions` — a stop that changed the stored job
  (`jobspec_unchanged`);
* `strip-flag` deletes `DesiredTransition.NoShutdownDelay` from allocations as read — a server
  that skips the delay without recording why (`delay_skipped_only_when_flagged`);
* `stale-services` keeps answering `/v1/service/:name` with the registrations it last saw
  once the server's list has emptied — a server that deregisters only after the kill
  (`prestop_hooks_always_run`; the services outlive the stop too: `stop_completes`);
* `late-leader` moves the `Terminated` and `Killed` events of each allocation's `leader`
  task 10 s later — a client that killed the other tasks before the leader had ended
  (`kill_order`);
* `late-flag` hides, in the event stream, `DesiredTransition.NoShutdownDelay` from each
  allocation until the stream has shown it set to stop — a server that wrote the flag
  after the stop (`stop_recorded`; only the stream shows the order of two writes);
* `late-deregistration` holds back, in the event stream, each allocation's service
  deregistrations until the stream has shown it client-terminal, and then sends them at a
  later index — a server that deregistered after the kill (`prestop_hooks_always_run`, seen
  without the witness);
* `hide-event-stream` is no fault: it answers `/v1/event/stream` 404, as a server that
  offers no stream, so that the probe goes without it; `end-event-stream` answers it 200
  and ends it at once, as Nomad does with a token it refuses (past its headers);
* `hide-raw-exec` is no fault: it hides the raw_exec driver from `/v1/nodes`, so that the
  probe falls back to mock_driver tasks;
* `none` changes nothing.

Only JSON bodies on the named paths are touched; everything else passes byte for byte. The
event stream (`/v1/event/stream`) is relayed line by line as it comes."""

import http.client
import http.server
import json
import threading
import urllib.parse

FAULTS = ("none", "drop-flag", "rewrite-delay", "strip-flag", "stale-services", "late-leader",
          "late-flag", "late-deregistration", "hide-event-stream", "end-event-stream",
          "hide-raw-exec")
STREAM_FAULTS = ("late-flag", "late-deregistration")
TERMINAL = ("complete", "failed", "lost")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
              "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}
SECOND = 1_000_000_000


def job_read(path):
    """For `/v1/job/<id>` "job", for `/v1/job/<id>/versions` "versions", else None. On the raw
    path, so an escaped `/` (`%2F`) stays inside the id."""
    parts = path.split("/")[1:]
    if len(parts) < 3 or parts[:2] != ["v1", "job"] or not parts[2]:
        return None
    return {(): "job", ("versions",): "versions"}.get(tuple(parts[3:]))


def allocations_read(path):
    """Whether `path` answers with an allocation or a list of them."""
    parts = path.split("/")[1:]
    if len(parts) == 3 and parts[:2] == ["v1", "allocation"]:
        return bool(parts[2])
    return parts == ["v1", "allocations"] or (
        len(parts) == 4 and parts[0] == "v1" and parts[1] in ("job", "node", "evaluation")
        and bool(parts[2]) and parts[3] == "allocations")


def drop_flag_from_query(query):
    """The query without `no_shutdown_delay` (None if it had none)."""
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k != "no_shutdown_delay"]
    return None if len(kept) == len(pairs) else urllib.parse.urlencode(kept)


def delay_stopped_jobs(jobs):
    """Adds a second to each group and task ShutdownDelay of every stopped job; whether any."""
    changed = False
    for job in jobs:
        if not isinstance(job, dict) or job.get("Stop") is not True:
            continue
        for group in job.get("TaskGroups") or []:
            if not isinstance(group, dict):
                continue
            for holder in [group, *(t for t in group.get("Tasks") or [] if isinstance(t, dict))]:
                holder["ShutdownDelay"] = (holder.get("ShutdownDelay") or 0) + SECOND
                changed = True
    return changed


def strip_flag_from_allocations(allocs):
    """Deletes DesiredTransition.NoShutdownDelay from each allocation; whether any had it."""
    changed = False
    for alloc in allocs:
        transition = alloc.get("DesiredTransition") if isinstance(alloc, dict) else None
        if isinstance(transition, dict) and "NoShutdownDelay" in transition:
            del transition["NoShutdownDelay"]
            changed = True
    return changed


def service_read(path):
    """Whether `path` lists one service's registrations."""
    parts = path.split("/")[1:]
    return len(parts) == 3 and parts[:2] == ["v1", "service"] and bool(parts[2])


def delay_leader_end(allocs):
    """Moves the leader task's Terminated and Killed events 10 s later; whether any."""
    changed = False
    for alloc in allocs:
        states = alloc.get("TaskStates") if isinstance(alloc, dict) else None
        leader = states.get("leader") if isinstance(states, dict) else None
        for event in (leader or {}).get("Events") or []:
            if isinstance(event, dict) and event.get("Type") in ("Terminated", "Killed"):
                event["Time"] = event.get("Time", 0) + 10 * SECOND
                changed = True
    return changed


def as_json(body):
    try:
        return json.loads(body)
    except ValueError:  # also UnicodeDecodeError
        return None


class FaultyProxy:
    def __init__(self, upstream, fault):
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}: one of {', '.join(FAULTS)}")
        split = urllib.parse.urlsplit(upstream)
        if split.scheme != "http" or not split.hostname:
            raise ValueError(f"upstream {upstream!r} is not an http:// URL")
        self.upstream_host, self.upstream_port = split.hostname, split.port or 80
        self.upstream_netloc = split.netloc
        self.fault = fault
        self.requests = []
        self.rewritten = 0
        self._services = {}
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.address = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def record(self, method, target):
        with self._lock:
            self.requests.append((method, target))

    def _count(self):
        with self._lock:
            self.rewritten += 1

    def fault_request(self, target, body):
        """The (target, body) to forward: under drop-flag, without the flag."""
        if self.fault != "drop-flag":
            return target, body
        changed = False
        path, _, query = target.partition("?")
        kept = drop_flag_from_query(query) if query else None
        if kept is not None:
            target, changed = (f"{path}?{kept}" if kept else path), True
        parsed = as_json(body) if body else None
        if isinstance(parsed, dict) and "NoShutdownDelay" in parsed:
            del parsed["NoShutdownDelay"]
            body, changed = json.dumps(parsed).encode(), True
        if changed:
            self._count()
        return target, body

    def fault_response(self, method, target, body):
        """The body to answer with: under rewrite-delay or strip-flag, the faulty one."""
        path = target.partition("?")[0]
        if method != "GET":
            return body
        if self.fault == "rewrite-delay" and job_read(path):
            parsed = as_json(body)
            if job_read(path) == "job":
                jobs = [parsed]
            else:
                jobs = parsed.get("Versions") if isinstance(parsed, dict) else None
            changed = isinstance(jobs, list) and delay_stopped_jobs(jobs)
        elif self.fault == "strip-flag" and allocations_read(path):
            parsed = as_json(body)
            changed = strip_flag_from_allocations(parsed if isinstance(parsed, list) else [parsed])
        elif self.fault == "hide-raw-exec" and path == "/v1/nodes":
            parsed = as_json(body)
            changed = False
            for node in parsed if isinstance(parsed, list) else []:
                drivers = node.get("Drivers") if isinstance(node, dict) else None
                if isinstance(drivers, dict) and drivers.pop("raw_exec", None) is not None:
                    changed = True
        elif self.fault == "late-leader" and allocations_read(path):
            parsed = as_json(body)
            changed = delay_leader_end(parsed if isinstance(parsed, list) else [parsed])
        elif self.fault == "stale-services" and service_read(path):
            parsed = as_json(body)
            with self._lock:
                if isinstance(parsed, list) and parsed:
                    self._services[path] = parsed
                    return body
                changed = parsed == [] and path in self._services
                if changed:
                    parsed = self._services[path]
        else:
            return body
        if not changed:
            return body
        self._count()
        return json.dumps(parsed).encode()


    def fault_stream_line(self, line, state):
        """The lines to relay for one line of the event stream, under a stream fault."""
        batch = as_json(line) if self.fault in STREAM_FAULTS else None
        if not isinstance(batch, dict) or not isinstance(batch.get("Events"), list):
            return [line]
        kept, released, changed = [], [], False
        for event in batch["Events"]:
            payload = event.get("Payload") if isinstance(event, dict) else None
            alloc = (payload or {}).get("Allocation") if event.get("Topic") == "Allocation" else None
            alloc = alloc if isinstance(alloc, dict) else None
            if self.fault == "late-flag" and alloc is not None:
                stopped = state.setdefault("stopped", set())
                if alloc.get("DesiredStatus") == "stop":
                    stopped.add(alloc.get("ID"))
                transition = alloc.get("DesiredTransition")
                if alloc.get("ID") not in stopped and isinstance(transition, dict) \
                        and transition.pop("NoShutdownDelay", None) is not None:
                    changed = True
            if self.fault == "late-deregistration":
                held = state.setdefault("held", {})
                if event.get("Topic") == "Service" and event.get("Type") == "ServiceDeregistration":
                    owner = ((payload or {}).get("Service") or {}).get("AllocID")
                    held.setdefault(owner, []).append(event)
                    changed = True
                    continue
                if alloc is not None and alloc.get("ClientStatus") in TERMINAL:
                    released += held.pop(alloc.get("ID"), [])
            kept.append(event)
        if not changed and not released:
            return [line]
        self._count()
        lines = []
        if released:
            # At a later index, but sent first: the probe orders by index, and so never
            # reads the allocation's end without the deregistrations after it.
            later = batch.get("Index", 0) + 1
            for event in released:
                event["Index"] = later
            lines.append(json.dumps({"Index": later, "Events": released}).encode() + b"\n")
        if kept:
            lines.append(json.dumps({**batch, "Events": kept}).encode() + b"\n")
        return lines


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 makes a burst of connections wait on SYN retries


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def forward(self):
        proxy = self.server.proxy
        proxy.record(self.command, self.path)
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length else None
        target, body = proxy.fault_request(self.path, body)
        if self.command == "GET" and target.partition("?")[0] == "/v1/event/stream":
            if proxy.fault == "hide-event-stream":
                proxy._count()
                return self.answer(404, [("Content-Type", "text/plain")], b"")
            if proxy.fault == "end-event-stream":
                proxy._count()
                self.close_connection = True
                self.send_response_only(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                return
            return self.relay_stream(proxy, target)
        try:
            status, headers, answer = self.upstream(proxy, target, body)
        except (OSError, http.client.HTTPException) as error:
            text = f"faulty proxy: upstream {proxy.upstream_netloc} unreachable: {error}\n"
            return self.answer(502, [("Content-Type", "text/plain; charset=utf-8")], text.encode())
        self.answer(status, headers, proxy.fault_response(self.command, target, answer))

    def relay_stream(self, proxy, target):
        """Relays the event stream line by line, each through the stream fault if any, until
        either side ends it."""
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
        try:
            conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", proxy.upstream_netloc)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP | {"host", "content-length"}:
                    conn.putheader(name, value)
            conn.endheaders()
            response = conn.getresponse()
            if response.status != 200:
                return self.answer(response.status, response.getheaders(), response.read())
            self.close_connection = True
            self.send_response_only(200)
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP | {"content-length"}:
                    self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            state = {}
            while True:
                line = response.readline()
                if not line:
                    return
                for out in proxy.fault_stream_line(line, state):
                    self.wfile.write(out)
                self.wfile.flush()
        except (OSError, http.client.HTTPException):
            return
        finally:
            conn.close()

    def upstream(self, proxy, target, body):
        """Sends the request on to the upstream; its status, headers and body."""
        dropped = HOP_BY_HOP | {"host", "content-length"} | {
            name.strip().lower() for name in self.headers.get("Connection", "").split(",")}
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
        try:
            conn.putrequest(self.command, target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", proxy.upstream_netloc)
            for name, value in self.headers.items():
                if name.lower() not in dropped:
                    conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def answer(self, status, headers, body):
        self.send_response_only(status)  # the upstream's own Date and Server go through
        length = str(len(body))
        for name, value in headers:
            if name.lower() == "content-length" and self.command == "HEAD":
                length = value  # a HEAD answer has no body but announces the GET's length
            elif name.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(name, value)
        if status not in (204, 304):
            self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward
