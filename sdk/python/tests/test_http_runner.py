"""``python3 -m berth.runtime.http_runner`` as a real subprocess on a free port, as a deployed stub's container runs it."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from typing import Any, Dict, Optional, Tuple

from tests.asgi_support import WebSocketClient

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAIT_S = 30.0

ENDPOINT_APP = '''
import os, threading, time
from berth import endpoint

def setup():
    return {"pid": os.getpid(), "warm": True}

both_in = threading.Barrier(2, timeout=10)

@endpoint(concurrent_requests=2)
def handle(op, context, value=None):
    if op == "echo":
        return {"value": value, "task_id": context.task_id, "on_start": context.on_start_value,
                "callback_url": context.callback_url, "stub_type": context.stub_type, "pid": os.getpid()}
    if op == "raise":
        raise KeyError(value)
    if op == "not_json":
        return {1, 2}
    if op == "together":
        both_in.wait()
        return "both ran at once"
    if op == "print":
        print("printed by the handler", value)
        return None
    if op == "block":
        open(os.path.join(value, "started"), "w").close()
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(value, "release")) and time.monotonic() < deadline:
            time.sleep(0.01)
        return "released"
    raise ValueError(op)
'''

PID_APP = '''
import os

def setup():
    return os.getpid()

def whoami(context):
    return {"pid": os.getpid(), "on_start_pid": context.on_start_value}
'''

ASGI_APP = '''
import json

def setup():
    return "from on_start"

class App:
    def __init__(self, greeting):
        self.greeting = greeting

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["path"] == "/boom":
            raise RuntimeError("the app broke")
        body = json.dumps({"greeting": self.greeting, "path": scope["path"], "method": scope["method"]}).encode()
        await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

def web(context):
    return App(context.on_start_value)
'''

REALTIME_APP = '''
def setup():
    return 42

def echo(message, context):
    return {"got": message, "on_start": context.on_start_value}
'''

BROKEN_APP = "import not_a_module_anywhere\n\ndef handle(x):\n    return x\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The module serving ``handler`` from a temp code dir; ``stop()`` sends SIGTERM and returns the exit code."""

    def __init__(self, files: Dict[str, str], handler: str, stub_type: str, workers: int = 1,
                 concurrent: int = 1, on_start: str = ""):
        self.dir = tempfile.TemporaryDirectory()
        try:
            code = os.path.join(self.dir.name, "code")
            os.mkdir(code)
            for name, text in files.items():
                with open(os.path.join(code, name), "w") as f:
                    f.write(textwrap.dedent(text))
            self.port = free_port()
            self.log_path = os.path.join(self.dir.name, "container.log")
            self.log_file = open(self.log_path, "wb")
            env = {
                "PATH": os.environ.get("PATH", ""),
                "PYTHONPATH": SDK_DIR,
                "BERTH_REMOTE": "1",
                "BERTH_CONTAINER_ID": "ctr-http",
                "BERTH_STUB_ID": "stub-http",
                "BERTH_STUB_TYPE": stub_type,
                "BERTH_HANDLER": handler,
                "BERTH_ON_START": on_start,
                "BERTH_WORKERS": str(workers),
                "BERTH_CALLBACK_URL": "http://stub.example/cb",
                "BERTH_PYTHON_VERSION": "3.11",
            }
            self.proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "berth.runtime.http_runner", "--port", str(self.port), "--host", "127.0.0.1",
                 "--concurrent-requests", str(concurrent)],
                cwd=code, env=env, stdout=self.log_file, stderr=subprocess.STDOUT,
            )
            self.wait_listening()
        except BaseException:
            self.close()
            raise

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_listening(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the runner exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the runner did not listen within {WAIT_S} s:\n{self.log()}") from None
                time.sleep(0.05)

    def request(self, method: str, path: str = "/", body: Any = None, headers: Optional[dict] = None,
                raw: Optional[bytes] = None) -> Tuple[int, http.client.HTTPMessage, Any]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            h = {"content-type": "application/json", **(headers or {})}
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            payload = r.read()
            try:
                value = json.loads(payload)
            except ValueError:
                value = payload
            return r.status, r.headers, value
        finally:
            c.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT_S)
            raise AssertionError(f"the runner did not stop on SIGTERM:\n{self.log()}") from None

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
        log_file = getattr(self, "log_file", None)
        if log_file is not None:
            log_file.close()
        self.dir.cleanup()


class ServerCase(unittest.TestCase):
    files: Dict[str, str] = {}
    handler = ""
    stub_type = "endpoint"
    workers = 1
    concurrent = 1
    on_start = ""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(cls.files, cls.handler, cls.stub_type, cls.workers, cls.concurrent, cls.on_start)
        cls.addClassCleanup(cls.server.close)


