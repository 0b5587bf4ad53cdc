"""The SDK's exceptions.

``BerthError`` is what the coordinator answered (a stable ``code``). A task
that ends in a failure-type status raises a ``TaskError`` subclass, except a
handler exception that unpickles here: that one is raised as itself, with the
remote traceback as its ``__cause__`` (as ``concurrent.futures`` does).
"""

from typing import Optional


class BerthError(Exception):
    """An error answered by the coordinator, with its stable code."""

    def __init__(self, code: str, message: str, status: int = 0):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.status = status


class SerializationError(Exception):
    """An argument or a result cannot be pickled or unpickled."""


class ArgumentsTooLargeError(SerializationError):
    """The pickled arguments of one task exceed the per-task limit (4 MiB)."""

    def __init__(self, message: str, size: int, limit: int):
        super().__init__(message)
        self.size = size
        self.limit = limit


class ImageBuildError(Exception):
    """The function's Image asks for something this cluster cannot build yet."""


class RemoteCallError(RuntimeError):
    """``.remote()``/``.map()`` called while the runner imports the user's module."""


class RemoteTraceback(Exception):
    """The traceback of a remote exception, attached as its ``__cause__``."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class TaskError(Exception):
    """A task ended in FAILED, TIMEOUT, CANCELLED or EXPIRED."""

    def __init__(self, task_id: str, status: str, message: str, error: Optional[dict] = None):
        text = f"task {task_id} ended {status}"
        super().__init__(f"{text}: {message}" if message else text)
        self.task_id = task_id
        self.status = status
        self.message = message
        # The TaskError object as the runner or agent reported it (type, message, traceback).
        self.error = error or {}


class TaskTimeoutError(TaskError):
    """The task ran longer than its ``timeout``; its container was stopped."""


class TaskCancelledError(TaskError):
    """The task was cancelled."""


class TaskExpiredError(TaskError):
    """The task waited in the queue past ``task_policy.expires``."""


class RemoteError(TaskError):
    """A remote exception that does not unpickle here (its class is remote-only, say)."""

    def __init__(self, type: str, message: str, traceback: str, task_id: str = "", status: str = "FAILED"):
        TaskError.__init__(self, task_id, status, f"{type}: {message}" if message else type)
        self.type = type
        self.message = message
        self.traceback = traceback
        self.error = {"type": type, "message": message, "traceback": traceback}

    def __str__(self) -> str:
        head = f"{self.type}: {self.message}" if self.message else self.type
        return f"{head}\n\nRemote traceback:\n{self.traceback}" if self.traceback else head


class SandboxConnectionError(BerthError):
    """The sandbox is unknown, terminated or expired (or this instance terminated it)."""

    def __init__(self, code: str, message: str, status: int = 0, sandbox_id: str = ""):
        super().__init__(code, message, status)
        self.sandbox_id = sandbox_id


class SandboxProcessError(BerthError):
    """No process with this pid in the sandbox."""

    def __init__(self, code: str, message: str, status: int = 0, pid: Optional[int] = None):
        super().__init__(code, message, status)
        self.pid = pid


class SandboxFileSystemError(BerthError):
    """A sandbox path is missing, of the wrong kind or outside the sandbox; ``path`` names it."""

    def __init__(self, code: str, message: str, status: int = 0, path: str = ""):
        if path and path not in message:
            message = f"{path}: {message}"
        super().__init__(code, message, status)
        self.path = path


TASK_ERRORS = {
    "TIMEOUT": TaskTimeoutError,
    "CANCELLED": TaskCancelledError,
    "EXPIRED": TaskExpiredError,
}
