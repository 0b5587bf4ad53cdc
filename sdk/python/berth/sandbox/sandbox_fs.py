"""A sandbox's filesystem: stat, list, upload, download, delete, directories, find and replace.

Paths are the container's own: absolute, or relative to "/". A path whose
".." would climb above the root is refused here (SandboxFileSystemError,
path_invalid) before any request; a missing path or one of the wrong kind is
the coordinator's path_not_found / path_invalid, raised as the same class.
Uploads and downloads move the bytes in blocks, never the whole file at once.
"""

import datetime
import os
import stat
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..errors import BerthError, SandboxFileSystemError
from .sandbox_api import q, query

if TYPE_CHECKING:
    from .sandbox import SandboxInstance


@dataclass
class SandboxFileInfo:
    name: str
    path: str
    size: int
    is_dir: bool
    is_symlink: bool
    # When the file last changed (UTC); None when the coordinator did not say.
    mod_time: Optional[datetime.datetime]
    mode: int
    # `ls -l` form, e.g. "-rw-r--r--".
    permissions: str
    owner: str
    group: str
    uid: int
    gid: int

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxFileInfo":
        return cls(
            name=str(d.get("name", "")),
            path=str(d.get("path", "")),
            size=int(d.get("size") or 0),
            is_dir=bool(d.get("is_dir")),
            is_symlink=bool(d.get("is_symlink")),
            mod_time=parse_time(d.get("mod_time")),
            mode=int(d.get("mode") or 0),
            permissions=str(d.get("permissions", "")),
            owner=str(d.get("owner", "")),
            group=str(d.get("group", "")),
            uid=int(d.get("uid") or 0),
            gid=int(d.get("gid") or 0),
        )


def parse_time(value: Any) -> Optional[datetime.datetime]:
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


@dataclass
class SandboxFilePosition:
    """1-based line and column."""

    line: int
    column: int


@dataclass
class SandboxFileSearchRange:
    start: SandboxFilePosition
    end: SandboxFilePosition


@dataclass
class SandboxFileSearchMatch:
    path: str
    # The matching line, without its newline.
    line: str
    range: SandboxFileSearchRange

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxFileSearchMatch":
        r = d.get("range") or {}
        start, end = r.get("start") or {}, r.get("end") or {}
        return cls(
            path=str(d.get("path", "")),
            line=str(d.get("line", "")),
            range=SandboxFileSearchRange(
                start=SandboxFilePosition(int(start.get("line", 0)), int(start.get("column", 0))),
                end=SandboxFilePosition(int(end.get("line", 0)), int(end.get("column", 0))),
            ),
        )


@dataclass
class SandboxFileReplacement:
    """How many occurrences ``replace_in_files`` replaced in one file."""

    path: str
    replacements: int


def check_path(path: Any) -> str:
    """The sandbox path as given, once it is known not to leave the container's root."""
    if not isinstance(path, str) or not path:
        raise SandboxFileSystemError(
            "path_invalid", f"a sandbox path is a non-empty string, not {path!r}", path=str(path)
        )
    if "\x00" in path:
        raise SandboxFileSystemError("path_invalid", "the path holds a NUL byte", path=path)
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise SandboxFileSystemError("path_invalid", "the path climbs above the sandbox's root", path=path)
        elif part not in ("", "."):
            depth += 1
    return path


