"""The runner's side of the bridge: HTTP/1.1 keep-alive over the agent's unix socket.

The client itself (BridgeClient, AgentGone, log) lives in berth.unix_http, shared with
the SDK objects that reach the agent from a sandbox or pod, which may not import the runtime.
"""

from ..unix_http import AGENT_GONE_AFTER_S, AgentGone, BridgeClient, UnixHTTPConnection, log

__all__ = ["AGENT_GONE_AFTER_S", "AgentGone", "BridgeClient", "UnixHTTPConnection", "log"]
