"""Queue, Map and Signal inside a container: over the agent's socket (docs/queues.md).

The runner installs this before it imports the user's module. The agent adds
the container's workspace to each request and relays it to the coordinators;
the container names no workspace and reaches neither NATS nor the coordinator.
"""

import os

from ..api import state_transport
from ..api.state_transport import BridgeStateTransport


def install_from_env() -> None:
    """Installs the transport when this container has an agent socket."""
    path = os.environ.get("BERTH_AGENT_SOCKET") or "/berth/run/agent.sock"
    if os.path.exists(path):
        state_transport.install(BridgeStateTransport(path))
