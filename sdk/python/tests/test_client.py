import base64
import hashlib
import json
import os
import pickle
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer

from berth import BerthError, Client, TaskCancelledError
from tests.fake_gateway import FakeGateway


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer bt_good":
            body = {"error": {"code": "unauthenticated", "message": "unknown or revoked token"}}
            status = 401
        else:
            body = {"external_id": "ws-1", "name": "default", "created_at": "2026-01-01T00:00:00Z"}
            status = 200
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class ClientTest(unittest.TestCase):
    """The client against a local HTTP server speaking the coordinator's error shape."""

    @classmethod
    def setUpClass(cls):
        cls.server = HTTPServer(("127.0.0.1", 0), Handler)
        cls.url = f"http://127.0.0.1:{cls.server.server_port}"
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def test_current_workspace(self):
        self.assertEqual(Client(token="bt_good", url=self.url).current_workspace()["external_id"], "ws-1")

    def test_error_carries_code_and_message(self):
        with self.assertRaises(BerthError) as ctx:
            Client(token="bt_bad", url=self.url).current_workspace()
        self.assertEqual(ctx.exception.code, "unauthenticated")
        self.assertEqual(ctx.exception.status, 401)
        self.assertIn("revoked", str(ctx.exception))

    def test_unreachable_is_unavailable(self):
        with self.assertRaises(BerthError) as ctx:
            Client(token="bt_good", url="http://127.0.0.1:1").current_workspace()
        self.assertEqual(ctx.exception.code, "unavailable")



class GatewayClientTest(unittest.TestCase):
    """upload_file, tasks by id and deployments against the fake gateway."""

    @classmethod
    def setUpClass(cls):
        cls.gw = FakeGateway()
        cls.gw.stubs["stub-dep"] = {"id": "stub-dep", "name": "dep", "type": "function", "config_version": 1}
        cls.client = Client(token="bt_test", url=cls.gw.url)

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()

    def test_upload_file_once(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "weights.bin")
            with open(path, "wb") as f:
                f.write(b"w" * 100_000)
            ref = self.client.upload_file(path)
            again = self.client.upload_file(path)
        self.assertEqual(ref.sha256, hashlib.sha256(b"w" * 100_000).hexdigest())
        self.assertEqual((ref.name, ref.size), ("weights.bin", 100_000))
        self.assertEqual(self.gw.puts.count(ref.sha256), 1)
        self.assertEqual(again.sha256, ref.sha256)

    def test_deployment_submit_and_task_result(self):
        dep = self.client.get_deployment_by_stub_id("stub-dep")
        self.assertEqual((dep.stub_id, dep.name), ("stub-dep", "dep"))
        task = dep.submit(input={"prompt": "hi"})
        self.assertEqual(self.gw.submissions[-1][:2], ("stub-dep", 1))
        self.assertIsNone(task.result(wait=False))
        with self.assertRaises(TimeoutError):
            task.result(timeout=0)
        self.gw.results[task.id] = ("COMPLETE", base64.b64encode(pickle.dumps("done")).decode(), None)
        self.assertEqual(self.client.get_task_by_id(task.id).result(), "done")
        self.assertEqual(task.status, "COMPLETE")
        other = dep.submit(input={})
        self.assertEqual(other.cancel(), "CANCELLED")
        with self.assertRaises(TaskCancelledError) as ctx:
            other.result()
        self.assertEqual(ctx.exception.task_id, other.id)

    def test_unknown_task_and_deployment_are_errors(self):
        with self.assertRaises(BerthError) as ctx:
            self.client.get_task_by_id("task-nope")
        self.assertEqual((ctx.exception.code, ctx.exception.status), ("not_found", 404))
        with self.assertRaises(BerthError) as ctx:
            self.client.get_deployment_by_stub_id("stub-nope")
        self.assertEqual((ctx.exception.code, ctx.exception.status), ("not_found", 200))
        with self.assertRaises(BerthError) as ctx:
            self.client.get_deployment_by_id("dep-1")
        self.assertEqual(ctx.exception.code, "route_not_found")


if __name__ == "__main__":
    unittest.main()
