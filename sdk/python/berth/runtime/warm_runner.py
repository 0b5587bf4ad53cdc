"""A pre-warmed runner: ``python3 -u -m berth.runtime.warm_runner`` (docs/runtime.md, "Pre-warmed runners").

Started by the agent before any stub is known: it imports the runner (what
a cold start would spend its time on), connects to ``BERTH_WARM_SOCKET`` and
waits. When the agent gives it to a stub's container, the agent has already
mounted the code, set its limits and network, and served its bridge; it then
sends one JSON line, the container's environment (secrets included) and
working directory. From there this process is that runner: the user's module
is imported only now. If the agent hangs up first, it exits having run nothing.
"""

import json
import os
import signal
import socket
import sys

from . import runner

MAX_ASSIGNMENT_BYTES = 16 * 1024 * 1024


def wait_for_assignment(path: str):
    """The agent's one line, decoded; None when it hung up without one."""
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
        return json.loads(buf)
    finally:
        s.close()


def become(assignment: dict) -> None:
    """Takes the container's environment and working directory as if it had started with them."""
    env = assignment["env"]
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    os.chdir(assignment.get("cwd") or "/")
    # What PYTHONPATH would have put on sys.path at start-up, in its order.
    for p in reversed([p for p in env.get("PYTHONPATH", "").split(":") if p]):
        if p not in sys.path:
            sys.path.insert(0, p)


def main() -> int:
    # PID 1 ignores SIGTERM without a handler: a stop before the assignment must not wait out its grace.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    assignment = wait_for_assignment(os.environ.get("BERTH_WARM_SOCKET") or "/berth/run/warm.sock")
    if assignment is None:
        return 0
    become(assignment)
    return runner.main()


if __name__ == "__main__":
    sys.exit(main())
