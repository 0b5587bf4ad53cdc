"""The program of an ``endpoint``, ``asgi`` or ``realtime`` container (docs/deployments.md, "The container side").

    python3 -u -m berth.runtime.http_runner --port 8000 [--concurrent-requests N]

Reads the same ``BERTH_*`` environment as ``berth.runtime.runner``. Each of
``BERTH_WORKERS`` processes imports ``BERTH_HANDLER``, runs ``BERTH_ON_START``
and only then listens on the port (shared with SO_REUSEPORT), so a
connection that is accepted reaches a loaded handler. With more than one
worker the first process only forks them and waits: it forwards SIGTERM and
SIGINT, restarts none, and when one ends on its own it stops the others and
exits with that worker's status (a container short of a worker has fewer
slots than the coordinator counts on, so it is replaced whole).

A handler that does not import (or an on_start that raises) still serves:
every request, and ``GET /.berth/health``, answers 500 naming the error.
"""

import argparse
import asyncio
import inspect
import os
import signal
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..api.context import Context
from .asgi_host import SHUTDOWN_GRACE_S, AsgiServer, LifespanFailed
from .endpoint_app import EndpointApp, FailedApp, call_factory, guarded, log, with_health
from .state_bridge import install_from_env as install_state_transport
from .db_forward import start_from_env as forward_databases
from .handler_load import import_handler, load_failure, resolve
from .realtime_app import realtime_asgi
from .runner import RunnerConfig

KINDS = ("endpoint", "asgi", "realtime")
EVERY_REQUEST_FAILS = "every request will answer 500"


class SharedPortServer(AsgiServer):
    """An AsgiServer whose TCP socket has SO_REUSEPORT: each worker process listens on the same port."""

    async def start(self) -> Tuple[str, int]:
        await self.lifespan.startup()
        try:
            self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_port=True)
        except BaseException:
            await self.lifespan.shutdown(SHUTDOWN_GRACE_S)
            raise
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = self.scope_server = (host, port)
        return self.address


class Worker:
    """One worker process: load the handler, build the kind's app, serve it until SIGTERM."""

    def __init__(self, cfg: RunnerConfig, kind: str, host: str, port: int, concurrent_requests: int):
        self.cfg = cfg
        self.kind = kind
        self.host = host
        self.port = port
        self.concurrent_requests = concurrent_requests
        self.handler: Optional[Callable[..., Any]] = None
        self.on_start_value: Any = None
        self.error: Optional[Dict[str, Any]] = None

    def load(self) -> None:
        """Import and a sync on_start, before any event loop runs (either may call asyncio.run)."""
        try:
            self.handler = import_handler(self.cfg.handler)
        except (Exception, SystemExit) as e:
            self.error = load_failure(f"cannot import the handler {self.cfg.handler}", e, EVERY_REQUEST_FAILS)
            return
        if self.cfg.on_start:
            try:
                self.on_start_value = resolve(self.cfg.on_start, "BERTH_ON_START")()
            except (Exception, SystemExit) as e:
                self.error = load_failure(f"on_start {self.cfg.on_start} failed", e, EVERY_REQUEST_FAILS)

    def context(self) -> Context:
        return Context(
            container_id=self.cfg.container_id,
            stub_id=self.cfg.stub_id,
            stub_type=self.cfg.stub_type,
            callback_url=self.cfg.callback_url,
            on_start_value=self.on_start_value,
            bind_port=self.port,
            python_version=self.cfg.python_version,
        )

    async def app(self) -> Any:
        """The app to serve; an async on_start and the ``@asgi`` factory run here, on the serving loop."""
        if self.error is None and inspect.isawaitable(self.on_start_value):
            try:
                self.on_start_value = await self.on_start_value
            except Exception as e:  # noqa: BLE001
                self.error = load_failure(f"on_start {self.cfg.on_start} failed", e, EVERY_REQUEST_FAILS)
        if self.error is None and self.handler is not None:
            try:
                return with_health(self._kind_app(self.handler), None)
            except Exception as e:  # noqa: BLE001 - the factory is user code
                self.error = load_failure(f"the app factory {self.cfg.handler} failed", e, EVERY_REQUEST_FAILS)
        return with_health(FailedApp(self.error or {}), self.error)

    def _kind_app(self, handler: Callable[..., Any]) -> Any:
        if self.kind == "endpoint":
            return EndpointApp(handler, self.concurrent_requests, self.context())
        if self.kind == "realtime":
            return realtime_asgi(handler, self.on_start_value, self.concurrent_requests, context=self.context())
        app = call_factory(handler, self.context())
        if inspect.isawaitable(app):
            raise TypeError(f"{self.cfg.handler} is async: an @asgi function returns the app, it is not awaited")
        if not callable(app):
            raise TypeError(f"{self.cfg.handler} returned a {type(app).__name__}, not an ASGI application")
        return guarded(app)

    async def serve(self) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = SharedPortServer(await self.app(), host=self.host, port=self.port)
        try:
            try:
                host, port = await server.start()
            except LifespanFailed as e:
                self.error = {"type": "berth.LifespanFailed", "message": f"the app's lifespan startup failed: {e}"}
                log(f"{self.error['message']}; {EVERY_REQUEST_FAILS}")
                server = SharedPortServer(with_health(FailedApp(self.error), self.error), host=self.host, port=self.port)
                host, port = await server.start()
        except OSError as e:
            log(f"cannot listen on {self.host}:{self.port}: {e}")
            return 1
        log(f"worker {os.getpid()} serving {self.kind} {self.cfg.handler} on http://{host}:{port}")
        try:
            await stop.wait()
        finally:
            # A second SIGTERM must not cut the graceful stop short; closing the loop would
            # otherwise restore the default action for the last moments of the process.
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            await server.stop()
        return 0

    def run(self) -> int:
        self.load()
        return asyncio.run(self.serve())


