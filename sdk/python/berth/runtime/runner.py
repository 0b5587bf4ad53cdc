"""The in-container runner: ``python3 -u -m berth.runtime.runner`` (docs/tasks.md, "Bridge protocol").

Imports ``BERTH_HANDLER`` once, then each of ``BERTH_WORKERS`` threads loops:
take a task from the agent, run it, post its result. A handler that does not
import still serves: every task it takes fails at once, naming the import
error, so no task waits for a runner that can never run it.

In a gang (BERTH_GANG_SIZE > 1, shared/gang.ts) only rank 0 takes tasks,
one at a time, and runs each on every rank; the other ranks take theirs
from rank 0 (gang.py).
"""

import collections
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

from .. import serialize
from ..api.bot import BOT_TRANSITION_ATTR
from ..api.context import Context
from ..handler_call import HandlerArgumentsError, bind_endpoint_call
from .bridge import AgentGone, BridgeClient, log
from .capture import Capture
from .gang import Follower, Leader
from .gang_wire import GangConfig, accept_all, listen
from .state_bridge import install_from_env as install_state_transport
from .db_forward import start_from_env as forward_databases
from .handler_load import (
    error_of,
    import_handler,
    load_failure,
    resolve,
    takes_context,
    trimmed_traceback,
)

# The agent only needs a sign of life well within its ack wait; tests shorten it.
HEARTBEAT_INTERVAL_S = float(os.environ.get("BERTH_HEARTBEAT_INTERVAL_S") or 5.0)
# The agent drops a longer JSON copy of a result (it must fit in a task event).
MAX_RESULT_JSON_CHARS = 1024 * 1024
# The agent answers `next` after ~25 s without a task; a socket silent for longer is broken.
NEXT_TIMEOUT_S = 90.0
# Batching: a worker asks for up to MAX_BATCH tasks at once while its tasks take under
# SHORT_TASK_S each; a batch still running after RELEASE_AFTER_S gives its unstarted rest back.
MAX_BATCH = 32
SHORT_TASK_S = 0.01
RELEASE_AFTER_S = 0.05
# Results are posted before the batch ends once this much pickled data waits.
RESULTS_FLUSH_BYTES = 4 * 1024 * 1024
EVERY_TASK_FAILS = "every task will fail"


@dataclass
class RunnerConfig:
    socket: str
    handler: str
    on_start: str = ""
    container_id: Optional[str] = None
    stub_id: Optional[str] = None
    stub_type: Optional[str] = None
    callback_url: Optional[str] = None
    python_version: str = ""
    retry_for: List[str] = field(default_factory=list)
    workers: int = 1

    @classmethod
    def from_env(cls, e: Dict[str, str]) -> "RunnerConfig":
        try:
            retry_for = [str(n) for n in json.loads(e.get("BERTH_RETRY_FOR") or "[]")]
        except (ValueError, TypeError):
            log(f"BERTH_RETRY_FOR {e.get('BERTH_RETRY_FOR')!r} is not a JSON list; no exception retries")
            retry_for = []
        try:
            workers = max(1, int(e.get("BERTH_WORKERS") or "1"))
        except ValueError:
            workers = 1
        return cls(
            socket=e.get("BERTH_AGENT_SOCKET") or "/berth/run/agent.sock",
            handler=e.get("BERTH_HANDLER", ""),
            on_start=e.get("BERTH_ON_START", ""),
            container_id=e.get("BERTH_CONTAINER_ID") or None,
            stub_id=e.get("BERTH_STUB_ID") or None,
            stub_type=e.get("BERTH_STUB_TYPE") or None,
            callback_url=e.get("BERTH_CALLBACK_URL") or None,
            python_version=e.get("BERTH_PYTHON_VERSION", ""),
            retry_for=retry_for,
            workers=workers,
        )