class EndpointTest(ServerCase):
    files = {"app.py": ENDPOINT_APP}
    handler = "app:handle"
    stub_type = "endpoint/deployment"
    concurrent = 2
    on_start = "app:setup"

    def test_json_round_trip_with_task_id_and_on_start_value(self):
        status, headers, body = self.server.request("POST", "/", {"op": "echo", "value": [1, "two"]},
                                                    {"X-Task-Id": "task-123"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertIsNone(headers["x-berth-error"])
        self.assertEqual(body["value"], [1, "two"])
        self.assertEqual(body["task_id"], "task-123")
        self.assertEqual(body["on_start"], {"pid": body["pid"], "warm": True})
        self.assertEqual(body["stub_type"], "endpoint/deployment")
        self.assertEqual(body["callback_url"], "http://stub.example/cb")

    def test_any_path_and_the_callback_header(self):
        status, _, body = self.server.request("POST", "/some/path", {"op": "echo"},
                                              {"X-Callback-Url": "http://caller.example/done"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["callback_url"], "http://caller.example/done")
        self.assertIsNone(body["task_id"])

    def test_unknown_and_missing_keys_are_400_naming_them(self):
        status, headers, body = self.server.request("POST", "/", {"value": 1, "zzz": 2})
        self.assertEqual(status, 400)
        self.assertEqual(headers["x-berth-error"], "1")
        error = body["error"]
        self.assertEqual(error["type"], "berth.HandlerArgumentsError")
        self.assertEqual((error["unknown"], error["missing"]), (["zzz"], ["op"]))
        self.assertIn("'zzz'", error["message"])
        self.assertIn("'op'", error["message"])

    def test_a_body_that_is_not_a_json_object_is_400(self):
        status, headers, body = self.server.request("POST", "/", raw=b"{not json")
        self.assertEqual((status, headers["x-berth-error"], body["error"]["type"]), (400, "1", "InvalidJSON"))
        status, _, body = self.server.request("POST", "/", [1, 2])
        self.assertEqual(status, 400)
        self.assertIn("must be a JSON object", body["error"]["message"])

    def test_a_handler_that_raises_is_500_with_its_traceback(self):
        status, headers, body = self.server.request("POST", "/", {"op": "raise", "value": "k"})
        self.assertEqual((status, headers["x-berth-error"]), (500, "1"))
        error = body["error"]
        self.assertEqual((error["type"], error["message"]), ("KeyError", "'k'"))
        self.assertIn("raise KeyError(value)", error["traceback"])
        self.assertNotIn("endpoint_app.py", error["traceback"])

    def test_a_return_value_that_is_not_json_is_500(self):
        status, headers, body = self.server.request("POST", "/", {"op": "not_json"})
        self.assertEqual((status, headers["x-berth-error"]), (500, "1"))
        self.assertEqual(body["error"]["type"], "berth.SerializationError")
        self.assertIn("not JSON", body["error"]["message"])

    def test_other_methods_are_405(self):
        status, headers, body = self.server.request("GET", "/")
        self.assertEqual((status, headers["x-berth-error"], headers["allow"]), (405, "1", "POST"))

    def test_health(self):
        status, _, body = self.server.request("GET", "/.berth/health")
        self.assertEqual((status, body), (200, {"ok": True}))

    def test_two_requests_run_at_once_with_concurrent_requests_2(self):
        # Each call waits (up to 10 s) at a barrier for the other: both answer 200 only if they overlapped.
        results = []
        threads = [threading.Thread(target=lambda: results.append(self.server.request("POST", "/", {"op": "together"})))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        self.assertEqual([(r[0], r[2]) for r in results], [(200, "both ran at once")] * 2)

    def test_prints_reach_the_container_log(self):
        status, _, _ = self.server.request("POST", "/", {"op": "print", "value": "xyzzy"})
        self.assertEqual(status, 200)
        self.assertIn("printed by the handler xyzzy", self.server.log())


class GracefulStopTest(unittest.TestCase):
    def test_sigterm_lets_the_request_in_progress_finish_then_exits_0(self):
        server = Server({"app.py": ENDPOINT_APP}, "app:handle", "endpoint")
        self.addCleanup(server.close)
        marks = server.dir.name
        answers = []
        t = threading.Thread(target=lambda: answers.append(server.request("POST", "/", {"op": "block", "value": marks})))
        t.start()
        self.addCleanup(t.join, WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(os.path.join(marks, "started")):
            self.assertLess(time.monotonic(), deadline, server.log())
            time.sleep(0.01)
        server.proc.send_signal(signal.SIGTERM)
        open(os.path.join(marks, "release"), "w").close()
        t.join(WAIT_S)
        self.assertEqual([(a[0], a[2]) for a in answers], [(200, "released")])
        self.assertEqual(server.stop(), 0, server.log())


class WorkersTest(ServerCase):
    files = {"app.py": PID_APP}
    handler = "app:whoami"
    workers = 2
    on_start = "app:setup"

    def test_two_processes_share_the_port_each_with_its_own_on_start_then_stop_on_sigterm(self):
        seen = set()
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 2 and time.monotonic() < deadline:
            status, _, body = self.server.request("POST", "/", {})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["on_start_pid"], body["pid"])
            seen.add(body["pid"])
        self.assertEqual(len(seen), 2, f"only one worker answered:\n{self.server.log()}")
        self.assertNotIn(self.server.proc.pid, seen)
        self.assertEqual(self.server.stop(), 0, self.server.log())
        for pid in seen:
            with self.assertRaises(ProcessLookupError):
                os.kill(pid, 0)


class ImportFailureTest(ServerCase):
    files = {"broken.py": BROKEN_APP}
    handler = "broken:handle"

    def test_the_server_listens_and_every_request_hears_why(self):
        status, headers, body = self.server.request("POST", "/", {"x": 1})
        self.assertEqual((status, headers["x-berth-error"]), (500, "1"))
        self.assertEqual(body["error"]["type"], "ModuleNotFoundError")
        self.assertIn("cannot import the handler broken:handle", body["error"]["message"])
        self.assertIn("not_a_module_anywhere", body["error"]["message"])
        self.assertIn("import not_a_module_anywhere", body["error"]["traceback"])
        status, _, body = self.server.request("GET", "/.berth/health")
        self.assertEqual(status, 500)
        self.assertIn("not_a_module_anywhere", body["error"]["message"])
        self.assertEqual(self.server.log().count("cannot import the handler"), 1, self.server.log())


class OnStartFailureTest(ServerCase):
    files = {"app.py": "def setup():\n    raise RuntimeError('no model')\n\ndef handle(x):\n    return x\n"}
    handler = "app:handle"
    on_start = "app:setup"

    def test_every_request_names_the_on_start_error(self):
        status, _, body = self.server.request("POST", "/", {"x": 1})
        self.assertEqual((status, body["error"]["type"]), (500, "RuntimeError"))
        self.assertIn("on_start app:setup failed: RuntimeError: no model", body["error"]["message"])


class AsgiTest(ServerCase):
    files = {"web.py": ASGI_APP}
    handler = "web:web"
    stub_type = "asgi/serve"
    on_start = "web:setup"

    def test_the_factory_s_app_serves_any_method_and_path(self):
        status, _, body = self.server.request("PUT", "/items/7")
        self.assertEqual((status, body), (201, {"greeting": "from on_start", "path": "/items/7", "method": "PUT"}))

    def test_an_exception_before_the_response_is_berth_s_500(self):
        status, headers, body = self.server.request("GET", "/boom")
        self.assertEqual((status, headers["x-berth-error"]), (500, "1"))
        self.assertEqual((body["error"]["type"], body["error"]["message"]), ("RuntimeError", "the app broke"))
        self.assertIn('raise RuntimeError("the app broke")', body["error"]["traceback"])

    def test_health_is_not_passed_to_the_app(self):
        status, _, body = self.server.request("GET", "/.berth/health")
        self.assertEqual((status, body), (200, {"ok": True}))


class RealtimeTest(ServerCase):
    files = {"rt.py": REALTIME_APP}
    handler = "rt:echo"
    stub_type = "realtime/deployment"
    on_start = "rt:setup"

    def test_each_message_gets_the_handler_s_reply(self):
        ws = WebSocketClient(("127.0.0.1", self.server.port))
        self.addCleanup(ws.shut)
        self.assertEqual(ws.status, 101)
        ws.send_text(json.dumps({"n": 1}))
        self.assertEqual(json.loads(ws.recv()), {"got": {"n": 1}, "on_start": 42})
        ws.send_text("plain")
        self.assertEqual(json.loads(ws.recv()), {"got": "plain", "on_start": 42})
        self.assertEqual(ws.close()[:2], ("close", 1000))

    def test_health(self):
        status, _, body = self.server.request("GET", "/.berth/health")
        self.assertEqual((status, body), (200, {"ok": True}))


class BadStubTypeTest(unittest.TestCase):
    def test_a_queued_stub_type_is_refused_naming_the_types(self):
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SDK_DIR, "BERTH_STUB_TYPE": "taskqueue/deployment",
               "BERTH_HANDLER": "app:f"}
        r = subprocess.run([sys.executable, "-m", "berth.runtime.http_runner", "--port", "0"], env=env,
                           capture_output=True, timeout=WAIT_S)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"'taskqueue/deployment' is not served over HTTP", r.stderr)


if __name__ == "__main__":
    unittest.main()
