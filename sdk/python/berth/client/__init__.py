"""The caller's side: HTTP to the coordinator (Client, tasks, code sync, credentials, ``berth.client.describe``).

Never imports berth.runtime (docs/design-notes.md, "Python SDK layout").
Public names are re-exported by ``berth`` (berth/__init__.py).
"""