class Runner:
    def __init__(self, cfg: RunnerConfig):
        self.cfg = cfg
        self.fn: Optional[Callable] = None
        self.fn_name = cfg.handler
        self.load_error: Optional[dict] = None
        self.on_start_value: Any = None
        self.wants_context = False
        self.gone = threading.Event()
        # Rank 0 of a gang (gang.py): each task runs on every rank; None outside a gang.
        self.leader: Optional[Leader] = None
        self.output_client = BridgeClient(cfg.socket, timeout=30.0, gone_after_s=5.0)
        self.capture = Capture(self._send_output)

    # ---- startup ----

    def load(self) -> None:
        try:
            self.fn = import_handler(self.cfg.handler)
        except (Exception, SystemExit) as e:
            self.load_error = load_failure(f"cannot import the handler {self.cfg.handler}", e, EVERY_TASK_FAILS)
            return
        self.fn_name = getattr(self.fn, "__qualname__", self.cfg.handler)
        self.wants_context = takes_context(self.fn)
        if self.cfg.on_start:
            try:
                self.on_start_value = self._await(resolve(self.cfg.on_start, "BERTH_ON_START")())
            except (Exception, SystemExit) as e:
                self.load_error = load_failure(f"on_start {self.cfg.on_start} failed", e, EVERY_TASK_FAILS)

    @staticmethod
    def _await(value: Any) -> Any:
        if not inspect.iscoroutine(value):
            return value
        import asyncio  # only for async handlers: a cold start pays for every import

        return asyncio.run(value)

    # ---- tasks ----

    def _send_output(self, task_id: str, stream: str, data: str) -> None:
        try:
            self.output_client.post(f"/v1/tasks/{task_id}/output", {"stream": stream, "data": data})
        except AgentGone:
            pass

    def context(self, task: dict) -> Context:
        return Context(
            container_id=self.cfg.container_id,
            stub_id=self.cfg.stub_id,
            stub_type=self.cfg.stub_type,
            callback_url=task.get("callback_url") or self.cfg.callback_url,
            task_id=task.get("id"),
            timeout=task.get("timeout"),
            on_start_value=self.on_start_value,
            bind_port=0,
            python_version=self.cfg.python_version,
        )

    def failure(self, e: BaseException) -> dict:
        error = error_of(e)
        try:
            data = serialize.dumps(e)
            serialize.loads(data)  # an exception whose __init__ rejects its args pickles but never unpickles
            if len(data) <= serialize.MAX_TASK_RESULT_BYTES:
                error["pickled"] = serialize.b64(data)
        except Exception:
            pass
        names = set(self.cfg.retry_for)
        retry = any(
            c.__name__ in names or c.__qualname__ in names or f"{c.__module__}.{c.__qualname__}" in names
            for c in type(e).__mro__
        )
        return {"status": "FAILED", "error": error, "retry": retry}

    def success(self, value: Any) -> dict:
        try:
            data = serialize.dumps(value)
        except Exception as e:
            return self.refused(f"return value of {self.fn_name} is not picklable: {type(e).__name__}: {e}")
        if len(data) > serialize.MAX_TASK_RESULT_BYTES:
            return self.refused(
                f"return value of {self.fn_name} is {len(data)} bytes pickled; the limit is 4 MiB "
                f"({serialize.MAX_TASK_RESULT_BYTES} bytes): return a smaller value or write large data to a volume"
            )
        body = {"status": "COMPLETE", "result": serialize.b64(data)}
        try:
            text = json.dumps(value, allow_nan=False)
            if len(text) <= MAX_RESULT_JSON_CHARS:
                body["result_json"] = text
        except (TypeError, ValueError, RecursionError):
            pass
        return body

    @staticmethod
    def refused(message: str, type_name: str = "berth.SerializationError", tb: str = "") -> dict:
        return {"status": "FAILED", "error": {"type": type_name, "message": message, "traceback": tb}, "retry": False}

    def execute(self, task: dict) -> dict:
        ok, outcome = self.invoke(task)
        return self.success(outcome) if ok else outcome

    def invoke(self, task: dict) -> Tuple[bool, Any]:
        """(True, the handler's return value) or (False, the FAILED result).

        Apart from execute, so a gang's other ranks (gang.py) run the call without pickling a value nobody reads.
        """
        if self.load_error is not None:
            return False, {"status": "FAILED", "error": dict(self.load_error), "retry": False}
        fn = self.fn
        if task.get("payload_format") == "json":
            fn = self._json_target()
            call = self._json_call(task, fn)
        else:
            call = self._pickled_call(task)
        if isinstance(call, dict):
            return False, call
        args, kwargs = call
        try:
            return True, self._await(fn(*args, **kwargs))  # type: ignore[misc]
        except BaseException as e:  # noqa: BLE001 - SystemExit in a handler is its failure too
            return False, self.failure(e)

    def _pickled_call(self, task: dict) -> Union[Tuple[tuple, dict], dict]:
        """The pickled ``(args, kwargs)`` of a ``.remote()``/``.put()``; a FAILED result when they do not unpickle."""
        try:
            args, kwargs = serialize.loads(serialize.unb64(task.get("args") or ""))
            args, kwargs = tuple(args), dict(kwargs)
        except Exception as e:
            return self.refused(
                f"cannot unpickle the arguments of task {task.get('id')} for {self.fn_name}: {type(e).__name__}: {e}",
                tb=trimmed_traceback(e),
            )
        if self.wants_context and "context" not in kwargs:
            kwargs["context"] = self.context(task)
        return args, kwargs

    def _json_target(self) -> Callable:
        """What a JSON task calls: the handler, or for a deployed bot's firing its transition's
        session entry, which takes the session and the markers as JSON (docs/bots.md)."""
        transition = getattr(self.fn, BOT_TRANSITION_ATTR, None)
        return transition.run_session_task if transition is not None else self.fn  # type: ignore[return-value]

    def _json_call(self, task: dict, fn: Callable) -> Union[Tuple[tuple, dict], dict]:
        """A JSON object (a task queue POST, a schedule tick) bound by the endpoint rules (handler_call.py)."""
        try:
            body = json.loads(serialize.unb64(task.get("args") or ""))
        except ValueError as e:  # UnicodeDecodeError and binascii.Error included
            return self.refused(f"the JSON payload of task {task.get('id')} does not parse: {e}", "berth.PayloadError")
        try:
            return bind_endpoint_call(fn, body, self.context(task))  # type: ignore[arg-type]
        except HandlerArgumentsError as e:
            return self.refused(str(e), "berth.HandlerArgumentsError")

    def run_task(self, task: dict, heartbeat: "Heartbeat", batch: Optional["Batch"] = None) -> Optional[dict]:
        """The task's result; None when a gang's rank 0 has already reported it (gang.py)."""
        task_id = str(task.get("id"))
        # Process-wide, for handlers that read them (with several workers, the latest task's).
        os.environ["BERTH_TASK_ID"] = task_id
        os.environ["BERTH_TASK_ATTEMPT"] = str(task.get("attempt", 1))
        heartbeat.begin(task_id, batch)
        out = self.capture.start(task_id)
        try:
            leader = self.leader
            result = self.execute(task) if leader is None else leader.run(task, lambda: self.execute(task))
        finally:
            self.capture.finish(out)
            heartbeat.end()
        return result

    def worker(self) -> None:
        client = BridgeClient(self.cfg.socket, timeout=NEXT_TIMEOUT_S)
        heartbeat = Heartbeat(BridgeClient(self.cfg.socket, timeout=30.0))
        # Short tasks come in batches (one agent round trip for many); a slow one drops back to one at a time.
        want = 1
        try:
            status, body = client.post("/v1/tasks/next", {"max": want})
            while not self.gone.is_set():
                tasks = self._tasks_of(status, body)
                if tasks is None:
                    return
                if not tasks:
                    status, body = client.post("/v1/tasks/next", {"max": want})
                    continue
                batch = Batch(tasks)
                results: List[dict] = []
                waiting_bytes = 0
                t0 = time.monotonic()
                while True:
                    task = batch.take()
                    if task is None:
                        break
                    result = self._run_one(task, heartbeat, batch)
                    if result is None:
                        continue
                    results.append(result)
                    waiting_bytes += len(result.get("result") or "")
                    if waiting_bytes > RESULTS_FLUSH_BYTES:
                        self._post_results(client, results, None)
                        results, waiting_bytes = [], 0
                per_task = (time.monotonic() - t0) / max(1, batch.ran)
                want = min(want * 2, MAX_BATCH) if per_task < SHORT_TASK_S and not batch.released else 1
                if self.leader is not None:
                    # A gang runs one task at a time on all its ranks. Its result is posted alone:
                    # only then may a rank's end take rank 0 down, and a broken gang asks for no more.
                    if results:
                        self._post_results(client, results, None)
                    if not self.leader.idle():
                        log("the gang cannot run another task; exiting")
                        self.gone.set()
                        return
                    status, body = client.post("/v1/tasks/next", {"max": 1})
                    continue
                status, body = self._post_results(client, results, want)
        except AgentGone as e:
            log(f"{e}; exiting")
            self.gone.set()

    def _tasks_of(self, status: int, body: Any) -> Optional[List[dict]]:
        """The tasks of an answer; [] to ask again, None when the agent takes no more from this container."""
        if status == 204:
            return []
        if status == 410:
            log("the agent takes no more tasks from this container")
            return None
        tasks = body.get("tasks") if isinstance(body, dict) else None
        if tasks is None and isinstance(body, dict) and isinstance(body.get("task"), dict):
            tasks = [body["task"]]
        if status != 200 or not isinstance(tasks, list) or not all(isinstance(t, dict) and t.get("id") for t in tasks):
            log(f"unexpected answer from the agent: {status} {body!r}")
            self.gone.wait(1.0)
            return []
        return tasks

    def _run_one(self, task: dict, heartbeat: "Heartbeat", batch: "Batch") -> Optional[dict]:
        started_at = int(time.time() * 1000)
        try:
            result = self.run_task(task, heartbeat, batch)
            if result is None:
                return None
        except Exception as e:  # noqa: BLE001 - a runner fault still ends the task
            log(f"runner fault on task {task['id']}:\n{traceback.format_exc()}")
            result = self.refused(f"the berth runner failed: {type(e).__name__}: {e}", "berth.RunnerError")
        result["id"] = str(task["id"])
        result["started_at"] = started_at
        return result

    def _post_results(self, client: BridgeClient, results: List[dict], want: Optional[int]) -> Tuple[int, Any]:
        """Posts the results; with ``want``, the same call asks for the next tasks."""
        body: Dict[str, Any] = {"results": results}
        if want is not None:
            body["next"] = {"max": want}
        status, answer = client.post("/v1/tasks/results", body)
        if status >= 300:
            log(f"the agent refused a batch of {len(results)} result(s): {status} {answer!r}")
            return status, answer
        for r in (answer or {}).get("results") or []:
            if isinstance(r, dict) and int(r.get("status") or 0) >= 300:
                log(f"the agent refused the result of task {r.get('id')}: {r.get('status')} {r.get('error')!r}")
        return status, answer

    def serve(self) -> int:
        self.capture.install()
        threads = [
            threading.Thread(target=self.worker, name=f"berth-worker-{i}", daemon=True) for i in range(self.cfg.workers)
        ]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and not self.gone.wait(0.5):
            pass
        return 1 if self.gone.is_set() else 0


