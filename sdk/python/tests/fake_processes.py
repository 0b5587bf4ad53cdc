"""The processes of a fake sandbox (tests/fake_sandboxes.py): a real local program whose stdout and stderr
pump threads keep in bounded buffers by byte offset (the agent's output buffers), stdout, stderr and both combined.
"""

import datetime
import os
import threading

# The most one read takes from a pipe or a socket (also the fake's upload and download blocks).
BLOCK = 64 * 1024


class OutBuf:
    """The last ``limit`` bytes of one stream; offsets count every byte ever written."""

    def __init__(self, limit):
        self.limit = limit
        self.data = bytearray()
        self.start = 0

    @property
    def end(self):
        return self.start + len(self.data)

    def append(self, block):
        self.data += block
        extra = len(self.data) - self.limit
        if extra > 0:
            del self.data[:extra]
            self.start += extra


class Process:
    def __init__(self, pid, args, cwd, proc, limit):
        self.pid, self.args, self.cwd, self.proc = pid, args, cwd, proc
        self.started_at = datetime.datetime.now(datetime.timezone.utc).isoformat()
        self.cond = threading.Condition()
        self.bufs = {"stdout": OutBuf(limit), "stderr": OutBuf(limit), "combined": OutBuf(limit)}
        self.open_pipes = 2
        self.pumps = [threading.Thread(target=self.pump, args=(getattr(proc, n), n), daemon=True) for n in ("stdout", "stderr")]
        for t in self.pumps:
            t.start()

    def pump(self, pipe, name):
        fd = pipe.fileno()
        while True:
            block = os.read(fd, BLOCK)
            with self.cond:
                if not block:
                    self.open_pipes -= 1
                    self.cond.notify_all()
                    return
                self.bufs[name].append(block)
                self.bufs["combined"].append(block)
                self.cond.notify_all()

    @property
    def done(self):
        # The output is complete once both pipes are closed (the process has exited or closed them).
        return self.open_pipes == 0

    def exit_code(self):
        """None while running; a signal's death as 128 + the signal, as a shell and runc report it."""
        code = self.proc.poll()
        return 128 - code if code is not None and code < 0 else code

    def json(self):
        code = self.exit_code()
        return {
            "pid": self.pid,
            "args": self.args,
            "cwd": self.cwd,
            "exit_code": code,
            "status": "running" if code is None else "exited",
            "started_at": self.started_at,
        }
