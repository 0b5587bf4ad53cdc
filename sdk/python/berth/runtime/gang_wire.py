"""The wire between the runners of one gang (shared/gang.ts): its settings, framing and connections.

A gang's ranks reach each other only over the gang's private network, and
only rank 0 talks to the agent about tasks, so rank 0 hands each task to the
others over a TCP connection of its own (BERTH_GANG_CONTROL_PORT on
BERTH_GANG_ADDRS[0]). Standard library only: the runner must start in any image.

A message is a frame: two big-endian u32 (header length, payload length),
a UTF-8 JSON object (the header, with ``t`` naming the kind) and raw bytes
(the payload: a task's pickled arguments, a piece of output). Both lengths
are bounded, so a corrupt or hostile peer cannot make a rank allocate much.
"""

import errno
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import serialize
from .bridge import log as bridge_log

FRAME = struct.Struct(">II")
# Headers carry ids, names and an error's message and traceback (each cut to MAX_ERROR_TEXT).
MAX_HEADER_BYTES = 1024 * 1024
# The largest payload is a task's arguments; a piece of output is at most 1 MiB of UTF-8.
MAX_PAYLOAD_BYTES = serialize.MAX_TASK_ARGS_BYTES
MAX_ERROR_TEXT = 64 * 1024
DEFAULT_CONTROL_PORT = 29400  # shared/gang.ts GANG_CONTROL_PORT
# How long rank 0 waits for every rank to connect, and a rank for rank 0 to listen:
# the ranks' containers start on different hosts, each pulling its image.
DEFAULT_CONNECT_TIMEOUT_S = 300.0
# How long the ranks still running a task may take to end once it has failed elsewhere
# before rank 0 takes them for stuck (waiting in a collective on a rank that gave up).
DEFAULT_GRACE_S = 30.0


class GangClosed(Exception):
    """The peer's connection ended (closed, reset, or it sent something that is not a frame)."""


@dataclass
class GangConfig:
    gang_id: str
    rank: int
    size: int
    addrs: List[str]
    port: int
    connect_timeout_s: float
    grace_s: float

    @classmethod
    def from_env(cls, e: Mapping[str, str]) -> Optional["GangConfig"]:
        """The gang this container is a member of; None outside a gang (or a gang of one).

        Raises ValueError on settings that cannot work, so the runner exits saying why.
        """
        size_text = e.get("BERTH_GANG_SIZE") or "1"
        try:
            size = int(size_text)
            rank = int(e.get("BERTH_GANG_RANK") or "0")
            port = int(e.get("BERTH_GANG_CONTROL_PORT") or DEFAULT_CONTROL_PORT)
            connect_timeout_s = float(e.get("BERTH_GANG_CONNECT_TIMEOUT_S") or DEFAULT_CONNECT_TIMEOUT_S)
            grace_s = float(e.get("BERTH_GANG_GRACE_S") or DEFAULT_GRACE_S)
        except ValueError as err:
            raise ValueError(f"the gang settings (BERTH_GANG_*) are not numbers: {err}") from None
        if size <= 1:
            return None
        addrs = [a.strip() for a in (e.get("BERTH_GANG_ADDRS") or "").split(",") if a.strip()]
        if not 0 <= rank < size:
            raise ValueError(f"BERTH_GANG_RANK {rank} is outside a gang of {size}")
        if not addrs:
            raise ValueError("BERTH_GANG_ADDRS is empty: the ranks cannot find rank 0")
        if not 0 < port < 65536:
            raise ValueError(f"BERTH_GANG_CONTROL_PORT {port} is not a port")
        return cls(e.get("BERTH_GANG_ID") or "", rank, size, addrs, port, connect_timeout_s, grace_s)


