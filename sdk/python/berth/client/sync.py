"""Code sync: the synced directory as a deterministic tar.gz, uploaded once per content.

The same tree gives the same bytes (entries sorted, mtime 0, owner 0, fixed
modes, gzip header without time or name), so its sha256 names the code and an
unchanged tree is never uploaded again.
"""

import gzip
import hashlib
import io
import os
import stat
import tarfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Set, Tuple

from ..errors import BerthError
from .ignore import IgnoreMatcher

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

IGNORE_FILE = ".berthignore"
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Archive:
    data: bytes
    sha256: str
    # Relative paths in the archive, directories with a trailing "/".
    names: Tuple[str, ...]


def collect(root: str) -> List[Tuple[str, str, bool]]:
    """(relative path, absolute path, is_dir) of what gets synced, sorted by path."""
    matcher = IgnoreMatcher.from_file(os.path.join(root, IGNORE_FILE))
    out: List[Tuple[str, str, bool]] = []

    def walk(abs_dir: str, rel_dir: str) -> None:
        try:
            entries = list(os.scandir(abs_dir))
        except OSError as e:
            raise BerthError("invalid_request", f"code sync cannot read {abs_dir}: {e.strerror or e}") from None
        for entry in entries:
            rel = f"{rel_dir}{entry.name}"
            # Symlinks, sockets, FIFOs and devices are not synced; the agent refuses them too.
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if matcher.ignored(rel, True):
                    continue
                out.append((rel, entry.path, True))
                walk(entry.path, rel + "/")
            elif entry.is_file(follow_symlinks=False):
                if not matcher.ignored(rel, False):
                    out.append((rel, entry.path, False))

    walk(root, "")
    out.sort(key=lambda e: e[0])
    return out


def _too_large(root: str, files: List[Tuple[str, int]]) -> BerthError:
    biggest = sorted(files, key=lambda f: -f[1])[:5]
    listed = ", ".join(f"{name} ({size / (1024 * 1024):.1f} MiB)" for name, size in biggest)
    return BerthError(
        "object_too_large",
        f"the code archive of {root} is over the 256 MiB limit; the largest files are {listed}: "
        f"list what the function does not need in {os.path.join(root, IGNORE_FILE)} (gitignore syntax)",
    )


def pack(root: str) -> Archive:
    """The deterministic tar.gz of the synced directory."""
    root = os.path.abspath(root)
    buf = io.BytesIO()
    names: List[str] = []
    seen: List[Tuple[str, int]] = []
    # Level 6: near 9's size at a fraction of its time on large trees.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, abs_path, is_dir in collect(root):
                info = tarfile.TarInfo(rel)
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if is_dir:
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                    names.append(rel + "/")
                    continue
                try:
                    with open(abs_path, "rb") as f:
                        st = os.fstat(f.fileno())
                        info.size = st.st_size
                        info.mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
                        tar.addfile(info, f)
                except OSError as e:
                    raise BerthError("invalid_request", f"code sync cannot read {abs_path}: {e.strerror or e}") from None
                names.append(rel)
                seen.append((rel, info.size))
                if buf.tell() > MAX_ARCHIVE_BYTES:
                    raise _too_large(root, seen)
    data = buf.getvalue()
    if len(data) > MAX_ARCHIVE_BYTES:
        raise _too_large(root, seen)
    return Archive(data=data, sha256=hashlib.sha256(data).hexdigest(), names=tuple(names))


_lock = threading.Lock()
# Per process: the directory's archive hash (packed once), and what each coordinator already has.
_packed: Dict[str, str] = {}
_uploaded: Set[Tuple[str, str]] = set()


def sync_code(client: "Client", root: str) -> str:
    """Makes sure the coordinator has the directory's archive; returns its sha256."""
    root = os.path.abspath(root)
    with _lock:
        sha = _packed.get(root)
        if sha is not None and (client.url, sha) in _uploaded:
            return sha
        archive = pack(root)
        sha = archive.sha256
        exists, _ = client.object_exists(sha)
        if not exists:
            client.put_object(sha, archive.data, len(archive.data))
        _packed[root] = sha
        _uploaded.add((client.url, sha))
        return sha