class SandboxFileSystem:
    """``sandbox.fs``."""

    def __init__(self, sandbox: "SandboxInstance"):
        self.sandbox = sandbox

    def _route(self, tail: str) -> str:
        return f"/sandboxes/{q(self.sandbox.container_id)}{tail}"

    def _ctx(self, path: str) -> Dict[str, Any]:
        return {"sandbox_id": self.sandbox.container_id, "path": path}

    def stat_file(self, sandbox_path: str) -> SandboxFileInfo:
        path = check_path(sandbox_path)
        r = self.sandbox.call("GET", self._route("/files/stat?" + query(path=path)), context=self._ctx(path))
        return SandboxFileInfo.from_json(r.get("file") or {})

    def list_files(self, sandbox_path: str) -> List[SandboxFileInfo]:
        """A directory's entries (not recursive), sorted by name."""
        path = check_path(sandbox_path)
        r = self.sandbox.call("GET", self._route("/files/list?" + query(path=path)), context=self._ctx(path))
        return [SandboxFileInfo.from_json(f) for f in r.get("files") or []]

    def upload_file(self, local_path: str, sandbox_path: str) -> SandboxFileInfo:
        """Copies a local file into the sandbox (parent directories are created), keeping its permission bits."""
        path = check_path(sandbox_path)
        self.sandbox.check_alive()
        with open(local_path, "rb") as f, self.sandbox.watch():
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise IsADirectoryError(f"{local_path} is not a regular file")
            # The mode in octal digits, as `chmod` takes it.
            mode = format(st.st_mode & 0o777, "04o")
            route = self._route("/files/content?" + query(path=path, mode=mode))
            r = self.sandbox.api.upload(route, f, st.st_size, self._ctx(path))
        return SandboxFileInfo.from_json(r.get("file") or {})

    def download_file(self, sandbox_path: str, local_path: str) -> None:
        """Copies a sandbox file to ``local_path``; written to a temporary file first, so a failure leaves nothing."""
        path = check_path(sandbox_path)
        self.sandbox.check_alive()
        directory = os.path.dirname(os.path.abspath(local_path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".berth-download-")
        try:
            with os.fdopen(fd, "wb") as out, self.sandbox.watch():
                route = self._route("/files/content?" + query(path=path))
                for block in self.sandbox.api.read_raw(route, self._ctx(path)):
                    out.write(block)
            os.replace(tmp, local_path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def delete_file(self, sandbox_path: str) -> None:
        """A file or symlink; a directory is path_invalid (use delete_directory)."""
        path = check_path(sandbox_path)
        self.sandbox.call("DELETE", self._route("/files?" + query(path=path)), context=self._ctx(path))

    def create_directory(self, sandbox_path: str) -> SandboxFileInfo:
        """``mkdir -p``."""
        path = check_path(sandbox_path)
        r = self.sandbox.call("POST", self._route("/directories"), {"path": path}, context=self._ctx(path))
        return SandboxFileInfo.from_json(r.get("file") or {})

    def delete_directory(self, sandbox_path: str) -> None:
        """``rm -r`` of a directory (never the root)."""
        path = check_path(sandbox_path)
        self.sandbox.call("DELETE", self._route("/directories?" + query(path=path)), context=self._ctx(path))

    def find_in_files(self, sandbox_path: str, pattern: str) -> List[SandboxFileSearchMatch]:
        """Lines matching ``pattern`` (a regular expression) in a file or the files under a directory."""
        path = check_path(sandbox_path)
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"pattern must be a non-empty string, not {pattern!r}")
        body = {"path": path, "pattern": pattern}
        r = self.sandbox.call("POST", self._route("/files/find"), body, context=self._ctx(path))
        return [SandboxFileSearchMatch.from_json(m) for m in r.get("matches") or []]

    def replace_in_files(self, sandbox_path: str, old_string: str, new_string: str) -> List[SandboxFileReplacement]:
        """Replaces every occurrence of the literal ``old_string`` in a file or the files under a directory."""
        path = check_path(sandbox_path)
        if not isinstance(old_string, str) or not old_string:
            raise ValueError(f"old_string must be a non-empty string, not {old_string!r}")
        if not isinstance(new_string, str):
            raise ValueError(f"new_string must be a string, not {new_string!r}")
        body = {"path": path, "old_string": old_string, "new_string": new_string}
        r = self.sandbox.call("POST", self._route("/files/replace"), body, context=self._ctx(path))
        out = []
        for f in r.get("files") or []:
            if not isinstance(f, dict):
                raise BerthError("internal", "the coordinator's replace answer is malformed")
            out.append(SandboxFileReplacement(path=str(f.get("path", "")), replacements=int(f.get("replacements", 0))))
        return out
