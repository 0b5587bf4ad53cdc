"""The standard-library ASGI server and the realtime adapter, over real sockets (docs/asgi.md)."""

import hashlib
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

from berth.runtime.asgi_host import AsgiServer, LifespanFailed, load_app
from berth.runtime.bridge import UnixHTTPConnection
from berth.api.context import Context
from berth.runtime.realtime_app import realtime_asgi
from tests.asgi_support import WAIT_S, ServerThread, TestApp, WebSocketClient, raw_exchange

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServerCase(unittest.TestCase):
    options: dict = {}

    def setUp(self):
        self.app = TestApp()
        self.server = ServerThread(self.app, **self.options)
        # A cleanup, not tearDown: it runs after the clients' cleanups, so none holds the server's grace period.
        self.addCleanup(self.server.stop)
        self.assertEqual(self.app.next_event(), "lifespan.startup")

    def conn(self):
        c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=WAIT_S)
        self.addCleanup(c.close)
        return c

    def get_json(self, c, method="GET", path="/scope", body=None, headers=None):
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        self.assertEqual(r.status, 200, data)
        return json.loads(data)

    def ws(self, path="/echo", subprotocols=None):
        client = WebSocketClient(self.server.address, path, subprotocols)
        self.addCleanup(client.shut)
        return client