def supervise(workers: List[Callable[[], int]]) -> int:
    """Forks one process per worker; forwards SIGTERM/SIGINT; ends when they do (see the module doc)."""
    pids: List[int] = []
    for run in workers:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run()
            except BaseException:  # noqa: BLE001 - a child never returns into the parent's loop
                log(f"worker {os.getpid()} failed:\n{traceback.format_exc()}")
            finally:
                _flush()
                os._exit(code)
        pids.append(pid)
    stopping = False

    def stop_all(sig: int = signal.SIGTERM, *_: Any) -> None:
        nonlocal stopping
        stopping = True
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    first: Optional[int] = None
    while pids:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid not in pids:
            continue  # a process the user's code forked and left behind (we may be PID 1)
        pids.remove(pid)
        code = os.waitstatus_to_exitcode(status)
        stopped = stopping and code in (0, 143, -signal.SIGTERM)
        if not stopped:
            log(f"worker {pid} exited with {code}; stopping the other workers")
            first = code if first is None else first
            if not stopping:
                stop_all()
    return 0 if first is None else (first if first > 0 else 1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m berth.runtime.http_runner", description="Serve a deployed endpoint, asgi or realtime stub over HTTP."
    )
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    parser.add_argument("--concurrent-requests", type=int, default=1, help="requests one worker serves at once")
    args = parser.parse_args(argv)
    if args.concurrent_requests < 1:
        parser.error(f"--concurrent-requests must be at least 1, not {args.concurrent_requests}")
    # Prints of the handler are the container's log: line by line even without -u.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    cfg = RunnerConfig.from_env(dict(os.environ))
    kind = (cfg.stub_type or "").split("/")[0]
    if kind not in KINDS:
        log(f"BERTH_STUB_TYPE {cfg.stub_type!r} is not served over HTTP (one of {', '.join(KINDS)}); use berth.runtime.runner")
        return 2
    if not cfg.handler:
        log("BERTH_HANDLER is not set (module:function)")
        return 2
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)

    # Queue, Map and Signal of the user's module go through the agent's socket.
    install_state_transport()
    # The workspace's databases at the 127.0.0.1 ports their URLs name (docs/databases.md).
    forward_databases()
    def run_worker() -> int:
        # We may be PID 1, which ignores signals without a handler: until the server
        # takes SIGTERM over for a graceful stop, it ends the process at once.
        signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
        return Worker(cfg, kind, args.host, args.port, args.concurrent_requests).run()

    if cfg.workers == 1:
        code = run_worker()
    else:
        code = supervise([run_worker] * cfg.workers)
    _flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
