"""Submitting tasks and reading their NDJSON stream: ``.remote()`` and ``.map()``.

A ``.map()`` sends its inputs in chunks (one request per chunk, a few in
flight on their own kept-alive connections) and yields results in input
order as they come. Closing the generator closes the connections; the
coordinator then cancels the unfinished tasks that are not headless.
"""

import http.client
import json
import queue
import threading
import time
from typing import IO, Any, Dict, Iterable, Iterator, List, Optional, Tuple
from urllib.parse import quote

from .. import serialize
from ..errors import BerthError
from . import outcome
from .http import HttpConnection, read_json
from .tasks import Task
from .unreachable import Unreachable

CHUNK_SIZE = 1000
# Base64 bytes of inputs per request: well under the coordinator's 64 MiB body limit.
MAX_CHUNK_BYTES = 32 * 1024 * 1024
PARALLEL_REQUESTS = 4

# (status, result b64, TaskError) of one task, or the exception that stands for it.
Raw = Tuple[str, str, Optional[str], Optional[dict]]


class Printer:
    """Writes what tasks print to the caller's streams, one piece at a time."""

    def __init__(self, out: IO[str], err: IO[str]):
        self.out = out
        self.err = err
        self.lock = threading.Lock()

    def write(self, event: dict) -> None:
        data = event.get("data")
        if not isinstance(data, str) or not data:
            return
        target = self.err if event.get("stream") == "stderr" else self.out
        with self.lock:
            try:
                target.write(data)
                target.flush()
            except (OSError, ValueError):
                pass  # the caller's stream is closed: output is best effort


def tasks_path(stub_id: str) -> str:
    return f"/api/v1/gateway/stubs/{quote(stub_id, safe='')}/tasks"


def events(resp: http.client.HTTPResponse, base_url: str) -> Iterator[dict]:
    """The NDJSON objects of a submission's answer; a plain JSON answer is checked and ends it."""
    ctype = resp.getheader("Content-Type", "")
    if resp.status != 200 or "ndjson" not in ctype:
        body = read_json(resp, base_url)
        raise BerthError("internal", f"the coordinator answered a streamed submission with {json.dumps(body)[:200]}")
    while True:
        try:
            line = resp.readline()
        except (OSError, http.client.HTTPException) as e:
            raise BerthError("unavailable", f"the task stream from {base_url} broke: {e}") from None
        if not line:
            return
        line = line.strip()
        if not line:
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            raise BerthError("internal", f"the coordinator sent a line that is not JSON: {line[:200]!r}") from None
        if ev.get("event") == "error":
            err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
            raise BerthError(err.get("code", "internal"), err.get("message", "the submission failed"))
        yield ev


def wait_raw(client, task_id: str) -> Raw:
    """Asks for a task's end by id (after its stream broke off), for up to UNAVAILABLE_WAIT_S unreachable."""
    broken = Unreachable(pause=(1.0, 1.0))
    while True:
        try:
            r = Task(client, task_id)._result_once(25)
        except BerthError as e:
            if e.code != "unavailable":
                raise
            broken.pause_or_raise(e, f"task {task_id}")
            continue
        broken.reset()
        status = r.get("status", "")
        if status in outcome.TERMINAL:
            return task_id, status, r.get("result"), r.get("error")


def broke_off(e: Optional[BaseException]) -> bool:
    """No failure, or the stream from the coordinator broke (it died): tasks it named are asked for by id."""
    return e is None or (isinstance(e, BerthError) and e.code == "unavailable")


def submit_body(inputs: List[str], headless: bool) -> dict:
    return {"inputs": inputs, "headless": headless, "stream": True}


def run_one(client, conn: HttpConnection, stub_id: str, payload: bytes, headless: bool, printer: Printer) -> Any:
    """One task: prints its output as it comes, returns its value or raises its failure."""
    resp = client.stream(conn, tasks_path(stub_id), submit_body([serialize.b64(payload)], headless))
    task_id = ""
    final: Optional[Raw] = None
    clean = False
    try:
        for ev in events(resp, client.url):
            kind = ev.get("event")
            if kind == "task":
                task_id = ev.get("task_id", task_id)
            elif kind == "output":
                printer.write(ev)
            elif kind == "result":
                final = (ev.get("task_id", task_id), ev.get("status", ""), ev.get("result"), ev.get("error"))
        clean = not resp.will_close
    except BerthError as e:
        # The task is accepted once named: its end is asked for by id (another coordinator answers).
        if not (task_id and broke_off(e)):
            raise
    finally:
        if not clean:
            conn.close()
    if final is None:
        if not task_id:
            raise BerthError("unavailable", "the coordinator ended the task stream before naming the task")
        final = wait_raw(client, task_id)
    return outcome.decode(*final)


