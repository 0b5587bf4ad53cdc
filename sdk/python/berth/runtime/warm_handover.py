"""A pre-warmed container's hand-over: the one JSON line the agent sends on its socket.

Pre-warmed runners (warm_runner.py) and pre-warmed sandboxes (sandbox_init.py, which
loads this file by its path and imports nothing of berth) block here until the agent
gives them a stub or a sandbox (docs/runtime.md and docs/sandboxes.md, "Pre-warmed ...").
"""

import json
import socket

MAX_ASSIGNMENT_BYTES = 16 * 1024 * 1024


def wait_for_assignment(path):
    """The agent's one line at the socket ``path``, decoded; None when it hung up without one."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        buf = bytearray()
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                return None
            buf += chunk
            if len(buf) > MAX_ASSIGNMENT_BYTES:
                raise ValueError("the assignment is larger than 16 MiB")
        return json.loads(buf.decode("utf-8"))
    finally:
        s.close()
