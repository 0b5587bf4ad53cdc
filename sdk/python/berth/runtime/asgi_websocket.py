"""RFC 6455 websockets for the standard-library ASGI server (asgi_host.py, docs/asgi.md).

One ``WebSocketSession`` per upgraded connection: it answers the handshake when
the app sends ``websocket.accept``, and a reader task turns client frames into
ASGI events, answering pings and the close handshake itself so that an app
busy with one message still keeps its connection alive.
"""

import asyncio
import base64
import hashlib
import re
import struct
from typing import Any, Awaitable, Callable, List, Optional, Tuple

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
# Messages read ahead of the app; beyond it the reader stops and TCP pushes back on the client.
QUEUED_MESSAGES = 8
CLOSE_WAIT_S = 5.0

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


class ClientDisconnected(OSError):
    """Raised by ``send`` once the client has gone (ASGI spec 2.4)."""


class Incomplete(Exception):
    """The peer closed the connection in the middle of something."""


class _Fail(Exception):
    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def response_headers(headers: Any) -> List[Tuple[bytes, bytes]]:
    """An app's response headers, refusing what would break the framing (CR, LF, bad names)."""
    out = []
    for name, value in headers or ():
        name, value = bytes(name), bytes(value)
        if not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value):
            raise RuntimeError(f"invalid response header {name!r}: {value!r}")
        out.append((name.lower(), value))
    return out


def is_upgrade(req: Any) -> bool:
    return b"websocket" in req.tokens(b"upgrade") and b"upgrade" in req.tokens(b"connection")


def handshake_error(req: Any) -> Optional[Tuple[int, str, bytes]]:
    """(status, reason, extra header lines) when an upgrade request is not a valid RFC 6455 handshake."""
    if req.method != "GET" or req.http_version != "1.1":
        return 400, "a websocket handshake must be an HTTP/1.1 GET", b""
    if req.header(b"sec-websocket-version") != b"13":
        return 426, "only websocket version 13 is supported", b"sec-websocket-version: 13\r\n"
    key = req.header(b"sec-websocket-key") or b""
    try:
        ok = len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        ok = False
    return None if ok else (400, "invalid Sec-WebSocket-Key", b"")


def accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + WS_GUID).digest())


def encode_frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def unmask(data: bytes, mask: bytes) -> bytes:
    # One big-integer XOR: C speed without a C extension.
    n = len(data)
    if not n:
        return b""
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def valid_close_code(code: int) -> bool:
    return code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014) or 3000 <= code <= 4999


def close_payload(code: int, reason: str = "") -> bytes:
    if code == 1005:
        return b""
    data = reason.encode("utf-8")[:123]
    while data:  # a cut in the middle of a character would make the frame invalid
        try:
            data.decode("utf-8")
            break
        except UnicodeDecodeError:
            data = data[:-1]
    return struct.pack("!H", code) + data