class Conn:
    """One framed connection; sends from several threads are serialised, receives come from one thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.send_lock = threading.Lock()
        _keepalive(sock)

    def send(self, header: Dict[str, Any], payload: bytes = b"") -> None:
        head = json.dumps(header).encode()
        if len(head) > MAX_HEADER_BYTES or len(payload) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"a gang message of {len(head)} + {len(payload)} bytes is over the limits")
        with self.send_lock:
            try:
                self.sock.sendall(FRAME.pack(len(head), len(payload)) + head + payload)
            except OSError as e:
                raise GangClosed(str(e)) from None

    def recv(self) -> Tuple[Dict[str, Any], bytes]:
        n_head, n_payload = FRAME.unpack(self._exactly(FRAME.size))
        if n_head > MAX_HEADER_BYTES or n_payload > MAX_PAYLOAD_BYTES:
            raise GangClosed(f"a frame of {n_head} + {n_payload} bytes is over the limits")
        try:
            header = json.loads(self._exactly(n_head))
        except ValueError as e:
            raise GangClosed(f"a frame's header is not JSON: {e}") from None
        if not isinstance(header, dict):
            raise GangClosed("a frame's header is not a JSON object")
        return header, self._exactly(n_payload)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1024 * 1024))
            except OSError as e:
                raise GangClosed(str(e)) from None
            if not chunk:
                raise GangClosed("the connection closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _keepalive(sock: socket.socket) -> None:
    """A host that vanishes sends no FIN: keepalives notice it within about a minute instead of hours.

    Best effort: a socket that is not TCP (a socketpair in tests) has none of these options.
    """
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1), (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            pass


def listen(cfg: GangConfig, deadline: float) -> socket.socket:
    """Rank 0's listening socket, on its gang address only (the gang network is the one the ranks share).

    Retried until ``deadline`` while the address is not (yet) this container's: the gang's
    interface may come up just after the runner starts. OSError past the deadline.
    """
    while True:
        srv = socket.socket(socket.AF_INET6 if ":" in cfg.addrs[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind((cfg.addrs[0], cfg.port))
            srv.listen(max(8, cfg.size))
            return srv
        except OSError as e:
            srv.close()
            if e.errno != errno.EADDRNOTAVAIL or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def accept_all(srv: socket.socket, cfg: GangConfig, deadline: float) -> Dict[int, Conn]:
    """Every other rank's connection, by rank; each says its rank first. TimeoutError names the missing ranks."""
    conns: Dict[int, Conn] = {}
    while len(conns) < cfg.size - 1:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [r for r in range(1, cfg.size) if r not in conns]
            for c in conns.values():
                c.close()
            raise TimeoutError(
                f"gang rank(s) {', '.join(map(str, missing))} did not connect to rank 0 "
                f"({cfg.addrs[0]}:{cfg.port}) within {cfg.connect_timeout_s:g} s"
            )
        srv.settimeout(left)
        try:
            sock, peer = srv.accept()
        except socket.timeout:
            continue
        sock.settimeout(min(10.0, max(0.1, left)))  # a hello that never comes must not stall the others
        conn = Conn(sock)
        try:
            header, _ = conn.recv()
        except GangClosed as e:
            log(f"a connection from {peer} ended before it said its rank: {e}")
            conn.close()
            continue
        rank = header.get("rank")
        if header.get("t") != "hello" or not isinstance(rank, int) or not 0 < rank < cfg.size or rank in conns:
            log(f"refused a gang connection from {peer}: {header!r}")
            conn.close()
            continue
        if cfg.gang_id and header.get("gang_id") != cfg.gang_id:
            log(f"refused rank {rank} from {peer}: it is of gang {header.get('gang_id')!r}, not {cfg.gang_id!r}")
            conn.close()
            continue
        sock.settimeout(None)
        conns[rank] = conn
    return conns


def connect(cfg: GangConfig) -> Conn:
    """A follower's connection to rank 0, retried while rank 0's container starts; TimeoutError past the bound."""
    deadline = time.monotonic() + cfg.connect_timeout_s
    last = ""
    while True:
        try:
            sock = socket.create_connection((cfg.addrs[0], cfg.port), timeout=5.0)
        except OSError as e:
            last = str(e)
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"gang rank {cfg.rank} could not reach rank 0 at {cfg.addrs[0]}:{cfg.port} "
                    f"within {cfg.connect_timeout_s:g} s: {last}"
                ) from None
            time.sleep(0.2)
            continue
        sock.settimeout(None)
        conn = Conn(sock)
        conn.send({"t": "hello", "rank": cfg.rank, "gang_id": cfg.gang_id})
        return conn


def cut(text: Any) -> str:
    """An error's text, bounded so its header fits in a frame."""
    s = str(text or "")
    return s if len(s) <= MAX_ERROR_TEXT else s[: MAX_ERROR_TEXT - 20] + "\n... (cut)"


def log(message: str) -> None:
    bridge_log(f"gang: {message}")
