"""A small HTTP client for the coordinator's REST API (standard library only)."""

import json
import urllib.error
import urllib.request
from typing import Any, Optional

from .config import current_credentials


class BerthError(Exception):
    """An error answered by the coordinator, with its stable code."""

    def __init__(self, code: str, message: str, status: int = 0):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.status = status


class Client:
    """Talks to a berth coordinator with a workspace token.

    ``token`` defaults to ``SERVICE_TOKEN``, then the CLI's profile.
    """

    def __init__(self, token: str = "", url: Optional[str] = None, timeout: float = 30.0):
        creds = current_credentials(token)
        self.url = (url or creds.url).rstrip("/")
        self.token = creds.token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> Any:
        if not self.token:
            raise BerthError(
                "unauthenticated",
                "no token: pass token=, set SERVICE_TOKEN, or run `berth configure default --token T`",
            )
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw or b"{}").get("error") or {}
            except ValueError:
                err = {}
            raise BerthError(err.get("code", "internal"), err.get("message", f"HTTP {e.code}"), e.code) from None
        except urllib.error.URLError as e:
            raise BerthError("unavailable", f"cannot reach {self.url}: {e.reason}") from None
        return json.loads(raw or b"{}")

    def current_workspace(self) -> dict:
        """The token's workspace (``external_id``, ``name``, ``created_at``)."""
        return self.request("GET", "/api/v1/workspace/current")
