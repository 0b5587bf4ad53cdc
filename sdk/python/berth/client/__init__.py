"""The caller's side: HTTP to the coordinator (Client, tasks, code sync, credentials, ``berth.client.describe``).

Never imports berth.runtime, nor berth.api or berth.sandbox, which build on it
(docs/design-notes.md, "Python SDK layout"): what they share with it lives
here (``default``, ``markers``, ``kinds``).
Public names are re-exported by ``berth`` (berth/__init__.py).
"""
