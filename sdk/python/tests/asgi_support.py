"""Helpers for test_asgi_host: the server on its own loop thread, a small websocket client, test apps."""

import asyncio
import base64
import concurrent.futures
import hashlib
import json
import os
import queue
import socket
import struct
import threading
from typing import Any, List, Optional, Tuple

from berth.runtime.asgi_host import AsgiServer

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
WAIT_S = 10.0


class ServerThread:
    """An AsgiServer on an event loop in a background thread; ``stop()`` shuts it down gracefully."""

    def __init__(self, app: Any, **options: Any):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="asgi-test-loop", daemon=True)
        self.thread.start()
        self.server = AsgiServer(app, **options)
        try:
            self.address = self.call(self.server.start())
        except BaseException:
            self._end_loop()
            raise

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S * 3)

    @property
    def port(self) -> int:
        return self.address[1]

    def stop_soon(self) -> "concurrent.futures.Future[None]":
        """Starts a graceful stop without waiting for it (the caller plays the client meanwhile)."""
        return asyncio.run_coroutine_threadsafe(self.server.stop(grace_s=2.0), self.loop)

    def stop(self) -> None:
        """Stops the server (once; a second call is a no-op) and ends the loop thread."""
        if self.loop.is_closed():
            return
        try:
            self.stop_soon().result(WAIT_S * 3)
        finally:
            self._end_loop()

    def _end_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()


