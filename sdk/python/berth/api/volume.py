"""Volume: a named directory of the workspace that outlives containers (docs/volumes.md).

Declared in user code and passed as ``volumes=[...]`` to a decorator, a
Sandbox or a Pod; every container of that stub sees it at ``./{mount_path}``
(relative to its working directory) and at ``/volumes/{name}``.
"""

import re
from typing import Any, Dict, List, Optional

# Mirrors shared/volumes.ts VOLUME_NAME_RE: the coordinator and the agent judge names by the same rule.
VOLUME_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def check_volume_name(name: Any) -> str:
    if not isinstance(name, str) or not VOLUME_NAME_RE.match(name):
        raise ValueError(
            f"volume name {name!r} is not valid: use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    return name


def check_mount_path(path: Any) -> str:
    if not isinstance(path, str) or path.strip() == "" or "\0" in path:
        raise ValueError(f"volume mount_path must be a non-empty path, got {path!r}")
    segments = [s for s in path.split("/") if s not in ("", ".")]
    if ".." in segments:
        raise ValueError(f"volume mount_path {path!r} may not contain '..'")
    if not segments:
        raise ValueError(f"volume mount_path {path!r} names no directory")
    if path.startswith("/") and segments[0] in ("volumes", "proc", "sys"):
        raise ValueError(f"volume mount_path {path!r} may not lie under /{segments[0]}")
    return path


class Volume:
    """A workspace volume, created on first use; its files persist between runs and hosts."""

    def __init__(self, name: str, mount_path: str):
        self.name = check_volume_name(name)
        self.mount_path = check_mount_path(mount_path)

    def config(self) -> Dict[str, Any]:
        """The entry of the stub config's ``volumes`` (shared/volumes.ts StubVolume)."""
        return {"name": self.name, "mount_path": self.mount_path}

    def __repr__(self) -> str:
        return f"Volume(name={self.name!r}, mount_path={self.mount_path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Volume) and (self.name, self.mount_path) == (other.name, other.mount_path)

    def __hash__(self) -> int:
        return hash((self.name, self.mount_path))


def volumes_option(volumes: Optional[List[Any]]) -> Optional[List[Any]]:
    """The ``volumes=`` option: None or a list of Volume and CloudBucket, names unique within each kind."""
    from .bucket import CloudBucket  # bucket.py imports this module

    if volumes is None:
        return None
    if not isinstance(volumes, (list, tuple)):
        raise TypeError("volumes must be a list")
    seen = set()
    for v in volumes:
        if not isinstance(v, (Volume, CloudBucket)):
            raise TypeError(f"volumes entries must be berth.Volume or berth.CloudBucket, not {type(v).__name__}")
        key = (type(v).__name__, v.name)
        if key in seen:
            raise ValueError(f"{'cloud bucket' if isinstance(v, CloudBucket) else 'volume'} {v.name!r} is listed twice")
        seen.add(key)
    return list(volumes)


def volumes_config(volumes: Optional[List[Any]]) -> Optional[List[Dict[str, Any]]]:
    """The stub config's ``volumes``: None when unset, else {name, mount_path} per Volume, plus config for a CloudBucket."""
    from .bucket import CloudBucket

    return None if volumes is None else [v.stub_entry() if isinstance(v, CloudBucket) else v.config() for v in volumes]
