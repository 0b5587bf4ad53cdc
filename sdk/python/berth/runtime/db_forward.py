"""The workspace's databases inside a container (docs/databases.md).

A database's URL (the secret ``DB_<NAME>_URL``) names ``127.0.0.1:<local
port>``. Containers cannot open TCP to each other, so the runtime listens on
each such port before the user's module is imported, and carries every
connection over the container's agent socket: ``GET
/v1/databases/<port>/connect`` with ``Upgrade: berth-tcp``; after ``101`` the
agent pipes the bytes to the database's pod. Any client library works
unchanged (psycopg, redis-py, ``psql``), as it only sees a local TCP server.
"""

import os
import re
import socket
import threading
from typing import Dict, List, Optional

from ..unix_http import log

#: The URLs berth writes (coordinator/databases/engines.ts): 127.0.0.1 and the local port.
_URL = re.compile(r"^(?:postgresql|postgres|redis)://[^@/\s]*@127\.0\.0\.1:(\d{1,5})(?:/|$)")
_KEY = re.compile(r"^DB_[A-Z0-9_]+_URL$")
_MAX_HEAD = 16 * 1024


def local_ports(environ: Dict[str, str]) -> List[int]:
    """The local ports the container's database URLs name, in order, each once."""
    out: List[int] = []
    for key in sorted(environ):
        m = _URL.match(environ[key]) if _KEY.match(key) else None
        port = int(m.group(1)) if m else 0
        if 0 < port <= 65535 and port not in out:
            out.append(port)
    return out


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class DatabaseForwarder:
    """Listens on 127.0.0.1:port and carries each connection over the agent socket."""

    def __init__(self, socket_path: str, port: int) -> None:
        self.socket_path = socket_path
        self.port = port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self._logged = False
        threading.Thread(target=self._accept, name=f"berth-db-{port}", daemon=True).start()

    def close(self) -> None:
        try:
            self.listener.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect(self) -> "tuple[socket.socket, bytes]":
        """The agent connection after its 101, and any bytes that came with the answer."""
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(self.socket_path)
            up.sendall(
                (
                    f"GET /v1/databases/{self.port}/connect HTTP/1.1\r\nHost: agent\r\n"
                    "Upgrade: berth-tcp\r\nConnection: Upgrade\r\n\r\n"
                ).encode()
            )
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = up.recv(4096)
                if not chunk or len(buf) > _MAX_HEAD:
                    raise ConnectionError("the agent closed the connection before it answered")
                buf += chunk
            head, rest = buf.split(b"\r\n\r\n", 1)
            status = head.split(b"\r\n", 1)[0].decode("latin-1")
            if status.split(" ")[1:2] != ["101"]:
                # The refusal's body says why (no such database here, not started, ...).
                try:
                    while True:
                        chunk = up.recv(4096)
                        if not chunk or len(rest) > _MAX_HEAD:
                            break
                        rest += chunk
                except OSError:
                    pass
                raise ConnectionError(f"{status}: {rest.decode('utf-8', 'replace').strip()}")
            return up, rest
        except BaseException:
            up.close()
            raise

    def _serve(self, client: socket.socket) -> None:
        try:
            up, rest = self._connect()
        except (OSError, ConnectionError) as e:
            # Once per forwarder: a client that retries in a loop must not flood the log.
            if not self._logged:
                self._logged = True
                log(f"the database on 127.0.0.1:{self.port} cannot be reached through the agent: {e}")
            client.close()
            return
        self._logged = False
        try:
            if rest:
                client.sendall(rest)
        except OSError:
            up.close()
            client.close()
            return
        back = threading.Thread(target=_pump, args=(up, client), daemon=True)
        back.start()
        _pump(client, up)
        back.join()
        up.close()
        client.close()


def start_from_env(
    environ: Optional[Dict[str, str]] = None, socket_path: Optional[str] = None
) -> List[DatabaseForwarder]:
    """A forwarder per database URL of the environment, when the container has an agent socket."""
    env = dict(os.environ if environ is None else environ)
    path = socket_path or env.get("BERTH_AGENT_SOCKET") or "/berth/run/agent.sock"
    if not os.path.exists(path):
        return []
    out = []
    for port in local_ports(env):
        try:
            out.append(DatabaseForwarder(path, port))
        except OSError as e:
            log(f"cannot listen on 127.0.0.1:{port} for a database URL: {e}")
    return out
