"""``integrations.VLLM``: vLLM's OpenAI-compatible server deployed as an ASGI app (spec, "vLLM integration").

``VLLMArgs`` holds the server's arguments and maps them to vLLM's own command
line (``to_cli()``): a field left at ``None`` is not passed, so vLLM's default
applies. In the container the ASGI app (berth.integrations.vllm_server) starts
``python -m vllm.entrypoints.openai.api_server`` on loopback and passes every
request through to it, streams chunk by chunk. The deployment declares the
model names vLLM serves to the ``/v1`` gateway (``served_models``,
docs/inference.md), so ``model="<name>"`` reaches it. Docs: docs/inference.md.
"""

import os
import sys
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Union

from ..api.autoscaler import QueueDepthAutoscaler
from ..api.deployable import ASGI, check_served_models
from ..api.image import Image
from ..api.locate import Location, locate
from ..api.volume import Volume
from ..errors import BerthError

VLLM_CACHE_VOLUME = "vllm_cache"
VLLM_CACHE_DIR = "./vllm_cache"
# Spec: the image adds these packages.
VLLM_PACKAGES = ["fastapi", "vllm", "huggingface_hub"]
VLLM_KEEP_WARM_S = 60

# Fields whose flag vLLM defines as a plain switch (store_true): True passes it, False leaves vLLM's default (off).
_SWITCHES = frozenset(
    {"trust_remote_code", "enforce_eager", "enable_auto_tool_choice", "disable_log_requests", "disable_log_stats"}
)
# Fields vLLM defines as --flag / --no-flag: None leaves vLLM's default.
_TRISTATE = frozenset({"enable_prefix_caching"})