class _MapState:
    def __init__(self):
        self.cond = threading.Condition()
        self.done: Dict[int, Any] = {}
        self.jobs: "queue.Queue[Optional[Tuple[int, List[str]]]]" = queue.Queue()
        self.conns: List[HttpConnection] = []
        self.stopped = False

    def put(self, index: int, value: Any) -> None:
        with self.cond:
            self.done[index] = value
            self.cond.notify_all()

    def take(self, index: int) -> Any:
        with self.cond:
            while index not in self.done:
                self.cond.wait(1.0)
            return self.done.pop(index)


class MapRun:
    def __init__(self, client, stub_id: str, headless: bool, printer: Printer, what: str):
        self.client = client
        self.stub_id = stub_id
        self.headless = headless
        self.printer = printer
        self.what = what
        self.state = _MapState()
        self.threads: List[threading.Thread] = []

    def _worker(self) -> None:
        conn = self.client.new_connection(timeout=None)
        with self.state.cond:
            self.state.conns.append(conn)
        try:
            while True:
                job = self.state.jobs.get()
                if job is None or self.state.stopped:
                    return
                self._chunk(conn, *job)
        finally:
            conn.close()

    def _chunk(self, conn: HttpConnection, base: int, inputs: List[str]) -> None:
        ids: Dict[int, str] = {}
        got = set()
        clean = False
        failure: Optional[BaseException] = None
        try:
            resp = self.client.stream(conn, tasks_path(self.stub_id), submit_body(inputs, self.headless))
            for ev in events(resp, self.client.url):
                if self.state.stopped:
                    return
                kind = ev.get("event")
                idx = ev.get("index")
                if not isinstance(idx, int) or not 0 <= idx < len(inputs):
                    continue
                if kind == "task":
                    ids[idx] = ev.get("task_id", "")
                elif kind == "output":
                    self.printer.write(ev)
                elif kind == "result":
                    got.add(idx)
                    raw = (ev.get("task_id", ids.get(idx, "")), ev.get("status", ""), ev.get("result"), ev.get("error"))
                    self.state.put(base + idx, raw)
            clean = not resp.will_close
        except BaseException as e:  # noqa: BLE001 - every input of the chunk must get an outcome
            failure = e
        finally:
            if not clean:
                conn.close()
        if self.state.stopped:
            return
        for idx in range(len(inputs)):
            if idx in got:
                continue
            if broke_off(failure) and ids.get(idx):
                try:
                    self.state.put(base + idx, wait_raw(self.client, ids[idx]))
                    continue
                except BaseException as e:  # noqa: BLE001
                    failure = e
            self.state.put(base + idx, failure or BerthError("unavailable", "the task stream ended early"))

    def _submit(self, base: int, inputs: List[str]) -> None:
        self.state.jobs.put((base, inputs))
        if len(self.threads) < PARALLEL_REQUESTS:
            t = threading.Thread(target=self._worker, name=f"berth-map-{len(self.threads)}", daemon=True)
            t.start()
            self.threads.append(t)

    def _close(self) -> None:
        with self.state.cond:
            self.state.stopped = True
            conns = list(self.state.conns)
        for conn in conns:
            conn.abort()
        for _ in self.threads:
            self.state.jobs.put(None)
        # Daemon threads: one still inside a result request finishes on its own.
        deadline = time.monotonic() + 2.0
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def _next_chunk(self, it: Iterator[Any], base: int) -> Tuple[List[str], bool]:
        """Up to CHUNK_SIZE pickled items (and under the request size limit); True when the items ran out."""
        chunk: List[str] = []
        size = 0
        while len(chunk) < CHUNK_SIZE and size < MAX_CHUNK_BYTES:
            try:
                item = next(it)
            except StopIteration:
                return chunk, True
            index = base + len(chunk)
            try:
                data = serialize.b64(serialize.dump_args((item,), {}, what=f"item {index} of {self.what}"))
            except Exception as e:
                # Raised in its turn: the items before it still run and are yielded first.
                self.state.put(index, e)
                return chunk, True
            chunk.append(data)
            size += len(data)
        return chunk, False

    def results(self, iterable: Iterable[Any]) -> Iterator[Any]:
        it = iter(iterable)
        total: Optional[int] = None
        submitted = 0
        next_index = 0
        try:
            while True:
                while total is None and self.state.jobs.qsize() < PARALLEL_REQUESTS:
                    chunk, ended = self._next_chunk(it, submitted)
                    if chunk:
                        self._submit(submitted, chunk)
                        submitted += len(chunk)
                    if ended:
                        # An item that failed to pickle holds the index after the last one sent.
                        total = submitted + (1 if submitted in self.state.done else 0)
                if total is not None and next_index >= total:
                    return
                raw = self.state.take(next_index)
                next_index += 1
                if isinstance(raw, BaseException):
                    raise raw
                yield outcome.decode(*raw)
        finally:
            self._close()
