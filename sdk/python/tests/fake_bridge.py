"""A fake agent bridge for runner tests: HTTP/1.1 on a unix socket in a temp dir (docs/tasks.md)."""

import json
import os
import queue
import re
import socketserver
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the runner is killed mid-request at teardown


class FakeBridge:
    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.tasks: "queue.Queue[dict]" = queue.Queue()
        self.cond = threading.Condition()
        self.results = {}
        # (kind, task_id, payload) in arrival order: output before result is checked on it.
        self.events = []
        self.cancelled = set()
        self.closed = False
        self.released = []
        # add_many queues its tasks all at once: an ask takes all of them or none.
        self.adding = threading.Lock()
        # The `max` of each ask for tasks, in order.
        self.asks = []
        # POST /v1/state (Queue, Map, Signal, a bot's model.chat): answered by this when set.
        self.state_handler = None
        self.state_requests = []
        bridge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body=None):
                raw = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                if raw:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path == "/v1/state" and bridge.state_handler is not None:
                    bridge.state_requests.append(body)
                    return self.reply(200, bridge.state_handler(body))
                if self.path == "/v1/tasks/next" and bridge.closed:
                    return self.reply(410, {"error": {"code": "failed_precondition", "message": "no more tasks"}})
                if self.path == "/v1/tasks/next":
                    tasks = bridge.take(body.get("max") or 1)
                    return self.reply(200, {"task": tasks[0], "tasks": tasks}) if tasks else self.reply(204)
                if self.path == "/v1/tasks/results":
                    outcomes = []
                    with bridge.cond:
                        for r in body.get("results") or []:
                            bridge.events.append(("result", r["id"], r))
                            bridge.results[r["id"]] = r
                            outcomes.append({"id": r["id"], "status": 204})
                        bridge.cond.notify_all()
                    if not body.get("next"):
                        return self.reply(200, {"results": outcomes})
                    if bridge.closed:
                        return self.reply(410, {"error": {"code": "failed_precondition", "message": "no more tasks"}})
                    return self.reply(200, {"results": outcomes, "tasks": bridge.take(body["next"].get("max") or 1)})
                if self.path == "/v1/tasks/release":
                    with bridge.cond:
                        for task_id in body.get("ids") or []:
                            bridge.events.append(("release", task_id, {}))
                            bridge.released.append(task_id)
                        bridge.cond.notify_all()
                    return self.reply(200, {"released": len(body.get("ids") or [])})
                m = re.match(r"^/v1/tasks/([^/]+)/(output|heartbeat|result)$", self.path)
                if not m:
                    return self.reply(404, {"error": {"code": "route_not_found", "message": self.path}})
                task_id, kind = m.groups()
                with bridge.cond:
                    bridge.events.append((kind, task_id, body))
                    if kind == "result":
                        bridge.results[task_id] = body
                    bridge.cond.notify_all()
                if kind == "heartbeat" and task_id in bridge.cancelled:
                    return self.reply(410, {"error": {"code": "failed_precondition", "message": "cancelled"}})
                return self.reply(204)

        self.server = _Server(socket_path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, max_tasks: int) -> list:
        """Up to max_tasks queued tasks: waits briefly for the first, never for the rest."""
        with self.cond:
            self.asks.append(max_tasks)
        with self.adding:
            try:
                tasks = [self.tasks.get(timeout=0.2)]
            except queue.Empty:
                return []
            while len(tasks) < max_tasks:
                try:
                    tasks.append(self.tasks.get_nowait())
                except queue.Empty:
                    break
            return tasks

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def add(self, task_id: str, args_b64: str, attempt: int = 1, timeout: int = 60, **extra):
        """``extra``: more task fields, such as ``payload_format="json"``."""
        self.tasks.put(
            {"id": task_id, "args": args_b64, "attempt": attempt, "timeout": timeout, "callback_url": "", "created_at": "",
             **extra}
        )

    def add_many(self, tasks) -> None:
        """(task_id, args_b64) pairs, queued so that one ask sees them all."""
        with self.adding:
            for task_id, payload in tasks:
                self.add(task_id, payload)

    def wait_result(self, task_id: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        with self.cond:
            while task_id not in self.results:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no result for {task_id} after {timeout} s; events: {self.events}")
                self.cond.wait(left)
            return self.results[task_id]

    def output(self, task_id: str, stream: str = "stdout") -> str:
        with self.cond:
            return "".join(b["data"] for k, t, b in self.events if k == "output" and t == task_id and b["stream"] == stream)

    def kinds(self, task_id: str):
        with self.cond:
            return [k for k, t, _ in self.events if t == task_id]


def start_runner(
    code_dir: str, socket_path: str, handler: str, python: str = sys.executable, **env
) -> subprocess.Popen:
    """``python``: the interpreter (another one has packages this one lacks, such as torch)."""
    full = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([SDK_DIR, code_dir]),
        "BERTH_REMOTE": "1",
        "BERTH_CONTAINER_ID": "ctr-test",
        "BERTH_STUB_ID": "stub-test",
        "BERTH_STUB_TYPE": "function",
        "BERTH_HANDLER": handler,
        "BERTH_AGENT_SOCKET": socket_path,
        "BERTH_PYTHON_VERSION": "3.11",
        **env,
    }
    return subprocess.Popen(
        [python, "-u", "-m", "berth.runtime.runner"],
        cwd=code_dir,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def stop_runner(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=10)
    return out.decode("utf-8", "replace")
