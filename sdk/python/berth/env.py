"""Where the code runs: ``env.is_remote()`` is true inside a berth container."""

import os
import threading

# Set by the runner while it imports the user's module: calls made at import
# time would submit tasks from every container, so they are refused then.
_importing = threading.Event()


def is_remote() -> bool:
    return os.environ.get("BERTH_REMOTE") == "1"


def importing_user_code() -> bool:
    return is_remote() and _importing.is_set()


def set_importing(on: bool) -> None:
    if on:
        _importing.set()
    else:
        _importing.clear()
