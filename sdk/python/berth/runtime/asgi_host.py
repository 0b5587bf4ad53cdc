"""A standard-library ASGI 3.0 server for the in-container runner (docs/asgi.md).

The runner hosts an ``@asgi`` or ``@realtime`` app with it when the image has
no uvicorn or hypercorn: HTTP/1.1 (asgi_http.py, requests read by asgi_parse.py), RFC 6455 websockets
(asgi_websocket.py) and the lifespan protocol, on TCP or a unix socket.
TLS and HTTP/2 end at the coordinator, so neither is here.

    python3 -m berth.runtime.asgi_host module:app --port 8000
    python3 -m berth.runtime.asgi_host module:make_app() --uds /tmp/app.sock
"""

import argparse
import asyncio
import importlib
import os
import signal
import stat
import sys
import threading
import traceback
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple, Union

from .asgi_http import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_WS_MESSAGE_BYTES, MAX_HEADER_BYTES, Connection, log
from .asgi_websocket import ClientDisconnected

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_WS_MESSAGE_BYTES",
    "MAX_HEADER_BYTES",
    "AsgiServer",
    "ClientDisconnected",
    "LifespanFailed",
    "load_app",
    "serve",
    "serve_async",
]

# Longer than the coordinator's pooled-connection idle time, so the proxy always closes first.
KEEP_ALIVE_S = 75.0
SHUTDOWN_GRACE_S = 10.0

Address = Union[Tuple[str, int], str]
ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


class LifespanFailed(RuntimeError):
    """The app answered ``lifespan.startup`` with ``lifespan.startup.failed``."""


