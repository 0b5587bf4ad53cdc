"""Sandboxes: one container a program drives from outside (docs/sandboxes.md).

``Sandbox(...)`` holds the options; ``create()``, ``connect(id)`` and
``create_from_memory_snapshot(id)`` give a :class:`SandboxInstance` with
``process`` (exec, run_code), ``fs`` (files) and the lifetime, port, network
and snapshot methods. The sandbox id is its container id (``ctr-...``).

Bad options raise ValueError in the constructor, before any request.
Everything the coordinator refuses comes back as SandboxConnectionError
(unknown, terminated or expired sandbox), SandboxProcessError (unknown pid),
SandboxFileSystemError (a path missing or of the wrong kind, named) or, for
other causes, BerthError with the coordinator's code.
"""

import contextlib
import io
from typing import Any, Dict, Iterator, List, Optional, Sequence, TextIO, Union

from ..api.image import Image
from ..errors import BerthError, SandboxConnectionError
from .sandbox_api import SandboxApi, q
from .sandbox_fs import SandboxFileSystem
from .sandbox_process import SandboxProcessManager
from .sandbox_stub import ContainerSpec
from .units import check_egress, check_port, check_ttl

DEFAULT_TTL_S = 600
# Creating waits for the container to run: an image pull or a snapshot restore takes minutes.
CREATE_TIMEOUT_S = 900.0


class Sandbox(ContainerSpec):
    """A sandbox's options. ``token``/``url`` default to SERVICE_TOKEN/BERTH_URL, then the CLI's profile."""

    stub_type = "sandbox"
    handler = "berth.sandbox:Sandbox"

    def __init__(
        self,
        cpu: Union[int, float, str] = 1.0,
        memory: Union[int, str] = 128,
        gpu: Union[str, Sequence[str], None] = None,
        gpu_count: int = 0,
        gpu_memory: Union[int, str, None] = None,
        image: Optional[Image] = None,
        volumes: Optional[List[Any]] = None,
        secrets: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        block_network: bool = False,
        allow_list: Optional[Sequence[str]] = None,
        ports: Optional[Sequence[int]] = None,
        ttl_seconds: int = DEFAULT_TTL_S,
        token: str = "",
        url: Optional[str] = None,
        keep_warm_seconds: Optional[int] = None,
        isolation: str = "container",
        pool: Optional[str] = None,
        priority: int = 0,
    ):
        super().__init__(
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            gpu_count=gpu_count,
            gpu_memory=gpu_memory,
            image=image,
            volumes=volumes,
            secrets=secrets,
            env=env,
            ports=ports,
            block_network=block_network,
            allow_list=allow_list,
            token=token,
            url=url,
            isolation=isolation,
            pool=pool,
            priority=priority,
        )
        # beta9 names the idle lifetime keep_warm_seconds; both names set the same TTL.
        if keep_warm_seconds is not None:
            if ttl_seconds != DEFAULT_TTL_S and ttl_seconds != keep_warm_seconds:
                raise ValueError(
                    f"keep_warm_seconds={keep_warm_seconds!r} and ttl_seconds={ttl_seconds!r} name the same "
                    "idle lifetime with different values: give one of them"
                )
            ttl_seconds = keep_warm_seconds
        self.ttl_seconds = check_ttl(ttl_seconds)

    def __repr__(self) -> str:
        return f"<berth.Sandbox cpu={self.cpu_millicores}m memory={self.memory}Mi ports={self.ports}>"

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        extra = super().stub_extra(code_sha256)
        extra["ttl_seconds"] = self.ttl_seconds
        return extra

    def create(self) -> "SandboxInstance":
        """Starts a sandbox and returns once its container runs."""
        api = self.api
        name = self.default_name()
        stub_id = self.register(api, name)
        r = api.call("POST", "/sandboxes", {"stub_id": stub_id}, timeout=CREATE_TIMEOUT_S)
        return SandboxInstance(api, r)

    def connect(self, id: str) -> "SandboxInstance":
        """The running sandbox with this id (its container id); SandboxConnectionError if unknown or terminated."""
        if not isinstance(id, str) or not id.strip():
            raise SandboxConnectionError("not_found", f"{id!r} is not a sandbox id (ctr-...)", sandbox_id=str(id))
        sid = id.strip()
        r = self.api.call("GET", f"/sandboxes/{q(sid)}", context={"sandbox_id": sid})
        if r.get("status") == "terminated":
            raise SandboxConnectionError("sandbox_terminated", f"sandbox {sid} was terminated", sandbox_id=sid)
        r.setdefault("sandbox_id", sid)
        r.setdefault("container_id", r.get("sandbox_id"))
        return SandboxInstance(self.api, r)

    def create_from_memory_snapshot(self, snapshot_id: str) -> "SandboxInstance":
        """A new sandbox restored from ``snapshot_memory()``'s snapshot, on the host holding it."""
        if not isinstance(snapshot_id, str) or not snapshot_id.strip():
            raise ValueError(f"snapshot_id must be a snapshot id (snap-...), not {snapshot_id!r}")
        r = self.api.call(
            "POST",
            "/sandboxes/from-memory-snapshot",
            {"snapshot_id": snapshot_id.strip()},
            context={"sandbox_id": ""},
            timeout=CREATE_TIMEOUT_S,
        )
        return SandboxInstance(self.api, r)

    def debug(self, file: Optional[TextIO] = None) -> None:
        """Prints the debug buffer: the last 100 gateway calls of this Sandbox and its instances."""
        self.api.print_debug(file)


