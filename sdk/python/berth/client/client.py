"""The HTTP client for the coordinator's REST and gateway routes (standard library only)."""

import hashlib
import json
import os
import threading
from typing import IO, Any, Dict, Optional, Tuple, Union
from urllib.parse import quote

from ..errors import BerthError
from .config import current_credentials
from .http import HttpConnection, read_json

MAX_OBJECT_BYTES = 256 * 1024 * 1024


def auth_headers(token: str, content_type: Optional[str] = None) -> Dict[str, str]:
    """The bearer header (and the body's type); unauthenticated, saying how to get a token, without one."""
    if not token:
        raise BerthError(
            "unauthenticated",
            "no token: pass token=, set SERVICE_TOKEN, or run `berth configure default --token T`",
        )
    h = {"Authorization": f"Bearer {token}"}
    if content_type:
        h["Content-Type"] = content_type
    return h


class Client:
    """Talks to a berth coordinator with a workspace token.

    ``token`` defaults to ``SERVICE_TOKEN``, then the CLI's profile.
    """

    def __init__(self, token: str = "", url: Optional[str] = None, timeout: float = 30.0):
        creds = current_credentials(token)
        self.url = (url or creds.url).rstrip("/")
        self.token = creds.token
        self.timeout = timeout
        # One kept-alive connection per thread: http.client connections are not thread-safe.
        self._local = threading.local()

    # ---- transport ----

    def _headers(self, content_type: Optional[str] = None) -> dict:
        return auth_headers(self.token, content_type)

    def _conn(self) -> HttpConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = HttpConnection(self.url, self.timeout)
        return conn

    def new_connection(self, timeout: Optional[float] = None) -> HttpConnection:
        """A connection of its own (for long streams), which the caller closes."""
        return HttpConnection(self.url, timeout)

    def stream_connection(self) -> HttpConnection:
        """This thread's connection for task streams: no read timeout, a task may run for hours."""
        conn = getattr(self._local, "stream", None)
        if conn is None:
            conn = self._local.stream = HttpConnection(self.url, None)
        return conn

    def request(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        """A JSON request; HTTP errors and gateway ``ok: false`` answers raise BerthError."""
        data = None if body is None else json.dumps(body).encode()
        return self.send(method, path, data, "application/json" if data is not None else None, timeout)

    def send(
        self,
        method: str,
        path: str,
        data: Union[bytes, IO[bytes], None],
        content_type: Optional[str],
        timeout: Optional[float] = None,
        length: Optional[int] = None,
    ) -> Any:
        headers = self._headers(content_type)
        if length is not None:
            headers["Content-Length"] = str(length)
        conn = self._conn()
        conn.timeout = timeout if timeout is not None else self.timeout
        if conn.conn is not None and conn.conn.sock is not None:
            conn.conn.sock.settimeout(conn.timeout)
        resp = conn.request(method, path, data, headers)
        try:
            return read_json(resp, self.url)
        finally:
            if resp.will_close:
                conn.close()

    def stream(self, conn: HttpConnection, path: str, body: Any):
        """POSTs JSON on ``conn`` and returns the response unread (an NDJSON stream)."""
        headers = self._headers("application/json")
        headers["Accept"] = "application/x-ndjson"
        return conn.request("POST", path, json.dumps(body).encode(), headers)

    # ---- routes ----

    def current_workspace(self) -> dict:
        """The token's workspace (``external_id``, ``name``, ``created_at``)."""
        return self.request("GET", "/api/v1/workspace/current")

    def object_exists(self, sha256: str) -> Tuple[bool, Optional[Any]]:
        r = self.request("GET", f"/api/v1/gateway/objects/{sha256}")
        return bool(r.get("exists")), r.get("object_id")

    def put_object(self, sha256: str, data: Union[bytes, IO[bytes]], size: int) -> Any:
        """Uploads content-addressed bytes (the coordinator checks the hash); returns the object id."""
        if size > MAX_OBJECT_BYTES:
            raise BerthError("object_too_large", f"{size} bytes is over the 256 MiB limit of an object")
        # Large uploads take a while on slow links: no short socket timeout.
        r = self.send(
            "PUT",
            f"/api/v1/gateway/objects/{sha256}",
            data,
            "application/octet-stream",
            timeout=max(self.timeout, 600.0),
            length=size,
        )
        return r.get("object_id")

    def upload_file(self, local_path: str) -> "FileRef":
        """Uploads a local file (once: content addressed) and returns a reference usable as task input."""
        size = os.path.getsize(local_path)
        if size > MAX_OBJECT_BYTES:
            raise BerthError(
                "object_too_large", f"{local_path} is {size} bytes; objects are limited to 256 MiB ({MAX_OBJECT_BYTES} bytes)"
            )
        h = hashlib.sha256()
        with open(local_path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        sha = h.hexdigest()
        exists, object_id = self.object_exists(sha)
        if not exists:
            with open(local_path, "rb") as f:
                object_id = self.put_object(sha, f, size)
        return FileRef(object_id=object_id, sha256=sha, name=os.path.basename(local_path), size=size)

    def get_task_by_id(self, id: str) -> "Task":
        task = Task(self, id)
        task.refresh()
        return task

    def get_deployment_by_stub_id(self, stub_id: str) -> "Deployment":
        r = self.request("GET", f"/api/v1/gateway/stubs/{quote(stub_id, safe='')}")
        stub = r.get("stub") or {}
        return Deployment(self, stub_id=stub.get("id", stub_id), name=stub.get("name", ""), stub=stub)

    def get_deployment_by_id(self, id: str) -> "Deployment":
        r = self.request("GET", f"/api/v1/gateway/deployments/{quote(id, safe='')}")
        dep = r.get("deployment") or {}
        stub = dep.get("stub") if isinstance(dep.get("stub"), dict) else {}
        stub_id = dep.get("stub_id") or stub.get("id")
        if not stub_id:
            raise BerthError("internal", f"the coordinator's answer for deployment {id} names no stub")
        return Deployment(self, stub_id=stub_id, name=dep.get("name", ""), stub=stub, id=dep.get("id", id))


from .tasks import Deployment, FileRef, Task  # noqa: E402  (they use Client in annotations only)

__all__ = ["BerthError", "Client", "Deployment", "FileRef", "Task"]
