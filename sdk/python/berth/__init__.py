"""berth: serverless compute on your own GPU fleet."""

from . import env
from .api.autoscaler import QueueDepthAutoscaler
from .api.bot import Bot, BotContext, BotLocation, BotTransition
from .client.bots import BotSession
from .api.bucket import CloudBucket, CloudBucketConfig
from .api.context import Context
from .api.database import Database
from .api.deployable import ASGI, Endpoint, Realtime, Schedule, TaskQueue, asgi, endpoint, realtime, schedule, task_queue
from .api.function import Function, function
from .api.image import Image
from .api.options import GpuType, TaskPolicy
from .api.output import Output
from .api.signal import Signal
from .api.state import Map, Queue
from .api.volume import Volume
from .client.config import ConfigError, Credentials, current_credentials
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
from .handler_call import HandlerArgumentsError

__all__ = [
    "ASGI",
    "ArgumentsTooLargeError",
    "BerthError",
    "Bot",
    "BotContext",
    "BotLocation",
    "BotSession",
    "BotTransition",
    "Client",
    "CloudBucket",
    "CloudBucketConfig",
    "ConfigError",
    "Context",
    "Credentials",
    "Database",
    "Deployment",
    "Endpoint",
    "FileRef",
    "Function",
    "GpuType",
    "HandlerArgumentsError",
    "Image",
    "ImageBuildError",
    "Map",
    "Output",
    "Queue",
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
    "Signal",
    "Task",
    "TaskCancelledError",
    "TaskError",
    "TaskExpiredError",
    "TaskPolicy",
    "TaskQueue",
    "TaskTimeoutError",
    "Volume",
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
    "Client": "client.client",
    "Deployment": "client.client",
    "FileRef": "client.client",
    "Task": "client.client",
    "Pod": "sandbox.pod",
    "PodCreateResult": "sandbox.pod",
    "Sandbox": "sandbox.sandbox",
    "SandboxInstance": "sandbox.sandbox",
    "SandboxFileInfo": "sandbox.sandbox_fs",
    "SandboxFilePosition": "sandbox.sandbox_fs",
    "SandboxFileReplacement": "sandbox.sandbox_fs",
    "SandboxFileSearchMatch": "sandbox.sandbox_fs",
    "SandboxFileSearchRange": "sandbox.sandbox_fs",
    "SandboxFileSystem": "sandbox.sandbox_fs",
    "SandboxProcess": "sandbox.sandbox_process",
    "SandboxProcessManager": "sandbox.sandbox_process",
    "SandboxProcessResponse": "sandbox.sandbox_process",
    "SandboxProcessStream": "sandbox.sandbox_process",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'berth' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
