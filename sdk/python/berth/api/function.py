"""``@function``: a Python function that runs in containers of the cluster.

``square.remote(7)`` syncs the code, gets or creates the stub (once per
process) and runs one task; ``square.map(items)`` runs one task per item.
Calling ``square(7)`` directly does what beta9 does: outside a berth
container it runs remotely (as ``.remote(7)``); inside one (the runner sets
``BERTH_REMOTE=1``) it is a plain local call, so functions that call each
other in a container do not start new tasks. ``square.local(7)`` always runs
it here (docs/compatibility.md).
"""

import functools
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from .. import env, serialize
from ..client.default import default_client
from ..client.kinds import FUNCTION
from ..errors import BerthError, RemoteCallError
from .image import Image
from .locate import Location, locate
from .volume import volumes_config, volumes_option
from .options import (
    TaskPolicy,
    check_int,
    check_isolation,
    check_nodes,
    check_pool,
    check_preemptible,
    check_priority,
    check_timeout,
    cpu_fields,
    expires_text,
    parse_gpu,
    parse_gpu_memory,
    parse_memory,
    retry_names,
)

if TYPE_CHECKING:
    from ..client.client import Client

# berth.api builds on berth.client, which never imports berth.api. The heavy
# part of the client side (HTTP, code sync, the task stream) is still imported
# when a call is made, not when this module is: a container imports it through
# the user's `from berth import function` and never calls remotely (a cold
# start pays for every import). default_client's module is lean.

MAX_PENDING_TASKS = 100


def image_option(image: Optional[Image]) -> Image:
    """The ``image=`` option of a function, sandbox or pod; the default image where None."""
    if image is not None and not isinstance(image, Image):
        raise TypeError(f"image must be a berth.Image, not {type(image).__name__}")
    return image if image is not None else Image()




def _guard(name: str) -> None:
    if env.importing_user_code():
        raise RemoteCallError(
            f"{name} was called while the container imports your module: a call at module level would run "
            "in every container. Put the calls under `if __name__ == \"__main__\":`"
        )


