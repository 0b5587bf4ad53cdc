"""HTTP/1.1 for the standard-library ASGI server (asgi_host.py, docs/asgi.md).

One ``Connection`` per accepted socket reads requests in turn (keep-alive),
gives each to the app as an ``http`` scope, and hands a websocket upgrade to
asgi_websocket.py. Bad input is answered with a 4xx naming the cause.
"""

import asyncio
import sys
import traceback
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Callable, List, Optional, Tuple

from .asgi_parse import MAX_HEADER_BYTES, BadRequest, BodyTooLarge, Request, RequestBody, RequestInput, parse_head
from .asgi_websocket import (
    ClientDisconnected,
    Incomplete,
    WebSocketSession,
    handshake_error,
    is_upgrade,
    response_headers,
)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_WS_MESSAGE_BYTES = 16 * 1024 * 1024
# Unread body left after a response is read and dropped up to this; beyond it the connection closes.
DRAIN_BYTES = 256 * 1024
# After an error answer, input is read and dropped this long (or this much) before closing: closing
# with unread input sends an RST, which can destroy the answer before the client has read it.
LINGER_S = 2.0
LINGER_BYTES = 4 * 1024 * 1024



def log(message: str) -> None:
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"berth asgi: {message}\n")
        stream.flush()


def plain_response(status: int, text: str, keep_alive: bool, extra: bytes = b"") -> bytes:
    body = (text + "\n").encode() if text else b""
    return (
        f"HTTP/1.1 {status} {_phrase(status)}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\ndate: {formatdate(usegmt=True)}\r\n"
        f"{'' if keep_alive else 'connection: close' + chr(13) + chr(10)}"
    ).encode() + extra + b"\r\n" + body


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _encode_headers(headers: List[Tuple[bytes, bytes]]) -> bytes:
    return b"".join(n + b": " + v + b"\r\n" for n, v in headers)


DISCONNECT = {"type": "http.disconnect"}


