"""Deployment decorators: ``@endpoint``, ``@asgi``, ``@realtime``, ``@task_queue``, ``@schedule``.

Each decorated object is a :class:`berth.Function` of another stub type: the
same resource options, code location, code sync and stub registration, plus
what a deployment adds (workers, concurrency, the autoscaler, authorization).
``berth deploy FILE.py:OBJECT`` reads them through ``python -m berth.client.describe``.
Calling the object runs the function here (as ``.local()``); ``.serve()``
runs ``berth serve FILE.py:OBJECT``, beta9's live-reload entry point.
Parameters and defaults: docs/deployments-sdk.md.
"""

import os
import re
import shutil
import subprocess
import sys
from typing import Any, Callable, Dict, Optional
from urllib.parse import quote

from .. import serialize
from ..client.default import default_client
from ..client.tasks import QueuedTask
from ..errors import BerthError
from ..handler_call import describe_params
from .autoscaler import QueueDepthAutoscaler
from .function import MAX_PENDING_TASKS, Function, _guard
from .locate import Location
from .options import check_int

# Spec, Limits: an endpoint request not started within 180 s is EXPIRED; its default run timeout is the same.
ENDPOINT_REQUEST_TIMEOUT_S = 180
# Spec defaults keep realtime containers 10 s; endpoints, ASGI apps and task queues serve bursts of
# requests, so their containers stay 180 s (one request timeout) before scaling to zero.
DEFAULT_KEEP_WARM_S = 180
REALTIME_KEEP_WARM_S = 10

# Options Function.__init__ validates; the rest are the deployment's own.
_FUNCTION_OPTIONS = (
    "cpu",
    "memory",
    "gpu",
    "gpu_count",
    "gpu_memory",
    "image",
    "timeout",
    "retries",
    "callback_url",
    "volumes",
    "secrets",
    "name",
    "task_policy",
    "retry_for",
    "keep_warm_seconds",
    "on_start",
    "isolation",
    "pool",
    "priority",
    "preemptible",
)

_REQUIRED = object()

# A model name the /v1 gateway routes by (docs/inference.md): what OpenAI clients send as `model`.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
MAX_SERVED_MODELS = 32


