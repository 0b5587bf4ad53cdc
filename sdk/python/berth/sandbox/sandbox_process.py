"""Processes in a sandbox: exec, their output streams, status, wait, kill (docs/sandboxes.md).

A process is held by the agent that runs the sandbox, so any coordinator
answers for it; ``pid`` is a small integer per sandbox. Its output is read
from the agent's bounded buffer by byte offset, so a stream resumes where it
stopped: a connection that breaks mid-stream (its coordinator died) is
reopened at the same offset, and a wait that breaks is asked again, through
the same URL (behind a load balancer, another coordinator), for up to
UNAVAILABLE_WAIT_S while no coordinator can be reached.
"""

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..client.unreachable import Unreachable
from ..errors import BerthError, SandboxProcessError
from .sandbox_api import CHUNK, q, query

if TYPE_CHECKING:
    from .sandbox import SandboxInstance

STREAMS = ("stdout", "stderr", "combined")
# The frames of POST .../processes/run (coordinator/sandboxes/process-run.ts).
FRAME_STARTED, FRAME_STDOUT, FRAME_STDERR, FRAME_EXIT = 0x50, 0x4F, 0x45, 0x58
MAX_FRAME = 1 << 20
# Bytes of each stream the SDK keeps from a run's stream, as the agent keeps them: older ones are dropped.
RUN_KEEP_BYTES = 1 << 20
# Codes that mean "this coordinator or agent cannot run in one call": exec falls back to three calls.
_NO_RUN_ROUTE = ("route_not_found", "not_implemented")
# A wait is asked for in slices so no proxy sees a request idle for minutes.
WAIT_SLICE_S = 30


def unreachable(e: BaseException) -> bool:
    """The coordinator could not be reached or broke off (it died), as opposed to an answer refusing the call."""
    if isinstance(e, (OSError, http.client.HTTPException)):
        return True
    return isinstance(e, BerthError) and (e.code == "unavailable" or e.status in (502, 503, 504))


class _RunBuffer:
    """One stream's bytes from a run: the last RUN_KEEP_BYTES of them, by absolute offset."""

    def __init__(self) -> None:
        self.start = 0
        self.data = bytearray()

    def append(self, b: bytes) -> None:
        self.data += b
        over = len(self.data) - RUN_KEEP_BYTES
        if over > 0:
            del self.data[:over]
            self.start += over

    def take(self, offset: int) -> Tuple[int, bytes]:
        """(where the bytes begin, the bytes from ``offset`` on); offsets trimmed away begin at ``start``."""
        at = max(offset, self.start)
        return at, bytes(self.data[at - self.start :])


class _Run:
    """The stream of one ``exec`` in one round trip: the process's output and exit, read as the caller needs them.

    It ends with the exit frame; a stream cut off before it (the coordinator died) is ``broken``, and
    the process's streams and wait go on through the ordinary routes from the offsets reached.
    """

    def __init__(self, api: Any, conn: Any, resp: http.client.HTTPResponse):
        self.api = api
        self.conn = conn
        self.resp = resp
        self.buffers = {s: _RunBuffer() for s in STREAMS}
        self.exit: Optional[Tuple[int, str]] = None
        self.broken = False
        # A reader of stdout and a wait() in other threads pump the one response: a frame is read whole by one.
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self.exit is None and not self.broken

    def _read_exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            part = self.resp.read(n - len(out))
            if not part:
                raise EOFError("the run's stream ended")
            out += part
        return out

    def read_frame(self) -> Tuple[int, bytes]:
        header = self._read_exact(5)
        size = int.from_bytes(header[1:5], "big")
        if size > MAX_FRAME:
            raise EOFError(f"a frame of {size} bytes is over the {MAX_FRAME} limit")
        return header[0], self._read_exact(size)

    def started(self) -> Dict[str, Any]:
        """The first frame: the process as the coordinator answers it (pid, args, ...)."""
        kind, payload = self.read_frame()
        if kind != FRAME_STARTED:
            raise BerthError("internal", f"the run's stream began with frame {kind:#x}, not the process")
        return json.loads(payload)

    def pump(self) -> bool:
        """Reads one frame; False once the run has ended or broke off. Safe from several threads."""
        with self._lock:
            if not self.open:
                return False
            try:
                kind, payload = self.read_frame()
            except (OSError, EOFError, http.client.HTTPException):
                self.broken = True
                self.close()
                return False
            if kind in (FRAME_STDOUT, FRAME_STDERR):
                self.buffers["stdout" if kind == FRAME_STDOUT else "stderr"].append(payload)
                self.buffers["combined"].append(payload)
            elif kind == FRAME_EXIT:
                r = json.loads(payload)
                self.exit = (exit_code_of(r), str(r.get("status", "")))
                # The answer is read to its last frame: its connection serves the next exec.
                self.api.keep_raw(self.conn, self.resp)
            return True

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass


