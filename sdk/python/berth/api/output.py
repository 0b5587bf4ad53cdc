"""Output: a file a task publishes, with a signed public URL (docs/outputs.md).

Inside a berth container the file goes to the agent over its socket, which
relays it to the coordinator's object store; a directory is zipped first and
sent as one ``<name>.zip`` (as beta9 does). ``public_url(expires)`` returns a
URL anyone can GET without a token until it expires, after which the file is
deleted. beta9's names: ``Output(path=...)``, ``from_file``,
``from_pil_image``, ``save``, ``stat`` (a ``Stat``: mode, size, atime,
mtime), ``exists``, ``public_url`` and the ``Output*Error`` classes.
"""

import datetime
import json
import os
import shutil
import tempfile
import urllib.parse
import zipfile
from typing import Any, BinaryIO, Dict, NamedTuple, Optional, Union

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


class OutputNotSavedError(BerthError):
    """stat() or exists() of an Output that was never saved."""

    def __init__(self, message: str = "the Output has not been saved: call save() first"):
        super().__init__("not_found", message)


class OutputNotFoundError(BerthError):
    """The saved Output is gone (its public URL expired, so it was deleted)."""

    def __init__(self, message: str):
        super().__init__("not_found", message)


class OutputSaveError(BerthError):
    """save() failed; ``code`` says why (the coordinator's or the agent's error code)."""


class OutputPublicURLError(BerthError):
    """public_url() failed; ``code`` says why."""


def _time(value: Any) -> Optional[datetime.datetime]:
    if not isinstance(value, str) or not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


class Stat(NamedTuple):
    """The saved Output as ``stat()`` answers it: beta9's fields first, then berth's.

    ``stat().size`` and ``stat()["size"]`` both work; ``to_dict()`` gives them all.
    """

    mode: str  # protection bits of the stored file, as ``ls -l`` writes them
    size: int  # bytes
    atime: Optional[datetime.datetime]
    mtime: Optional[datetime.datetime]
    id: str = ""
    name: str = ""
    created_at: Optional[datetime.datetime] = None
    # When it is deleted (set by its first public URL); None: kept.
    expires_at: Optional[datetime.datetime] = None

    def to_dict(self) -> Dict[str, Any]:
        return self._asdict()

    def __getitem__(self, key: Union[int, slice, str]) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            if key not in self._fields:
                raise KeyError(key)
            return getattr(self, key)
        return tuple.__getitem__(self, key)

    @classmethod
    def from_answer(cls, a: Dict[str, Any]) -> "Stat":
        return cls(
            mode=str(a.get("mode") or ""),
            size=int(a.get("size") or 0),
            atime=_time(a.get("atime")),
            mtime=_time(a.get("mtime")),
            id=str(a.get("id") or ""),
            name=str(a.get("name") or ""),
            created_at=_time(a.get("created_at")),
            expires_at=_time(a.get("expires_at")),
        )


