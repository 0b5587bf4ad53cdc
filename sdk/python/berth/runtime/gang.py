"""Gang mode of the runner: one task run by every rank of a gang at once (shared/gang.ts).

Why it exists: a gang (``@function(nodes=N)``) is N containers on N hosts
that run each task together (torch.distributed over the gang's network).
The agent hands tasks to one runner per container, but the task belongs to
the gang, so only rank 0 takes tasks from its agent. It hands each one (id
and pickled arguments) to the other ranks over the gang's control connection
(gang_wire.py), runs its own call meanwhile, and reports one outcome:

- rank 0's result when every rank ended without an exception;
- "gang rank K failed: <type>: <message>" when rank K raised;
- "gang rank K ended while the task ran ..." when rank K's connection closed;
  rank 0 then exits, which ends the gang (the coordinator stops the rest).

Ranks still running a task that has failed elsewhere get ``grace_s`` to end:
they are likely waiting in a collective on a rank that gave up, so rank 0
exits (after reporting) rather than hand the next task to a stuck gang.
The other ranks never ask their agent for tasks and exit when rank 0 goes.
"""

import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, Set, Tuple

from .. import serialize
from .bridge import AgentGone, BridgeClient
from .capture import Capture
from .gang_wire import Conn, GangClosed, GangConfig, connect, cut, log

ERROR_TYPE = "berth.GangError"
# The task fields a follower needs besides the arguments (its Context and the JSON-payload choice).
TASK_FIELDS = ("id", "attempt", "timeout", "callback_url", "payload_format")