class HttpTest(ServerCase):
    def test_get_gives_the_app_a_complete_scope(self):
        c = self.conn()
        seen = self.get_json(c, path="/scope/../scope%20x?a=1&b=%20", headers={"X-Thing": "Value"})
        self.assertEqual(seen["type"], "http")
        self.assertEqual(seen["asgi"]["version"], "3.0")
        self.assertIn("spec_version", seen["asgi"])
        self.assertEqual((seen["http_version"], seen["method"], seen["scheme"]), ("1.1", "GET", "http"))
        self.assertEqual(seen["path"], "/scope/../scope x")
        self.assertEqual((seen["raw_path"], seen["query_string"]), ("/scope/../scope%20x", "a=1&b=%20"))
        self.assertEqual(seen["root_path"], "")
        self.assertIn(["x-thing", "Value"], seen["headers"])
        self.assertEqual(seen["client"][0], "127.0.0.1")
        self.assertEqual(seen["client"][1], c.sock.getsockname()[1])
        self.assertEqual(seen["server"], ["127.0.0.1", self.server.port])
        self.assertEqual(seen["state"], {"greeting": "hi"})

    def test_post_body_and_keep_alive_reuse(self):
        c = self.conn()
        first = self.get_json(c, "POST", "/scope", b"hello world", {"Content-Type": "text/plain"})
        self.assertEqual(first["body_length"], 11)
        self.assertEqual(first["body_sha256"], hashlib.sha256(b"hello world").hexdigest())
        second = self.get_json(c, "PUT", "/scope", b"x" * 100000)
        self.assertEqual(second["body_length"], 100000)
        self.assertEqual(first["client"], second["client"], "both requests came over one connection")
        c.request("POST", "/ignore-body", body=b"y" * 5000)  # unread body is drained, connection kept
        self.assertEqual(c.getresponse().read(), b"nothing here")
        self.assertEqual(self.get_json(c)["client"], first["client"])

    def test_chunked_upload(self):
        parts = [os.urandom(n) for n in (1, 1000, 70000, 3)]
        c = self.conn()
        seen = self.get_json(c, "POST", "/scope", iter(parts))  # http.client sends an iterable chunked
        self.assertEqual(seen["body_length"], sum(map(len, parts)))
        self.assertEqual(seen["body_sha256"], hashlib.sha256(b"".join(parts)).hexdigest())
        self.assertEqual(self.get_json(c)["client"], seen["client"])

    def test_streaming_response_is_chunked_and_head_has_no_body(self):
        c = self.conn()
        c.request("GET", "/stream")
        r = c.getresponse()
        self.assertEqual(r.getheader("transfer-encoding"), "chunked")
        self.assertEqual(r.read(), b"one,two,three")
        c.request("HEAD", "/stream")
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (200, b""))
        self.assertEqual(self.get_json(c)["method"], "GET", "the connection survives HEAD")

    def test_keep_alive_after_an_app_that_listened_for_disconnect(self):
        c = self.conn()
        for _ in range(3):
            c.request("GET", "/listen")
            self.assertEqual(c.getresponse().read(), b"listened")
            self.assertEqual(self.app.next_event(), "http.disconnect")

    def test_http_1_0_is_answered_and_closed(self):
        out = raw_exchange(self.server.address, b"GET /stream HTTP/1.0\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertIn(b"connection: close", out)
        self.assertTrue(out.endswith(b"\r\n\r\none,two,three"), out)

    def test_expect_100_continue(self):
        with socket.create_connection(self.server.address, timeout=WAIT_S) as s:
            s.sendall(b"POST /scope HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            self.assertEqual(s.recv(100), b"HTTP/1.1 100 Continue\r\n\r\n")
            s.sendall(b"abcde")
            self.assertIn(b'"body_length": 5', s.recv(65536))

    def test_malformed_requests_get_400_and_the_server_keeps_serving(self):
        cases = {
            b"GARBAGE\r\n\r\n": b"400 Bad Request",
            b"GET / HTTP/1.1\r\nHost x\r\n\r\n": b"malformed header line",
            b"GET / HTTP/1.1\r\n\r\n": b"without a Host header",
            b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n": b"not ASCII",
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n": b"505",
            b"GET nowhere HTTP/1.1\r\nHost: x\r\n\r\n": b"not a path",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -3\r\n\r\n": b"invalid Content-Length",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n": b"both",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n": b"501",
            b"POST /scope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n": b"invalid chunk size",
            b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70000 + b"\r\n\r\n": b"431",
            b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 300000: b"431",
        }
        for request, expected in cases.items():
            out = raw_exchange(self.server.address, request)
            self.assertIn(expected, out, request[:60])
            self.assertNotIn(b"Traceback", out)
        self.assertEqual(self.get_json(self.conn())["path"], "/scope")

    def test_app_exception_before_the_response_is_a_500(self):
        c = self.conn()
        c.request("GET", "/boom")
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (500, b"Internal Server Error\n"))
        self.assertEqual(self.get_json(c)["path"], "/scope", "a 500 keeps the connection")

    def test_app_exception_after_the_response_started_closes_the_connection(self):
        c = self.conn()
        c.request("GET", "/boom-after-start")
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        with self.assertRaises(http.client.IncompleteRead):
            r.read()

    def test_client_going_away_is_an_http_disconnect(self):
        s = socket.create_connection(self.server.address, timeout=WAIT_S)
        s.sendall(b"GET /wait-disconnect HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(self.app.next_event(), "waiting")
        s.close()
        self.assertEqual(self.app.next_event(), "http.disconnect")


class LimitsTest(ServerCase):
    options = {"max_body_bytes": 1024, "limit_concurrency": 1}

    def test_body_over_the_limit_is_413(self):
        c = self.conn()
        c.request("POST", "/scope", body=b"x" * 1025)
        r = c.getresponse()
        self.assertEqual(r.status, 413)
        self.assertIn(b"larger than 1024 bytes", r.read())
        c = self.conn()
        c.request("POST", "/scope", body=iter([b"x" * 600, b"y" * 600]))
        self.assertEqual(c.getresponse().status, 413)
        self.assertEqual(self.get_json(self.conn(), "POST", "/scope", b"x" * 1024)["body_length"], 1024)

    def test_over_limit_concurrency_is_503(self):
        held = self.conn()
        held.request("GET", "/hold")
        self.assertEqual(self.app.next_event(), "holding")
        c = self.conn()
        c.request("GET", "/scope")
        self.assertEqual(c.getresponse().status, 503)
        self.server.loop.call_soon_threadsafe(self.app.release.set)
        self.assertEqual(held.getresponse().read(), b"released")


class LifespanTest(unittest.TestCase):
    def test_startup_before_requests_and_shutdown_after_them(self):
        app = TestApp()
        server = ServerThread(app)
        try:
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
            c.request("GET", "/stream")
            c.getresponse().read()
            c.close()
        finally:
            server.stop()
        self.assertEqual(app.next_event(), "lifespan.startup")
        self.assertEqual(app.next_event(), "lifespan.shutdown")
        self.assertTrue(app.events.empty())

    def test_app_without_lifespan_is_served(self):
        server = ServerThread(TestApp(lifespan=False))
        try:
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
            c.request("GET", "/scope")
            self.assertIsNone(json.loads(c.getresponse().read())["state"])
            c.close()
        finally:
            server.stop()

    def test_startup_failed_stops_the_server(self):
        async def app(scope, receive, send):
            await receive()
            await send({"type": "lifespan.startup.failed", "message": "no database"})

        with self.assertRaisesRegex(LifespanFailed, "no database"):
            ServerThread(app)

    def test_unix_socket(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "app.sock")
            server = ServerThread(TestApp(), unix_path=path)
            try:
                c = UnixHTTPConnection(path, timeout=WAIT_S)
                c.request("GET", "/scope")
                seen = json.loads(c.getresponse().read())
                c.close()
                self.assertEqual((seen["server"], seen["client"]), ([path, None], None))
            finally:
                server.stop()
            self.assertFalse(os.path.exists(path))


class WebSocketTest(ServerCase):
    options = {"max_ws_message_bytes": 1024}

    def test_echo_text_and_binary_with_subprotocol_and_headers(self):
        ws = self.ws(subprotocols=["chat.v2", "chat.v1"])
        self.assertEqual(ws.status, 101)
        self.assertEqual((ws.headers["sec-websocket-protocol"], ws.headers["x-hello"]), ("chat.v2", "world"))
        ws.send_text("héllo")
        self.assertEqual(ws.recv(), "héllo")
        ws.send_bytes(b"\x00\xffbin")
        self.assertEqual(ws.recv(), b"\x00\xffbin")
        big = os.urandom(1000)  # a 16-bit length frame
        ws.send_bytes(big)
        self.assertEqual(ws.recv(), big)

    def test_fragmented_message_with_a_ping_between_fragments(self):
        ws = self.ws()
        ws.send_frame(1, "frag".encode(), fin=False)
        ws.send_frame(9, b"mid")
        ws.send_frame(0, "men".encode(), fin=False)
        ws.send_frame(0, "ted ✓".encode())
        self.assertEqual(ws.recv_frame(), (True, 10, b"mid"))
        self.assertEqual(ws.recv(), "fragmented ✓")

    def test_ping_gets_a_pong_with_its_payload(self):
        ws = self.ws()
        ws.send_frame(9, b"are you there")
        self.assertEqual(ws.recv_frame(), (True, 10, b"are you there"))

    def test_client_close_is_echoed_and_reaches_the_app(self):
        ws = self.ws()
        self.assertEqual(ws.close(1001, "bye"), ("close", 1001, ""))
        self.assertTrue(ws.at_eof())
        self.assertEqual(self.app.next_event(), ("disconnect", 1001))

    def test_app_close_with_code_and_reason(self):
        ws = self.ws()
        ws.send_text("close please")
        self.assertEqual(ws.recv(), ("close", 4000, "asked"))
        ws.send_frame(8, b"\x0f\xa0")
        self.assertTrue(ws.at_eof())
        self.assertEqual(self.app.next_event(), ("disconnect", 4000))

    def test_abrupt_client_disconnect_is_1006(self):
        ws = self.ws()
        ws.send_text("x")
        ws.recv()
        ws.shut()
        self.assertEqual(self.app.next_event(), ("disconnect", 1006))

    def test_oversize_message_is_closed_with_1009(self):
        ws = self.ws()
        ws.send_bytes(b"x" * 1025)
        self.assertEqual(ws.recv()[:2], ("close", 1009))
        self.assertEqual(self.app.next_event(), ("disconnect", 1009))
        ws = self.ws()
        ws.send_frame(2, b"x" * 600, fin=False)
        ws.send_frame(0, b"x" * 600)
        self.assertEqual(ws.recv()[:2], ("close", 1009))

    def test_protocol_violations(self):
        cases = [
            (dict(opcode=1, payload=b"unmasked", mask=False), 1002),
            (dict(opcode=1, payload=b"x", rsv=0x40), 1002),
            (dict(opcode=0, payload=b"orphan continuation"), 1002),
            (dict(opcode=3, payload=b""), 1002),
            (dict(opcode=9, payload=b"p" * 126), 1002),
            (dict(opcode=1, payload=b"\xff\xfe"), 1007),
            (dict(opcode=8, payload=b"\x03\xed"), 1002),  # 1005 may not be sent
        ]
        for frame, code in cases:
            ws = self.ws()
            ws.send_frame(**frame)
            self.assertEqual(ws.recv()[:2], ("close", code), frame)
            self.assertTrue(ws.at_eof())

    def test_close_before_accept_is_403(self):
        ws = self.ws("/refuse")
        self.assertEqual(ws.status, 403)

    def test_bad_handshakes(self):
        base = b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        out = raw_exchange(self.server.address, base + b"Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: x\r\n\r\n")
        self.assertIn(b"426", out)
        self.assertIn(b"sec-websocket-version: 13", out)
        out = raw_exchange(self.server.address, base + b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: x\r\n\r\n")
        self.assertIn(b"400 Bad Request", out)

    def test_app_exception_after_accept_is_1011(self):
        ws = self.ws("/crash")
        ws.send_text("go")
        self.assertEqual(ws.recv()[:2], ("close", 1011))

    def test_server_stop_closes_open_websockets_with_1012(self):
        ws = self.ws()
        ws.send_text("x")
        ws.recv()
        stopping = self.server.stop_soon()
        self.assertEqual(ws.recv()[:2], ("close", 1012))
        self.assertEqual(self.app.next_event(), ("disconnect", 1012))
        ws.send_frame(8, b"\x03\xf4")
        self.assertTrue(ws.at_eof())
        stopping.result(WAIT_S)
        self.assertEqual(self.app.next_event(), "lifespan.shutdown")


def greet(message, context):
    if message == "fail":
        raise ValueError("cannot greet fail")
    if isinstance(message, dict):
        return {"hello": message.get("name"), "warm": context.on_start_value, "stub": context.stub_id}
    if isinstance(message, bytes):
        return message[::-1]
    return f"plain {message}"


async def count_async(message):
    return {"length": len(message)}


def rendezvous_handler(concurrency):
    barrier = threading.Barrier(concurrency, timeout=WAIT_S)

    def handler(message):
        barrier.wait()  # breaks (an error reply) unless `concurrency` calls run at once
        return {"met": message}

    return handler


class RealtimeTest(unittest.TestCase):
    def serve(self, handler, **kwargs):
        server = ServerThread(realtime_asgi(handler, **kwargs))
        self.addCleanup(server.stop)
        ws = WebSocketClient(server.address, "/")
        self.addCleanup(ws.shut)
        self.assertEqual(ws.status, 101)
        return server, ws

    def test_json_round_trip_text_and_bytes(self):
        _, ws = self.serve(greet, on_start_value="model loaded", context=Context(stub_id="stub-1"))
        ws.send_text('{"name": "ada"}')
        self.assertEqual(json.loads(ws.recv()), {"hello": "ada", "warm": "model loaded", "stub": "stub-1"})
        ws.send_text("not json")
        self.assertEqual(ws.recv(), "plain not json")
        ws.send_bytes(b"\x01\x02\xff")
        self.assertEqual(ws.recv(), b"\xff\x02\x01")

    def test_handler_error_is_sent_and_the_socket_stays_open(self):
        _, ws = self.serve(greet)
        ws.send_text('"fail"')
        self.assertEqual(json.loads(ws.recv()), {"error": "ValueError: cannot greet fail"})
        ws.send_text('{"name": "again"}')
        self.assertEqual(json.loads(ws.recv())["hello"], "again")

    def test_sync_handlers_run_concurrent_requests_at_once(self):
        server, first = self.serve(rendezvous_handler(2), concurrent_requests=2)
        second = WebSocketClient(server.address, "/")
        self.addCleanup(second.shut)
        first.send_text("1")
        second.send_text("2")
        self.assertEqual((json.loads(first.recv()), json.loads(second.recv())), ({"met": 1}, {"met": 2}))

    def test_async_handler_and_http_gets_426(self):
        server, ws = self.serve(count_async, concurrent_requests=2)
        ws.send_text("[1, 2, 3]")
        self.assertEqual(json.loads(ws.recv()), {"length": 3})
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
        c.request("GET", "/")
        r = c.getresponse()
        self.assertEqual(r.status, 426)
        self.assertIn("websocket", json.loads(r.read())["error"])
        c.close()


APP_MODULE = '''
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        raise RuntimeError("lifespan unsupported")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"from " + scope["path"].encode()})

def make_app():
    return app

not_an_app = 42
'''


class LoadAppTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        with open(os.path.join(self.dir.name, "asgi_demo_app.py"), "w") as f:
            f.write(textwrap.dedent(APP_MODULE))
        sys.path.insert(0, self.dir.name)
        self.addCleanup(sys.path.remove, self.dir.name)
        self.addCleanup(sys.modules.pop, "asgi_demo_app", None)

    def test_attribute_and_factory(self):
        module = __import__("asgi_demo_app")
        self.assertIs(load_app("asgi_demo_app:app"), module.app)
        self.assertIs(load_app("asgi_demo_app:make_app()"), module.app)

    def test_errors_name_the_cause(self):
        with self.assertRaisesRegex(ValueError, "module:attribute"):
            load_app("asgi_demo_app")
        with self.assertRaisesRegex(AttributeError, "no attribute 'nope'"):
            load_app("asgi_demo_app:nope")
        with self.assertRaisesRegex(TypeError, "int, not an ASGI application"):
            load_app("asgi_demo_app:not_an_app")
        with self.assertRaises(ImportError):
            load_app("no_such_module_here:app")

    def test_command_line_on_a_unix_socket(self):
        path = os.path.join(self.dir.name, "cli.sock")
        env = dict(os.environ, PYTHONPATH=SDK_DIR)
        proc = subprocess.Popen(
            [sys.executable, "-m", "berth.runtime.asgi_host", "asgi_demo_app:make_app()", "--uds", path],
            cwd=self.dir.name, env=env, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        deadline = time.monotonic() + WAIT_S * 3
        while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        c = UnixHTTPConnection(path, timeout=WAIT_S)
        c.request("GET", "/cli")
        self.assertEqual(c.getresponse().read(), b"from /cli")
        c.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT_S * 3)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("does not support the lifespan protocol", err)
        self.assertIn(f"serving asgi_demo_app:make_app() on unix:{path}", err)
        self.assertFalse(os.path.exists(path))

    def test_command_line_refuses_an_unloadable_app(self):
        proc = subprocess.run(
            [sys.executable, "-m", "berth.runtime.asgi_host", "asgi_demo_app:nope", "--port", "0"],
            cwd=self.dir.name, env=dict(os.environ, PYTHONPATH=SDK_DIR), capture_output=True, text=True,
            timeout=WAIT_S * 3,
        )
        self.assertEqual(proc.returncode, 1)
        self.assertIn("cannot load asgi_demo_app:nope: AttributeError", proc.stderr)


class ServerArgumentsTest(unittest.TestCase):
    def test_unix_and_tcp_together_are_refused(self):
        with self.assertRaisesRegex(ValueError, "either"):
            AsgiServer(TestApp(), unix_path="/tmp/x.sock", port=1)


class HandshakeKeyTest(unittest.TestCase):
    def test_accept_key_is_rfc_6455s_worked_example(self):
        # RFC 6455 section 1.3: what every client checks; a wrong GUID fails every real websocket client.
        from berth.runtime.asgi_websocket import accept_key

        self.assertEqual(accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="), b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")


if __name__ == "__main__":
    unittest.main()
