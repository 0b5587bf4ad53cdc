"""Pods: one container running its own entrypoint, usually a server on a port (docs/sandboxes.md).

``Pod(entrypoint=[...], ports=[8000]).create()`` starts one container and
returns ``ok``, ``container_id`` and ``url``; ``pod.deploy()`` (or
``berth deploy app.py:pod``) makes a named deployment whose containers run the
entrypoint, never scaled to zero by default. The directory of the module that
defines the pod is synced into the container, as for a function.
"""

import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union
from urllib.parse import quote

from ..api.image import Image
from ..api.locate import Location, locate
from ..api.options import check_int, check_nodes
from ..client.kinds import POD
from ..errors import BerthError
from .sandbox_stub import ContainerSpec

CREATE_TIMEOUT_S = 900.0


@dataclass
class PodCreateResult:
    """What ``create()`` answers; ``error`` (beta9: ``error_msg``) says why when ``ok`` is False.

    A pod whose entrypoint finished at once (exit code 0) is ok: its
    ``status`` is ``"terminated"`` and its ``exit_code`` 0. ``refresh()``
    reads both again, ``wait()`` until the entrypoint ends, ``terminate()``
    stops it (beta9's PodInstance).
    """

    ok: bool
    container_id: str = ""
    url: str = ""
    # Port → public URL of every exposed port; ``url`` is the first port's.
    urls: Dict[int, str] = field(default_factory=dict)
    error: str = ""
    code: str = ""
    # running, or terminated once it ended (then exit_code, when it ended on its own).
    status: str = ""
    exit_code: Optional[int] = None
    terminated_reason: Optional[str] = None
    _api: Any = field(default=None, repr=False, compare=False)

    @property
    def error_msg(self) -> str:
        return self.error

    def _route(self, tail: str = "") -> str:
        if not self.ok or self._api is None:
            raise BerthError("failed_precondition", f"the pod did not start: {self.error or 'no container'}")
        return f"/pods/{quote(self.container_id, safe='')}{tail}"

    def refresh(self) -> "PodCreateResult":
        """Reads the pod's status and exit code again (GET /pods/{id}); returns this result."""
        route = self._route()
        r = self._api.call("GET", route)
        self.status = str(r.get("status") or "")
        code = r.get("exit_code")
        self.exit_code = code if isinstance(code, int) else None
        self.terminated_reason = r.get("terminated_reason")
        return self

    def wait(self, timeout: Optional[float] = None, interval: float = 1.0) -> Optional[int]:
        """Waits until the pod ends; its exit code (None when it was ended from outside). TimeoutError past ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.refresh().status != "terminated":
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"pod {self.container_id} still runs after {timeout} s")
            time.sleep(interval)
        return self.exit_code

    def terminate(self) -> bool:
        """Stops and removes the pod's container; False when it had ended already."""
        self._route()  # refuses a pod that never started
        try:
            self._api.call("POST", f"/sandboxes/{quote(self.container_id, safe='')}/terminate", {})
        except BerthError as e:
            if e.code == "sandbox_terminated":
                return False
            raise
        self.status = "terminated"
        return True


