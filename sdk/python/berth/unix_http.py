"""HTTP/1.1 over a unix socket: how code in a container reaches its agent.

Shared by the runner's bridge (berth.runtime.bridge) and the objects user code
saves or calls through the agent (berth.api.output, berth.api.state_transport),
which may not import the runtime.
"""

import http.client
import json
import os
import socket
import sys
import time
from typing import Any, Optional, Tuple


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float] = None):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


# How long the runner keeps trying to reach an agent that went away before it gives up (tests shorten it).
AGENT_GONE_AFTER_S = float(os.environ.get("BERTH_AGENT_GONE_AFTER_S") or 60.0)


class AgentGone(Exception):
    """The agent's socket has not answered for AGENT_GONE_AFTER_S."""


def log(message: str, who: str = "runner") -> None:
    """To the container's log (the real stderr, never a task's captured output), as `berth {who}:`."""
    stream = sys.__stderr__
    if stream is not None:
        try:
            stream.write(f"berth {who}: {message}\n")
            stream.flush()
        except (OSError, ValueError):
            pass


class BridgeClient:
    """One connection to the agent; not shared between threads."""

    def __init__(self, path: str, timeout: float = 60.0, gone_after_s: float = AGENT_GONE_AFTER_S):
        self.path = path
        self.timeout = timeout
        self.gone_after_s = gone_after_s
        self.conn: Optional[UnixHTTPConnection] = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def post(self, route: str, body: Any, timeout: Optional[float] = None) -> Tuple[int, Any]:
        """(status, JSON body or None). Reconnects with backoff; AgentGone after ~60 s without the agent."""
        data = json.dumps(body).encode()
        first_failure: Optional[float] = None
        delay = 0.05
        reused = self.conn is not None
        while True:
            try:
                if self.conn is None:
                    self.conn = UnixHTTPConnection(self.path, self.timeout)
                    reused = False
                self.conn.timeout = timeout if timeout is not None else self.timeout
                if self.conn.sock is not None:
                    self.conn.sock.settimeout(self.conn.timeout)
                self.conn.request("POST", route, body=data, headers={"Content-Type": "application/json"})
                resp = self.conn.getresponse()
                raw = resp.read()
                if resp.will_close:
                    self.close()
                try:
                    parsed = json.loads(raw) if raw else None
                except ValueError:
                    parsed = None
                return resp.status, parsed
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if reused:
                    # A kept-alive connection the agent closed while idle: one immediate retry.
                    reused = False
                    continue
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    log(f"the agent's socket {self.path} does not answer ({e}); retrying")
                if now - first_failure >= self.gone_after_s:
                    raise AgentGone(f"the agent's socket {self.path} has not answered for {self.gone_after_s:.0f} s: {e}")
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
