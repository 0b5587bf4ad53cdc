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
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence

from ..client.unreachable import Unreachable
from ..errors import BerthError, SandboxProcessError
from .sandbox_api import CHUNK, q, query

if TYPE_CHECKING:
    from .sandbox import SandboxInstance

STREAMS = ("stdout", "stderr", "combined")
# A wait is asked for in slices so no proxy sees a request idle for minutes.
WAIT_SLICE_S = 30


def unreachable(e: BaseException) -> bool:
    """The coordinator could not be reached or broke off (it died), as opposed to an answer refusing the call."""
    if isinstance(e, (OSError, http.client.HTTPException)):
        return True
    return isinstance(e, BerthError) and (e.code == "unavailable" or e.status in (502, 503, 504))


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

    def _chunks(self) -> Iterator[bytes]:
        """Raw bytes from ``offset`` until the process ends, reconnecting at the offset when a connection breaks."""
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

    def __init__(self, sandbox: "SandboxInstance", pid: int, info: Optional[Dict[str, Any]] = None):
        self.sandbox = sandbox
        self.pid = pid
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
        """Starts ``args`` (the program and its arguments) and returns at once."""
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