def _defining_module() -> str:
    """The module that called Pod(...), past berth's own frames."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("berth."):
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_globals.get("__name__", "__main__") if frame is not None else "__main__"


def check_entrypoint(entrypoint: Any) -> List[str]:
    if entrypoint is None:
        return []
    if isinstance(entrypoint, str) or not isinstance(entrypoint, (list, tuple)):
        raise ValueError(f"entrypoint must be a list of strings such as ['python3', 'server.py'], not {entrypoint!r}")
    if not all(isinstance(a, str) for a in entrypoint):
        raise ValueError(f"entrypoint holds something other than strings: {entrypoint!r}")
    if entrypoint and not entrypoint[0]:
        raise ValueError("the entrypoint's program name is empty")
    return list(entrypoint)


class Pod(ContainerSpec):
    """A pod's options (spec, SDK objects → Pod). ``token``/``url`` default to SERVICE_TOKEN/BERTH_URL.

    ``nodes=N`` (1 to 64, default 1) asks for a gang: N containers on N
    distinct hosts, each running the entrypoint, that reach each other over a
    private network with the ``torch.distributed`` environment set (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ...; see berth.Function). A deployed pod
    (``deploy()``) runs as a gang; ``create()`` starts one container, and the
    coordinator refuses it ``nodes`` above 1.
    """

    stub_type = "pod"
    handler = "berth.pod:Pod"
    # What `berth deploy` and `berth image build` tell it by (berth.client.kinds).
    _berth_kind = POD

    def __init__(
        self,
        entrypoint: Optional[Sequence[str]] = None,
        ports: Optional[Sequence[int]] = None,
        name: Optional[str] = None,
        cpu: Union[int, float, str] = 1.0,
        memory: Union[int, str] = 128,
        gpu: Union[str, Sequence[str], None] = None,
        gpu_count: int = 0,
        gpu_memory: Union[int, str, None] = None,
        image: Optional[Image] = None,
        volumes: Optional[List[Any]] = None,
        secrets: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        keep_warm_seconds: int = -1,
        authorized: bool = False,
        block_network: bool = False,
        allow_list: Optional[Sequence[str]] = None,
        token: str = "",
        url: Optional[str] = None,
        isolation: str = "container",
        pool: Optional[str] = None,
        priority: int = 0,
        nodes: int = 1,
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
        self.nodes = check_nodes(nodes)
        self.entrypoint = check_entrypoint(entrypoint)
        if name is not None and (not isinstance(name, str) or not name.strip() or "/" in name):
            raise ValueError(f"Pod name must be a non-empty string without '/', got {name!r}")
        self.name = name
        self.keep_warm_seconds = check_int("keep_warm_seconds", keep_warm_seconds, -1)
        if not isinstance(authorized, bool):
            raise TypeError(f"authorized must be True or False, not {authorized!r}")
        self.authorized = authorized
        self.module = _defining_module()
        self.deployment: Optional[Dict[str, Any]] = None
        self.last_error = ""

    def __repr__(self) -> str:
        return f"<berth.Pod {self.name or ''} {self.entrypoint!r} ports={self.ports}>"

    @property
    def stub_name(self) -> str:
        return self.name or self.default_name()

    def keep_warm(self) -> int:
        return self.keep_warm_seconds

    def authorized_flag(self) -> bool:
        return self.authorized

    def location(self) -> Location:
        """Where the pod is defined: its directory is what code sync uploads."""
        return locate(types.SimpleNamespace(__module__=self.module, __qualname__="Pod"))

    def code_root(self) -> Optional[str]:
        try:
            return self.location().root
        except BerthError:
            return None  # defined where there is no file (an interactive session): nothing to sync

    def stub_config(self, loc: Optional[Location] = None) -> Dict[str, Any]:
        return super().stub_config()

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        extra = super().stub_extra(code_sha256)
        if self.entrypoint:
            extra["entrypoint"] = list(self.entrypoint)
        if self.nodes > 1:
            extra["nodes"] = self.nodes  # a gang (shared/gang.ts); sent only for one
        return extra

    def create(self, entrypoint: Optional[Sequence[str]] = None) -> PodCreateResult:
        """Starts one container running the entrypoint (this one, else the constructor's)."""
        command = check_entrypoint(entrypoint) or self.entrypoint
        if not command:
            raise ValueError("a pod needs an entrypoint: Pod(entrypoint=[...]) or create(entrypoint=[...])")
        try:
            stub_id = self.register(self.api, self.stub_name)
            body: Dict[str, Any] = {"stub_id": stub_id}
            if entrypoint is not None:
                body["entrypoint"] = command
            r = self.api.call("POST", "/pods", body, timeout=CREATE_TIMEOUT_S)
        except BerthError as e:
            self.last_error = e.message
            # beta9 programs rarely read result.error: say why where the program's user sees it.
            print(f"berth: the pod did not start: {e.message}", file=sys.stderr)
            return PodCreateResult(ok=False, error=e.message, code=e.code)
        urls = {int(k): str(v) for k, v in (r.get("urls") or {}).items() if str(k).isdigit()}
        exit_code = r.get("exit_code")
        return PodCreateResult(
            ok=True,
            container_id=str(r.get("container_id", "")),
            url=str(r.get("url") or ""),
            urls=urls,
            status=str(r.get("status") or "running"),
            exit_code=exit_code if isinstance(exit_code, int) else None,
            _api=self.api,
        )

    def deploy(self, name: Optional[str] = None) -> bool:
        """Deploys the pod as a named deployment; False (with the reason printed and in ``last_error``) if refused."""
        deploy_name = name or self.name
        if not deploy_name:
            raise ValueError("deploying a pod needs a name: Pod(name=...), deploy(name=...) or `berth deploy --name`")
        if not self.entrypoint:
            raise ValueError("a deployed pod runs its entrypoint: give Pod(entrypoint=[...])")
        try:
            self.check_image(deploy_name)
            sha = self.sync(self.api)
            body = {
                "name": deploy_name,
                "type": self.stub_type,
                "config": self.stub_config(),
                "extra": self.stub_extra(sha),
            }
            r = self.api.call("POST", "/deployments", body, timeout=CREATE_TIMEOUT_S)
        except BerthError as e:
            self.last_error = e.message
            print(f"berth: deploying pod {deploy_name} failed: {e}", file=sys.stderr)
            return False
        self.deployment = r.get("deployment") or {}
        for warning in r.get("warnings") or []:
            print(f"berth: warning: {warning}", file=sys.stderr)
        return True
