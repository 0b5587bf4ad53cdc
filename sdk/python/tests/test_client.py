import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer

from berth import BerthError, Client


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


if __name__ == "__main__":
    unittest.main()
