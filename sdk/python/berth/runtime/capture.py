"""What a task prints: still written to the container's log, and forwarded to the caller.

sys.stdout and sys.stderr become tees. A write goes to the real stream and,
when the writing thread runs a task (or a single task runs, for threads the
handler started), into that task's buffer. A background thread posts the
buffers every ~50 ms; an explicit flush (``print(..., flush=True)``) posts at
once, so output printed right before a crash still reaches the caller.
"""

import sys
import threading
from typing import Callable, Dict, List, Optional, Tuple

FLUSH_INTERVAL_S = 0.05
# Largest piece of output in one post.
MAX_PIECE = 256 * 1024

Send = Callable[[str, str, str], None]  # (task_id, stream, data)


class TaskOutput:
    def __init__(self, task_id: str):
        self.task_id = task_id
        self.lock = threading.Lock()
        self.pieces: List[Tuple[str, str]] = []

    def add(self, stream: str, data: str) -> None:
        with self.lock:
            for i in range(0, len(data), MAX_PIECE):
                part = data[i : i + MAX_PIECE]
                last = self.pieces[-1] if self.pieces else None
                if last is not None and last[0] == stream and len(last[1]) + len(part) <= MAX_PIECE:
                    self.pieces[-1] = (stream, last[1] + part)
                else:
                    self.pieces.append((stream, part))

    def drain(self) -> List[Tuple[str, str]]:
        with self.lock:
            out, self.pieces = self.pieces, []
        return out


class Capture:
    """The registry of running tasks' output and the thread that forwards it."""

    def __init__(self, send: Send, interval_s: float = FLUSH_INTERVAL_S):
        self.send = send
        self.interval_s = interval_s
        self.local = threading.local()
        self.active: Dict[str, TaskOutput] = {}
        self.lock = threading.Lock()
        # Serialises posting, so pieces of one task reach the agent in order.
        self.send_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def install(self) -> None:
        sys.stdout = Tee(self, "stdout", sys.stdout)
        sys.stderr = Tee(self, "stderr", sys.stderr)
        self.thread = threading.Thread(target=self._loop, name="berth-output", daemon=True)
        self.thread.start()

    def uninstall(self) -> None:
        self.stop_event.set()
        if isinstance(sys.stdout, Tee):
            sys.stdout = sys.stdout.real
        if isinstance(sys.stderr, Tee):
            sys.stderr = sys.stderr.real

    def start(self, task_id: str) -> TaskOutput:
        out = TaskOutput(task_id)
        with self.lock:
            self.active[task_id] = out
        self.local.current = out
        return out

    def finish(self, out: TaskOutput) -> None:
        """Stops capturing for the task and posts what is left (before its result)."""
        self.local.current = None
        with self.lock:
            self.active.pop(out.task_id, None)
        self.flush(out)

    def current(self) -> Optional[TaskOutput]:
        out = getattr(self.local, "current", None)
        if out is not None:
            return out
        with self.lock:
            if len(self.active) == 1:
                return next(iter(self.active.values()))
        return None

    def flush(self, out: TaskOutput) -> None:
        if getattr(self.local, "sending", False):
            return  # something the send itself wrote: it goes out with the next flush
        with self.send_lock:
            self.local.sending = True
            try:
                for stream, data in out.drain():
                    try:
                        self.send(out.task_id, stream, data)
                    except Exception as e:  # noqa: BLE001 - output is best effort; the task goes on
                        _real_stderr(f"berth runner: output of task {out.task_id} not forwarded: {e}\n")
            finally:
                self.local.sending = False

    def _loop(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            with self.lock:
                running = list(self.active.values())
            for out in running:
                self.flush(out)


def _real_stderr(text: str) -> None:
    stream = sys.__stderr__
    if stream is not None:
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            pass


class Tee:
    """A text stream writing to the real stream and to the current task's buffer."""

    def __init__(self, capture: Capture, name: str, real):
        self.capture = capture
        self.name = name
        self.real = real

    def write(self, data: str) -> int:
        n = self.real.write(data)
        if data:
            out = self.capture.current()
            if out is not None:
                out.add(self.name, data)
        return len(data) if n is None else n

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.real.flush()
        out = self.capture.current()
        if out is not None:
            self.capture.flush(out)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str):
        # encoding, fileno, buffer, errors, ...: as the real stream has them.
        return getattr(self.real, name)