def connect(address: Any) -> socket.socket:
    if isinstance(address, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(WAIT_S)
        s.connect(address)
        return s
    return socket.create_connection(address, timeout=WAIT_S)


def raw_exchange(address: Any, data: bytes) -> bytes:
    """Sends raw bytes and reads until the server closes the connection."""
    with connect(address) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


class WebSocketClient:
    """RFC 6455 from the client's side, with knobs to break the rules on purpose."""

    def __init__(self, address: Any, path: str = "/", subprotocols: Optional[List[str]] = None):
        self.sock = connect(address)
        self.buf = b""
        key = base64.b64encode(os.urandom(16))
        lines = [f"GET {path} HTTP/1.1", "Host: test", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key.decode()}", "Sec-WebSocket-Version: 13"]
        if subprotocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        self.status = int(head[0].split(" ")[1])
        self.headers = {}
        for line in head[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
        if self.status == 101:
            expected = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
            if self.headers.get("sec-websocket-accept") != expected:
                raise AssertionError(f"bad Sec-WebSocket-Accept {self.headers.get('sec-websocket-accept')!r}")

    def _until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            self._more()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_frame(self, opcode: int, payload: bytes, fin: bool = True, mask: bool = True, rsv: int = 0) -> None:
        head = bytes([(0x80 if fin else 0) | rsv | opcode])
        n = len(payload)
        bit = 0x80 if mask else 0
        if n < 126:
            head += bytes([bit | n])
        elif n < 65536:
            head += bytes([bit | 126]) + struct.pack("!H", n)
        else:
            head += bytes([bit | 127]) + struct.pack("!Q", n)
        if mask:
            key = os.urandom(4)
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
            head += key
        self.sock.sendall(head + payload)

    def send_text(self, text: str) -> None:
        self.send_frame(1, text.encode())

    def send_bytes(self, data: bytes) -> None:
        self.send_frame(2, data)

    def recv_frame(self) -> Tuple[bool, int, bytes]:
        b0, b1 = self._exactly(2)
        if b1 & 0x80:
            raise AssertionError("the server masked a frame")
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._exactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._exactly(8))
        return bool(b0 & 0x80), b0 & 0x0F, self._exactly(n)

    def recv(self) -> Any:
        """The next data message (str or bytes); a close frame comes back as ("close", code, reason)."""
        fin, opcode, payload = self.recv_frame()
        if opcode == 8:
            code = struct.unpack("!H", payload[:2])[0] if payload else 1005
            return ("close", code, payload[2:].decode())
        if not fin:
            raise AssertionError("this server sends whole messages")
        return payload.decode() if opcode == 1 else payload

    def close(self, code: int = 1000, reason: str = "") -> Any:
        self.send_frame(8, struct.pack("!H", code) + reason.encode())
        return self.recv()

    def at_eof(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def shut(self) -> None:
        self.sock.close()


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("disconnected while reading the body")
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def respond(send: Any, status: int, body: bytes, headers: Optional[list] = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers or []})
    await send({"type": "http.response.body", "body": body})


class TestApp:
    """Records what it sees in ``events`` (a thread-safe queue) so tests can wait on it."""

    def __init__(self, lifespan: bool = True):
        self.lifespan = lifespan
        self.events: "queue.Queue[Any]" = queue.Queue()
        self.release: Optional[asyncio.Event] = None

    def next_event(self) -> Any:
        return self.events.get(timeout=WAIT_S)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            if not self.lifespan:
                raise RuntimeError("no lifespan here")
            while True:
                message = await receive()
                self.events.put(message["type"])
                if message["type"] == "lifespan.startup":
                    scope["state"]["greeting"] = "hi"
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        route = scope["path"].strip("/").split("/")[0].replace("-", "_") or "scope"
        handler = getattr(self, ("ws_" if kind == "websocket" else "http_") + route)
        await handler(scope, receive, send)

    async def http_scope(self, scope: dict, receive: Any, send: Any) -> None:
        body = await read_body(receive)
        shown = {k: v for k, v in scope.items() if k not in ("headers", "raw_path", "query_string", "state")}
        shown.update(raw_path=scope["raw_path"].decode(), query_string=scope["query_string"].decode(),
                     headers=[[n.decode(), v.decode()] for n, v in scope["headers"]], state=scope.get("state"),
                     body_length=len(body), body_sha256=hashlib.sha256(body).hexdigest())
        await respond(send, 200, json.dumps(shown).encode(), [(b"content-type", b"application/json")])

    async def http_stream(self, scope: dict, receive: Any, send: Any) -> None:
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-kind", b"stream")]})
        for part in (b"one,", b"", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def http_ignore_body(self, scope: dict, receive: Any, send: Any) -> None:
        await respond(send, 404, b"nothing here")

    async def http_boom(self, scope: dict, receive: Any, send: Any) -> None:
        raise ValueError("the app broke")

    async def http_boom_after_start(self, scope: dict, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("the app broke midway")

    async def http_wait_disconnect(self, scope: dict, receive: Any, send: Any) -> None:
        await read_body(receive)
        self.events.put("waiting")
        self.events.put((await receive())["type"])

    async def http_listen(self, scope: dict, receive: Any, send: Any) -> None:
        """Streams while listening for a disconnect, as Starlette's StreamingResponse does."""
        await read_body(receive)
        listener = asyncio.ensure_future(receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0)  # the listener is now waiting on the socket
        await send({"type": "http.response.body", "body": b"listened"})
        self.events.put((await listener)["type"])

    async def http_hold(self, scope: dict, receive: Any, send: Any) -> None:
        self.release = asyncio.Event()
        self.events.put("holding")
        await self.release.wait()
        await respond(send, 200, b"released")

    async def ws_echo(self, scope: dict, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        offered = scope["subprotocols"]
        await send({"type": "websocket.accept", "subprotocol": offered[0] if offered else None,
                    "headers": [(b"x-hello", b"world")]})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                self.events.put(("disconnect", message["code"]))
                return
            if message.get("text") == "close please":
                await send({"type": "websocket.close", "code": 4000, "reason": "asked"})
                continue
            await send({"type": "websocket.send", **{k: v for k, v in message.items() if k in ("text", "bytes")}})

    async def ws_refuse(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.close"})

    async def ws_crash(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await receive()
        raise RuntimeError("the websocket app broke")
