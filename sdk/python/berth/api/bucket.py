"""CloudBucket: an S3-compatible bucket mounted in the container with s3fs (docs/buckets.md).

Passed in ``volumes=[...]`` beside Volumes. The keys are never in code:
``CloudBucketConfig.access_key`` and ``secret_key`` name workspace secrets
(``berth secret create S3_KEY ...``) whose values the coordinator hands the
agent when a container starts.
"""

import re
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from .volume import check_mount_path

# Mirrors shared/buckets.ts: the coordinator and the agent judge these the same way.
BUCKET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{2,254}$")
SECRET_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
REGION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def _secret_name(field: str, v: Any) -> Optional[str]:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or not SECRET_NAME_RE.match(v):
        raise ValueError(f"CloudBucketConfig {field} {v!r} must name a workspace secret (letters, digits and '_', not starting with a digit)")
    return v


class CloudBucketConfig:
    """How to reach a bucket: secret names for the keys (both or neither), endpoint, region, read_only."""

    def __init__(
        self,
        read_only: bool = False,
        access_key: Optional[str] = None,
        secret_key: Optional[str] = None,
        endpoint: Optional[str] = None,
        region: Optional[str] = None,
    ):
        if not isinstance(read_only, bool):
            raise TypeError("CloudBucketConfig read_only must be a bool")
        self.read_only = read_only
        self.access_key = _secret_name("access_key", access_key)
        self.secret_key = _secret_name("secret_key", secret_key)
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError("CloudBucketConfig needs both access_key and secret_key (secret names), or neither for a public bucket")
        if endpoint is not None and endpoint != "":
            parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
            if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username
                    or parts.password or parts.query or parts.fragment or "," in endpoint):
                raise ValueError(f"CloudBucketConfig endpoint {endpoint!r} must be an http:// or https:// URL without credentials, query or commas")
        self.endpoint = endpoint or None
        if region is not None and region != "" and (not isinstance(region, str) or not REGION_RE.match(region)):
            raise ValueError(f"CloudBucketConfig region {region!r} must be 1-64 letters, digits, '_' or '-'")
        self.region = region or None

    def config(self) -> Dict[str, Any]:
        return {
            "read_only": self.read_only,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "endpoint": self.endpoint,
            "region": self.region,
        }

    def __repr__(self) -> str:
        return ("CloudBucketConfig(read_only={!r}, access_key={!r}, secret_key={!r}, endpoint={!r}, region={!r})"
                .format(self.read_only, self.access_key, self.secret_key, self.endpoint, self.region))


class CloudBucket:
    """A bucket (name as at the provider) mounted at ``./{mount_path}``."""

    def __init__(self, name: str, mount_path: str, config: CloudBucketConfig):
        if not isinstance(name, str) or not BUCKET_NAME_RE.match(name):
            raise ValueError(
                f"cloud bucket name {name!r} is not valid: use 3-255 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if not isinstance(config, CloudBucketConfig):
            raise TypeError("CloudBucket config must be a berth.CloudBucketConfig")
        self.name = name
        self.mount_path = check_mount_path(mount_path)
        self.config = config

    def stub_entry(self) -> Dict[str, Any]:
        """The entry of the stub config's ``volumes`` (shared/buckets.ts StubBucket): a Volume's plus ``config``."""
        return {"name": self.name, "mount_path": self.mount_path, "config": self.config.config()}

    def __repr__(self) -> str:
        return f"CloudBucket(name={self.name!r}, mount_path={self.mount_path!r}, config={self.config!r})"