class SandboxInstance:
    """A running sandbox. After ``terminate()`` every method raises SandboxConnectionError."""

    def __init__(self, api: SandboxApi, info: Dict[str, Any]):
        self.api = api
        cid = info.get("container_id") or info.get("sandbox_id")
        if not isinstance(cid, str) or not cid:
            raise BerthError("internal", "the coordinator's sandbox answer has no sandbox_id")
        self.container_id: str = cid
        self.stub_id: str = str(info.get("stub_id") or "")
        self.urls: Dict[int, str] = _urls(info.get("urls"))
        self.expires_at: Optional[str] = info.get("expires_at")
        self.terminated = False
        self.process = SandboxProcessManager(self)
        self.fs = SandboxFileSystem(self)

    def __repr__(self) -> str:
        state = "terminated" if self.terminated else "running"
        return f"<berth.SandboxInstance {self.container_id} {state}>"

    def sandbox_id(self) -> str:
        return self.container_id

    # ---- plumbing for process, fs ----

    def check_alive(self) -> None:
        if self.terminated:
            raise SandboxConnectionError(
                "sandbox_terminated",
                f"sandbox {self.container_id} is terminated; create or connect to another",
                sandbox_id=self.container_id,
            )

    def call(
        self,
        method: str,
        route: str,
        body: Any = None,
        context: Optional[Dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        self.check_alive()
        ctx = {"sandbox_id": self.container_id, **(context or {})}
        with self.watch():
            return self.api.call(method, route, body, context=ctx, timeout=timeout)

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Checks the instance is usable, and marks it unusable when the coordinator says the sandbox ended."""
        self.check_alive()
        try:
            yield
        except SandboxConnectionError as e:
            if e.code == "sandbox_terminated":
                self.terminated = True
            raise

    def send_bytes(self, method: str, route: str, data: bytes, context: Dict[str, Any]) -> Dict[str, Any]:
        with self.watch():
            return self.api.upload(route, io.BytesIO(data), len(data), {"sandbox_id": self.container_id, **context})

    def _route(self, tail: str = "") -> str:
        return f"/sandboxes/{q(self.container_id)}{tail}"

    # ---- the spec's methods ----

    def info(self) -> Dict[str, Any]:
        """The coordinator's record: status, created_at, expires_at, ttl_seconds, urls, network."""
        return self.call("GET", self._route())

    def expose_port(self, port: int) -> str:
        """Exposes a container port; returns its public URL."""
        r = self.call("POST", self._route("/ports"), {"port": check_port(port)})
        url = str(r.get("url", ""))
        self.urls[port] = url
        return url

    def list_urls(self) -> Dict[int, str]:
        """Port → public URL of every exposed port."""
        self.urls = _urls(self.call("GET", self._route("/ports")).get("urls"))
        return dict(self.urls)

    def update_network_permissions(
        self, block_network: bool = False, allow_list: Optional[List[str]] = None
    ) -> Dict[str, Any]:
        """Changes the outbound policy at once, without a restart; ``(False, [])`` removes every restriction."""
        block, allow = check_egress(block_network, allow_list)
        body = {"block_network": block, "allow_list": allow if allow is not None else []}
        return dict(self.call("POST", self._route("/network"), body).get("network") or {})

    def terminate(self) -> bool:
        """Stops and removes the container; this instance is unusable afterwards."""
        self.call("POST", self._route("/terminate"), {})
        self.terminated = True
        return True

    def update_ttl(self, ttl: int) -> Optional[str]:
        """Idle seconds before the sandbox ends (-1: never); returns the new expiry time."""
        r = self.call("POST", self._route("/ttl"), {"ttl_seconds": check_ttl(ttl)})
        self.expires_at = r.get("expires_at")
        return self.expires_at

    def create_image_from_filesystem(self) -> str:
        """Commits the container's files as an image; ``Image.from_id(id)`` runs from it."""
        r = self.call("POST", self._route("/snapshots/filesystem"), {}, timeout=CREATE_TIMEOUT_S)
        return str(r.get("image_id", ""))

    def snapshot_memory(self) -> str:
        """A CRIU checkpoint; BerthError ``checkpoint_unavailable`` where the host cannot checkpoint."""
        r = self.call("POST", self._route("/snapshots/memory"), {}, timeout=CREATE_TIMEOUT_S)
        return str(r.get("snapshot_id", ""))

    def debug(self, file: Optional[TextIO] = None) -> None:
        """Prints the debug buffer: the last 100 gateway calls made through this sandbox's client."""
        self.api.print_debug(file)


def _urls(value: Any) -> Dict[int, str]:
    if not isinstance(value, dict):
        return {}
    return {int(k): str(v) for k, v in value.items() if str(k).isdigit()}
