"""Code sync: the synced directory as a deterministic tar.gz, uploaded once per content.

The same tree gives the same bytes (entries sorted, mtime 0, owner 0, fixed
modes, gzip header without time or name), so its sha256 names the code and an
unchanged tree is never uploaded again.
"""

import gzip
import hashlib
import io
import os
import re
import stat
import sys
import tarfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple

from ..errors import BerthError
from .ignore import IgnoreMatcher

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

IGNORE_FILE = ".berthignore"
MIB = 1024 * 1024
# The coordinator keeps no object larger than this: no setting goes past it.
OBJECT_LIMIT_BYTES = 256 * MIB
# A code archive past this is refused before any upload: an app's directory
# rarely needs more, and one that does usually carries data or dependencies
# by mistake (a dataset, a model, node_modules).
DEFAULT_MAX_ARCHIVE_BYTES = 100 * MIB
MAX_ENV = "BERTH_CODE_SYNC_MAX"

_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": MIB, "mib": MIB, "g": 1024 * MIB, "gib": 1024 * MIB}


def max_archive_bytes() -> int:
    """The cap on a code archive: BERTH_CODE_SYNC_MAX (e.g. ``200MiB``), else 100 MiB."""
    raw = os.environ.get(MAX_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_ARCHIVE_BYTES
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)", raw)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None or float(m.group(1)) <= 0:
        raise BerthError(
            "invalid_request",
            f"{MAX_ENV} must be a size such as 50MiB, 200M or 1048576 (bytes), got {raw!r}",
        )
    limit = int(float(m.group(1)) * unit)
    if limit > OBJECT_LIMIT_BYTES:
        raise BerthError(
            "invalid_request",
            f"{MAX_ENV}={raw} is over the coordinator's object limit of 256 MiB; no code archive can be larger",
        )
    return limit


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < MIB:
        return f"{n / 1024:.1f} KiB"
    return f"{n / MIB:.1f} MiB"


@dataclass(frozen=True)
class Archive:
    data: bytes
    sha256: str
    # Relative paths in the archive, directories with a trailing "/".
    names: Tuple[str, ...]

    @property
    def files(self) -> int:
        return sum(1 for n in self.names if not n.endswith("/"))


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


def _too_large(root: str, files: List[Tuple[str, int]], limit: int, so_far: int) -> BerthError:
    biggest = sorted(files, key=lambda f: -f[1])[:5]
    listed = ", ".join(f"{name} ({human_size(size)})" for name, size in biggest)
    return BerthError(
        "object_too_large",
        f"the code archive of {root} is over the {human_size(limit)} code sync limit "
        f"(over {human_size(so_far)} compressed when it stopped); the largest files are {listed}: "
        f"list what the function does not need in {os.path.join(root, IGNORE_FILE)} (gitignore syntax), "
        f"or raise the limit with {MAX_ENV} (up to 256 MiB); data belongs in a volume",
    )


def pack(root: str, limit: Optional[int] = None) -> Archive:
    """The deterministic tar.gz of the synced directory; over ``limit`` (default: max_archive_bytes()) is an error."""
    root = os.path.abspath(root)
    limit = max_archive_bytes() if limit is None else limit
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
                if buf.tell() > limit:
                    raise _too_large(root, seen, limit, buf.tell())
    data = buf.getvalue()
    if len(data) > limit:
        raise _too_large(root, seen, limit, len(data))
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
            # The one line code sync prints: what is about to leave this machine.
            print(
                f"berth: uploading the code of {root}: {human_size(len(archive.data))} ({archive.files} files)",
                file=sys.stderr,
            )
            client.put_object(sha, archive.data, len(archive.data))
        _packed[root] = sha
        _uploaded.add((client.url, sha))
        return sha
