"""What user code declares: decorators, Function and the deployment kinds, Image, options, Context.

Imported wherever the user's module is, on the caller's machine and in the
container. Public names are re-exported by ``berth`` (berth/__init__.py).
Never imports berth.runtime. Builds on berth.client, which never imports
this package; the heavy part of it (HTTP, code sync, the task stream) only
inside the functions that call the coordinator (docs/design-notes.md,
"Python SDK layout").
"""
