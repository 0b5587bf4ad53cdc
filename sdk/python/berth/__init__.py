"""berth: serverless compute on your own GPU fleet."""

from . import env
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
from .function import Function, function
from .image import Image
from .options import TaskPolicy

__all__ = [
    "ArgumentsTooLargeError",
    "BerthError",
    "Client",
    "ConfigError",
    "Context",
    "Credentials",
    "Deployment",
    "FileRef",
    "Function",
    "Image",
    "ImageBuildError",
    "RemoteCallError",
    "RemoteError",
    "RemoteTraceback",
    "SerializationError",
    "Task",
    "TaskCancelledError",
    "TaskError",
    "TaskExpiredError",
    "TaskPolicy",
    "TaskTimeoutError",
    "current_credentials",
    "env",
    "function",
]
__version__ = "0.1.0"
