"""What sandboxes and pods share: their resource options and the stub they register.

Both are started from a stub (``type`` "sandbox" or "pod") registered with
``POST /api/v1/gateway/stubs`` like a function's, so image, cpu, memory, gpu,
secrets and code sync work the same; ``extra`` carries entrypoint, ports,
block_network, allow_list and (sandboxes) ttl_seconds (docs/sandboxes.md).
"""

import hashlib
import json
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..api.function import image_option
from ..api.options import check_isolation, check_pool, check_priority, parse_gpu_memory
from ..api.volume import volumes_config, volumes_option
from ..api.image import Image
from ..errors import BerthError
from .sandbox_api import SandboxApi
from .units import check_egress, check_ports, parse_cpu, parse_gpu, parse_memory

MAX_PENDING_TASKS = 100


def api_for(token: str = "", url: Optional[str] = None) -> SandboxApi:
    """The routes of the coordinator in effect: ``url``/``token``, else BERTH_URL/SERVICE_TOKEN, else the profile."""
    from ..client.config import current_credentials

    creds = current_credentials(token)
    return SandboxApi(url or creds.url, creds.token)


class ContainerSpec:
    """The options of a container started from outside; subclasses set ``stub_type``."""

    stub_type = ""
    # A name in the stub config's handler form: the container runs no Python handler.
    # Sandbox and Pod keep the names of the flat layout (berth.sandbox:Sandbox,
    # berth.pod:Pod): a label in the stub config, not an import path.
    handler = ""

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
        ports: Optional[Sequence[int]] = None,
        block_network: bool = False,
        allow_list: Optional[Sequence[str]] = None,
        token: str = "",
        url: Optional[str] = None,
        isolation: str = "container",
        pool: Optional[str] = None,
        priority: int = 0,
    ):
        self.cpu, self.cpu_millicores = parse_cpu(cpu)
        self.isolation = check_isolation(isolation)
        self.pool = check_pool(pool)
        # A sandbox or pod may preempt lower-priority preemptible work; it is never preempted itself.
        self.priority = check_priority(priority)
        self.memory = parse_memory(memory)
        self.gpu_types, self.gpu_count = parse_gpu(gpu, gpu_count)
        self.gpu_count, self.gpu_memory = parse_gpu_memory(gpu_memory, self.gpu_types, self.gpu_count)
        self.image = image_option(image)
        self.volumes = volumes_option(volumes)
        if secrets is not None and (isinstance(secrets, str) or not isinstance(secrets, (list, tuple))):
            raise TypeError("secrets must be a list of secret names")
        self.secrets = [str(s) for s in (secrets or [])]
        if env is not None and (
            not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise TypeError("env must be a dict of strings to strings")
        self.env = dict(env or {})
        self.ports = check_ports(ports)
        self.block_network, self.allow_list = check_egress(block_network, allow_list)
        self._stubs: Dict[Tuple[str, Optional[str]], str] = {}
        self._lock = threading.Lock()
        self._token = token
        self._url = url
        self._api: Optional[SandboxApi] = None

    @property
    def api(self) -> SandboxApi:
        """The coordinator's routes, for ``token``/``url`` as given (looked up on first use)."""
        if self._api is None:
            self._api = api_for(self._token, self._url)
        return self._api

    def check_image(self, name: str) -> None:
        # A sandbox or pod may start from a filesystem snapshot (Image.from_id): its img- ref is sent as is.
        self.image.check_runnable(name, allow_snapshot=True)

    def image_ref(self) -> str:
        return self.image.snapshot_id or self.image.image_ref

    def stub_config(self) -> Dict[str, Any]:
        """The decoded ``stub.config`` (shared/tasks.ts StubConfig)."""
        return {
            "runtime": {
                "cpu": self.cpu,
                "gpu": ",".join(self.gpu_types),
                "memory": self.memory,
                "image_id": self.image.image_id,
            },
            "handler": self.handler,
            "on_start": "",
            "python_version": self.image.python_version,
            "keep_warm_seconds": self.keep_warm(),
            "max_pending_tasks": MAX_PENDING_TASKS,
            "callback_url": "",
            # No tasks run in these containers: nothing to retry or time out.
            "task_policy": {"max_retries": 0, "timeout": -1, "expires": ""},
            "workers": 1,
            "authorized": self.authorized_flag(),
            "volumes": volumes_config(self.volumes),
            "autoscaler": {"type": "queue_depth", "max_containers": 1, "tasks_per_container": 1},
        }

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        """shared/tasks.ts StubExtra, with the sandbox and pod fields."""
        extra: Dict[str, Any] = {
            "cpu_millicores": self.cpu_millicores,
            "gpu_types": list(self.gpu_types),
            "gpu_count": self.gpu_count,
            "retry_for": [],
            "image_ref": self.image_ref(),
            "code_sha256": code_sha256,
            "secrets": list(self.secrets),
            "headless": False,
            "ports": list(self.ports),
            "block_network": self.block_network,
        }
        if self.allow_list is not None:
            extra["allow_list"] = list(self.allow_list)
        if self.env:
            extra["env"] = dict(self.env)
        if self.isolation != "container":
            extra["isolation"] = self.isolation
        if self.pool:
            extra["pool"] = self.pool
        if self.gpu_memory:
            extra["gpu_memory_mib"] = self.gpu_memory
        if self.priority:
            extra["priority"] = self.priority
        return extra

    def keep_warm(self) -> int:
        return -1

    def authorized_flag(self) -> bool:
        return False

    def default_name(self) -> str:
        """``{type}-{hash}``: the same options share one stub, other options never overwrite it."""
        canonical = json.dumps([self.stub_config(), self.stub_extra()], sort_keys=True, separators=(",", ":"))
        return f"{self.stub_type}-{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"

    def code_root(self) -> Optional[str]:
        """The directory synced into the container; None syncs nothing."""
        return None

    def sync(self, api: SandboxApi) -> str:
        """Uploads the code directory's archive unless the coordinator has it; its sha256, or "" with none."""
        root = self.code_root()
        if root is None:
            return ""
        from ..client.sync import sync_code

        return sync_code(api, root)  # type: ignore[arg-type]  (it has the two object routes sync_code uses)

    def register(self, api: SandboxApi, name: str) -> str:
        """Syncs the code (when there is any) and gets or creates the stub, once per coordinator and token."""
        key = (api.url, api.token)
        with self._lock:
            stub_id = self._stubs.get(key)
            if stub_id:
                return stub_id
            self.check_image(name)
            sha = self.sync(api)
            body = {"name": name, "type": self.stub_type, "config": self.stub_config(), "extra": self.stub_extra(sha)}
            r = api.call("POST", "/stubs", body)
            stub_id = (r.get("stub") or {}).get("id")
            if not stub_id:
                raise BerthError("internal", "the coordinator's stub answer has no id")
            self._stubs[key] = stub_id
            return stub_id
