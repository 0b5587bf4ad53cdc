"""The ASGI apps of a deployed stub's container (docs/deployments.md, "The container side").

``EndpointApp`` turns an ``@endpoint`` handler into an app: a POSTed JSON
object is bound to the handler's parameters (handler_call.py), its return
value is the JSON answer. ``guarded`` wraps an ``@asgi`` app so that an
exception before its response starts still answers in berth's error shape,
``FailedApp`` answers for a handler that did not load, and ``with_health``
puts ``GET /.berth/health`` in front of any of them.

Every error answer berth makes (not the user's app) carries
``X-Berth-Error: 1`` and ``{"error": {"type", "message", ...}}``, so the
coordinator can tell a handler's failure from an app's own 4xx/5xx.
"""

import asyncio
import dataclasses
import functools
import inspect
import json
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from ..api.context import Context
from ..handler_call import HandlerArgumentsError, bind_endpoint_call
from .handler_load import error_of, takes_context

HEALTH_PATH = "/.berth/health"
BERTH_ERROR = (b"x-berth-error", b"1")
JSON_TYPE = (b"content-type", b"application/json")

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def log(message: str) -> None:
    """To the container's log; the agent keeps it (``berth serve`` shows it)."""
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"berth http_runner: {message}\n")
        stream.flush()


def header(scope: dict, name: bytes) -> Optional[str]:
    for n, v in scope.get("headers") or []:
        if n == name:
            return v.decode("latin-1")
    return None


async def send_json(
    send: Callable, status: int, body: bytes, headers: Optional[List[Tuple[bytes, bytes]]] = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [JSON_TYPE, *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Callable, status: int, error: Dict[str, Any], headers: Optional[list] = None) -> None:
    body = json.dumps({"error": error}).encode()
    await send_json(send, status, body, [BERTH_ERROR, *(headers or [])])


async def read_body(receive: Callable) -> Optional[bytes]:
    """The whole request body; None when the client went away (or the host refused the body)."""
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body") or b"")
        if not message.get("more_body"):
            return b"".join(parts)


async def answer_lifespan(receive: Callable, send: Callable, on_shutdown: Callable[[], None] = lambda: None) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


def _is_async(fn: Callable) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


class EndpointApp:
    """``POST`` (any path) with a JSON object: the handler's return value as JSON.

    At most ``concurrent_requests`` calls run at once; more wait for a slot
    (the coordinator sends no more than that, so waiting is rare). Sync
    handlers run in a thread pool of that size, async ones on the event loop.
    """

    def __init__(self, handler: Callable[..., Any], concurrent_requests: int, context: Context):
        if concurrent_requests < 1:
            raise ValueError(f"concurrent_requests must be at least 1, not {concurrent_requests}")
        self.handler = handler
        self.name = getattr(handler, "__qualname__", None) or getattr(handler, "__name__", "the handler")
        self.is_async = _is_async(handler)
        self.context = context
        self.concurrent_requests = concurrent_requests
        self.pool = ThreadPoolExecutor(max_workers=concurrent_requests, thread_name_prefix="berth-endpoint")
        self._slots: Optional[asyncio.Semaphore] = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await answer_lifespan(receive, send, lambda: self.pool.shutdown(wait=False))
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "an endpoint takes POST requests"})
        elif scope["method"] != "POST":
            message = f"an endpoint takes POST with a JSON object, not {scope['method']}"
            await send_error(send, 405, {"type": "MethodNotAllowed", "message": message}, [(b"allow", b"POST")])
        else:
            await self._post(scope, receive, send)

    async def _post(self, scope: dict, receive: Callable, send: Callable) -> None:
        data = await read_body(receive)
        if data is None:
            return
        try:
            body = json.loads(data) if data.strip() else {}
        except ValueError as e:
            await send_error(send, 400, {"type": "InvalidJSON", "message": f"the request body is not JSON: {e}"})
            return
        context = self._context(scope, body)
        try:
            args, kwargs = bind_endpoint_call(self.handler, body, context)
        except HandlerArgumentsError as e:
            error = {"type": "berth.HandlerArgumentsError", "message": str(e), "unknown": e.unknown, "missing": e.missing}
            await send_error(send, 400, error)
            return
        if self._slots is None:  # made here: a Semaphore belongs to the running loop (Python 3.9)
            self._slots = asyncio.Semaphore(self.concurrent_requests)
        async with self._slots:
            if self.is_async:
                ok, value = await self._call_async(args, kwargs)
            else:
                call = functools.partial(self._call_sync, args, kwargs)
                ok, value = await asyncio.get_running_loop().run_in_executor(self.pool, call)
        if not ok:
            log(f"{self.name} raised on task {context.task_id}:\n{value['traceback']}")
            await send_error(send, 500, value)
            return
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            message = f"the return value of {self.name} is not JSON: {type(e).__name__}: {e}"
            await send_error(send, 500, {"type": "berth.SerializationError", "message": message})
            return
        await send_json(send, 200, text.encode())

    def _context(self, scope: dict, body: Any) -> Context:
        callback = header(scope, b"x-callback-url")
        if not callback and isinstance(body, dict) and isinstance(body.get("callback_url"), str):
            callback = body["callback_url"]
        return dataclasses.replace(
            self.context,
            task_id=header(scope, b"x-task-id") or None,
            callback_url=callback or self.context.callback_url,
        )

    # Both return (True, value) or (False, error): the exception is caught in the
    # frame that called the handler, so its traceback starts at the user's code.

    def _call_sync(self, args: tuple, kwargs: dict) -> Tuple[bool, Any]:
        try:
            value = self.handler(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - SystemExit in a handler is its request's failure
            return False, error_of(e)
        if inspect.isawaitable(value):
            return False, {"type": "TypeError", "message": f"{self.name} returned an awaitable from a sync call"}
        return True, value

    async def _call_async(self, args: tuple, kwargs: dict) -> Tuple[bool, Any]:
        try:
            return True, await self.handler(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001
            return False, error_of(e)


class FailedApp:
    """What serves when the handler did not import or on_start failed: every request hears why."""

    def __init__(self, error: Dict[str, Any]):
        self.error = error

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await answer_lifespan(receive, send)
        elif kind == "http":
            await send_error(send, 500, self.error)
        elif kind == "websocket":
            # Accepted so the client reads the reason; 1011: the server cannot serve.
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": json.dumps({"error": self.error})})
            await send({"type": "websocket.close", "code": 1011})


def guarded(app: ASGIApp) -> ASGIApp:
    """An ``@asgi`` app whose exception before the response started becomes berth's 500."""

    async def guard(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            await app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the app's failure is its request's
            if started:
                raise  # the host cuts the response short: the only way HTTP/1.1 can say so
            log(f"the app raised on {scope.get('method')} {scope.get('path')}:\n{traceback.format_exc()}")
            await send_error(send, 500, error_of(e))

    return guard


def with_health(app: ASGIApp, error: Optional[Dict[str, Any]]) -> ASGIApp:
    """``GET /.berth/health`` answered here, never by the user's app: 200, or 500 with the load error."""
    healthy = json.dumps({"ok": True}).encode()

    async def health(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope.get("path") == HEALTH_PATH:
            if error is None:
                await send_json(send, 200, healthy)
            else:
                await send_error(send, 500, error)
            return
        await app(scope, receive, send)

    return health


def call_factory(factory: Callable[..., Any], context: Context) -> Any:
    """The ``@asgi`` factory's app (or an awaitable of it): called with ``context`` when it takes one."""
    return factory(context=context) if takes_context(factory) else factory()
