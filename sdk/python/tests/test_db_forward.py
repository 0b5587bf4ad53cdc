"""The runtime's database forwarder (berth/runtime/db_forward.py) over real
sockets: a TCP client on 127.0.0.1, the forwarder, and a unix socket server
in a thread standing in for the agent (the agent's side is tested by
test/bridge/db-connect.test.ts)."""

import io
import os
import socket
import sys
import tempfile
import threading
import unittest

from berth.runtime import db_forward


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeAgent:
    """Answers each upgrade with `answer`; after a 101, echoes every chunk prefixed with b'db:'."""

    def __init__(self, path: str, answer: bytes):
        self.path = path
        self.answer = answer
        self.requests = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.server.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(4096)
            if not chunk:
                conn.close()
                return
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        self.requests.append(head.decode())
        conn.sendall(self.answer)
        if not self.answer.startswith(b"HTTP/1.1 101"):
            conn.close()
            return
        if rest:
            conn.sendall(b"db:" + rest)
        while True:
            data = conn.recv(4096)
            if not data:
                break
            conn.sendall(b"db:" + data)
        conn.close()


def recv_some(s: socket.socket) -> bytes:
    s.settimeout(10)
    return s.recv(4096)


class LocalPortsTest(unittest.TestCase):
    def test_only_berth_database_urls_on_loopback_each_port_once(self):
        env = {
            "DB_MAIN_URL": "postgresql://berth:" + "a" * 32 + "@127.0.0.1:15432/postgres",
            "DB_CACHE_URL": "redis://default:" + "b" * 32 + "@127.0.0.1:16379/0",
            "DB_COPY_URL": "postgresql://berth:x@127.0.0.1:15432/postgres",
            "DB_ELSEWHERE_URL": "postgresql://u:p@db.example:5432/x",
            "OTHER_URL": "postgresql://u:p@127.0.0.1:15999/x",
            "DB_BAD_URL": "postgresql://u:p@127.0.0.1:99999/x",
        }
        self.assertEqual(db_forward.local_ports(env), [16379, 15432])


class ForwarderTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.sock = os.path.join(self.dir.name, "agent.sock")

    def agent(self, answer: bytes) -> FakeAgent:
        a = FakeAgent(self.sock, answer)
        self.addCleanup(a.close)
        return a

    def test_bytes_go_both_ways_over_the_agent_socket(self):
        agent = self.agent(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: berth-tcp\r\nconnection: Upgrade\r\n\r\n")
        port = free_port()
        env = {"DB_MAIN_URL": f"postgresql://berth:{'c' * 32}@127.0.0.1:{port}/postgres"}
        fwds = db_forward.start_from_env(env, self.sock)
        self.addCleanup(lambda: [f.close() for f in fwds])
        self.assertEqual([f.port for f in fwds], [port])
        for text in (b"first", b"second"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(text)
                self.assertEqual(recv_some(c), b"db:" + text)
                c.sendall(b"more")
                self.assertEqual(recv_some(c), b"db:more")
        self.assertEqual(len(agent.requests), 2)
        first = agent.requests[0].split("\r\n")
        self.assertEqual(first[0], f"GET /v1/databases/{port}/connect HTTP/1.1")
        self.assertIn("Upgrade: berth-tcp", first)

    def test_a_refusal_closes_the_client_and_is_logged_once_with_its_reason(self):
        body = b'{"error":{"code":"not_found","message":"no database of this workspace on local port"}}'
        self.agent(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\r\n" + body)
        port = free_port()
        # berth.unix_http.log writes to the real stderr (sys.__stderr__), never a task's captured output.
        err = io.StringIO()
        real = sys.__stderr__
        sys.__stderr__ = err
        try:
            fwd = db_forward.DatabaseForwarder(self.sock, port)
            self.addCleanup(fwd.close)
            for _ in range(2):
                with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                    self.assertEqual(recv_some(c), b"", "the client sees the connection end")
        finally:
            sys.__stderr__ = real
        lines = [line for line in err.getvalue().splitlines() if line]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn(f"the database on 127.0.0.1:{port} cannot be reached through the agent", lines[0])
        self.assertIn("404 Not Found", lines[0])
        self.assertIn("no database of this workspace", lines[0])

    def test_no_agent_socket_no_forwarders(self):
        env = {"DB_MAIN_URL": f"postgresql://berth:{'d' * 32}@127.0.0.1:{free_port()}/postgres"}
        self.assertEqual(db_forward.start_from_env(env, os.path.join(self.dir.name, "missing.sock")), [])


if __name__ == "__main__":
    unittest.main()
