"""Sandboxes and pods, driven from the caller's machine through the coordinator's sandbox API.

The process server that runs inside a sandbox is berth.runtime.sandbox_init.
Never imports berth.runtime (docs/design-notes.md, "Python SDK layout").
Public names are re-exported by ``berth`` (berth/__init__.py).
"""
