"""How Queue, Map and Signal reach the cluster (docs/queues.md).

Outside a container: the SDK's gateway route on the coordinator
(``POST /api/v1/gateway/state``) with the configured token. Inside one, the
in-container runtime installs its agent-socket transport before it imports
the user's module (``berth.runtime.state_bridge``): containers never reach
the coordinator, and the agent adds the container's workspace itself.
"""

import threading
from typing import Any, Callable, Dict, Optional

# A transport takes one request ({op, name, ...}) and a timeout in seconds and
# returns the answer's fields, or raises BerthError.
Transport = Callable[[Dict[str, Any], Optional[float]], Dict[str, Any]]

_installed: Optional[Transport] = None
_lock = threading.Lock()


def install(transport: Optional[Transport]) -> None:
    """Sets the transport every Queue, Map and Signal of this process uses (None: back to HTTP)."""
    global _installed
    with _lock:
        _installed = transport


def _http(request: Dict[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
    from .. import env
    from ..errors import BerthError
    from .function import default_client

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
    from ..runtime.state_bridge import BridgeStateTransport

    transport = BridgeStateTransport(path)
    install(transport)
    return transport


def call(request: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
    transport = _installed or _from_socket()
    return (transport or _http)(request, timeout)
