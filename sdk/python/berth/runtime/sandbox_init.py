"""The process server of a sandbox container (docs/sandboxes.md, "Process server").

The agent makes this the container's pid 1 when the image has python3:
`python3 -u -I /berth/sdk/berth/runtime/sandbox_init.py SOCKET` (isolated, so the berth
package is not imported into every sandbox and the image's PYTHON* variables
do not apply to it). It keeps the container alive, reaps orphans (it is pid
1), ends on SIGTERM/SIGINT after passing it on, and runs the processes the
agent asks for on a unix socket: one connection per process, frames both ways.
A forked process keeps everything runc applied to the container's init
(capabilities, seccomp, no_new_privs, cgroup, namespaces, rlimits), the same
restrictions `runc exec` gives a process, minus the cost of starting runc.

Stdlib only and Python 3.6+ syntax: the interpreter is the image's.
"""

import importlib.util
import json
from contextlib import suppress
import os
import selectors
import signal
import socket
import struct
import sys
import time


def _load_sibling(name):
    # -I leaves this directory off sys.path, and putting it there would let
    # berth's own modules (http.py, ...) shadow the stdlib for this process:
    # load the sibling file by its path instead.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("berth_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_wire = _load_sibling("sandbox_init_wire")
_starting = _load_sibling("sandbox_init_start")
# A pre-warmed sandbox's environment, as the agent sends it.
wait_for_assignment = _load_sibling("warm_handover").wait_for_assignment
CAN_SPAWN, spawn, fork_child = _starting.CAN_SPAWN, _starting.spawn, _starting.fork_child
HEADER, MAX_FRAME, ProtocolError, FrameReader = _wire.HEADER, _wire.MAX_FRAME, _wire.ProtocolError, _wire.FrameReader
START, STDIN, CLOSE_STDIN, SIGNAL = _wire.START, _wire.STDIN, _wire.CLOSE_STDIN, _wire.SIGNAL
STARTED, STDOUT, STDERR, EXIT, FAILED = _wire.STARTED, _wire.STDOUT, _wire.STDERR, _wire.EXIT, _wire.FAILED
encode, encode_json, exit_code, parse_start = _wire.encode, _wire.encode_json, _wire.exit_code, _wire.parse_start

READ_CHUNK = 64 * 1024
# While a connection has this much unsent output, its process's pipes are not read.
HIGH_WATER = 1 << 20
# How long a stop waits for the container's processes to end and their exits
# to reach the agent. 2 s proved too short on a loaded 2-core host (a
# trapping shell's exit missed it and its client saw 255); the agent's own
# stop grace still bounds a process that ignores the signal.
STOP_WAIT_S = 5.0


class Process:
    def __init__(self, pid, stdin_w, out_r, err_r):
        self.pid = pid
        self.stdin_w = stdin_w
        self.stdin_buf = bytearray()
        self.stdin_closing = False
        self.pipes = {out_r: STDOUT, err_r: STDERR}
        self.status = None
        self.key = ("stdin", self)


class Connection:
    def __init__(self, sock):
        self.sock = sock
        self.reader = FrameReader()
        self.out = bytearray()
        self.proc = None
        self.closing = False  # no more output once `out` is sent
        # Output done and our side shut down: we read until the client closes,
        # since closing with its frames unread would reset the connection and
        # could lose output it has not read yet.
        self.shut = False
        self.key = ("conn", self)  # selector data: one object, so _watch sees it unchanged
        self.pipe_key = ("pipe", self)