def check_served_models(value: Any) -> Optional[list]:
    """``served_models=``: the model names an endpoint or ASGI deployment answers on ``/v1``."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(f"served_models must be a list of model names, not {value!r}")
    names = list(value)
    if not names or len(names) > MAX_SERVED_MODELS:
        raise ValueError(f"served_models takes 1 to {MAX_SERVED_MODELS} model names, got {len(names)}")
    for n in names:
        if not isinstance(n, str) or not _MODEL_NAME.match(n):
            raise ValueError(
                f"served_models: {n!r} is not a model name (1-128 characters: letters, digits and ._:/@+-, "
                "starting with a letter or digit)"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"served_models names a model twice: {names!r}")
    return names

_SERVICE_DEFAULTS: Dict[str, Any] = {
    "cpu": 1.0,
    "memory": 128,
    "gpu": None,
    "gpu_count": 0,
    "gpu_memory": None,
    "image": None,
    "timeout": 3600,
    "callback_url": None,
    "volumes": None,
    "secrets": None,
    "name": None,
    "workers": 1,
    "concurrent_requests": 1,
    "keep_warm_seconds": DEFAULT_KEEP_WARM_S,
    "max_pending_tasks": MAX_PENDING_TASKS,
    "on_start": None,
    "authorized": True,
    "autoscaler": None,  # QueueDepthAutoscaler()
    "isolation": "container",
    "pool": None,
    "priority": 0,
    "preemptible": False,
}


class Deployable(Function):
    """What the deployment kinds share; a subclass sets ``stub_type``, ``decorator`` and ``defaults``."""

    decorator = ""
    defaults: Dict[str, Any] = {}

    def __init__(self, func: Callable, **options: Any):
        if not callable(func):
            raise TypeError(f"@{self.decorator} decorates a function, not {func!r}")
        self.check_options(options)
        o = {**self.defaults, **options}
        missing = [k for k, v in o.items() if v is _REQUIRED]
        if missing:
            raise TypeError(f"@{self.decorator} needs {', '.join(missing)}=")
        name = o.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip() or "/" in name):
            raise ValueError(f"@{self.decorator} name must be a non-empty string without '/', got {name!r}")
        function_options = {k: o[k] for k in _FUNCTION_OPTIONS if k in o}
        # Endpoints, ASGI apps and realtime handlers answer a caller that is waiting: no silent re-runs.
        function_options.setdefault("retries", 0)
        super().__init__(func, **function_options)
        self.workers = check_int("workers", o.get("workers", 1), 1)
        self.concurrent_requests = check_int("concurrent_requests", o.get("concurrent_requests", 1), 1)
        self.max_pending_tasks = check_int("max_pending_tasks", o.get("max_pending_tasks", MAX_PENDING_TASKS), 1)
        authorized = o.get("authorized", True)
        if not isinstance(authorized, bool):
            raise TypeError(f"authorized must be True or False, not {authorized!r}")
        self.authorized = authorized
        autoscaler = o.get("autoscaler")
        if autoscaler is None:
            autoscaler = QueueDepthAutoscaler()
        elif not isinstance(autoscaler, QueueDepthAutoscaler):
            raise TypeError(f"autoscaler must be a berth.QueueDepthAutoscaler, not {type(autoscaler).__name__}")
        self.autoscaler = autoscaler

    @classmethod
    def check_options(cls, options: Dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(cls.defaults))
        if unknown:
            raise TypeError(
                f"@{cls.decorator} has no parameter {', '.join(unknown)}; "
                f"its parameters are {', '.join(cls.defaults)}"
            )

    def __repr__(self) -> str:
        return f"<berth.{type(self).__name__} {self.stub_name}>"

    def handler_params(self) -> Optional[Dict[str, Any]]:
        return describe_params(self.func)

    def stub_config(self, loc: Optional[Location] = None) -> Dict[str, Any]:
        config = super().stub_config(loc)
        config["workers"] = self.workers
        config["authorized"] = self.authorized
        config["max_pending_tasks"] = self.max_pending_tasks
        config["autoscaler"] = self.autoscaler.to_config()
        return config

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        extra = super().stub_extra(code_sha256)
        extra["min_containers"] = self.autoscaler.min_containers
        extra["concurrent_requests"] = self.concurrent_requests
        params = self.handler_params()
        if params is not None:
            extra["handler_params"] = params
        return extra

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the handler here: a deployment is called through its URL or queue, never as a task."""
        return self.func(*args, **kwargs)

    def serve_target(self) -> str:
        """``FILE.py:OBJECT`` of this object, as ``berth serve`` and ``berth deploy`` take it."""
        loc = self.location()
        mod = sys.modules.get(getattr(self.func, "__module__", "__main__"))
        file = getattr(mod, "__file__", None)
        if not file:
            raise BerthError("invalid_request", f"{loc.qualname} has no file to serve: define it in a .py file")
        return f"{os.path.abspath(file)}:{loc.qualname}"

    def serve(self, timeout: int = 0, name: Optional[str] = None) -> int:
        """beta9's ``.serve()``: a live-reloading dev session of this object through ``berth serve``.

        Blocks until the session ends (Ctrl-C, or ``timeout`` idle seconds; 0 keeps the CLI's
        default of 600) and answers the CLI's exit status. Needs the ``berth`` CLI on PATH
        (or its path in ``BERTH_CLI``).
        """
        _guard(f"{self.stub_name}.serve()")
        cli = os.environ.get("BERTH_CLI") or shutil.which("berth")
        if not cli:
            raise BerthError(
                "failed_precondition",
                f"{self.stub_name}.serve() runs the berth CLI (`berth serve`), which is not on PATH: "
                "install it or set BERTH_CLI to its path",
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
            raise ValueError(f"timeout must be idle seconds >= 0 (0: the CLI's default), got {timeout!r}")
        argv = [cli, "serve", self.serve_target()]
        if name or self.name:
            argv += ["--name", str(name or self.name)]
        if timeout > 0:
            argv += ["--idle-timeout", str(timeout)]
        try:
            return subprocess.call(argv)
        except KeyboardInterrupt:  # the CLI got the same Ctrl-C and cleans up on its own
            return 130

    def _not_called_remotely(self) -> TypeError:
        return TypeError(
            f"{self.stub_name} is a @{self.decorator}: deploy it with `berth deploy FILE.py:{self.stub_name}` "
            f"(or `berth serve`) and call it there, or call {self.stub_name}(...) to run it here"
        )

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        raise self._not_called_remotely()

    def map(self, iterable: Any) -> Any:
        raise self._not_called_remotely()


class _ModelServing(Deployable):
    """Endpoint and ASGI deployments may serve models on the ``/v1`` gateway (``served_models=[...]``)."""

    def __init__(self, func: Callable, **options: Any):
        super().__init__(func, **options)
        self.served_models = check_served_models(options.get("served_models"))

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        extra = super().stub_extra(code_sha256)
        if self.served_models:
            extra["served_models"] = list(self.served_models)
        return extra


class Endpoint(_ModelServing):
    """A web API: ``POST {base_url}/endpoint/{name}`` with a JSON body calls the handler (berth.handler_call)."""

    stub_type = "endpoint"
    decorator = "endpoint"
    defaults = {**_SERVICE_DEFAULTS, "timeout": ENDPOINT_REQUEST_TIMEOUT_S, "served_models": None}

    def __init__(self, func: Callable, **options: Any):
        super().__init__(func, **options)
        # A request waits at most the spec's request timeout for a container; then it is EXPIRED.
        self.expires = str(ENDPOINT_REQUEST_TIMEOUT_S)


class ASGI(_ModelServing):
    """An ASGI application (HTTP and websockets): the decorated function takes no arguments
    (or only ``context``) and returns the app; it runs once per container."""

    stub_type = "asgi"
    decorator = "asgi"
    defaults = {**_SERVICE_DEFAULTS, "served_models": None}

    def __init__(self, func: Callable, **options: Any):
        super().__init__(func, **options)
        required = describe_params(func)["required"]
        if required:
            raise ValueError(
                f"@asgi decorates a function that returns the ASGI app and is called with no arguments "
                f"(a context parameter excepted), but {self.stub_name} needs {', '.join(required)}: "
                "to serve an existing app write `@asgi def web(): return app`"
            )

    def handler_params(self) -> Optional[Dict[str, Any]]:
        return None


class Realtime(Deployable):
    """A websocket endpoint: the handler runs for every received message; its return value is sent back."""

    stub_type = "realtime"
    decorator = "realtime"
    defaults = {**_SERVICE_DEFAULTS, "keep_warm_seconds": REALTIME_KEEP_WARM_S}


class TaskQueue(Deployable):
    """A queue of tasks: ``.put(*args, **kwargs)`` (or a POST to its URL) enqueues one and returns it
    (a :class:`berth.client.tasks.QueuedTask`: the id string, with beta9's ``.id``)."""

    stub_type = "taskqueue"
    decorator = "task_queue"
    defaults = {**_SERVICE_DEFAULTS, "retries": 3, "task_policy": None, "retry_for": None}

    def _not_called_remotely(self) -> TypeError:
        return TypeError(f"{self.stub_name} is a @task_queue: enqueue with {self.stub_name}.put(...)")

    def put(self, *args: Any, **kwargs: Any) -> Any:
        """Enqueues one task (syncing the code and registering the stub first).

        Returns a QueuedTask: equal to (and usable as) the task id string, with ``.id``,
        ``.status``, ``.result()`` and ``.cancel()`` as beta9 programs read them.
        """
        what = f"{self.stub_name}.put()"
        _guard(what)
        payload = serialize.dump_args(args, kwargs, what=what)
        client = default_client()
        stub_id = self.prepare(client)
        r = client.request(
            "POST", f"/api/v1/gateway/stubs/{quote(stub_id, safe='')}/enqueue", {"args": serialize.b64(payload)}
        )
        task_id = r.get("task_id") if isinstance(r, dict) else None
        if not task_id:
            raise BerthError("internal", f"the coordinator's answer to {what} has no task_id")
        return QueuedTask(client, str(task_id))


_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-]+$")