class SandboxProcessStream:
    """One output stream of a process: iterable by line (each with its newline), ``read()`` for the rest.

    Both block until the process ends. Text is UTF-8 (undecodable bytes are replaced).
    """

    def __init__(self, process: "SandboxProcess", stream: str):
        self.process = process
        self.stream = stream
        # Bytes taken from the coordinator so far; the next request starts here.
        self.offset = 0
        # Received but not yet handed out (a partial line while iterating).
        self._pending = b""
        # Bytes the coordinator no longer held when asked for them (its buffer keeps the last 1 MiB).
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<SandboxProcessStream {self.stream} of pid {self.process.pid} at {self.offset}>"

    def _run_chunks(self) -> Iterator[bytes]:
        """What the exec's own stream brings (one round trip); stops early when it broke off."""
        run = self.process._run
        if run is None:
            return
        buf = run.buffers[self.stream]
        while True:
            at, data = buf.take(self.offset)
            if at > self.offset:
                self.dropped += at - self.offset
                self.offset = at
            if data:
                self.offset += len(data)
                yield data
                continue
            if not run.pump():
                return

    def _chunks(self) -> Iterator[bytes]:
        """Raw bytes from ``offset`` until the process ends, reconnecting at the offset when a connection breaks."""
        run = self.process._run
        if run is not None:
            yield from self._run_chunks()
            if run.exit is not None:
                return
        sb = self.process.sandbox
        broken = Unreachable()
        what = f"the {self.stream} stream of pid {self.process.pid}"
        while True:
            route = (
                f"/sandboxes/{q(sb.container_id)}/processes/{self.process.pid}/output?"
                + query(stream=self.stream, offset=self.offset, follow="true")
            )
            try:
                conn, resp = sb.api.open_raw(route, self.process.context(), None)
            except (OSError, http.client.HTTPException, BerthError) as e:
                if not unreachable(e):
                    raise
                broken.pause_or_raise(e, what)
                continue
            try:
                start = resp.getheader("X-Output-Start")
                if start is not None and start.isdigit() and int(start) > self.offset:
                    self.dropped += int(start) - self.offset
                    self.offset = int(start)
                while True:
                    block = resp.read1(CHUNK)
                    if not block:
                        return
                    broken.reset()
                    self.offset += len(block)
                    yield block
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                broken.pause_or_raise(e, what)
            finally:
                conn.close()

    def __iter__(self) -> Iterator[str]:
        with self.process.sandbox.watch():
            yield from self._lines()

    def _lines(self) -> Iterator[str]:
        for block in self._chunks():
            self._pending += block
            while True:
                nl = self._pending.find(b"\n")
                if nl < 0:
                    break
                line, self._pending = self._pending[: nl + 1], self._pending[nl + 1 :]
                yield line.decode("utf-8", "replace")
        if self._pending:
            line, self._pending = self._pending, b""
            yield line.decode("utf-8", "replace")

    def read(self) -> str:
        """All remaining output, once the process has ended."""
        with self.process.sandbox.watch():
            parts = [self._pending]
            self._pending = b""
            parts.extend(self._chunks())
        return b"".join(parts).decode("utf-8", "replace")


