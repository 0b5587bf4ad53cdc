"""Tasks and deployments as the Client hands them out."""

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote

from .. import serialize
from ..errors import BerthError
from . import outcome

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

# How long one result request waits on the coordinator before asking again.
RESULT_POLL_S = 25


@dataclass(frozen=True)
class FileRef:
    """An uploaded file: content addressed on the coordinator (``Client.upload_file``)."""

    object_id: Any
    sha256: str
    name: str
    size: int


class Task:
    """One task. ``status`` asks the coordinator each time it is read."""

    def __init__(self, client: "Client", task_id: str, status: Optional[str] = None):
        self.client = client
        self.id = task_id
        self._status = status
        self._info: Optional[dict] = None

    def __repr__(self) -> str:
        return f"Task(id={self.id!r}, status={self._status!r})"

    @property
    def status(self) -> str:
        return self.refresh()["status"]

    def refresh(self) -> dict:
        """The task as the task status API answers it (the spec's Task object)."""
        info = self.client.request("GET", f"/v2/task/{quote(self.id, safe='')}/")
        self._info = info
        self._status = info.get("status", self._status)
        return info

    def _result_once(self, wait_s: int) -> dict:
        path = f"/api/v1/gateway/tasks/{quote(self.id, safe='')}/result"
        if wait_s > 0:
            path += f"?wait=1&timeout_s={wait_s}"
        return self.client.request("GET", path, timeout=wait_s + self.client.timeout)

    def result(self, wait: bool = True, timeout: Optional[float] = None) -> Any:
        """The return value; raises what the task ended with.

        ``wait=False`` answers None at once for a task not yet ended;
        ``timeout`` (seconds) raises TimeoutError when it passes first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not wait:
                wait_s = 0
            elif deadline is None:
                wait_s = RESULT_POLL_S
            else:
                wait_s = max(0, min(RESULT_POLL_S, int(deadline - time.monotonic() + 0.999)))
            r = self._result_once(wait_s)
            status = r.get("status", "")
            self._status = status or self._status
            if status in outcome.TERMINAL:
                return outcome.decode(self.id, status, r.get("result"), r.get("error"))
            if not wait:
                return None
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"task {self.id} has not ended after {timeout} s (status {status})")

    def cancel(self) -> str:
        """Cancels the task if it has not ended; answers its status."""
        r = self.client.request("POST", f"/api/v1/gateway/tasks/{quote(self.id, safe='')}/cancel", {})
        self._status = r.get("status", self._status)
        return self._status or ""


class QueuedTask(str):
    """What ``TaskQueue.put()`` answers: the task id as a string (berth's earlier answer, so code
    that stores or compares it keeps working), plus beta9's ``.id`` and the :class:`Task` methods."""

    def __new__(cls, client: "Client", task_id: str) -> "QueuedTask":
        obj = super().__new__(cls, task_id)
        obj._task = Task(client, task_id, "PENDING")
        return obj

    def __repr__(self) -> str:
        return f"QueuedTask(id={str(self)!r})"

    @property
    def id(self) -> str:
        return str(self)

    @property
    def status(self) -> str:
        return self._task.status

    def refresh(self) -> dict:
        return self._task.refresh()

    def result(self, wait: bool = True, timeout: Optional[float] = None) -> Any:
        return self._task.result(wait=wait, timeout=timeout)

    def cancel(self) -> str:
        return self._task.cancel()


class Deployment:
    """A stub tasks can be submitted to by id (no local function needed)."""

    def __init__(self, client: "Client", stub_id: str, name: str = "", stub: Optional[dict] = None, id: str = ""):
        self.client = client
        self.id = id or stub_id
        self.stub_id = stub_id
        self.name = name
        self.stub = stub or {}

    def __repr__(self) -> str:
        return f"Deployment(id={self.id!r}, stub_id={self.stub_id!r}, name={self.name!r})"

    def submit(self, input: Optional[dict] = None) -> Task:
        """Submits one task whose handler gets ``input`` as keyword arguments."""
        payload = serialize.dump_args((), dict(input or {}), what=f"the task for {self.name or self.stub_id}")
        r = self.client.request(
            "POST",
            f"/api/v1/gateway/stubs/{quote(self.stub_id, safe='')}/tasks",
            {"inputs": [serialize.b64(payload)], "stream": False},
        )
        ids = r.get("task_ids") or []
        if not ids:
            raise BerthError("internal", "the coordinator created no task")
        return Task(self.client, ids[0], "PENDING")