def check_cron(when: Any) -> str:
    """A light check (5 fields or a macro); the coordinator parses the expression exactly at deploy."""
    if not isinstance(when, str):
        raise TypeError(f"@schedule when must be a cron expression string, not {type(when).__name__}")
    text = " ".join(when.split())
    if text.startswith("@"):
        if text.lower() not in _CRON_MACROS:
            raise ValueError(f"@schedule when={when!r} is not a known macro: use one of {', '.join(_CRON_MACROS)}")
        return text.lower()
    fields = text.split(" ") if text else []
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ValueError(
            f"@schedule when={when!r} is not a cron expression: give 5 fields (minute hour day-of-month "
            f"month day-of-week) such as '*/5 * * * *', or one of {', '.join(_CRON_MACROS)}"
        )
    return text


class Schedule(Deployable):
    """Runs the function (with no arguments, or only ``context``) on a cron schedule while deployed."""

    stub_type = "schedule"
    decorator = "schedule"
    defaults = {
        "when": _REQUIRED,
        "cpu": 1.0,
        "memory": 128,
        "gpu": None,
        "gpu_count": 0,
        "gpu_memory": None,
        "image": None,
        "timeout": 3600,
        "retries": 3,
        "callback_url": None,
        "volumes": None,
        "secrets": None,
        "name": None,
        "task_policy": None,
        "retry_for": None,
        "keep_warm_seconds": REALTIME_KEEP_WARM_S,
        "on_start": None,
        "isolation": "container",
        "pool": None,
        "priority": 0,
        "preemptible": False,
    }

    def __init__(self, func: Callable, **options: Any):
        super().__init__(func, **options)
        self.when = check_cron(options["when"])
        required = describe_params(func)["required"]
        if required:
            raise ValueError(
                f"@schedule calls {self.stub_name}() with no arguments (a context parameter excepted), "
                f"but it needs {', '.join(required)}: give them defaults"
            )

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        extra = super().stub_extra(code_sha256)
        extra["when"] = self.when
        return extra

    def _not_called_remotely(self) -> TypeError:
        return TypeError(
            f"{self.stub_name} is a @schedule: it runs on its schedule once deployed; call {self.stub_name}() "
            "to run it here"
        )