def exit_now(code: int) -> None:
    """Leaves at once: the worker thread may be inside user code that never returns."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass
    os._exit(code)


class Round:
    """One task as the gang runs it: which ranks still run it and how it went for them."""

    def __init__(self, task_id: str, ranks: Set[int]):
        self.task_id = task_id
        self.started_at = int(time.time() * 1000)
        self.waiting = set(ranks)
        self.failure: Optional[Tuple[int, dict]] = None  # the first rank that raised, and its error
        self.failed_at: Optional[float] = None
        self.closed: Optional[int] = None  # the first rank whose connection closed
        self.own_done = False
        # Set by whoever reports the task's outcome: the worker, or a reader thread while rank 0's call still runs.
        self.claimed = False


class Leader:
    """Rank 0's side: hands tasks to the followers and folds their outcomes into the task's."""

    def __init__(self, cfg: GangConfig, conns: Dict[int, Conn], socket_path: str, retry_for: Set[str]):
        self.cfg = cfg
        self.conns = conns
        self.retry_for = retry_for
        self.cond = threading.Condition()
        self.current: Optional[Round] = None
        self.dead: Set[int] = set()
        # True once the gang cannot run another task: the worker reports what it has and the runner exits.
        self.broken = False
        # From handing out a task until its result is posted: a rank that ends meanwhile must not
        # take the result down with rank 0; the worker exits once it is posted.
        self.busy = False
        # Reader threads post follower output and, while rank 0's call still runs, a failed outcome.
        self.client = BridgeClient(socket_path, timeout=30.0, gone_after_s=5.0)
        self.client_lock = threading.Lock()
        self.exit = exit_now

    def start(self) -> None:
        for rank, conn in self.conns.items():
            threading.Thread(target=self._read, args=(rank, conn), name=f"berth-gang-{rank}", daemon=True).start()

    # ---- the worker's side ----

    def run(self, task: dict, own: Callable[[], dict]) -> Optional[dict]:
        """The task's result; None when a reader thread already reported it."""
        task_id = str(task.get("id"))
        rnd = Round(task_id, set(self.conns))
        with self.cond:
            self.busy = True
            if self.dead:
                self.broken = True
                return self.closed_failure(min(self.dead))
            self.current = rnd
        header = {k: task.get(k) for k in TASK_FIELDS if task.get(k) is not None}
        header["t"] = "task"
        header["id"] = task_id
        try:
            payload = serialize.unb64(task.get("args") or "")
        except ValueError:
            payload = b""  # rank 0's own call fails on them the same way, and its failure is reported
        for rank, conn in self.conns.items():
            try:
                conn.send(header, payload)
            except GangClosed:
                with self.cond:
                    self.current = None
                    self.broken = True
                return self.closed_failure(rank)
        try:
            result = own()
        except BaseException:
            # A fault of the runner itself: the ranks may still run the task, so the gang cannot go on.
            with self.cond:
                rnd.own_done = rnd.claimed = True
                self.current = None
                self.broken = True
                self.cond.notify_all()
            raise
        return self._finish(rnd, result)

    def idle(self) -> bool:
        """The worker has posted the task's result: False when the gang cannot run another task."""
        with self.cond:
            self.busy = False
            self.broken = self.broken or bool(self.dead)
            return not self.broken

    def _finish(self, rnd: Round, result: dict) -> Optional[dict]:
        own_failed = result.get("status") != "COMPLETE"
        with self.cond:
            rnd.own_done = True
            self.cond.notify_all()
            if own_failed and rnd.failed_at is None:
                rnd.failed_at = time.monotonic()
            # Once the task has failed anywhere, the rest get grace_s; while all goes well, no bound
            # (the task's timeout is the agent's to enforce).
            while rnd.waiting and rnd.closed is None:
                if rnd.failed_at is None:
                    self.cond.wait()
                    continue
                left = rnd.failed_at + self.cfg.grace_s - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            self.current = None
            reported = rnd.claimed
            rnd.claimed = True
            if rnd.closed is not None:
                self.broken = True
            elif rnd.waiting:
                self.broken = True
                log(
                    f"rank(s) {', '.join(map(str, sorted(rnd.waiting)))} still run task {rnd.task_id} "
                    f"{self.cfg.grace_s:g} s after it failed; ending the gang"
                )
            if self.dead:
                self.broken = True
        if reported:
            return None
        if rnd.closed is not None:
            return self.closed_failure(rnd.closed)
        if own_failed or rnd.failure is None:
            return result
        return self.rank_failure(*rnd.failure)

    # ---- outcomes ----

    def rank_failure(self, rank: int, error: dict) -> dict:
        etype, message = str(error.get("type") or "Exception"), str(error.get("message") or "")
        short = etype.rsplit(".", 1)[-1]
        return {
            "status": "FAILED",
            "error": {
                "type": ERROR_TYPE,
                "message": f"gang rank {rank} failed: {etype}: {message}",
                "traceback": str(error.get("traceback") or ""),
            },
            # A follower sends its exception's name, not the class: retry_for matches the name.
            "retry": etype in self.retry_for or short in self.retry_for,
        }

    @staticmethod
    def closed_failure(rank: int) -> dict:
        return {
            "status": "FAILED",
            "error": {
                "type": ERROR_TYPE,
                "message": f"gang rank {rank} ended while the task ran (its connection to rank 0 closed)",
                "traceback": "",
            },
            "retry": False,
        }

    # ---- the reader threads ----

    def _read(self, rank: int, conn: Conn) -> None:
        while True:
            try:
                header, payload = conn.recv()
            except GangClosed as e:
                log(f"rank {rank}'s connection closed: {e}")
                self._lost(rank)
                return
            kind = header.get("t")
            if kind == "output":
                self._output(rank, header, payload)
            elif kind == "done":
                self._done(rank, header)
            else:
                log(f"rank {rank} sent an unknown message {kind!r}")

    def _output(self, rank: int, header: dict, payload: bytes) -> None:
        data = payload.decode("utf-8", "replace")
        with self.client_lock:
            try:
                self.client.post(f"/v1/tasks/{header.get('id')}/output", {"stream": header.get("stream"), "data": data})
            except AgentGone:
                pass

    def _done(self, rank: int, header: dict) -> None:
        claim = None
        with self.cond:
            rnd = self.current
            if rnd is None or rnd.task_id != header.get("id") or rank not in rnd.waiting:
                return
            rnd.waiting.discard(rank)
            if not header.get("ok"):
                if rnd.failure is None:
                    rnd.failure = (rank, header.get("error") if isinstance(header.get("error"), dict) else {})
                if rnd.failed_at is None:
                    rnd.failed_at = time.monotonic()
                if not rnd.own_done and not rnd.claimed:
                    rnd.claimed = True
                    claim = rnd
            self.cond.notify_all()
        if claim is not None:
            # Rank 0's own call may wait on the failed rank forever: report now, not when it returns.
            self._report(claim, self.rank_failure(*claim.failure))  # type: ignore[misc]
            threading.Thread(target=self._await_own, args=(claim,), name="berth-gang-grace", daemon=True).start()

    def _lost(self, rank: int) -> None:
        claim = None
        with self.cond:
            self.dead.add(rank)
            self.broken = True
            rnd = self.current
            if rnd is not None and rank in rnd.waiting:
                rnd.waiting.discard(rank)
                if rnd.closed is None:
                    rnd.closed = rank
                if not rnd.own_done and not rnd.claimed:
                    rnd.claimed = True
                    claim = rnd
            idle = not self.busy
            self.cond.notify_all()
        if idle:
            log(f"rank {rank} ended between tasks; ending the gang")
            self.exit(1)
        elif claim is not None:
            self._report(claim, self.closed_failure(rank))
            log(f"rank {rank} ended while task {claim.task_id} ran; ending the gang")
            self.exit(1)
        # Otherwise the worker sees the closed rank when rank 0's own call returns (or once it has
        # posted the result), reports and exits.

    def _await_own(self, rnd: Round) -> None:
        """After a reported failure: rank 0's own call has grace_s to return, or the gang is stuck."""
        deadline = time.monotonic() + self.cfg.grace_s
        with self.cond:
            while not rnd.own_done:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            if rnd.own_done:
                return
        log(f"rank 0 still runs task {rnd.task_id} {self.cfg.grace_s:g} s after it failed; ending the gang")
        self.exit(1)

    def _report(self, rnd: Round, result: dict) -> None:
        body = {**result, "id": rnd.task_id, "started_at": rnd.started_at}
        with self.client_lock:
            try:
                status, answer = self.client.post("/v1/tasks/results", {"results": [body]})
            except AgentGone:
                return
        if status >= 300:
            log(f"the agent refused the result of task {rnd.task_id}: {status} {answer!r}")


