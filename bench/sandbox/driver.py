"""The berth side of bench/sandbox: one long-lived process driven by run.ts.

Reads one JSON command per stdin line and answers one JSON line on stdout,
so run.ts can interleave berth and podman samples in the same run while this
process keeps its connections and imports warm. Times are taken here, in
Python, around the SDK calls a user would make; every HTTP request the SDK
sends is also timed (``http``), and ``wall_ms`` gives wall-clock instants
(ms since the epoch) to line up with the coordinator's and agent's logs.

Commands: {"op": "create", "data_dir": DIR}, {"op": "warm"}, {"op": "exec", "requests": "one"|"three"},
{"op": "upload", "path": LOCAL}, {"op": "close"}.
"""

import datetime
import json
import os
import signal
import sys
import time
import traceback

from berth import Sandbox
from berth.errors import SandboxConnectionError

READY = "ready"
UPLOAD_TO = "/root/bench-upload.bin"
# The same shape as podman's containers in run.ts; ttl well past the run.
OPTIONS = {"cpu": 1, "memory": 512, "ttl_seconds": 900}


def ms(t0):
    return (time.perf_counter() - t0) * 1000.0


class Timings:
    """Wraps one SandboxApi so every request it sends is timed (method, route, start, ms)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.t0 = time.perf_counter()
        self.calls = []

    def instrument(self, api):
        exchange, open_raw = api._exchange, api.open_raw

        def timed_exchange(method, route, *args, **kw):
            start = time.perf_counter()
            try:
                return exchange(method, route, *args, **kw)
            finally:
                self.add(method, route, start)

        def timed_open_raw(route, *args, **kw):
            start = time.perf_counter()
            try:
                return open_raw(route, *args, **kw)
            finally:
                # Up to the response's headers: the body (the output, a run's frames) follows.
                self.add(kw.get("method", "GET"), route, start)

        api._exchange, api.open_raw = timed_exchange, timed_open_raw

    def add(self, method, route, start):
        route = route.split("?")[0]
        self.calls.append(
            {"req": f"{method} {route}", "at_ms": (start - self.t0) * 1000.0, "ms": (time.perf_counter() - start) * 1000.0}
        )


def iso_ms(text):
    """ms since the epoch of an ISO 8601 time such as 2026-11-22T00:20:58.303Z."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000.0