class _Lifespan:
    """The ``lifespan`` scope; an app that raises on it (it does not do lifespan) is served without."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.state: Optional[Dict[str, Any]] = None  # set once startup completed: copied into every scope
        self.task: Optional["asyncio.Future[None]"] = None

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self.inbox: "asyncio.Queue[dict]" = asyncio.Queue()
        self.started: "asyncio.Future[Tuple[bool, str]]" = loop.create_future()
        self.stopped: "asyncio.Future[Tuple[bool, str]]" = loop.create_future()
        state: Dict[str, Any] = {}
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": state}
        self.inbox.put_nowait({"type": "lifespan.startup"})
        self.task = asyncio.ensure_future(self._run(scope))
        await asyncio.wait([self.task, self.started], return_when=asyncio.FIRST_COMPLETED)
        if not self.started.done():
            return
        ok, message = self.started.result()
        if not ok:
            self.task.cancel()
            raise LifespanFailed(message or "the app's lifespan startup failed")
        self.state = state

    async def _run(self, scope: dict) -> None:
        try:
            await self.app(scope, self.inbox.get, self._send)
        except Exception as e:  # noqa: BLE001
            if not self.started.done():
                detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                log(f"the app does not support the lifespan protocol ({detail}); serving it without")
            else:
                log(f"the app's lifespan handler raised:\n{traceback.format_exc()}")

    async def _send(self, message: dict) -> None:
        kind = message.get("type")
        result = (str(kind).endswith(".complete"), str(message.get("message") or ""))
        if kind in ("lifespan.startup.complete", "lifespan.startup.failed") and not self.started.done():
            self.started.set_result(result)
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed") and not self.stopped.done():
            self.stopped.set_result(result)
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on the lifespan scope")

    async def shutdown(self, timeout: float) -> None:
        if self.state is None or self.task is None or self.task.done():
            return
        self.inbox.put_nowait({"type": "lifespan.shutdown"})
        await asyncio.wait([self.task, self.stopped], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self.stopped.done() and not self.stopped.result()[0]:
            log(f"the app's lifespan shutdown failed: {self.stopped.result()[1]}")
        elif not self.stopped.done() and not self.task.done():
            log(f"the app's lifespan shutdown did not finish within {timeout:g} s")
        if not self.task.done():
            await asyncio.wait([self.task], timeout=1.0)
            self.task.cancel()


class AsgiServer:
    """Start with ``await start()`` (lifespan startup, then listen); end with ``await stop()``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: Optional[str] = None,
        port: Optional[int] = None,
        unix_path: Optional[str] = None,
        limit_concurrency: Optional[int] = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_ws_message_bytes: int = DEFAULT_MAX_WS_MESSAGE_BYTES,
        root_path: str = "",
        keep_alive_s: float = KEEP_ALIVE_S,
    ):
        if unix_path is not None and (host is not None or port is not None):
            raise ValueError("listen on either a unix socket or host and port, not both")
        if limit_concurrency is not None and limit_concurrency < 1:
            raise ValueError(f"limit_concurrency must be at least 1, not {limit_concurrency}")
        self.app = app
        self.host = host or "127.0.0.1"
        self.port = port or 0
        self.unix_path = unix_path
        self.limit_concurrency = limit_concurrency
        self.max_body_bytes = max_body_bytes
        self.max_ws_message_bytes = max_ws_message_bytes
        self.root_path = root_path
        self.keep_alive_s = keep_alive_s
        self.lifespan = _Lifespan(app)
        self.active = 0  # app calls in progress (requests and websocket sessions)
        self.stopping = False
        self.address: Optional[Address] = None
        self.scope_server: Optional[Tuple[str, Optional[int]]] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._connections: Dict["asyncio.Task[None]", Connection] = {}

    def at_capacity(self) -> bool:
        return self.limit_concurrency is not None and self.active >= self.limit_concurrency

    async def start(self) -> Address:
        await self.lifespan.startup()
        try:
            if self.unix_path is not None:
                _remove_stale_socket(self.unix_path)
                self._server = await asyncio.start_unix_server(self._accept, path=self.unix_path)
                self.address, self.scope_server = self.unix_path, (self.unix_path, None)
            else:
                self._server = await asyncio.start_server(self._accept, self.host, self.port)
                host, port = self._server.sockets[0].getsockname()[:2]
                self.address = self.scope_server = (host, port)
        except BaseException:
            await self.lifespan.shutdown(SHUTDOWN_GRACE_S)
            raise
        return self.address

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        conn = Connection(self, reader, writer)
        if self.stopping or task is None:
            conn.close()
            return
        self._connections[task] = conn
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # stop() ended it; asyncio (3.11) would log a cancelled connection task as an error
        finally:
            self._connections.pop(task, None)

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stops listening, lets requests in progress finish (up to grace_s), then lifespan shutdown."""
        if self.stopping:
            return
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for task, conn in list(self._connections.items()):
            if conn.ws is not None:
                try:
                    await conn.ws.shutdown()
                except Exception:  # noqa: BLE001 - a websocket already gone needs no goodbye
                    pass
            elif not conn.busy:
                task.cancel()
        pending = set(self._connections)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            except asyncio.TimeoutError:
                pass
        if self.unix_path is not None:
            _remove_stale_socket(self.unix_path)
        await self.lifespan.shutdown(grace_s)


def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket; refusing to replace it")
    os.unlink(path)


async def serve_async(
    app: ASGIApp,
    *,
    host: Optional[str] = None,
    port: Optional[int] = None,
    unix_path: Optional[str] = None,
    ready: Optional[Callable[[Address], None]] = None,
    limit_concurrency: Optional[int] = None,
    stop: Optional[asyncio.Event] = None,
    **options: Any,
) -> None:
    """Serves until ``stop`` is set (or the task is cancelled), then shuts down gracefully.

    ``ready(address)`` is called once listening: ``(host, port)`` (port 0 picks a free one) or the
    unix socket path. ``options``: max_body_bytes, max_ws_message_bytes, root_path, keep_alive_s.
    """
    server = AsgiServer(
        app, host=host, port=port, unix_path=unix_path, limit_concurrency=limit_concurrency, **options
    )
    address = await server.start()
    try:
        if ready is not None:
            ready(address)
        await (stop.wait() if stop is not None else asyncio.get_running_loop().create_future())
    finally:
        await server.stop()


def serve(
    app: ASGIApp,
    *,
    host: Optional[str] = None,
    port: Optional[int] = None,
    unix_path: Optional[str] = None,
    ready: Optional[Callable[[Address], None]] = None,
    limit_concurrency: Optional[int] = None,
    handle_signals: bool = True,
    **options: Any,
) -> None:
    """Blocking ``serve_async``; on the main thread, SIGINT and SIGTERM shut it down gracefully."""

    async def main() -> None:
        stop = asyncio.Event()
        if handle_signals and threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        await serve_async(
            app,
            host=host,
            port=port,
            unix_path=unix_path,
            ready=ready,
            limit_concurrency=limit_concurrency,
            stop=stop,
            **options,
        )

    asyncio.run(main())


def load_app(spec: str) -> ASGIApp:
    """``module:attr`` (dots allowed in attr) is the app; ``module:attr()`` calls a zero-argument factory."""
    target = spec.strip()
    factory = target.endswith("()")
    if factory:
        target = target[:-2]
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"app {spec!r} is not of the form module:attribute or module:factory()")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"module {module_name!r} has no attribute {attr!r}") from None
    if factory:
        if not callable(obj):
            raise TypeError(f"{target} is a {type(obj).__name__}, not a factory function")
        obj = obj()
    if not callable(obj):
        raise TypeError(f"{spec} is a {type(obj).__name__}, not an ASGI application")
    return obj


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m berth.runtime.asgi_host", description="Serve an ASGI 3 app with the Python standard library."
    )
    parser.add_argument("app", help="module:attribute, or module:factory() for a zero-argument factory")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="TCP port (0 picks a free one)")
    where.add_argument("--uds", metavar="PATH", help="unix socket path")
    parser.add_argument("--host", default=None, help="TCP address to bind (default 127.0.0.1)")
    parser.add_argument("--limit-concurrency", type=int, default=None, help="requests at once; more get 503")
    parser.add_argument("--root-path", default="", help="the ASGI root_path: where a proxy mounts the app")
    args = parser.parse_args(argv)
    if args.uds is not None and args.host is not None:
        parser.error("--host goes with --port, not --uds")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        app = load_app(args.app)
    except Exception as e:  # noqa: BLE001 - the user's import error, shown in full
        log(f"cannot load {args.app}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return 1

    def ready(address: Address) -> None:
        where = f"http://{address[0]}:{address[1]}" if isinstance(address, tuple) else f"unix:{address}"
        log(f"serving {args.app} on {where}")

    try:
        serve(
            app,
            host=args.host,
            port=args.port,
            unix_path=args.uds,
            ready=ready,
            limit_concurrency=args.limit_concurrency,
            root_path=args.root_path,
        )
    except LifespanFailed as e:
        log(f"startup failed: {e}")
        return 1
    except OSError as e:
        log(f"cannot listen: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