class Follower:
    """A rank ≥ 1: runs the tasks rank 0 hands it with the runner's own call, and answers ok or the error."""

    def __init__(self, cfg: GangConfig, runner: Any):
        self.cfg = cfg
        self.runner = runner
        self.conn: Optional[Conn] = None
        self.line_start = {"stdout": True, "stderr": True}

    def serve(self) -> int:
        try:
            self.conn = connect(self.cfg)
        except TimeoutError as e:
            log(str(e))
            return 1
        # Its output goes to its own log and, through rank 0, to the caller; rank 0 posts it.
        self.runner.capture = Capture(self._send_output)
        self.runner.capture.install()
        log(f"rank {self.cfg.rank} of {self.cfg.size} connected to rank 0")
        while True:
            try:
                header, payload = self.conn.recv()
            except GangClosed as e:
                log(f"rank 0's connection closed ({e}); exiting")
                return 1
            if header.get("t") != "task":
                log(f"rank 0 sent an unknown message {header.get('t')!r}")
                continue
            try:
                self.conn.send(self.run(header, payload))
            except GangClosed as e:
                log(f"rank 0's connection closed ({e}); exiting")
                return 1

    def run(self, header: dict, payload: bytes) -> dict:
        task = {k: header[k] for k in TASK_FIELDS if k in header}
        task["args"] = serialize.b64(payload)
        task_id = str(task.get("id"))
        os.environ["BERTH_TASK_ID"] = task_id
        os.environ["BERTH_TASK_ATTEMPT"] = str(task.get("attempt", 1))
        out = self.runner.capture.start(task_id)
        try:
            ok, outcome = self.runner.invoke(task)
        except Exception as e:  # noqa: BLE001 - a runner fault still answers rank 0
            error = {"type": "berth.RunnerError", "message": f"the berth runner failed: {type(e).__name__}: {e}"}
            ok, outcome = False, {"error": error}
        finally:
            self.runner.capture.finish(out)
        if ok:
            return {"t": "done", "id": task_id, "ok": True}
        error = outcome.get("error") or {}
        return {
            "t": "done",
            "id": task_id,
            "ok": False,
            "error": {k: cut(error.get(k)) for k in ("type", "message", "traceback")},
        }

    def _send_output(self, task_id: str, stream: str, data: str) -> None:
        """Each line marked with the rank, so the caller can tell the ranks' output apart."""
        prefix = f"[rank {self.cfg.rank}] "
        lines = data.split("\n")
        starts = [self.line_start[stream]] + [True] * (len(lines) - 1)
        marked = [(prefix if start and line else "") + line for start, line in zip(starts, lines)]
        self.line_start[stream] = data.endswith("\n")
        if self.conn is not None:
            self.conn.send({"t": "output", "id": task_id, "stream": stream}, "\n".join(marked).encode())