class WebSocketSession:
    def __init__(
        self,
        inp: Any,
        write: Callable[[bytes], Awaitable[None]],
        close_transport: Callable[[], None],
        key: bytes,
        max_message_bytes: int,
    ):
        self.inp = inp
        self._write = write
        self.close_transport = close_transport
        self.key = key
        self.max_message_bytes = max_message_bytes
        self.state = "connecting"  # -> open -> closing -> closed, or connecting -> refused
        self.connect_delivered = False
        self.events: "asyncio.Queue[dict]" = asyncio.Queue()
        self.room = asyncio.Event()
        self.disconnect: Optional[dict] = None
        self.final_queued = False
        self.close_sent = False
        self.app_done = False
        self.reader: Optional["asyncio.Future[None]"] = None

    # ---- the app's side ----

    async def receive(self) -> dict:
        if not self.connect_delivered:
            self.connect_delivered = True
            return {"type": "websocket.connect"}
        if self.disconnect is not None:
            return self.disconnect
        event = await self.events.get()
        self.room.set()
        if event["type"] == "websocket.disconnect":
            self.disconnect = event
        return event

    async def send(self, message: dict) -> None:
        kind = message.get("type")
        if self.state == "connecting":
            if kind == "websocket.accept":
                await self._accept(message)
            elif kind == "websocket.close":
                # ASGI: a close before accept refuses the handshake with 403.
                self.state = "refused"
                self._finish(1000, "")
                await self._write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            else:
                raise RuntimeError(f"ASGI message {kind!r} before websocket.accept (not supported by this server)")
            return
        if kind == "websocket.send":
            if self.state != "open":
                raise ClientDisconnected("the websocket is closed")
            data, text = message.get("bytes"), message.get("text")
            if data is not None:
                frame = encode_frame(OP_BINARY, bytes(data))
            elif text is not None:
                frame = encode_frame(OP_TEXT, str(text).encode("utf-8"))
            else:
                raise RuntimeError("websocket.send without bytes or text")
            await self._write(frame)
        elif kind == "websocket.close":
            if self.state == "open":
                await self._close(int(message.get("code") or 1000), str(message.get("reason") or ""))
        elif kind == "websocket.accept":
            raise RuntimeError("websocket.accept sent twice")
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on a websocket")

    # ---- the connection's side ----

    async def _accept(self, message: dict) -> None:
        lines = [
            b"HTTP/1.1 101 Switching Protocols",
            b"upgrade: websocket",
            b"connection: Upgrade",
            b"sec-websocket-accept: " + accept_key(self.key),
        ]
        subprotocol = message.get("subprotocol")
        if subprotocol:
            lines.append(b"sec-websocket-protocol: " + str(subprotocol).encode("latin-1"))
        for name, value in response_headers(message.get("headers")):
            if name not in (b"upgrade", b"connection", b"sec-websocket-accept", b"sec-websocket-protocol"):
                lines.append(name + b": " + value)
        await self._write(b"\r\n".join(lines) + b"\r\n\r\n")
        self.state = "open"
        self.reader = asyncio.ensure_future(self._read_loop())

    async def _close(self, code: int, reason: str) -> None:
        if not valid_close_code(code):
            raise RuntimeError(f"websocket.close with invalid code {code}")
        self.state = "closing"
        await self._send_close(code, reason)

    async def _send_close(self, code: int, reason: str) -> None:
        if self.close_sent:
            return
        self.close_sent = True
        try:
            await self._write(encode_frame(OP_CLOSE, close_payload(code, reason)))
        except ClientDisconnected:
            self._finish(1006, "")

    def _finish(self, code: int, reason: str) -> None:
        if not self.final_queued:
            self.final_queued = True
            self.events.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})

    async def shutdown(self) -> None:
        """The server is stopping: 1012 to the client, and the app hears of it at once."""
        if self.state == "open":
            self._finish(1012, "server shutting down")
            await self._close(1012, "server shutting down")

    async def after_app(self, failed: bool) -> None:
        self.app_done = True
        self.room.set()
        if self.state == "open":
            await self._close(1011 if failed else 1000, "")
        if self.reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.reader), CLOSE_WAIT_S)
            except (asyncio.TimeoutError, Exception):
                self.reader.cancel()

    async def _read_loop(self) -> None:
        try:
            await self._read_frames()
        except _Fail as f:
            await self._send_close(f.code, f.reason)
            self._finish(f.code, f.reason)
        except (Incomplete, ConnectionError, OSError):
            self._finish(1006, "")
        self.state = "closed"
        self.close_transport()

    async def _read_frames(self) -> None:
        message_op: Optional[int] = None
        parts: List[bytes] = []
        size = 0
        while True:
            b0, b1 = await self.inp.exactly(2)
            fin, opcode, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if b0 & 0x70:
                raise _Fail(1002, "reserved bits set without an extension")
            if not b1 & 0x80:
                raise _Fail(1002, "client frames must be masked")
            if n == 126:
                (n,) = struct.unpack("!H", await self.inp.exactly(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", await self.inp.exactly(8))
            if opcode >= OP_CLOSE:
                if opcode not in (OP_CLOSE, OP_PING, OP_PONG):
                    raise _Fail(1002, f"unknown opcode {opcode}")
                if not fin or n > 125:
                    raise _Fail(1002, "control frames must be whole and at most 125 bytes")
            elif opcode not in (OP_CONT, OP_TEXT, OP_BINARY):
                raise _Fail(1002, f"unknown opcode {opcode}")
            elif (opcode == OP_CONT) != (message_op is not None):
                raise _Fail(1002, "unexpected continuation frame" if opcode == OP_CONT else "expected a continuation")
            elif size + n > self.max_message_bytes:
                raise _Fail(1009, f"message larger than {self.max_message_bytes} bytes")
            mask = await self.inp.exactly(4)
            payload = unmask(await self.inp.exactly(n), mask)
            if opcode == OP_CLOSE:
                await self._peer_close(payload)
                return
            if opcode == OP_PING:
                if self.state == "open":
                    await self._write(encode_frame(OP_PONG, payload))
                continue
            if opcode == OP_PONG:
                continue
            if opcode != OP_CONT:
                message_op = opcode
            parts.append(payload)
            size += n
            if not fin:
                continue
            data, op = b"".join(parts), message_op
            parts, size, message_op = [], 0, None
            if op == OP_TEXT:
                try:
                    event = {"type": "websocket.receive", "text": data.decode("utf-8")}
                except UnicodeDecodeError:
                    raise _Fail(1007, "a text message is not valid UTF-8") from None
            else:
                event = {"type": "websocket.receive", "bytes": data}
            while self.events.qsize() >= QUEUED_MESSAGES and not self.app_done:
                self.room.clear()
                await self.room.wait()
            if not self.app_done and not self.final_queued:
                self.events.put_nowait(event)

    async def _peer_close(self, payload: bytes) -> None:
        if len(payload) == 1:
            raise _Fail(1002, "a close frame with a 1-byte payload")
        code = struct.unpack("!H", payload[:2])[0] if payload else 1005
        if payload and not valid_close_code(code):
            raise _Fail(1002, f"invalid close code {code}")
        try:
            reason = payload[2:].decode("utf-8")
        except UnicodeDecodeError:
            raise _Fail(1007, "the close reason is not valid UTF-8") from None
        await self._send_close(code, "")
        self._finish(code, reason)