class Function:
    """A function the cluster runs as tasks; made by ``@function(...)`` (the options are listed there).

    ``nodes=N`` (1 to 64, default 1) makes each container a gang of N on N
    distinct hosts, placed all or nothing, that reach each other over a
    private network of their own: every rank runs each task with the same
    arguments (with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
    ``MASTER_PORT`` set for ``torch.distributed``), rank 0's return value is
    the task's, and any rank's exception or exit fails the task naming the
    rank ("gang rank 1 failed: ..."). ``gpu``/``gpu_count`` are per rank.
    """

    # The registered stub's type; the deployment kinds (deployable.py) are Functions of other types.
    stub_type = "function"
    # What `berth deploy` and `berth image build` tell it by (berth.client.kinds); every subclass too.
    _berth_kind = FUNCTION

    def __init__(
        self,
        func: Callable,
        cpu: Union[int, float, str] = 1.0,
        memory: Union[int, str] = 128,
        gpu: Union[str, Sequence[str], None] = None,
        gpu_count: int = 0,
        gpu_memory: Union[int, str, None] = None,
        image: Optional[Image] = None,
        timeout: int = 3600,
        retries: int = 3,
        callback_url: Optional[str] = None,
        volumes: Optional[List[Any]] = None,
        secrets: Optional[List[str]] = None,
        name: Optional[str] = None,
        task_policy: Optional[TaskPolicy] = None,
        retry_for: Optional[Sequence[Any]] = None,
        headless: bool = False,
        keep_warm_seconds: int = 10,
        on_start: Union[Callable, str, None] = None,
        isolation: str = "container",
        pool: Optional[str] = None,
        priority: int = 0,
        preemptible: bool = False,
        nodes: int = 1,
    ):
        if not callable(func):
            raise TypeError(f"@function decorates a function, not {func!r}")
        self.func = func
        functools.update_wrapper(self, func)
        self.cpu, self.cpu_millicores = cpu_fields(cpu)
        self.memory = parse_memory(memory)
        self.gpu_types, self.gpu_count = parse_gpu(gpu, gpu_count)
        self.gpu_count, self.gpu_memory = parse_gpu_memory(gpu_memory, self.gpu_types, self.gpu_count)
        self.image = image_option(image)
        policy = task_policy
        if policy is not None and not isinstance(policy, TaskPolicy):
            raise TypeError(f"task_policy must be a berth.TaskPolicy, not {type(policy).__name__}")
        self.timeout = check_timeout(policy.timeout if policy else timeout)
        self.retries = check_int("retries", policy.max_retries if policy else retries, 0)
        self.expires = expires_text(policy.expires if policy else None)
        self.callback_url = callback_url or ""
        self.volumes = volumes_option(volumes)
        self.secrets = [str(s) for s in (secrets or [])]
        self.name = name
        self.retry_for = retry_names(retry_for)
        self.headless = bool(headless)
        self.keep_warm_seconds = check_int("keep_warm_seconds", keep_warm_seconds, -1)
        if on_start is not None and not (callable(on_start) or isinstance(on_start, str)):
            raise TypeError("on_start must be a function or a 'module:function' string")
        self.on_start = on_start
        self.isolation = check_isolation(isolation)
        self.pool = check_pool(pool)
        self.priority = check_priority(priority)
        self.preemptible = check_preemptible(preemptible)
        self.nodes = check_nodes(nodes)
        self._stubs: Dict[Tuple[str, Optional[str]], str] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<berth.Function {self.stub_name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """beta9's direct call: remote from outside a container, local inside one."""
        if env.is_remote():
            return self.func(*args, **kwargs)
        return self.remote(*args, **kwargs)

    def local(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the function here, in this process (beta9's ``.local()``)."""
        return self.func(*args, **kwargs)

    @property
    def stub_name(self) -> str:
        return self.name or getattr(self.func, "__qualname__", getattr(self.func, "__name__", "function"))

    def location(self) -> Location:
        return locate(self.func)

    def _on_start_handler(self) -> str:
        if self.on_start is None:
            return ""
        if isinstance(self.on_start, str):
            return self.on_start
        return locate(self.on_start).handler

    def stub_config(self, loc: Optional[Location] = None) -> Dict[str, Any]:
        """The decoded ``stub.config`` (shared/tasks.ts StubConfig, field for field)."""
        loc = loc or self.location()
        return {
            "runtime": {
                "cpu": self.cpu,
                "gpu": ",".join(self.gpu_types),
                "memory": self.memory,
                "image_id": self.image.image_id,
            },
            "handler": loc.handler,
            "on_start": self._on_start_handler(),
            "python_version": self.image.python_version,
            "keep_warm_seconds": self.keep_warm_seconds,
            "max_pending_tasks": MAX_PENDING_TASKS,
            "callback_url": self.callback_url,
            "task_policy": {"max_retries": self.retries, "timeout": self.timeout, "expires": self.expires},
            "workers": 1,
            "authorized": False,
            "volumes": volumes_config(self.volumes),
            "autoscaler": {"type": "queue_depth", "max_containers": 1, "tasks_per_container": 1},
        }

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        """What berth keeps beside the config (shared/tasks.ts StubExtra)."""
        return {
            "cpu_millicores": self.cpu_millicores,
            "gpu_types": list(self.gpu_types),
            "gpu_count": self.gpu_count,
            # A share of one shared GPU (docs/gpus.md, "Shared GPUs"); sent only when asked for.
            **({"gpu_memory_mib": self.gpu_memory} if self.gpu_memory else {}),
            "retry_for": list(self.retry_for),
            # A sandbox's filesystem snapshot (Image.from_id) is sent as its img- id; the cluster runs it on its agent.
            "image_ref": self.image.snapshot_id or self.image.image_ref,
            "code_sha256": code_sha256,
            "secrets": list(self.secrets),
            "headless": self.headless,
            # The image's env_vars: the build's steps saw them, the running function gets them too.
            **({"env": self.image.runtime_env()} if self.image.runtime_env() else {}),
            # Sent only when asked for: a coordinator without runtime choice still takes the stub.
            **({"isolation": self.isolation} if self.isolation != "container" else {}),
            # Only that pool's agents run it (docs/pools.md).
            **({"pool": self.pool} if self.pool else {}),
            # Placement order and preemption (docs/gpus.md); sent only when set.
            **({"priority": self.priority} if self.priority else {}),
            **({"preemptible": True} if self.preemptible else {}),
            # A gang of that many hosts per container (shared/gang.ts); sent only for a gang.
            **({"nodes": self.nodes} if self.nodes > 1 else {}),
        }

    def prepare(self, client: "Client") -> str:
        """Syncs the code and gets or creates the stub (once per client); returns the stub id."""
        from ..client.sync import sync_code

        key = (client.url, client.token)
        with self._lock:
            stub_id = self._stubs.get(key)
            if stub_id:
                return stub_id
            self.image.check_runnable(self.stub_name, allow_snapshot=True)
            if self.image.needs_build():
                from ..client.images import build_image

                # Waits for the build (printing its steps); extra.image_ref then names the built image.
                built = build_image(client, self.image)
                self.image._built_ref, self.image._built_env = built["ref"], built.get("env", {})
            loc = self.location()
            sha = sync_code(client, loc.root)
            body = {
                "name": self.stub_name,
                "type": self.stub_type,
                "config": self.stub_config(loc),
                "extra": self.stub_extra(sha),
            }
            r = client.request("POST", "/api/v1/gateway/stubs", body)
            stub_id = (r.get("stub") or {}).get("id")
            if not stub_id:
                raise BerthError("internal", "the coordinator's stub answer has no id")
            self._stubs[key] = stub_id
            return stub_id

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Runs once in a container and returns the result (or raises the remote exception)."""
        _guard(f"{self.stub_name}.remote()")
        payload = serialize.dump_args(args, kwargs, what=f"{self.stub_name}.remote()")
        from ..client.invoke import Printer, run_one

        client = default_client()
        stub_id = self.prepare(client)
        printer = Printer(sys.stdout, sys.stderr)
        return run_one(client, client.stream_connection(), stub_id, payload, self.headless, printer)

    def map(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """One task per item (the item is the single argument); yields results in input order."""
        _guard(f"{self.stub_name}.map()")
        from ..client.invoke import MapRun, Printer

        client = default_client()
        stub_id = self.prepare(client)
        run = MapRun(client, stub_id, self.headless, Printer(sys.stdout, sys.stderr), f"{self.stub_name}.map()")
        return run.results(iterable)


def function(func: Optional[Callable] = None, **options: Any) -> Any:
    """``@function`` or ``@function(cpu=1, memory=128, ...)``.

    Options: ``cpu``, ``memory``, ``gpu``, ``gpu_count``, ``gpu_memory``,
    ``image``, ``timeout``, ``retries``, ``callback_url``, ``volumes``,
    ``secrets``, ``name``, ``task_policy``, ``retry_for``, ``headless``,
    ``keep_warm_seconds``, ``on_start``, ``isolation``, ``pool``,
    ``priority``, ``preemptible`` and ``nodes`` (a gang of that many hosts
    runs each task: see ``Function``).
    """
    if func is not None:
        return Function(func, **options)
    return lambda f: Function(f, **options)
