"""Image: what a function's container runs on.

Every builder method records into the image and returns it, so calls chain.
The recorded spec names the image (``image_id``). Registry images run as
they are (``base_image`` / ``from_registry``); python_packages, commands and
env_vars (with with_secrets) are built by the cluster when the function is first called
(berth.client.images, docs/images.md); what builds cannot do yet is refused
when the function is called (ImageBuildError), never ignored.
"""

import copy
import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

from ..client.kinds import IMAGE
from ..errors import ImageBuildError
from .options import check_pool

Packages = Union[Sequence[str], str, None]


def _packages(packages: Packages) -> List[str]:
    """A list of requirement lines; a string is a requirements file path."""
    if packages is None:
        return []
    if isinstance(packages, str):
        try:
            with open(packages, "r", encoding="utf-8") as f:
                lines = [ln.split("#", 1)[0].strip() for ln in f]
        except OSError as e:
            raise ValueError(f"cannot read the requirements file {packages}: {e.strerror or e}") from None
        return [ln for ln in lines if ln]
    return [str(p) for p in packages]


def _envs(env_vars: Union[str, Sequence[str], Dict[str, str], None]) -> List[str]:
    if env_vars is None:
        return []
    if isinstance(env_vars, dict):
        items = [f"{k}={v}" for k, v in env_vars.items()]
    elif isinstance(env_vars, str):
        items = [env_vars]
    else:
        items = [str(e) for e in env_vars]
    for item in items:
        if "=" not in item or item.startswith("="):
            raise ValueError(f"environment variable {item!r} is not of the form KEY=VALUE")
    return items


class _builder:
    """Works on the class (a new Image) and on an instance (records into it): both spellings chain."""

    def __init__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls):
        def bound(*args, **kwargs):
            return self.fn(obj if obj is not None else cls(), *args, **kwargs)

        bound.__name__ = self.fn.__name__
        bound.__doc__ = self.fn.__doc__
        return bound


