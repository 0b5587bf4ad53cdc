"""The sandbox and pod gateway routes (docs/sandboxes.md) as the SDK calls them.

JSON calls answer ``{ok: true, ...}`` or ``{ok: false, error}``; the raw byte
routes (file content, process output) answer bytes or a JSON error with its
own HTTP status. Errors become the spec's three classes by their code:
``not_found``/``sandbox_terminated`` → SandboxConnectionError,
``process_not_found`` → SandboxProcessError, ``path_not_found``/``path_invalid``
→ SandboxFileSystemError (naming the path); any other code stays a BerthError.

Every call is kept in a bounded debug buffer (``debug()`` prints it): time,
method, route, HTTP status, duration and a short summary of what went and
came back. The token is never recorded and byte bodies are shown by size.
"""

import collections
import io
import http.client
import json
import sys
import threading
import time
from typing import IO, Any, Deque, Dict, Iterator, Optional, TextIO, Tuple
from urllib.parse import quote, urlencode

from ..client.client import auth_headers
from ..client.http import HttpConnection
from ..errors import BerthError, SandboxConnectionError, SandboxFileSystemError, SandboxProcessError

GATEWAY = "/api/v1/gateway"
DEBUG_ENTRIES = 100
SUMMARY_CHARS = 300
CHUNK = 1 << 20
# Connections whose exec answer was read to its last frame, kept alive for the next exec (open_raw(reuse=True)).
IDLE_RAW_CONNECTIONS = 4

_CONNECTION_CODES = ("not_found", "sandbox_terminated")
_PATH_CODES = ("path_not_found", "path_invalid")


def q(value: Any) -> str:
    """One path segment, escaped."""
    return quote(str(value), safe="")


def query(**params: Any) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def mapped_error(code: str, message: str, status: int, details: Any, context: Dict[str, Any]) -> BerthError:
    """The SDK error for a gateway error code; ``context`` holds what the call was about (sandbox_id, pid, path)."""
    details = details if isinstance(details, dict) else {}
    if code in _CONNECTION_CODES and context.get("sandbox_id") is not None:
        return SandboxConnectionError(code, message, status, sandbox_id=str(context["sandbox_id"]))
    if code == "process_not_found":
        return SandboxProcessError(code, message, status, pid=context.get("pid"))
    if code in _PATH_CODES:
        path = details.get("path") if isinstance(details.get("path"), str) else context.get("path", "")
        return SandboxFileSystemError(code, message, status, path=path or "")
    return BerthError(code, message, status)


def _summary(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, separators=(",", ":"))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "..."


