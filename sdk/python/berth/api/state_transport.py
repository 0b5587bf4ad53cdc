"""How Queue, Map and Signal reach the cluster (docs/queues.md).

Outside a container: the SDK's gateway route on the coordinator
(``POST /api/v1/gateway/state``) with the configured token. Inside one, the
in-container runtime installs the agent-socket transport (BridgeStateTransport
below) before it imports the user's module (``berth.runtime.state_bridge``);
a sandbox's or pod's process finds the socket itself. Containers never reach
the coordinator, and the agent adds the container's workspace itself.
"""

import threading
from typing import Any, Callable, Dict, Optional

from ..client.default import default_client
from ..errors import BerthError
from ..unix_http import BridgeClient

# A transport takes one request ({op, name, ...}) and a timeout in seconds and
# returns the answer's fields, or raises BerthError.
Transport = Callable[[Dict[str, Any], Optional[float]], Dict[str, Any]]

_installed: Optional[Transport] = None
_lock = threading.Lock()


# Puts and pops are quick; a signal wait passes its own, longer timeout.
DEFAULT_TIMEOUT_S = 60.0


class BridgeStateTransport:
    """Over the agent's socket (runners install it; sandboxes and pods find it).

    One keep-alive connection per thread (a BridgeClient is not shared between threads).
    """

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


def install(transport: Optional[Transport]) -> None:
    """Sets the transport every Queue, Map and Signal of this process uses (None: back to HTTP)."""
    global _installed
    with _lock:
        _installed = transport


def _http(request: Dict[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
    from .. import env

    if env.is_remote():
        raise BerthError(
            "failed_precondition",
            "in a berth container Queue, Map and Signal go through the agent's socket, "
            "which berth's runner sets up before it imports your module; none is set up in this process",
        )

    answer = default_client().request("POST", "/api/v1/gateway/state", request, timeout=timeout)
    return {k: v for k, v in answer.items() if k != "ok"}


def _from_socket() -> Optional[Transport]:
    """A sandbox's or pod's process has the agent socket but no runner to install its transport."""
    import os

    path = os.environ.get("BERTH_AGENT_SOCKET", "")
    if not path or not os.path.exists(path):
        return None
    transport = BridgeStateTransport(path)
    install(transport)
    return transport


def call(request: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
    transport = _installed or _from_socket()
    return (transport or _http)(request, timeout)