class Image:
    # What `berth image build` tells it by (berth.client.kinds).
    _berth_kind = IMAGE

    def __init__(
        self,
        python_version: str = "3.8",
        python_packages: Packages = None,
        commands: Optional[Sequence[str]] = None,
        base_image: Optional[str] = None,
        base_image_creds: Union[Dict[str, str], Sequence[str], None] = None,
        env_vars: Union[str, Sequence[str], Dict[str, str], None] = None,
        build_with_gpu: Optional[str] = None,
        pool: Optional[str] = None,
    ):
        self.python_version = str(python_version)
        self.python_packages: List[str] = _packages(python_packages)
        self.commands: List[str] = [str(c) for c in (commands or [])]
        self.base_image = base_image
        self.base_image_creds = copy.deepcopy(base_image_creds)
        self.env_vars: List[str] = _envs(env_vars)
        self.gpu: Optional[str] = build_with_gpu
        self.snapshot_id: Optional[str] = None
        self.dockerfile: Optional[Dict[str, str]] = None
        self.secrets: List[str] = []
        self.use_micromamba = False
        self.micromamba_packages: List[str] = []
        self.micromamba_channels: List[str] = []
        # Only that pool's agents build it (docs/pools.md); None: any agent.
        self.pool: Optional[str] = check_pool(pool)

    # ---- builder methods ----

    @_builder
    def from_registry(self, image_uri: str, credentials: Union[Dict[str, str], Sequence[str], None] = None) -> "Image":
        self.base_image = image_uri
        self.base_image_creds = copy.deepcopy(credentials)
        return self

    @_builder
    def from_id(self, snapshot_id: str) -> "Image":
        self.snapshot_id = snapshot_id
        return self

    @_builder
    def from_dockerfile(self, path: str, context_dir: Optional[str] = None) -> "Image":
        path = os.path.abspath(path)
        self.dockerfile = {"path": path, "context_dir": os.path.abspath(context_dir or os.path.dirname(path))}
        return self

    def add_python_packages(self, packages: Packages) -> "Image":
        self.python_packages.extend(_packages(packages))
        return self

    def add_commands(self, commands: Sequence[str]) -> "Image":
        self.commands.extend(str(c) for c in commands)
        return self

    def with_envs(self, env_vars: Union[str, Sequence[str], Dict[str, str]]) -> "Image":
        self.env_vars.extend(_envs(env_vars))
        return self

    def with_secrets(self, secrets: Sequence[str]) -> "Image":
        self.secrets.extend(str(s) for s in secrets)
        return self

    def micromamba(self) -> "Image":
        self.use_micromamba = True
        return self

    def add_micromamba_packages(self, packages: Packages, channels: Sequence[str] = ()) -> "Image":
        self.micromamba_packages.extend(_packages(packages))
        self.micromamba_channels.extend(str(c) for c in channels)
        return self

    def build_with_gpu(self, gpu: str) -> "Image":
        self.gpu = gpu
        return self

    # ---- identity ----

    def spec(self) -> Dict[str, Any]:
        """Everything recorded; credentials by name only (their values stay local)."""
        creds = self.base_image_creds
        creds_names = sorted(creds) if isinstance(creds, dict) else list(creds or [])
        return {
            "python_version": self.python_version,
            "python_packages": self.python_packages,
            "commands": self.commands,
            "base_image": self.base_image,
            "base_image_creds": creds_names,
            "env_vars": self.env_vars,
            "build_with_gpu": self.gpu,
            "snapshot_id": self.snapshot_id,
            "dockerfile": self.dockerfile,
            "secrets": self.secrets,
            "micromamba": self.use_micromamba,
            "micromamba_packages": self.micromamba_packages,
            "micromamba_channels": self.micromamba_channels,
            # Only when given: an image without a pool keeps the id it always had.
            **({"pool": self.pool} if self.pool else {}),
        }

    @property
    def image_id(self) -> str:
        canonical = json.dumps(self.spec(), sort_keys=True, separators=(",", ":"))
        return "img-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Image(image_id={self.image_id!r}, base_image={self.base_image!r})"

    def unsupported(self, allow_snapshot: bool = False) -> List[str]:
        """What was asked for that this cluster cannot do yet (each as a phrase).

        ``allow_snapshot``: the caller runs a filesystem snapshot (``from_id``) as it is (its stub's
        ``extra.image_ref`` is the ``img-`` id): functions, deployments, sandboxes and pods all do.
        """
        out = []
        if self.snapshot_id and not allow_snapshot:
            out.append(f"the snapshot {self.snapshot_id}")
        return out

    def check_runnable(self, function_name: str, allow_snapshot: bool = False) -> None:
        wanted = self.unsupported(allow_snapshot)
        if wanted:
            raise ImageBuildError(
                f"the image of {function_name} asks for {'; '.join(wanted)}, but image builds of those kinds "
                "are not available on this cluster yet: builds do python_packages, commands, env_vars and secrets "
                "on a public base image (or the cluster's default Python image)"
            )

    def credential_values(self) -> Dict[str, str]:
        """base_image_creds as variable → value: a dict as given, a list looked up here (never printed)."""
        creds = self.base_image_creds
        if not creds:
            return {}
        if isinstance(creds, dict):
            return {str(k): str(v) for k, v in creds.items()}
        missing = [n for n in creds if not os.environ.get(n)]
        if missing:
            raise ImageBuildError(
                f"base_image_creds names {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                "not set in this environment"
            )
        return {n: os.environ[n] for n in creds}

    def runtime_env(self) -> Dict[str, str]:
        """The running function's environment from the image: the build's (env_vars, a Dockerfile's ENV) once built."""
        built = getattr(self, "_built_env", None)
        if built is not None:
            return dict(built)
        return dict(e.split("=", 1) for e in self.env_vars)

    def needs_build(self) -> bool:
        """Whether the cluster builds this image (packages, commands or environment on the base)."""
        # A private base goes through a build too: the agent pulls it with the credentials once.
        return bool(
            self.python_packages
            or self.commands
            or self.env_vars
            or self.dockerfile
            or self.use_micromamba
            or self.micromamba_packages
            or self.gpu
            or (self.base_image and self.base_image_creds)
        )

    @property
    def image_ref(self) -> str:
        """What the container runs: the built image once built, else the base image ("" = the default)."""
        return getattr(self, "_built_ref", "") or self.base_image or ""
