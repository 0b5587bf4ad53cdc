"""The in-container runtime: what the agent starts in a container.

``python3 -u -m berth.runtime.runner`` (queued tasks over the agent's bridge),
``python3 -u -m berth.runtime.http_runner`` (endpoint, asgi and realtime
stubs, on the standard-library ASGI host), and
``python3 -u -I /berth/sdk/berth/runtime/sandbox_init.py SOCKET``, a
sandbox's pid 1, run by path and stdlib only. Never imports berth.client or
berth.sandbox (docs/design-notes.md, "Python SDK layout"). Kept empty so that
starting a runner imports no more than it did.
"""
