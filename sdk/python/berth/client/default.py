"""The client that calls use when none is passed: one per (URL, token) in effect.

Shared by berth.api (``.remote()``, ``.map()``, ``.put()``, Queue/Map/Signal
over HTTP) and this package (BotSession, ``describe``, ``image_build``).
Lean on purpose: berth.api imports it at module level, so it is loaded
wherever the user's module is, in a container too; the HTTP client itself
(berth.client.client) is imported on the first call.
"""

import threading
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from .config import current_credentials

if TYPE_CHECKING:
    from .client import Client

_clients: Dict[Tuple[str, Optional[str]], "Client"] = {}
_clients_lock = threading.Lock()


def default_client() -> "Client":
    """One client per (URL, token) in effect, so connections are reused across calls."""
    from .client import Client  # HTTP and TLS: only once a call is made (a cold start pays for every import)

    creds = current_credentials()
    key = (creds.url, creds.token)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = Client()
        return client