class SandboxProcess:
    """A process running (or run) in the sandbox."""

    def __init__(
        self, sandbox: "SandboxInstance", pid: int, info: Optional[Dict[str, Any]] = None, run: Optional[_Run] = None
    ):
        self.sandbox = sandbox
        self.pid = pid
        # The exec's own stream (one round trip), while it lasts.
        self._run = run
        info = info or {}
        self.args: List[str] = list(info.get("args") or [])
        self.cwd: Optional[str] = info.get("cwd")
        self.started_at: Optional[str] = info.get("started_at")
        self.stdout = SandboxProcessStream(self, "stdout")
        self.stderr = SandboxProcessStream(self, "stderr")
        # Combined stdout and stderr, in the order they were written.
        self.logs = SandboxProcessStream(self, "combined")

    def __repr__(self) -> str:
        return f"<SandboxProcess pid={self.pid} {self.args!r}>"

    def context(self) -> Dict[str, Any]:
        return {"sandbox_id": self.sandbox.container_id, "pid": self.pid}

    def _route(self, tail: str = "") -> str:
        return f"/sandboxes/{q(self.sandbox.container_id)}/processes/{self.pid}{tail}"

    def status(self):
        """``(exit_code, status)``; exit_code is -1 while the process runs."""
        r = self.sandbox.call("GET", self._route(), context=self.context())
        return exit_code_of(r), str(r.get("status", ""))

    def wait(self, timeout: Optional[float] = None) -> int:
        """Blocks until the process ends and returns its exit code (-1 if ``timeout`` seconds pass first).

        A wait whose coordinator dies is asked again (another coordinator answers behind a load
        balancer) for up to UNAVAILABLE_WAIT_S; the process runs on meanwhile, held by its agent.
        """
        run = self._run
        if run is not None and timeout is None:
            # The exit comes on the exec's own stream after the output, which is kept for the streams to read.
            with self.sandbox.watch():
                while run.pump():
                    pass
            if run.exit is not None:
                return run.exit[0]
        deadline = None if timeout is None else time.monotonic() + timeout
        broken = Unreachable()
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            slice_s = WAIT_SLICE_S if remaining is None else max(0.0, min(WAIT_SLICE_S, remaining))
            try:
                r = self.sandbox.call(
                    "POST",
                    self._route("/wait"),
                    {"timeout_seconds": slice_s},
                    context=self.context(),
                    timeout=self.sandbox.api.timeout + slice_s,
                )
            except BerthError as e:
                if not unreachable(e):
                    raise
                broken.pause_or_raise(e, f"the wait for pid {self.pid}")
                continue
            broken.reset()
            code = exit_code_of(r)
            if code != -1:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                return -1

    def kill(self, signal: Optional[str] = None) -> bool:
        """Sends ``signal`` (a name such as "SIGTERM"; SIGKILL by default)."""
        body = {} if signal is None else {"signal": str(signal)}
        r = self.sandbox.call("POST", self._route("/kill"), body, context=self.context())
        return bool(r.get("killed", True))

    def write_stdin(self, data: Any, eof: bool = False) -> int:
        """Writes to the process's stdin (str as UTF-8); ``eof=True`` closes it afterwards."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        route = self._route("/stdin") + ("?eof=true" if eof else "")
        r = self.sandbox.send_bytes("POST", route, raw, context=self.context())
        return int(r.get("written", len(raw)))


def exit_code_of(r: Dict[str, Any]) -> int:
    code = r.get("exit_code")
    return -1 if code is None else int(code)


@dataclass
class SandboxProcessResponse:
    """What a blocking ``run_code`` returns: ``result`` is the code's stdout."""

    pid: int
    exit_code: int
    result: str
    stderr: str