class Server:
    def __init__(self, path, as_init=None):
        self.path = path
        self.as_init = os.getpid() == 1 if as_init is None else as_init
        self.base_env = dict(os.environ)
        self.sel = selectors.DefaultSelector()
        self.conns = set()
        self.procs = {}  # pid -> (Process, Connection)
        self.stop_signal = 0  # set by the handler; acted on by the loop
        self.stopping = None  # monotonic deadline once stopping
        self.listener = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def listen(self):
        # Bound and listening under a temporary name, then renamed into place:
        # a client that sees the path can connect (between bind and listen a
        # connect is refused, which the agent and tests met under load).
        tmp = self.path + ".tmp"
        for stale in (self.path, tmp):
            with suppress(FileNotFoundError):
                os.unlink(stale)
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lsock.bind(tmp)
            os.chmod(tmp, 0o600)
            lsock.listen(128)
            lsock.setblocking(False)
            os.rename(tmp, self.path)
        except BaseException:
            lsock.close()
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self.listener = lsock

    def install_signals(self):
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *a: None)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signo, _frame):
        self.stop_signal = self.stop_signal or signo

    def _stop(self, signo):
        self.stopping = time.monotonic() + STOP_WAIT_S
        if self.listener is not None:
            self.sel.unregister(self.listener)
            self.listener.close()
            self.listener = None
            with suppress(OSError):
                os.unlink(self.path)
        if self.as_init:
            self._kill(-1, signo)  # everything in the container's pid namespace but us
        else:
            for pid in list(self.procs):
                self._kill(pid, signo)

    def serve(self):
        """Runs until stopped and (up to STOP_WAIT_S) every child is gone."""
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        if self.listener is not None:
            self.sel.register(self.listener, selectors.EVENT_READ, ("accept", None))
        while True:
            if self.stop_signal and self.stopping is None:
                self._stop(self.stop_signal)
            if self.stopping is not None and (self._done() or time.monotonic() >= self.stopping):
                return
            timeout = None if self.stopping is None else max(0.0, self.stopping - time.monotonic())
            for key, mask in self.sel.select(timeout):
                what, obj = key.data
                self._guarded(obj, self._dispatch, what, obj, key.fd, mask)
            self._reap()
            for conn in list(self.conns):
                self._guarded(conn, self._update, conn)

    def _guarded(self, obj, fn, *args):
        # A bug here must cost one connection, never pid 1 (that would end the sandbox).
        try:
            fn(*args)
        except Exception as e:
            sys.stderr.write("berth sandbox init: %s: %r\n" % (fn.__name__, e))
            if isinstance(obj, Connection):
                self._guarded(None, self._drop, obj)

    def _dispatch(self, what, obj, fd, mask):
        if what == "wake":
            self._drain_wake()
        elif what == "accept":
            self._accept()
        elif what == "conn":
            self._on_conn(obj, mask)
        elif what == "pipe":
            self._on_pipe(obj, fd)
        elif what == "stdin":
            self._flush_stdin(obj)

    def _done(self):
        """Stopping: every child reaped and every process's exit sent."""
        return not self._reap() and not any(c.proc and not c.shut for c in self.conns)

    def _drain_wake(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _reap(self):
        """Collects every exited child; whether any child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            entry = self.procs.get(pid)
            if entry is not None:
                entry[0].status = status

    def _accept(self):
        if self.listener is None:
            return
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if self.as_init and not self._from_outside(sock):
            sock.close()
            return
        sock.setblocking(False)
        conn = Connection(sock)
        self.conns.add(conn)
        self._watch(sock, selectors.EVENT_READ, conn.key)

    @staticmethod
    def _from_outside(sock):
        # Peers outside our pid namespace (the agent) show pid 0; a process in
        # the container must not start processes as another user through us.
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _uid, _gid = struct.unpack("3i", creds)
        return pid == 0

    def _on_conn(self, conn, mask):
        if mask & selectors.EVENT_WRITE and conn.out and not self._send(conn):
            return
        if not mask & selectors.EVENT_READ:
            return
        try:
            data = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.closing:
            return
        try:
            for kind, payload in conn.reader.feed(data):
                self._on_frame(conn, kind, payload)
        except ProtocolError as e:
            self._fail(conn, "protocol", 0, str(e))

    def _send(self, conn):
        """Sends what it can of the connection's output; False when the connection was dropped."""
        try:
            sent = conn.sock.send(conn.out)
            del conn.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(conn)
            return False
        return True

    def _on_frame(self, conn, kind, payload):
        if kind == START:
            if conn.proc is not None:
                raise ProtocolError("a second start on one connection")
            try:
                req = parse_start(payload)
            except ValueError as e:
                raise ProtocolError(str(e))
            self._start(conn, req)
        elif conn.proc is None:
            raise ProtocolError("%r before start" % kind)
        elif kind == STDIN:
            if not conn.proc.stdin_closing:
                conn.proc.stdin_buf += payload
                self._flush_stdin(conn.proc)
        elif kind == CLOSE_STDIN:
            conn.proc.stdin_closing = True
            self._flush_stdin(conn.proc)
        elif kind == SIGNAL:
            try:
                signo = int(json.loads(payload.decode())["signal"])
            except (ValueError, KeyError, TypeError):
                raise ProtocolError("signal must be {\"signal\": number}")
            if conn.proc.status is None:
                self._kill(conn.proc.pid, signo)
        else:
            raise ProtocolError("unknown frame kind %r" % kind)

    def _start(self, conn, req):
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if CAN_SPAWN and req["user"] is None and req["cwd"] is None:
            try:
                pid = spawn(req, self.base_env, stdin_r, out_w, err_w)
            except OSError as e:
                pid = None
                failure = ("exec", e.errno or 0, e.strerror or str(e))
            finally:
                for fd in (stdin_r, out_w, err_w):
                    os.close(fd)
            if pid is None:
                for fd in (stdin_w, out_r, err_r):
                    os.close(fd)
                self._fail(conn, *failure)
                return
            self._started(conn, pid, stdin_w, out_r, err_r)
            return
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            fork_child(req, self.base_env, stdin_r, out_w, err_w, report_w)
        for fd in (stdin_r, out_w, err_w, report_w):
            os.close(fd)
        # The report pipe is close-on-exec: EOF means exec succeeded.
        with os.fdopen(report_r, "rb") as f:
            report = f.read()
        if report:
            for fd in (stdin_w, out_r, err_r):
                os.close(fd)
            os.waitpid(pid, 0)
            try:
                failure = json.loads(report.decode())
            except ValueError:
                failure = {"stage": "exec", "errno": 0, "message": report.decode(errors="replace")}
            self._fail(conn, failure.get("stage", "exec"), failure.get("errno", 0), failure.get("message", ""))
            return
        self._started(conn, pid, stdin_w, out_r, err_r)

    def _started(self, conn, pid, stdin_w, out_r, err_r):
        for fd in (stdin_w, out_r, err_r):
            os.set_blocking(fd, False)
        proc = Process(pid, stdin_w, out_r, err_r)
        conn.proc = proc
        self.procs[pid] = (proc, conn)
        for fd in proc.pipes:
            self._watch(fd, selectors.EVENT_READ, conn.pipe_key)
        conn.out += encode_json(STARTED, {"pid": pid})

    def _fail(self, conn, stage, err, message):
        conn.out += encode_json(FAILED, {"stage": stage, "errno": err, "message": message})
        conn.closing = True

    def _kill(self, pid, signo):
        with suppress(OSError, OverflowError, ValueError):
            os.kill(pid, signo)

    def _on_pipe(self, conn, fd):
        proc = conn.proc
        if fd not in proc.pipes:  # closed earlier in this round of events
            return
        try:
            data = os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            conn.out += encode(proc.pipes[fd], data)
            return
        self._watch(fd, 0)
        os.close(fd)
        del proc.pipes[fd]

    def _flush_stdin(self, proc):
        if proc.stdin_w is None:
            return
        try:
            while proc.stdin_buf:
                n = os.write(proc.stdin_w, proc.stdin_buf)
                del proc.stdin_buf[:n]
        except BlockingIOError:
            return
        except OSError:
            # The process closed its stdin (EPIPE): what is left is dropped, as with a pipe.
            proc.stdin_buf = bytearray()
            proc.stdin_closing = True
        if proc.stdin_closing:
            self._close_stdin(proc)

    def _close_stdin(self, proc):
        if proc.stdin_w is not None:
            self._watch(proc.stdin_w, 0)
            os.close(proc.stdin_w)
            proc.stdin_w = None

    def _watch(self, fd, events, data=None):
        """Sets what fd waits for (0: nothing)."""
        key = self.sel.get_map().get(fd)
        if not events:
            if key is not None:
                self.sel.unregister(fd)
        elif key is None:
            self.sel.register(fd, events, data)
        elif key.events != events or key.data is not data:
            self.sel.modify(fd, events, data)

    def _update(self, conn):
        """Sends EXIT when due and sets what each of the connection's fds waits for."""
        proc = conn.proc
        if proc is not None and proc.status is not None and not proc.pipes and not conn.closing:
            self._close_stdin(proc)
            del self.procs[proc.pid]
            conn.out += encode_json(EXIT, {"exit_code": exit_code(proc.status)})
            conn.closing = True
        if conn.out and not self._send(conn):
            return
        if conn.closing and not conn.out and not conn.shut:
            conn.shut = True
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._drop(conn)
                return
        self._watch(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0), conn.key)
        if proc is None:
            return
        for fd in proc.pipes:
            self._watch(fd, selectors.EVENT_READ if len(conn.out) < HIGH_WATER else 0, conn.pipe_key)
        if proc.stdin_w is not None:
            self._watch(proc.stdin_w, selectors.EVENT_WRITE if proc.stdin_buf else 0, proc.key)

    def _drop(self, conn):
        """Closes a connection; a process still running loses its only client and is killed."""
        if conn not in self.conns:
            return
        self.conns.discard(conn)
        self._watch(conn.sock, 0)
        conn.sock.close()
        proc = conn.proc
        if proc is None:
            return
        if proc.status is None:
            self._kill(proc.pid, signal.SIGKILL)
        self._close_stdin(proc)
        for fd in list(proc.pipes):
            self._watch(fd, 0)
            os.close(fd)
        proc.pipes.clear()
        # Reaped later by _reap, which finds no entry and just collects it.
        self.procs.pop(proc.pid, None)


def main(argv):
    warm = None
    if len(argv) == 3 and argv[1] == "--warm":
        argv, warm = argv[:1], argv[2]
    if len(argv) != 1:
        sys.stderr.write("usage: sandbox_init.py SOCKET_PATH [--warm HANDOVER_SOCKET]\n")
        return 2
    server = Server(argv[0])
    if warm is not None:
        # PID 1 ignores SIGTERM without a handler: a stop while it waits must not wait out its grace.
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda *_: os._exit(0))
    else:
        server.install_signals()
    try:
        server.listen()
    except OSError as e:
        # Still the sandbox's pid 1, without a socket: the agent falls back to runc exec.
        sys.stderr.write("berth sandbox init: cannot listen on %s: %s\n" % (argv[0], e))
        server.listener = None
    if warm is not None:
        # Listening already, so the sandbox's first exec need not wait for it; but nothing is
        # accepted, so no process starts, before the sandbox's environment is here.
        assignment = wait_for_assignment(warm)
        if assignment is None:
            return 0
        env = {str(k): str(v) for k, v in assignment["env"].items()}
        os.environ.clear()
        os.environ.update(env)
        server.base_env = dict(env)
        os.chdir(assignment.get("cwd") or "/")
        server.install_signals()
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
