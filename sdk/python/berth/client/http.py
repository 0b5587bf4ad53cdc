"""One keep-alive HTTP connection to the coordinator (http.client).

urllib opens a connection per request; a ``.map()`` of thousands of inputs
and a loop of ``.remote()`` calls reuse connections instead.
"""

import http.client
import json
import socket
from typing import Any, Optional
from urllib.parse import urlsplit

from ..errors import BerthError

# A kept-alive connection the server closed while idle fails on first use in these ways.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest)


class HttpConnection:
    def __init__(self, base_url: str, timeout: Optional[float]):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BerthError("invalid_request", f"the coordinator URL {base_url!r} is not an http(s) URL")
        self.base_url = base_url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.conn: Optional[http.client.HTTPConnection] = None
        self.used = False

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        conn.connect()
        if conn.sock is not None:
            # Streams stay silent while a task runs; keepalive notices a dead peer.
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def request(self, method: str, path: str, body: Any = None, headers: Optional[dict] = None) -> http.client.HTTPResponse:
        """Sends the request and returns the response with its body unread."""
        for attempt in (0, 1):
            fresh = self.conn is None
            try:
                if self.conn is None:
                    self.conn = self._connect()
                    self.used = False
                if hasattr(body, "seek") and attempt:
                    body.seek(0)
                self.conn.request(method, self.prefix + path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                self.used = True
                return resp
            except _STALE as e:
                self.close()
                if fresh or attempt or not self.used:
                    raise BerthError("unavailable", f"cannot reach {self.base_url}: {e}") from None
            except (OSError, http.client.HTTPException) as e:
                self.close()
                reason = e.strerror if isinstance(e, OSError) and e.strerror else e
                raise BerthError("unavailable", f"cannot reach {self.base_url}: {reason}") from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def abort(self) -> None:
        """Closes the socket under a reader blocked in another thread (it then sees EOF or an error)."""
        conn = self.conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def read_json(resp: http.client.HTTPResponse, base_url: str) -> Any:
    """The response's JSON body; an HTTP error or a gateway ``ok: false`` raises BerthError."""
    try:
        raw = resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise BerthError("unavailable", f"{base_url} broke off its answer: {e}") from None
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        body = None
    if resp.status >= 400 or body is None:
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            raise BerthError(err.get("code", "internal"), err.get("message", f"HTTP {resp.status}"), resp.status)
        text = raw[:200].decode("utf-8", "replace")
        raise BerthError("internal", f"HTTP {resp.status} from {base_url}: {text}", resp.status)
    check_ok(body, resp.status)
    return body


def check_ok(body: Any, status: int = 200) -> None:
    """Gateway routes answer HTTP 200 with ``{"ok": false, "error": ...}`` on failure."""
    if isinstance(body, dict) and body.get("ok") is False:
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        raise BerthError(err.get("code", "internal"), err.get("message", "the coordinator refused the request"), status)
