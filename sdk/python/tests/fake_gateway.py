"""A fake coordinator gateway for SDK tests: the documented routes on 127.0.0.1 (docs/tasks.md).

Tasks "run" in the test process: ``behaviours[stub name](args, kwargs)``
returns (output events, status, value or exception). Results of a chunk are
sent in reverse order, so the SDK must put them back in input order.
"""

import base64
import hashlib
import json
import pickle
import re
import socket
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def error_of(e: BaseException) -> dict:
    if e.__traceback__ is None:
        try:
            raise e
        except BaseException:
            pass
    err = {
        "type": type(e).__qualname__,
        "message": str(e),
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
    }
    try:
        err["pickled"] = b64(pickle.dumps(e))
    except Exception:
        pass
    return err


class FakeGateway:
    def __init__(self):
        self.lock = threading.Lock()
        self.objects = {}
        self.puts = []
        self.stubs = {}
        self.stub_bodies = []
        self.submissions = []  # (stub id, number of inputs, headless)
        self.enqueued = []  # (stub id, task id, args, kwargs) of task queue puts
        self.results = {}  # task id -> (status, result, error)
        self.closed_streams = 0
        self.connections = set()
        self.behaviours = {}
        self.result_delay_s = 0.0
        self.reverse = True
        self.task_seq = 0
        # More routes (tests/fake_sandboxes.py): each ``route(handler, method)`` answers and returns True, or returns False.
        self.routes = []
        gw = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send_json(self, body, status=200):
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n)

            def authorized(self):
                with gw.lock:
                    gw.connections.add(self.client_address)
                if self.headers.get("Authorization") == "Bearer bt_test":
                    return True
                self.send_json({"error": {"code": "unauthenticated", "message": "bad token"}}, 401)
                return False

            def do_GET(self):
                if not self.authorized():
                    return
                if any(route(self, "GET") for route in gw.routes):
                    return
                m = re.match(r"^/api/v1/gateway/objects/([0-9a-f]{64})$", self.path)
                if m:
                    sha = m.group(1)
                    ok = sha in gw.objects
                    return self.send_json({"ok": True, "exists": ok, **({"object_id": 1} if ok else {})})
                m = re.match(r"^/api/v1/gateway/tasks/([^/]+)/result", self.path)
                if m:
                    status, result, error = gw.results.get(m.group(1), ("RUNNING", None, None))
                    out = {"ok": True, "task_id": m.group(1), "status": status}
                    if result:
                        out["result"] = result
                    if error:
                        out["error"] = error
                    return self.send_json(out)
                m = re.match(r"^/v2/task/([^/]+)/$", self.path)
                if m:
                    if m.group(1) not in gw.results:
                        return self.send_json({"error": {"code": "not_found", "message": "no task"}}, 404)
                    return self.send_json({"id": m.group(1), "status": gw.results[m.group(1)][0]})
                m = re.match(r"^/api/v1/gateway/stubs/([^/]+)$", self.path)
                if m:
                    stub = gw.stubs.get(m.group(1))
                    if stub is None:
                        return self.send_json({"ok": False, "error": {"code": "not_found", "message": "no stub"}})
                    return self.send_json({"ok": True, "stub": stub})
                self.send_json({"ok": False, "error": {"code": "route_not_found", "message": self.path}})

            def do_PUT(self):
                if not self.authorized():
                    return
                if any(route(self, "PUT") for route in gw.routes):
                    return
                data = self.body()
                sha = self.path.rsplit("/", 1)[-1]
                if hashlib.sha256(data).hexdigest() != sha:
                    return self.send_json({"ok": False, "error": {"code": "object_hash_mismatch", "message": "hash"}})
                with gw.lock:
                    gw.objects[sha] = data
                    gw.puts.append(sha)
                self.send_json({"ok": True, "object_id": len(gw.objects)})

            def do_POST(self):
                if not self.authorized():
                    return
                if any(route(self, "POST") for route in gw.routes):
                    return
                body = json.loads(self.body() or b"{}")
                if self.path == "/api/v1/gateway/stubs":
                    if body["name"] == "refused":
                        return self.send_json({"ok": False, "error": {"code": "invalid_request", "message": "no such thing"}})
                    stub_id = "stub-" + body["name"]
                    with gw.lock:
                        gw.stub_bodies.append(body)
                        gw.stubs[stub_id] = {"id": stub_id, "name": body["name"], "type": body["type"], "config_version": 1}
                    return self.send_json({"ok": True, "stub": gw.stubs[stub_id]})
                m = re.match(r"^/api/v1/gateway/tasks/([^/]+)/cancel$", self.path)
                if m:
                    gw.results[m.group(1)] = ("CANCELLED", None, {"type": "TaskCancelled", "message": "cancelled"})
                    return self.send_json({"ok": True, "task_id": m.group(1), "status": "CANCELLED"})
                m = re.match(r"^/api/v1/gateway/stubs/([^/]+)/tasks$", self.path)
                if m:
                    return self.submit(m.group(1), body)
                m = re.match(r"^/api/v1/gateway/stubs/([^/]+)/enqueue$", self.path)
                if m:
                    return self.enqueue(m.group(1), body)
                self.send_json({"ok": False, "error": {"code": "route_not_found", "message": self.path}})

            def do_DELETE(self):
                if not self.authorized():
                    return
                if any(route(self, "DELETE") for route in gw.routes):
                    return
                self.send_json({"ok": False, "error": {"code": "route_not_found", "message": self.path}})

            def enqueue(self, stub_id, body):
                if stub_id not in gw.stubs:
                    return self.send_json({"ok": False, "error": {"code": "not_found", "message": "no stub"}})
                args, kwargs = pickle.loads(base64.b64decode(body["args"]))
                with gw.lock:
                    gw.task_seq += 1
                    tid = f"task-{gw.task_seq}"
                    gw.enqueued.append((stub_id, tid, args, kwargs))
                    gw.results[tid] = ("PENDING", None, None)
                self.send_json({"ok": True, "task_id": tid})

            def submit(self, stub_id, body):
                name = gw.stubs[stub_id]["name"]
                inputs = body["inputs"]
                with gw.lock:
                    gw.submissions.append((stub_id, len(inputs), body.get("headless")))
                    ids = []
                    for _ in inputs:
                        gw.task_seq += 1
                        ids.append(f"task-{gw.task_seq}")
                if not body.get("stream"):
                    for tid in ids:
                        gw.results[tid] = ("PENDING", None, None)
                    return self.send_json({"ok": True, "task_ids": ids})
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i, tid in enumerate(ids):
                        self.line({"event": "task", "index": i, "task_id": tid})
                    if name == "stream_error":
                        self.line({"event": "error", "error": {"code": "resource_exhausted", "message": "queue full"}})
                    elif name == "dies_mid_stream":
                        # The coordinator dies after naming every task and streaming the first half's
                        # results; the rest end elsewhere, known only by id (the result route).
                        half = len(inputs) // 2
                        for i in range(half):
                            self.run(name, i, ids[i], inputs[i])
                        for i in range(half, len(inputs)):
                            args, kwargs = pickle.loads(base64.b64decode(inputs[i]))
                            _, status, value = gw.behaviours[name](*args, **kwargs)
                            gw.results[ids[i]] = (status, b64(pickle.dumps(value)), None)
                        # Cut inside a chunk, as a process killed mid-write leaves it.
                        self.wfile.write(b"40\r\n{\"event\": \"res")
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    else:
                        order = range(len(inputs))
                        for i in reversed(order) if gw.reverse else order:
                            self.run(name, i, ids[i], inputs[i])
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    with gw.lock:
                        gw.closed_streams += 1
                    self.close_connection = True

            def run(self, name, i, tid, payload):
                args, kwargs = pickle.loads(base64.b64decode(payload))
                outputs, status, value = gw.behaviours[name](*args, **kwargs)
                for stream, data in outputs:
                    self.line({"event": "output", "index": i, "task_id": tid, "stream": stream, "data": data})
                if gw.result_delay_s:
                    time.sleep(gw.result_delay_s)
                ev = {"event": "result", "index": i, "task_id": tid, "status": status}
                if status == "COMPLETE":
                    ev["result"] = b64(pickle.dumps(value))
                else:
                    ev["error"] = value if isinstance(value, dict) else error_of(value)
                gw.results[tid] = (status, ev.get("result"), ev.get("error"))
                self.line(ev)

            def line(self, obj):
                data = json.dumps(obj).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