def _decorate(cls: type, func: Any, options: Dict[str, Any]) -> Any:
    if func is None:
        cls.check_options(options)  # type: ignore[attr-defined]
        return lambda f: cls(f, **options)
    if cls is Schedule and isinstance(func, str):
        raise TypeError(f"give the cron expression by name: @schedule(when={func!r})")
    return cls(func, **options)


def endpoint(func: Optional[Callable] = None, **options: Any) -> Any:
    """``@endpoint`` or ``@endpoint(name=..., cpu=..., autoscaler=..., ...)``: a JSON web API."""
    return _decorate(Endpoint, func, options)


def asgi(func: Optional[Callable] = None, **options: Any) -> Any:
    """``@asgi`` or ``@asgi(...)`` on a function returning an ASGI app."""
    return _decorate(ASGI, func, options)


def realtime(func: Optional[Callable] = None, **options: Any) -> Any:
    """``@realtime`` or ``@realtime(...)``: a websocket handler called for every message."""
    return _decorate(Realtime, func, options)


def task_queue(func: Optional[Callable] = None, **options: Any) -> Any:
    """``@task_queue`` or ``@task_queue(...)``: tasks enqueued with ``.put()`` or a POST."""
    return _decorate(TaskQueue, func, options)


def schedule(func: Optional[Callable] = None, **options: Any) -> Any:
    """``@schedule(when="*/5 * * * *", ...)``: runs the function on a cron schedule while deployed."""
    return _decorate(Schedule, func, options)