class Batch:
    """The tasks the agent handed to one worker, run in order.

    When they stop being short (the batch runs past RELEASE_AFTER_S), the
    heartbeat thread gives the ones not yet started back to the agent, which
    hands them to another runner instead of letting them wait here.
    """

    def __init__(self, tasks: List[dict]):
        self.lock = threading.Lock()
        self.rest: Deque[dict] = collections.deque(tasks)
        self.release_at = time.monotonic() + RELEASE_AFTER_S
        self.ran = 0
        self.released = False

    def take(self) -> Optional[dict]:
        with self.lock:
            if not self.rest:
                return None
            self.ran += 1
            return self.rest.popleft()

    def has_rest(self) -> bool:
        with self.lock:
            return bool(self.rest)

    def release_rest(self) -> List[str]:
        with self.lock:
            ids = [str(t["id"]) for t in self.rest]
            self.rest.clear()
            self.released = self.released or bool(ids)
            return ids


class Heartbeat:
    """One long-lived thread per worker that signs of life for the task it runs.

    A thread per task would cost its start on every task of a warm container.
    It also releases the unstarted rest of a batch that runs long.
    """

    def __init__(self, client: BridgeClient):
        self.client = client
        self.cond = threading.Condition()
        self.task_id: Optional[str] = None
        self.batch: Optional[Batch] = None
        self.due = 0.0
        self.thread: Optional[threading.Thread] = None

    def begin(self, task_id: str, batch: Optional[Batch] = None) -> None:
        with self.cond:
            self.task_id = task_id
            self.batch = batch
            self.due = time.monotonic() + HEARTBEAT_INTERVAL_S
            self.cond.notify()
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="berth-heartbeat", daemon=True)
                self.thread.start()

    def end(self) -> None:
        with self.cond:
            self.task_id = None

    def _wake_at(self) -> Optional[float]:
        """Monotonic time of the next thing to do; None while no task runs."""
        if self.task_id is None:
            return None
        if self.batch is not None and self.batch.has_rest():
            return min(self.due, self.batch.release_at)
        return self.due

    def _loop(self) -> None:
        while True:
            with self.cond:
                while True:
                    wake = self._wake_at()
                    if wake is not None and time.monotonic() >= wake:
                        break
                    self.cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))
                task_id = self.task_id
                batch = self.batch
                release = batch is not None and batch.has_rest() and time.monotonic() >= batch.release_at
                if not release:
                    self.due = time.monotonic() + HEARTBEAT_INTERVAL_S
            if release and batch is not None:
                ids = batch.release_rest()
                if ids:
                    try:
                        self.client.post("/v1/tasks/release", {"ids": ids})
                    except AgentGone:
                        return
                continue
            try:
                status, _ = self.client.post(f"/v1/tasks/{task_id}/heartbeat", {})
            except AgentGone:
                return
            if status == 410:
                log(f"task {task_id} was cancelled; the agent stops this container")
                with self.cond:
                    if self.task_id == task_id:
                        self.task_id = None


