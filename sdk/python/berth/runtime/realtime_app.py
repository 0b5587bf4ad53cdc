"""The ``@realtime`` handler as an ASGI app: one handler call per websocket message (docs/asgi.md).

Each received message is given to the handler JSON-decoded when it parses
(else as the text or bytes), with the context when the handler has a
``context`` parameter: ``handler(data, context=ctx)``, or, when ``context``
is the first positional parameter (beta9's ``def handler(context, data)``),
``handler(ctx, data)``. The return value goes back JSON-encoded, or as is when it is str
(a text message) or bytes (a binary one). A handler that raises sends
``{"error": "<Type>: <message>"}`` and the socket stays open. Messages of one
connection are handled in order; across connections at most
``concurrent_requests`` handler calls run at once (sync handlers in a thread
pool of that size).
"""

import asyncio
import dataclasses
import functools
import inspect
import json
import os
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from ..api.context import Context
from ..handler_call import unwrap_handler
from .asgi_http import log
from .handler_load import context_comes_first, takes_context


def realtime_asgi(
    handler: Callable[..., Any],
    on_start_value: Any = None,
    concurrent_requests: int = 1,
    *,
    context: Optional[Context] = None,
) -> "RealtimeApp":
    """``context``: the Context handlers get (its ``on_start_value`` is replaced); default from BERTH_* env."""
    return RealtimeApp(handler, on_start_value, concurrent_requests, context)


def decode_message(message: dict) -> Any:
    text = message.get("text")
    if text is not None:
        try:
            return json.loads(text)
        except ValueError:
            return text
    data = message.get("bytes") or b""
    try:
        return json.loads(data)
    except ValueError:  # UnicodeDecodeError included
        return data


def encode_reply(value: Any) -> dict:
    if isinstance(value, str):
        return {"type": "websocket.send", "text": value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"type": "websocket.send", "bytes": bytes(value)}
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        return error_reply(f"the handler's return value is not JSON: {type(e).__name__}: {e}")
    return {"type": "websocket.send", "text": text}


def error_reply(message: str) -> dict:
    return {"type": "websocket.send", "text": json.dumps({"error": message})}


class RealtimeApp:
    def __init__(
        self, handler: Callable[..., Any], on_start_value: Any, concurrent_requests: int, context: Optional[Context]
    ):
        if concurrent_requests < 1:
            raise ValueError(f"concurrent_requests must be at least 1, not {concurrent_requests}")
        self.handler = unwrap_handler(handler)
        self.wants_context = takes_context(self.handler)
        self.context_first = self.wants_context and context_comes_first(self.handler)
        call = getattr(self.handler, "__call__", None)
        self.is_async = inspect.iscoroutinefunction(self.handler) or inspect.iscoroutinefunction(call)
        base = context or Context(
            container_id=os.environ.get("BERTH_CONTAINER_ID") or None,
            stub_id=os.environ.get("BERTH_STUB_ID") or None,
            stub_type=os.environ.get("BERTH_STUB_TYPE") or "realtime",
            python_version=os.environ.get("BERTH_PYTHON_VERSION", ""),
        )
        self.context = dataclasses.replace(base, on_start_value=on_start_value)
        self.concurrent_requests = concurrent_requests
        self.pool = ThreadPoolExecutor(max_workers=concurrent_requests, thread_name_prefix="berth-realtime")
        self._slots: Optional[asyncio.Semaphore] = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope["type"]
        if kind == "websocket":
            await self._session(receive, send)
        elif kind == "http":
            body = json.dumps({"error": "this is a realtime endpoint: connect to it with a websocket"}).encode()
            headers = [(b"content-type", b"application/json"), (b"upgrade", b"websocket")]
            await send({"type": "http.response.start", "status": 426, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.pool.shutdown(wait=False)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _session(self, receive: Callable, send: Callable) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] != "websocket.receive":
                continue
            reply = await self.handle(decode_message(message))
            try:
                await send(reply)
            except OSError:  # the client left while its message was handled
                return

    async def handle(self, value: Any) -> dict:
        """One message's reply: the handler's value encoded, or ``{"error": ...}``."""
        if self._slots is None:  # made here: a Semaphore belongs to the running loop (Python 3.9)
            self._slots = asyncio.Semaphore(self.concurrent_requests)
        context = dataclasses.replace(self.context)
        if self.context_first:
            args, kwargs = (context, value), {}
        else:
            args, kwargs = (value,), ({"context": context} if self.wants_context else {})
        async with self._slots:
            try:
                if self.is_async:
                    result = await self.handler(*args, **kwargs)
                else:
                    call = functools.partial(self.handler, *args, **kwargs)
                    result = await asyncio.get_running_loop().run_in_executor(self.pool, call)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as e:  # noqa: BLE001 - the handler's failure is this message's, not the socket's
                log(f"the realtime handler raised:\n{traceback.format_exc()}")
                return error_reply(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        return encode_reply(result)
