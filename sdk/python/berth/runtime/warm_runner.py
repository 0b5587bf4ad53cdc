"""A pre-warmed runner: ``python3 -u -m berth.runtime.warm_runner`` (docs/runtime.md, "Pre-warmed runners").

Started by the agent before any stub is known: it imports the runner (what
a cold start would spend its time on), connects to ``BERTH_WARM_SOCKET`` and
waits. When the agent gives it to a stub's container, the agent has already
mounted the code, set its limits and network, and served its bridge; it then
sends one JSON line, the container's environment (secrets included) and
working directory. From there this process is that runner: the user's module
is imported only now. If the agent hangs up first, it exits having run nothing.
"""

import os
import signal
import sys

from . import runner
from .warm_handover import wait_for_assignment


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