class _HttpCycle:
    """One request and its response: the ``receive`` and ``send`` the app is given."""

    def __init__(self, conn: "Connection", req: Request, body: RequestBody):
        self.conn = conn
        self.req = req
        self.body = body
        tokens = req.tokens(b"connection")
        self.keep_alive = b"keep-alive" in tokens if req.http_version == "1.0" else b"close" not in tokens
        self.expect_continue = req.http_version == "1.1" and b"100-continue" in req.tokens(b"expect")
        self.request_delivered = False
        self.started = False
        self.head_sent = False
        self.status = 0
        self.headers: List[Tuple[bytes, bytes]] = []
        self.chunked = False
        self.no_body = False
        self.complete = False
        self.disconnected = False
        self.refused = False
        self.gone = asyncio.Event()
        self.watch: Optional["asyncio.Future[None]"] = None

    async def receive(self) -> dict:
        if self.complete or self.disconnected:
            return DISCONNECT
        if not self.request_delivered:
            try:
                if not self.body.done and self.expect_continue and not self.head_sent:
                    self.expect_continue = False
                    await self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                data = await self.body.read() if not self.body.done else b""
            except BodyTooLarge:
                await self._refuse(413, f"the request body is larger than {self.body.limit} bytes")
                return DISCONNECT
            except BadRequest as e:
                await self._refuse(e.status, str(e))
                return DISCONNECT
            except (Incomplete, ClientDisconnected, ConnectionError):
                self._lost()
                return DISCONNECT
            self.request_delivered = self.body.done
            return {"type": "http.request", "body": data, "more_body": not self.body.done}
        # The whole body is in: what is left to hear of is the client going away.
        if self.watch is None:
            self.watch = asyncio.ensure_future(self._watch())
        await self.gone.wait()
        return DISCONNECT

    async def _watch(self) -> None:
        try:
            # Read-ahead is kept for the next request; past a header block's worth, stop listening.
            while len(self.conn.inp.buf) <= MAX_HEADER_BYTES:
                if not await self.conn.inp.fill():
                    self._lost()
                    return
        except (ConnectionError, OSError):
            self._lost()

    def _lost(self) -> None:
        self.disconnected = True
        self.keep_alive = False
        self.gone.set()

    async def _refuse(self, status: int, message: str) -> None:
        """The body turned out bad while the app read it: answer if still possible, then hang up."""
        self.refused = True
        if not self.head_sent:
            self.head_sent = True
            try:
                await self.conn.write(plain_response(status, f"{_phrase(status)}: {message}", False))
            except ClientDisconnected:
                pass
        self._lost()
        self.conn.linger = True

    async def send(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            status = message.get("status")
            if not isinstance(status, int) or not 100 <= status <= 999:
                raise RuntimeError(f"http.response.start with invalid status {status!r}")
            self.started = True
            self.status = status
            self.headers = response_headers(message.get("headers"))
        elif kind == "http.response.body":
            if not self.started:
                raise RuntimeError("http.response.body before http.response.start")
            if self.complete:
                raise RuntimeError("http.response.body after the response ended")
            if self.disconnected:
                raise ClientDisconnected("the client has gone")
            data = bytes(message.get("body") or b"")
            more = bool(message.get("more_body", False))
            out = b""
            if not self.head_sent:
                out = self._head(data, more)
                self.head_sent = True
            if data and not self.no_body:
                out += b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data
            if not more:
                self.complete = True
                if self.chunked:
                    out += b"0\r\n\r\n"
            try:
                if out:
                    await self.conn.write(out)
            except ClientDisconnected:
                self._lost()
                raise
            if self.complete:
                self.gone.set()
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on an HTTP request")

    def _head(self, data: bytes, more: bool) -> bytes:
        headers = [(n, v) for n, v in self.headers if n != b"transfer-encoding"]
        names = {n for n, _ in headers}
        app_connection = b",".join(v for n, v in headers if n == b"connection").lower()
        if b"close" in app_connection or self.conn.server.stopping:
            self.keep_alive = False
        self.no_body = self.req.method == "HEAD" or self.status in (204, 304) or self.status < 200
        if not self.no_body and b"content-length" not in names:
            if not more:
                headers.append((b"content-length", str(len(data)).encode()))
            elif self.req.http_version == "1.1":
                self.chunked = True
                headers.append((b"transfer-encoding", b"chunked"))
            else:
                self.keep_alive = False  # an HTTP/1.0 stream ends where the connection does
        if b"date" not in names:
            headers.append((b"date", formatdate(usegmt=True).encode()))
        headers = [(n, v) for n, v in headers if n != b"connection"]
        if not self.keep_alive:
            headers.append((b"connection", b"close"))
        elif self.req.http_version == "1.0":
            headers.append((b"connection", b"keep-alive"))
        status_line = f"HTTP/1.1 {self.status} {_phrase(self.status)}\r\n".encode()
        return status_line + _encode_headers(headers) + b"\r\n"


class Connection:
    """``server`` is asgi_host.AsgiServer: its app, limits, ``stopping``, ``active`` and lifespan state."""

    def __init__(self, server: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.writer = writer
        self.inp = RequestInput(reader)
        self.lock = asyncio.Lock()
        self.busy = False
        self.linger = False
        self.ws: Optional[WebSocketSession] = None
        peer = writer.get_extra_info("peername")
        self.client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) and len(peer) >= 2 else None

    async def write(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise ClientDisconnected("the client has gone")
        self.writer.write(data)
        try:
            async with self.lock:  # one drain at a time: Python 3.9 refuses concurrent ones
                await self.writer.drain()
        except ConnectionError as e:
            raise ClientDisconnected(str(e)) from None

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()

    async def run(self) -> None:
        try:
            keep_alive = True
            while keep_alive and not self.server.stopping:
                try:
                    head = await asyncio.wait_for(
                        self.inp.until(b"\r\n\r\n", MAX_HEADER_BYTES, 431, "the header block"), self.server.keep_alive_s
                    )
                except (asyncio.TimeoutError, Incomplete):
                    return
                except BadRequest as e:
                    await self._reject(e)
                    return
                head = head.lstrip(b"\r\n")  # RFC 9112 2.2: empty lines before a request are ignored
                if head:
                    self.busy = True
                    try:
                        keep_alive = await self._request(head)
                    finally:
                        self.busy = False
        except (Incomplete, ConnectionError, ClientDisconnected):
            pass
        except Exception:
            log(f"connection fault:\n{traceback.format_exc()}")
        finally:
            if self.linger:
                await self._linger()
            self.close()

    async def _linger(self) -> None:
        if self.writer.is_closing():
            return
        loop = asyncio.get_running_loop()
        deadline, budget = loop.time() + LINGER_S, LINGER_BYTES
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
            while budget > 0:
                data = await asyncio.wait_for(self.inp.reader.read(65536), max(0.0, deadline - loop.time()))
                if not data:
                    return
                budget -= len(data)
        except (asyncio.TimeoutError, OSError):
            pass

    async def _reject(self, e: BadRequest) -> None:
        self.linger = True
        await self.write(plain_response(e.status, f"{_phrase(e.status)}: {e}", False))

    async def _request(self, head: bytes) -> bool:
        try:
            req = parse_head(head)
            upgrade = is_upgrade(req)
            body = None if upgrade else RequestBody(self.inp, req, self.server.max_body_bytes)
        except BadRequest as e:
            await self._reject(e)
            return False
        if self.server.at_capacity():
            self.linger = body is not None and not body.done
            await self.write(plain_response(503, "Service Unavailable: too many concurrent requests", False))
            return False
        if body is None:
            return await self._websocket(req)
        return await self._http(req, body)

    def _scope(self, kind: str, req: Request) -> dict:
        scope = {
            "type": kind,
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": req.http_version,
            "scheme": "ws" if kind == "websocket" else "http",
            "path": req.path,
            "raw_path": req.raw_path,
            "query_string": req.query,
            "root_path": self.server.root_path,
            "headers": list(req.headers),
            "client": self.client,
            "server": self.server.scope_server,
        }
        if kind == "http":
            scope["method"] = req.method
        else:
            offered = (req.header(b"sec-websocket-protocol") or b"").split(b",")
            scope["subprotocols"] = [p.strip().decode("latin-1") for p in offered if p.strip()]
        if self.server.lifespan.state is not None:
            scope["state"] = dict(self.server.lifespan.state)
        return scope

    async def _call_app(self, scope: dict, receive: Callable, send: Callable) -> Optional[BaseException]:
        self.server.active += 1
        try:
            await self.server.app(scope, receive, send)
            return None
        except Exception as e:  # noqa: BLE001 - an app's failure is its request's, never the server's
            if not isinstance(e, ClientDisconnected):
                log(f"exception in the app on {scope['type']} {scope['path']}:\n{traceback.format_exc()}")
            return e
        finally:
            self.server.active -= 1

    async def _http(self, req: Request, body: RequestBody) -> bool:
        cycle = _HttpCycle(self, req, body)
        failed = await self._call_app(self._scope("http", req), cycle.receive, cycle.send)
        if cycle.watch is not None:
            # Wait for it to let go of the stream: on 3.12+ the next read could otherwise come first.
            cycle.watch.cancel()
            await asyncio.wait([cycle.watch])
        if cycle.refused or cycle.disconnected:
            return False
        if not cycle.head_sent:
            if failed is None:
                log(f"the app returned without a complete response to {req.method} {req.path}")
            keep_alive = cycle.keep_alive and not self.server.stopping
            await self.write(plain_response(500, "Internal Server Error", keep_alive))
            return keep_alive and await self._drain(body)
        if not cycle.complete:
            return False  # the response is cut short: only closing tells the client so
        return cycle.keep_alive and await self._drain(body)

    async def _drain(self, body: RequestBody) -> bool:
        """Reads and drops the body the app left unread, so the connection can serve another request."""
        budget = DRAIN_BYTES
        try:
            while not body.done and budget > 0 and (body.chunked or body.left <= DRAIN_BYTES):
                budget -= len(await body.read())
        except (BadRequest, BodyTooLarge):
            return False
        return body.done

    async def _websocket(self, req: Request) -> bool:
        problem = handshake_error(req)
        if problem is not None:
            status, message, extra = problem
            await self.write(plain_response(status, f"{_phrase(status)}: {message}", False, extra))
            return False
        key = req.header(b"sec-websocket-key") or b""
        self.ws = WebSocketSession(self.inp, self.write, self.close, key, self.server.max_ws_message_bytes)
        failed = await self._call_app(self._scope("websocket", req), self.ws.receive, self.ws.send)
        if self.ws.state == "connecting":
            if failed is None:
                log(f"the app returned without accepting or closing the websocket on {req.path}")
            await self.write(plain_response(500, "Internal Server Error", False))
        else:
            await self.ws.after_app(failed is not None)
        return False