class Output:
    """A file or directory to publish from a task: ``Output(path="result.png").save()``.

    The path must exist when the Output is made (FileNotFoundError otherwise, as beta9).
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"]):
        if not isinstance(path, (str, os.PathLike)) or os.fspath(path) == "":
            raise TypeError("Output path must be a file or directory path")
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"Output path {self.path} does not exist")
        self.id: Optional[str] = None
        # A file this Output made (from_file, from_pil_image): removed once saved.
        self._own_file = False

    def __repr__(self) -> str:
        return f"Output(path={self.path!r}, id={self.id!r})"

    @classmethod
    def _temp(cls, suffix: str = "") -> str:
        fd, path = tempfile.mkstemp(prefix="berth-output-", suffix=suffix)
        os.close(fd)
        return path

    @classmethod
    def from_pil_image(cls, image: Any, format: str = "PNG") -> "Output":
        """An Output of a PIL image (anything with ``save(path, format=...)``), written as a temporary file."""
        if not hasattr(image, "save"):
            raise TypeError(f"from_pil_image takes a PIL image, not {type(image).__name__}")
        fmt = (format or "PNG").lstrip(".")
        path = cls._temp(f".{fmt.lower()}")
        image.save(path, format=fmt.upper())
        out = cls(path)
        out._own_file = True
        return out

    @classmethod
    def from_file(cls, file_handle: BinaryIO) -> "Output":
        """An Output of what a file-like object holds (read to its end, copied to a temporary file)."""
        if not hasattr(file_handle, "read"):
            raise TypeError(f"from_file takes a file opened for reading, not {type(file_handle).__name__}")
        name = os.path.basename(str(getattr(file_handle, "name", "") or ""))
        path = cls._temp(f"-{name}" if name else "")
        with open(path, "wb") as f:
            shutil.copyfileobj(file_handle, f)
        out = cls(path)
        out._own_file = True
        return out

    @property
    def _name(self) -> str:
        name = os.path.basename(os.path.normpath(self.path)) or "output"
        return f"{name}.zip" if os.path.isdir(self.path) else name

    def _zip(self) -> str:
        """The directory as one zip (its files relative to it, deflated), as beta9 saves directories."""
        packed = self._temp(".zip")
        with zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            for root, dirs, files in os.walk(self.path):
                dirs.sort()
                for f in sorted(files):
                    full = os.path.join(root, f)
                    if os.path.isfile(full):
                        z.write(full, os.path.relpath(full, self.path))
        return packed

    def save(self) -> "Output":
        """Uploads the file (a directory as ``<name>.zip``); sets ``id``. Returns the Output."""
        if not os.path.exists(self.path):
            raise OutputSaveError("invalid_request", f"Output path {self.path} does not exist")
        name = self._name
        packed: Optional[str] = None
        try:
            if os.path.isdir(self.path):
                packed = self._zip()
            source = packed or self.path
            query = urllib.parse.urlencode({"name": name, "task_id": os.environ.get("BERTH_TASK_ID", "")})
            size = os.path.getsize(source)
            try:
                with open(source, "rb") as f:
                    answer = _post(
                        f"/v1/outputs?{query}",
                        f,
                        {"Content-Type": "application/octet-stream", "Content-Length": str(size)},
                        UPLOAD_TIMEOUT_S,
                    )
            except BerthError as e:
                raise OutputSaveError(e.code, e.message, e.status) from None
        finally:
            if packed:
                os.unlink(packed)
        self.id = str(answer["id"])
        if self._own_file:
            os.unlink(self.path)
            self._own_file = False
        return self

    def _call(self, op: str, body: Dict[str, Any]) -> Dict[str, Any]:
        if self.id is None:
            raise OutputNotSavedError(f"Output {self.path} has not been saved: call save() first")
        data = json.dumps(body).encode()
        try:
            return _post(f"/v1/outputs/{self.id}/{op}", data, {"Content-Type": "application/json"}, 60.0)
        except BerthError as e:
            if e.code == "not_found":
                raise OutputNotFoundError(e.message) from None
            raise

    def public_url(self, expires: int = DEFAULT_EXPIRES_S) -> str:
        """A URL that serves the file without a token for ``expires`` seconds; the file is deleted then.

        Saves it first when it was not saved yet.
        """
        if isinstance(expires, bool) or not isinstance(expires, int) or expires < 1:
            raise ValueError(f"expires must be a whole number of seconds >= 1, got {expires!r}")
        if self.id is None:
            self.save()
        try:
            return str(self._call("url", {"expires": expires})["url"])
        except OutputNotFoundError:
            raise
        except BerthError as e:
            raise OutputPublicURLError(e.code, e.message, e.status) from None

    def stat(self) -> Stat:
        """The saved Output: a ``Stat`` (mode, size, atime, mtime; id, name, created_at, expires_at).

        OutputNotSavedError before save(), OutputNotFoundError once it was deleted.
        """
        return Stat.from_answer(self._call("stat", {}))

    def exists(self) -> bool:
        """Whether it is saved and not yet deleted."""
        try:
            self.stat()
            return True
        except (OutputNotSavedError, OutputNotFoundError):
            return False
