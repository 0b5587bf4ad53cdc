"""berth: serverless compute on your own GPU fleet."""

from . import env
from .autoscaler import QueueDepthAutoscaler
from .client import Client, Deployment, FileRef, Task
from .config import ConfigError, Credentials, current_credentials
from .context import Context
from .errors import (
    ArgumentsTooLargeError,
    BerthError,
    ImageBuildError,
    RemoteCallError,
    RemoteError,
    RemoteTraceback,
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
    "Realtime",
    "RemoteCallError",
    "RemoteError",
    "RemoteTraceback",
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
