"""berth: serverless compute on your own GPU fleet."""

from . import env
from .autoscaler import QueueDepthAutoscaler
from .config import ConfigError, Credentials, current_credentials
from .context import Context
from .errors import (
    ArgumentsTooLargeError,
    BerthError,
    ImageBuildError,
    RemoteCallError,
    RemoteError,
    RemoteTraceback,
    SandboxConnectionError,
    SandboxFileSystemError,
    SandboxProcessError,
    SerializationError,
    TaskCancelledError,
    TaskError,
    TaskExpiredError,
    TaskTimeoutError,
)
from .deployable import ASGI, Endpoint, Realtime, Schedule, TaskQueue, asgi, endpoint, realtime, schedule, task_queue
from .function import Function, function
from .handler_call import HandlerArgumentsError
from .image import Image
from .options import TaskPolicy

__all__ = [
    "ASGI",
    "ArgumentsTooLargeError",
    "BerthError",
    "Client",
    "ConfigError",
    "Context",
    "Credentials",
    "Deployment",
    "Endpoint",
    "FileRef",
    "Function",
    "HandlerArgumentsError",
    "Image",
    "ImageBuildError",
    "QueueDepthAutoscaler",
    "Pod",
    "PodCreateResult",
    "Realtime",
    "RemoteCallError",
    "RemoteError",
    "RemoteTraceback",
    "Sandbox",
    "SandboxConnectionError",
    "SandboxFileInfo",
    "SandboxFileReplacement",
    "SandboxFileSearchMatch",
    "SandboxFilePosition",
    "SandboxFileSearchRange",
    "SandboxFileSystem",
    "SandboxFileSystemError",
    "SandboxInstance",
    "SandboxProcess",
    "SandboxProcessError",
    "SandboxProcessManager",
    "SandboxProcessResponse",
    "SandboxProcessStream",
    "Schedule",
    "SerializationError",
    "Task",
    "TaskCancelledError",
    "TaskError",
    "TaskExpiredError",
    "TaskPolicy",
    "TaskQueue",
    "TaskTimeoutError",
    "asgi",
    "current_credentials",
    "endpoint",
    "env",
    "function",
    "realtime",
    "schedule",
    "task_queue",
]
__version__ = "0.1.0"

# The client, sandbox and pod classes pull in HTTP, TLS and the task stream:
# loaded on first use (PEP 562), so a container importing the user's module stays lean.
_LAZY = {
    "Client": "client",
    "Deployment": "client",
    "FileRef": "client",
    "Task": "client",
    "Pod": "pod",
    "PodCreateResult": "pod",
    "Sandbox": "sandbox",
    "SandboxInstance": "sandbox",
    "SandboxFileInfo": "sandbox_fs",
    "SandboxFilePosition": "sandbox_fs",
    "SandboxFileReplacement": "sandbox_fs",
    "SandboxFileSearchMatch": "sandbox_fs",
    "SandboxFileSearchRange": "sandbox_fs",
    "SandboxFileSystem": "sandbox_fs",
    "SandboxProcess": "sandbox_process",
    "SandboxProcessManager": "sandbox_process",
    "SandboxProcessResponse": "sandbox_process",
    "SandboxProcessStream": "sandbox_process",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'berth' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