class SandboxProcessManager:
    """``sandbox.process``: runs commands and finds the processes the sandbox's agent holds."""

    def __init__(self, sandbox: "SandboxInstance"):
        self.sandbox = sandbox

    def exec(self, *args: str, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> SandboxProcess:
        """Starts ``args`` (the program and its arguments) and returns at once.

        One request: its answer streams the process's output and exit code, which ``wait()`` and the
        streams read (a coordinator without that route gets three requests instead).
        """
        argv = check_args(args)
        body: Dict[str, Any] = {"args": argv}
        if cwd is not None:
            if not isinstance(cwd, str) or not cwd:
                raise ValueError(f"cwd must be a sandbox path, not {cwd!r}")
            body["cwd"] = cwd
        if env is not None:
            if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                raise ValueError("env must be a dict of strings to strings")
            body["env"] = dict(env)
        sid = self.sandbox.container_id
        context = {"sandbox_id": sid, "path": cwd}
        if self.sandbox.api.run_route:
            with self.sandbox.watch():
                try:
                    conn, resp = self.sandbox.api.open_raw(
                        f"/sandboxes/{q(sid)}/processes/run", context, None, method="POST", body=body, reuse=True
                    )
                except BerthError as e:
                    if e.code not in _NO_RUN_ROUTE:
                        raise
                    self.sandbox.api.run_route = False
                else:
                    run = _Run(self.sandbox.api, conn, resp)
                    try:
                        info = run.started()
                    except BaseException:
                        run.close()
                        raise
                    return SandboxProcess(self.sandbox, int(info["pid"]), {"args": argv, "cwd": cwd}, run)
        r = self.sandbox.call("POST", f"/sandboxes/{q(sid)}/processes", body, context={"sandbox_id": sid, "path": cwd})
        pid = r.get("pid")
        if not isinstance(pid, int):
            raise BerthError("internal", "the coordinator's answer to exec has no pid")
        return SandboxProcess(self.sandbox, pid, {"args": argv, "cwd": cwd})

    def get_process(self, pid: int) -> SandboxProcess:
        """The process with this pid; SandboxProcessError when the sandbox has none."""
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
            raise SandboxProcessError("process_not_found", f"{pid!r} is not a pid (pids are 1, 2, ...)", pid=None)
        sid = self.sandbox.container_id
        r = self.sandbox.call("GET", f"/sandboxes/{q(sid)}/processes/{pid}", context={"sandbox_id": sid, "pid": pid})
        return SandboxProcess(self.sandbox, pid, r)

    def list_processes(self) -> Dict[int, SandboxProcess]:
        """Every process the sandbox's agent holds for it, by pid."""
        sid = self.sandbox.container_id
        r = self.sandbox.call("GET", f"/sandboxes/{q(sid)}/processes", context={"sandbox_id": sid})
        out: Dict[int, SandboxProcess] = {}
        for p in r.get("processes") or []:
            out[int(p["pid"])] = SandboxProcess(self.sandbox, int(p["pid"]), p)
        return out

    def run_code(
        self, code: str, blocking: bool = True, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None
    ) -> Any:
        """``python3 -c code``: a SandboxProcessResponse once it ends (blocking), else the SandboxProcess."""
        if not isinstance(code, str):
            raise ValueError(f"code must be a string of Python, not {type(code).__name__}")
        process = self.exec("python3", "-c", code, cwd=cwd, env=env)
        if not blocking:
            return process
        exit_code = process.wait()
        return SandboxProcessResponse(
            pid=process.pid, exit_code=exit_code, result=process.stdout.read(), stderr=process.stderr.read()
        )


def check_args(args: Sequence[Any]) -> List[str]:
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])  # exec(["ls", "-l"]) as well as exec("ls", "-l")
    if not args:
        raise ValueError("exec needs a program to run, e.g. exec('python3', '-c', 'print(1)')")
    for a in args:
        if not isinstance(a, str):
            raise ValueError(f"exec arguments are strings; got {a!r}")
    if not args[0]:
        raise ValueError("exec's program name is empty")
    return list(args)