def container_meta(data_dir, container_id):
    """The agent runtime's meta.json of a container (createdAt: runtime.run called, startedAt: init running).

    Read at its one path, not found by a recursive glob: the agent's dir holds image layers and, for a
    container in a user namespace, idmapped mounts of whole root trees, whose walk took minutes."""
    path = os.path.join(data_dir, "agent", "containers", container_id, "meta.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def record_of(sb):
    """The coordinator's record of a sandbox, terminated ones too (status, terminated_reason)."""
    try:
        return sb.api.call("GET", f"/sandboxes/{sb.sandbox_id()}")
    except Exception as e:
        return f"unavailable: {e}"


def terminate(sb):
    """sb.terminate(); True when it answered sandbox_terminated because the container's exit
    (caused by this very terminate) was recorded first: a coordinator race (see bench/README.md),
    worked around here so the benchmark runs."""
    try:
        sb.terminate()
        return False
    except SandboxConnectionError as e:
        record = record_of(sb)
        if e.code == "sandbox_terminated" and isinstance(record, dict) and record.get("status") == "terminated":
            return True
        raise RuntimeError(f"{e}; the coordinator's record: {record}") from None


class Driver:
    def __init__(self):
        self.warm_sandbox = None
        self.warm_timings = Timings()
        self.created = []

    def create(self, data_dir):
        """Sandbox(...).create() → exec python3 → the line `ready` read; then terminated (not timed).

        ``marks`` (ms from the create call) line up what the client saw with the
        coordinator's and the agent's own ms timestamps, read after the timed part.
        """
        timings = Timings()
        spec = Sandbox(**OPTIONS)
        timings.instrument(spec.api)
        t0 = timings.t0 = time.perf_counter()
        wall0 = time.time() * 1000.0
        sb = spec.create()
        self.created.append(sb)
        created_ms = ms(t0)
        p = sb.process.exec("python3", "-c", f"print('{READY}')")
        exec_ms = ms(t0)
        first = next(iter(p.stdout))
        first_ms = ms(t0)
        if first.strip() != READY:
            raise RuntimeError(f"the sandbox printed {first!r}, not {READY!r}")
        p.stdout.read()
        calls = list(timings.calls)
        stubs = [c for c in calls if c["req"] == "POST /stubs"]
        marks = {
            "stub_registered": stubs[0]["at_ms"] + stubs[0]["ms"] if stubs else None,
            "row_inserted": iso_ms(record_of(sb).get("created_at")) - wall0,
            "create_answered": created_ms,
            "exec_answered": exec_ms,
            "first_output": first_ms,
        }
        meta = container_meta(data_dir, sb.sandbox_id())
        if meta:
            marks["runtime_run_called"] = meta["createdAt"] - wall0
            marks["init_running"] = meta["startedAt"] - wall0 if meta.get("startedAt") else None
        proc = sb.api.call("GET", f"/sandboxes/{sb.sandbox_id()}/processes/{p.pid}")
        marks["process_started"] = iso_ms(proc.get("started_at")) - wall0
        if proc.get("ended_at"):
            marks["process_ended"] = iso_ms(proc.get("ended_at")) - wall0
        t1 = time.perf_counter()
        raced = terminate(sb)
        terminate_ms = ms(t1)
        self.created.remove(sb)
        return {
            "ms": first_ms,
            "terminate_ms": terminate_ms,
            "terminate_raced": raced,
            "sandbox_id": sb.sandbox_id(),
            "marks": marks,
            "http": calls,
        }

    def warm(self):
        """The sandbox the exec and upload samples use, with one exec done (not timed)."""
        if self.warm_sandbox is None:
            self.warm_sandbox = Sandbox(**OPTIONS).create()
            self.warm_timings.instrument(self.warm_sandbox.api)
            self.exec()
        return {"sandbox_id": self.warm_sandbox.sandbox_id()}

    def exec(self, requests="one"):
        """exec("echo", "hi") → wait() → stdout.read() on the warm sandbox.

        ``requests``: "one" (POST .../processes/run, the SDK's way) or "three" (exec, wait, output:
        the SDK's way with a coordinator that lacks the run route), to compare both in one run.
        """
        sb = self.warm_sandbox
        sb.api.run_route = requests == "one"
        self.warm_timings.reset()
        t0 = time.perf_counter()
        p = sb.process.exec("echo", "hi")
        code = p.wait()
        out = p.stdout.read()
        total = ms(t0)
        if code != 0 or out != "hi\n":
            raise RuntimeError(f"exec echo hi gave exit code {code} and {out!r}")
        calls = list(self.warm_timings.calls)
        # The coordinator's own start and end of the session: runc exec and echo, without HTTP.
        proc = sb.api.call("GET", f"/sandboxes/{sb.sandbox_id()}/processes/{p.pid}")
        session_ms = iso_ms(proc["ended_at"]) - iso_ms(proc["started_at"]) if proc.get("ended_at") else None
        return {"ms": total, "session_ms": session_ms, "http": calls}

    def upload(self, path):
        sb = self.warm_sandbox
        t0 = time.perf_counter()
        info = sb.fs.upload_file(path, UPLOAD_TO)
        took = ms(t0)
        return {"ms": took, "size": info.size}

    def close(self):
        for sb in [*self.created, *([self.warm_sandbox] if self.warm_sandbox else [])]:
            try:
                if not sb.terminated:
                    terminate(sb)
            except Exception as e:  # already gone: nothing left to clean up
                print(f"terminate {sb.sandbox_id()}: {e}", file=sys.stderr)
        self.created, self.warm_sandbox = [], None
        return {"closed": True}


def main():
    # A Ctrl-C in the terminal reaches this process too; run.ts decides when it stops (the "close" command).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = Driver()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            op = cmd["op"]
            if op == "create":
                answer = driver.create(cmd["data_dir"])
            elif op == "warm":
                answer = driver.warm()
            elif op == "exec":
                answer = driver.exec(cmd.get("requests", "one"))
            elif op == "upload":
                answer = driver.upload(cmd["path"])
            elif op == "close":
                answer = driver.close()
            else:
                raise ValueError(f"unknown op {op!r}")
            answer["ok"] = True
        except Exception as e:
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if cmd.get("op") == "close":
            break
    driver.close()


if __name__ == "__main__":
    main()