class SandboxApi:
    """One coordinator's sandbox routes, with one kept-alive connection per thread and a debug buffer."""

    def __init__(self, url: str, token: Optional[str], timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.token = token
        # exec in one round trip (POST .../processes/run) until the coordinator says it has no such route.
        self.run_route = True
        self.timeout = timeout
        self._local = threading.local()
        # Every thread's kept-alive connection, so close() reaches them all.
        self._conns: list = []
        # (HttpConnection, its last response, of which only the chunked end is unread): see keep_raw.
        self._idle_raw: list = []
        self._debug: Deque[Dict[str, Any]] = collections.deque(maxlen=DEBUG_ENTRIES)
        self._debug_lock = threading.Lock()

    # ---- debug buffer ----

    def record(self, method: str, route: str, status: int, t0: float, sent: Any, answer: Any) -> None:
        """One call; ``t0`` is its time.monotonic() start."""
        elapsed = time.monotonic() - t0
        at = time.time() - elapsed
        entry = {
            "at": time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}",
            "method": method,
            "route": route,
            "status": status,
            "ms": int(elapsed * 1000),
            "sent": _summary(sent),
            "answer": _summary(answer),
        }
        with self._debug_lock:
            self._debug.append(entry)

    def debug_entries(self) -> list:
        with self._debug_lock:
            return list(self._debug)

    def print_debug(self, file: Optional[TextIO] = None) -> None:
        out = file if file is not None else sys.stdout
        entries = self.debug_entries()
        out.write(f"berth sandbox debug: {self.url}, last {len(entries)} of at most {DEBUG_ENTRIES} calls\n")
        for e in entries:
            out.write(f"{e['at']} {e['method']} {e['route']} -> {e['status']} in {e['ms']} ms\n")
            if e["sent"]:
                out.write(f"    sent:   {e['sent']}\n")
            if e["answer"]:
                out.write(f"    answer: {e['answer']}\n")
        out.flush()

    # ---- transport ----

    def headers(self, content_type: Optional[str] = None) -> Dict[str, str]:
        return auth_headers(self.token, content_type)

    def _conn(self, timeout: float) -> HttpConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = HttpConnection(self.url, timeout)
            with self._debug_lock:
                self._conns.append(conn)
        conn.timeout = timeout
        if conn.conn is not None and conn.conn.sock is not None:
            conn.conn.sock.settimeout(timeout)
        return conn

    def close(self) -> None:
        """Closes the kept-alive connections (a later call opens another)."""
        with self._debug_lock:
            conns, self._conns = self._conns, []
            idle, self._idle_raw = self._idle_raw, []
        for conn in conns + [c for c, _ in idle]:
            conn.close()
        self._local = threading.local()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def call(
        self,
        method: str,
        route: str,
        body: Any = None,
        context: Optional[Dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """A JSON call under /api/v1/gateway; the answer's fields, or the mapped error raised."""
        data = None if body is None else json.dumps(body).encode()
        headers = self.headers("application/json" if data is not None else None)
        return self._exchange(method, route, data, headers, body, context or {}, timeout)

    def upload(self, route: str, f: IO[bytes], size: int, context: Dict[str, Any]) -> Dict[str, Any]:
        """PUTs ``size`` bytes read from ``f`` in blocks (http.client streams a file body)."""
        headers = self.headers("application/octet-stream")
        headers["Content-Length"] = str(size)
        return self._exchange("PUT", route, f, headers, f"<{size} bytes>", context, max(self.timeout, 600.0))

    def _exchange(
        self,
        method: str,
        route: str,
        data: Any,
        headers: Dict[str, str],
        shown: Any,
        context: Dict[str, Any],
        timeout: Optional[float],
    ) -> Dict[str, Any]:
        started = time.monotonic()
        conn = self._conn(timeout if timeout is not None else self.timeout)
        status = 0
        try:
            resp = conn.request(method, GATEWAY + route, data, headers)
            status = resp.status
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise BerthError("unavailable", f"{self.url} broke off its answer: {e}") from None
            if resp.will_close:
                conn.close()
            answer = self._json(raw, status, context)
        except BerthError as e:
            self.record(method, route, status, started, shown, {"error": e.code, "message": e.message})
            raise
        self.record(method, route, status, started, shown, answer)
        return answer

    def _json(self, raw: bytes, status: int, context: Dict[str, Any]) -> Dict[str, Any]:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = raw[:200].decode("utf-8", "replace")
            raise BerthError("internal", f"HTTP {status} from {self.url} is not a JSON object: {text}", status)
        err = body.get("error")
        if status >= 400 or body.get("ok") is False:
            if isinstance(err, dict):
                raise mapped_error(
                    str(err.get("code", "internal")),
                    str(err.get("message", f"HTTP {status}")),
                    status,
                    err.get("details"),
                    context,
                )
            raise BerthError("internal", f"HTTP {status} from {self.url} without an error", status)
        return body

    # ---- code sync (berth.client.sync.sync_code takes this object as its client) ----

    def object_exists(self, sha256: str) -> Tuple[bool, Optional[Any]]:
        r = self.call("GET", f"/objects/{q(sha256)}")
        return bool(r.get("exists")), r.get("object_id")

    def put_object(self, sha256: str, data: bytes, size: int) -> Any:
        return self.upload(f"/objects/{q(sha256)}", io.BytesIO(data), size, {}).get("object_id")

    def keep_raw(self, conn: HttpConnection, resp: http.client.HTTPResponse) -> None:
        """Keeps the connection of an answer read up to its end for the next open_raw(reuse=True).

        Only the chunked encoding's last bytes may be left unread: the next user reads them (they came
        with or just after the last frame), so the reader of this answer never waits for them.
        """
        if resp.will_close:
            conn.close()
            return
        with self._debug_lock:
            if len(self._idle_raw) < IDLE_RAW_CONNECTIONS:
                self._idle_raw.append((conn, resp))
                return
        conn.close()

    def _idle_connection(self, timeout: Optional[float]) -> Optional[HttpConnection]:
        """A kept connection whose last answer is read to its end, or None."""
        while True:
            with self._debug_lock:
                if not self._idle_raw:
                    return None
                conn, resp = self._idle_raw.pop()
            try:
                rest = resp.read()
            except (OSError, http.client.HTTPException):
                rest = None
            if rest != b"" or not resp.isclosed() or conn.conn is None:
                conn.close()  # not at a clean end: it cannot carry another request
                continue
            conn.timeout = timeout
            if conn.conn.sock is not None:
                conn.conn.sock.settimeout(timeout)
            return conn

    def open_raw(
        self,
        route: str,
        context: Dict[str, Any],
        timeout: Optional[float],
        method: str = "GET",
        body: Any = None,
        reuse: bool = False,
    ) -> Tuple[HttpConnection, http.client.HTTPResponse]:
        """Calls a raw byte route on a connection of its own (closed by the caller, or given to keep_raw), the answer's body unread.

        ``body`` (POST) is sent as JSON. ``reuse``: on a connection keep_raw kept, when there is one (it
        saves a TCP connect and the coordinator's accept; a kept one the coordinator closed meanwhile is
        replaced, as the kept-alive JSON connection is).
        """
        started = time.monotonic()
        conn = (self._idle_connection(timeout) if reuse else None) or HttpConnection(self.url, timeout)
        data = None if body is None else json.dumps(body).encode()
        try:
            resp = conn.request(method, GATEWAY + route, data, self.headers("application/json" if data else None))
            if resp.status >= 400:
                raw = resp.read()
                try:
                    self._json(raw, resp.status, context)
                except BerthError as e:
                    self.record(method, route, resp.status, started, body, {"error": e.code, "message": e.message})
                    raise
            self.record(method, route, resp.status, started, body, "<bytes follow>")
            return conn, resp
        except BaseException:
            conn.close()
            raise

    def read_raw(self, route: str, context: Dict[str, Any], timeout: Optional[float] = None) -> Iterator[bytes]:
        """The bytes of a raw route in blocks of up to 1 MiB, never all at once."""
        conn, resp = self.open_raw(route, context, timeout if timeout is not None else max(self.timeout, 600.0))
        try:
            while True:
                try:
                    block = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    raise BerthError("unavailable", f"{self.url} broke off the download: {e}") from None
                if not block:
                    return
                yield block
        finally:
            conn.close()