@dataclass
class VLLMArgs:
    """Arguments of vLLM's OpenAI server (``vllm serve --help``); ``None`` keeps vLLM's own default.

    ``served_model_name`` is what clients send as ``model``; unset, the deployment's
    name and ``model`` are served. ``extra_args`` are passed to vLLM as they are,
    after the listed fields, for any flag not listed here.
    """

    model: str = "facebook/opt-125m"
    served_model_name: Union[str, List[str], None] = None
    tokenizer: Optional[str] = None
    revision: Optional[str] = None
    tokenizer_revision: Optional[str] = None
    trust_remote_code: bool = False
    download_dir: Optional[str] = VLLM_CACHE_DIR
    dtype: Optional[str] = None
    quantization: Optional[str] = None
    max_model_len: Optional[int] = None
    tensor_parallel_size: Optional[int] = None
    pipeline_parallel_size: Optional[int] = None
    gpu_memory_utilization: Optional[float] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    enforce_eager: bool = False
    enable_prefix_caching: Optional[bool] = None
    seed: Optional[int] = None
    device: Optional[str] = None
    chat_template: Optional[str] = None
    response_role: Optional[str] = None
    enable_auto_tool_choice: bool = False
    tool_call_parser: Optional[str] = None
    lora_modules: Optional[List[str]] = None
    max_log_len: Optional[int] = None
    disable_log_requests: bool = False
    disable_log_stats: bool = False
    extra_args: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(f"VLLMArgs.model must name a model (a Hugging Face id or a path), got {self.model!r}")
        if isinstance(self.extra_args, str) or not all(isinstance(a, str) for a in self.extra_args):
            raise TypeError(f"VLLMArgs.extra_args must be a list of strings, got {self.extra_args!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if (f.name in _SWITCHES) and not isinstance(v, bool):
                raise TypeError(f"VLLMArgs.{f.name} must be True or False, got {v!r}")
            if f.name in _TRISTATE and v is not None and not isinstance(v, bool):
                raise TypeError(f"VLLMArgs.{f.name} must be True, False or None, got {v!r}")

    def served_names(self, deployment_name: Optional[str] = None) -> List[str]:
        """The model names vLLM answers (its ``--served-model-name``) and the gateway routes to it."""
        given = self.served_model_name
        if given is not None:
            names = [given] if isinstance(given, str) else list(given)
        else:
            names = [deployment_name, self.model] if deployment_name else [self.model]
        unique = list(dict.fromkeys(names))
        checked = check_served_models(unique)
        return checked or []

    def to_cli(self, deployment_name: Optional[str] = None) -> List[str]:
        """vLLM's command line for these arguments (without host and port, which the container picks)."""
        argv: List[str] = []
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            flag = "--" + name.replace("_", "-")
            if name == "extra_args":
                continue
            if name == "served_model_name":
                argv += [flag, *self.served_names(deployment_name)]
            elif name in _SWITCHES:
                if value:
                    argv.append(flag)
            elif name in _TRISTATE:
                if value is not None:
                    argv.append(flag if value else "--no-" + flag[2:])
            elif value is None:
                continue
            elif isinstance(value, (list, tuple)):
                if value:
                    argv += [flag, *[str(v) for v in value]]
            else:
                argv += [flag, str(value)]
        return argv + list(self.extra_args)


def _default_image() -> Image:
    return Image().add_python_packages(list(VLLM_PACKAGES))


class VLLM(ASGI):
    """``integrations.VLLM(name=..., vllm_args=VLLMArgs(...))``: deploy with ``berth deploy app.py:OBJECT``."""

    stub_type = "asgi"
    decorator = "integrations.VLLM"

    def __init__(
        self,
        cpu: Union[int, float, str] = 1.0,
        memory: Union[int, str] = 128,
        gpu: Union[str, Sequence[str], None] = None,
        image: Optional[Image] = None,
        workers: int = 1,
        concurrent_requests: int = 1,
        keep_warm_seconds: int = VLLM_KEEP_WARM_S,
        max_pending_tasks: int = 100,
        timeout: int = 3600,
        authorized: bool = True,
        name: Optional[str] = None,
        volumes: Optional[List[Any]] = None,
        secrets: Optional[List[str]] = None,
        autoscaler: Optional[QueueDepthAutoscaler] = None,
        vllm_args: Optional[VLLMArgs] = None,
        gpu_count: int = 0,
    ):
        if vllm_args is None:
            vllm_args = VLLMArgs()
        elif not isinstance(vllm_args, VLLMArgs):
            raise TypeError(f"vllm_args must be a berth.integrations.VLLMArgs, not {type(vllm_args).__name__}")
        self.vllm_args = vllm_args
        # The module that built this object: the container imports it and finds the object by its variable.
        self._module_name = sys._getframe(1).f_globals.get("__name__", "__main__")
        super().__init__(
            self._app,
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            gpu_count=gpu_count,
            image=_default_image() if image is None else image,
            workers=workers,
            concurrent_requests=concurrent_requests,
            keep_warm_seconds=keep_warm_seconds,
            max_pending_tasks=max_pending_tasks,
            timeout=timeout,
            authorized=authorized,
            name=name,
            volumes=[Volume(name=VLLM_CACHE_VOLUME, mount_path=VLLM_CACHE_DIR)] if volumes is None else volumes,
            secrets=secrets,
            autoscaler=autoscaler,
        )
        self.served_models = vllm_args.served_names(name)

    def _variable(self) -> Optional[str]:
        mod = sys.modules.get(self._module_name)
        names = [k for k, v in vars(mod).items() if v is self and not k.startswith("__")] if mod else []
        return names[0] if names else None

    @property
    def stub_name(self) -> str:
        return self.name or self._variable() or "vllm"

    def location(self) -> Location:
        variable = self._variable()
        if variable is None:
            raise BerthError(
                "invalid_request",
                f"integrations.VLLM(...) built in {self._module_name!r} is not a top-level variable there: "
                "assign it at module level (llm = integrations.VLLM(...)) so the container can find it",
            )
        return locate(SimpleNamespace(__module__=self._module_name, __qualname__=variable))

    def serve_target(self) -> str:
        """``FILE.py:VARIABLE`` for ``.serve()`` (``berth serve``): the module that built this object."""
        loc = self.location()
        file = getattr(sys.modules.get(self._module_name), "__file__", None)
        if not file:
            raise BerthError("invalid_request", f"{loc.qualname} has no file to serve: define it in a .py file")
        return f"{os.path.abspath(file)}:{loc.qualname}"

    def command(self) -> List[str]:
        """vLLM's arguments as this deployment runs them (host and port are added in the container)."""
        return self.vllm_args.to_cli(self.name)

    def __repr__(self) -> str:
        return f"<berth.integrations.VLLM {self.stub_name} model={self.vllm_args.model!r}>"

    def _app(self) -> Any:
        """The container's ASGI app: vLLM's server on loopback behind a pass-through."""
        from .vllm_server import VLLMServerApp

        return VLLMServerApp(self.command(), startup_timeout_s=self.timeout)

    def stub_extra(self, code_sha256: str = "") -> Dict[str, Any]:
        extra = super().stub_extra(code_sha256)
        extra["served_models"] = list(self.served_models)
        return extra