def run_gang(cfg: RunnerConfig) -> Optional[int]:
    """A gang member's runner (gang.py): the exit code; None when this container is in no gang."""
    try:
        gang = GangConfig.from_env(os.environ)
    except ValueError as e:
        log(f"gang: {e}; exiting")
        return 2
    if gang is None:
        return None
    if cfg.workers > 1:
        log(f"gang: a gang runs one task at a time; BERTH_WORKERS={cfg.workers} is taken as 1")
        cfg.workers = 1
    runner = Runner(cfg)
    if gang.rank != 0:
        runner.load()
        return Follower(gang, runner).serve()
    try:
        # Listening before the handler loads: the other ranks' connections wait in the backlog meanwhile.
        srv = listen(gang, time.monotonic() + gang.connect_timeout_s)
    except OSError as e:
        log(f"gang: rank 0 cannot listen on {gang.addrs[0]}:{gang.port}: {e}; exiting")
        return 1
    runner.load()
    try:
        # Counted from here: the other ranks load the same code (an on_start may take minutes) before they connect.
        conns = accept_all(srv, gang, time.monotonic() + gang.connect_timeout_s)
    except TimeoutError as e:
        log(f"gang: {e}; exiting")
        return 1
    finally:
        srv.close()
    log(f"gang: all {gang.size} ranks connected; taking tasks")
    runner.leader = Leader(gang, conns, cfg.socket, set(cfg.retry_for))
    runner.leader.start()
    return runner.serve()


def main() -> int:
    # The runner is the container's PID 1, which the kernel shields from
    # signals without a handler: without this, a stop waits out its grace period.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    cfg = RunnerConfig.from_env(dict(os.environ))
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    # Queue, Map and Signal of the user's module go through the agent's socket.
    install_state_transport()
    # The workspace's databases at the 127.0.0.1 ports their URLs name (docs/databases.md).
    forward_databases()
    code = run_gang(cfg)
    if code is None:
        runner = Runner(cfg)
        runner.load()
        code = runner.serve()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        # Worker threads may sit in user code; leave without waiting for them.
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
