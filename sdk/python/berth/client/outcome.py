"""From a task's final status, result and TaskError to a value or an exception."""

from typing import Any, Optional

from .. import serialize
from ..errors import TASK_ERRORS, RemoteError, RemoteTraceback, SerializationError, TaskError

TERMINAL = frozenset({"COMPLETE", "FAILED", "TIMEOUT", "EXPIRED", "CANCELLED"})


def remote_exception(task_id: str, status: str, error: Optional[dict]) -> BaseException:
    """The exception a failed task raises in the caller."""
    error = error if isinstance(error, dict) else {}
    etype = str(error.get("type") or "")
    message = str(error.get("message") or "")
    tb = str(error.get("traceback") or "")
    cls = TASK_ERRORS.get(status)
    if cls is not None:
        return cls(task_id, status, message or f"the task ended {status}", error)
    pickled = error.get("pickled")
    if pickled:
        try:
            exc = serialize.loads(serialize.unb64(pickled))
        except Exception:
            exc = None
        if isinstance(exc, BaseException):
            exc.__cause__ = RemoteTraceback(f'\n"""\n{tb}"""' if tb else "(no traceback)")
            try:
                exc.task_id = task_id
            except Exception:
                pass
            return exc
    if status == "FAILED":
        return RemoteError(etype or "Exception", message, tb, task_id=task_id, status=status)
    return TaskError(task_id, status, message, error)


def decode(task_id: str, status: str, result: Optional[str], error: Optional[dict]) -> Any:
    """The task's return value, or raises what the task ended with."""
    if status != "COMPLETE":
        raise remote_exception(task_id, status, error)
    if not result:
        return None
    try:
        return serialize.loads(serialize.unb64(result))
    except Exception as e:
        raise SerializationError(
            f"the result of task {task_id} does not unpickle here: {type(e).__name__}: {e}"
        ) from e
