"""Queue, Map and Signal inside a container: over the agent's socket (docs/queues.md).

The runner installs this before it imports the user's module. The agent adds
the container's workspace to each request and relays it to the coordinators;
the container names no workspace and reaches neither NATS nor the coordinator.
"""

import os
import threading
from typing import Any, Dict, Optional

from ..api import state_transport
from ..errors import BerthError
from .bridge import BridgeClient

# Puts and pops are quick; a signal wait passes its own, longer timeout.
DEFAULT_TIMEOUT_S = 60.0


class BridgeStateTransport:
    """One keep-alive connection per thread (a BridgeClient is not shared between threads)."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self._local = threading.local()

    def __call__(self, request: Dict[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = BridgeClient(self.socket_path, timeout=DEFAULT_TIMEOUT_S)
        status, body = client.post("/v1/state", request, timeout=timeout or DEFAULT_TIMEOUT_S)
        if status == 200 and isinstance(body, dict):
            return body
        error = (body or {}).get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            raise BerthError(str(error.get("code") or "internal"), str(error.get("message") or ""), status)
        raise BerthError("internal", f"the agent answered {status} to {request.get('op')}", status)


def install_from_env() -> None:
    """Installs the transport when this container has an agent socket."""
    path = os.environ.get("BERTH_AGENT_SOCKET") or "/berth/run/agent.sock"
    if os.path.exists(path):
        state_transport.install(BridgeStateTransport(path))
