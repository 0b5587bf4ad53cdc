"""Output: a file a task publishes, with a signed public URL (docs/outputs.md).

Inside a berth container the file goes to the agent over its socket, which
relays it to the coordinator's object store; a directory is sent as one
``.tar.gz``. ``public_url(expires)`` returns a URL anyone can GET without a
token until it expires, after which the file is deleted.
"""

import json
import os
import tarfile
import tempfile
import urllib.parse
from typing import Any, Dict, Optional

from ..errors import BerthError
from ..unix_http import UnixHTTPConnection

DEFAULT_EXPIRES_S = 3600
# Uploads of large files take a while; the agent relays them as they arrive.
UPLOAD_TIMEOUT_S = 600.0


def _agent_socket() -> str:
    path = os.environ.get("BERTH_AGENT_SOCKET", "")
    if not path:
        raise BerthError(
            "failed_precondition",
            "an Output is saved from inside a berth container (a function, endpoint or task queue); "
            "this process has no agent socket (BERTH_AGENT_SOCKET)",
        )
    return path


def _post(route: str, body: Any, headers: Dict[str, str], timeout: float) -> Dict[str, Any]:
    conn = UnixHTTPConnection(_agent_socket(), timeout)
    try:
        conn.request("POST", route, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
    except OSError as e:
        raise BerthError("unavailable", f"the agent's socket did not answer ({e})") from None
    finally:
        conn.close()
    try:
        answer = json.loads(raw) if raw else {}
    except ValueError:
        answer = {}
    if resp.status == 200 and isinstance(answer, dict):
        return answer
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        raise BerthError(str(error.get("code") or "internal"), str(error.get("message") or ""), resp.status)
    raise BerthError("internal", f"the agent answered {resp.status} to {route}", resp.status)


class Output:
    """A file or directory to publish from a task: ``Output(path="result.png").save()``."""

    def __init__(self, path: str):
        if not isinstance(path, (str, os.PathLike)) or str(path) == "":
            raise TypeError("Output path must be a file or directory path")
        self.path = os.fspath(path)
        self.id: Optional[str] = None

    def __repr__(self) -> str:
        return f"Output(path={self.path!r}, id={self.id!r})"

    @classmethod
    def from_pil_image(cls, image: Any, format: str = "PNG") -> "Output":
        """An Output of a PIL image (anything with ``save(path, format=...)``), written as a temporary file."""
        if not hasattr(image, "save"):
            raise TypeError(f"from_pil_image takes a PIL image, not {type(image).__name__}")
        fd, path = tempfile.mkstemp(prefix="berth-output-", suffix=f".{format.lower()}")
        os.close(fd)
        image.save(path, format=format)
        return cls(path)

    def save(self) -> "Output":
        """Uploads the file (a directory as ``<name>.tar.gz``); sets ``id``. Returns the Output."""
        if not os.path.exists(self.path):
            raise BerthError("invalid_request", f"Output path {self.path} does not exist")
        name = os.path.basename(os.path.normpath(self.path)) or "output"
        packed: Optional[str] = None
        try:
            if os.path.isdir(self.path):
                fd, packed = tempfile.mkstemp(prefix="berth-output-", suffix=".tar.gz")
                os.close(fd)
                with tarfile.open(packed, "w:gz") as tar:
                    tar.add(self.path, arcname=name)
                name += ".tar.gz"
            source = packed or self.path
            query = urllib.parse.urlencode({"name": name, "task_id": os.environ.get("BERTH_TASK_ID", "")})
            size = os.path.getsize(source)
            with open(source, "rb") as f:
                answer = _post(
                    f"/v1/outputs?{query}",
                    f,
                    {"Content-Type": "application/octet-stream", "Content-Length": str(size)},
                    UPLOAD_TIMEOUT_S,
                )
        finally:
            if packed:
                os.unlink(packed)
        self.id = str(answer["id"])
        return self

    def _call(self, op: str, body: Dict[str, Any]) -> Dict[str, Any]:
        if self.id is None:
            raise BerthError("not_found", f"Output {self.path} has not been saved: call save() first")
        data = json.dumps(body).encode()
        return _post(f"/v1/outputs/{self.id}/{op}", data, {"Content-Type": "application/json"}, 60.0)

    def public_url(self, expires: int = DEFAULT_EXPIRES_S) -> str:
        """A URL that serves the file without a token for ``expires`` seconds; the file is deleted then."""
        if isinstance(expires, bool) or not isinstance(expires, int) or expires < 1:
            raise ValueError(f"expires must be a whole number of seconds >= 1, got {expires!r}")
        if self.id is None:
            self.save()
        return str(self._call("url", {"expires": expires})["url"])

    def stat(self) -> Dict[str, Any]:
        """The stored output: ``{id, name, size, created_at, expires_at}``."""
        return self._call("stat", {})

    def exists(self) -> bool:
        """Whether it is saved and not yet deleted."""
        if self.id is None:
            return False
        try:
            self.stat()
            return True
        except BerthError as e:
            if e.code == "not_found":
                return False
            raise
