"""Reading HTTP/1.1 requests for the standard-library ASGI server (asgi_http.py).

The request line and headers, checked (bad input raises ``BadRequest`` with
the status and a message naming the cause), and the body, plain or chunked,
handed out in pieces and never past its limit.
"""

import asyncio
import re
from typing import List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from .asgi_websocket import Incomplete

MAX_HEADER_BYTES = 64 * 1024

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class BodyTooLarge(Exception):
    pass


class RequestInput:
    """A buffer over the stream, so the server can read ahead to notice a disconnect."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader
        self.buf = bytearray()

    async def fill(self) -> bool:
        data = await self.reader.read(256 * 1024)
        self.buf += data
        return bool(data)

    async def until(self, sep: bytes, limit: int, status: int, what: str) -> bytes:
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i > limit or (i < 0 and len(self.buf) > limit):
                raise BadRequest(status, f"{what} is longer than {limit} bytes")
            if i >= 0:
                out = bytes(self.buf[: i + len(sep)])
                del self.buf[: i + len(sep)]
                return out
            start = max(0, len(self.buf) - len(sep) + 1)
            if not await self.fill():
                raise Incomplete()

    async def some(self, n: int) -> bytes:
        if not self.buf and not await self.fill():
            raise Incomplete()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not await self.fill():
                raise Incomplete()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


class Request:
    def __init__(self, method: str, version: str, target: bytes, headers: List[Tuple[bytes, bytes]]):
        self.method = method
        self.http_version = version
        self.headers = headers
        if target.startswith(b"/"):
            raw_path, _, query = target.partition(b"?")
        elif target == b"*" and method == "OPTIONS":
            raw_path, query = b"*", b""
        elif target[:7].lower() == b"http://" or target[:8].lower() == b"https://":
            parts = urlsplit(target)
            raw_path, query = parts.path or b"/", parts.query
        else:
            raise BadRequest(400, "the request target is not a path")
        self.raw_path = raw_path.partition(b"#")[0]
        self.query = query.partition(b"#")[0]
        self.path = unquote(self.raw_path.decode("ascii"))

    def header(self, name: bytes) -> Optional[bytes]:
        values = [v for n, v in self.headers if n == name]
        return b", ".join(values) if values else None

    def tokens(self, name: bytes) -> List[bytes]:
        return [t.strip().lower() for t in (self.header(name) or b"").split(b",") if t.strip()]


def parse_head(block: bytes) -> Request:
    lines = block[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    m = _VERSION.fullmatch(version)
    if not m:
        raise BadRequest(400, "malformed HTTP version")
    if m.group(1) != b"1":
        raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are served")
    try:
        target.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "the request target is not ASCII") from None
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header line")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise BadRequest(400, "control character in a header value")
        headers.append((name.lower(), value))
    req = Request(method.decode("ascii"), "1.1" if m.group(2) != b"0" else "1.0", target, headers)
    if req.http_version == "1.1" and req.header(b"host") is None:
        raise BadRequest(400, "HTTP/1.1 request without a Host header")
    return req


class RequestBody:
    """The request body as the app receives it, in pieces, never more than the limit."""

    def __init__(self, inp: RequestInput, req: Request, limit: int):
        self.inp = inp
        self.limit = limit
        self.received = 0
        self.chunk_left = 0
        te, cl = req.header(b"transfer-encoding"), req.header(b"content-length")
        if te is not None:
            if cl is not None:
                raise BadRequest(400, "both Transfer-Encoding and Content-Length")
            if req.tokens(b"transfer-encoding") != [b"chunked"]:
                raise BadRequest(501, "only the chunked transfer coding is supported")
            self.chunked, self.left = True, -1
        elif cl is not None:
            values = {v.strip() for v in cl.split(b",")}
            if len(values) != 1 or not values.pop().isdigit():
                raise BadRequest(400, "invalid Content-Length")
            self.chunked, self.left = False, int(cl.split(b",")[0])
            if self.left > limit:
                raise BadRequest(413, f"the request body is larger than {limit} bytes")
        else:
            self.chunked, self.left = False, 0

    @property
    def done(self) -> bool:
        return self.left == 0

    async def read(self) -> bytes:
        if not self.chunked:
            data = await self.inp.some(min(self.left, 256 * 1024)) if self.left else b""
            self.left -= len(data)
            return data
        if self.chunk_left == 0:
            line = await self.inp.until(b"\r\n", 4096, 400, "a chunk size line")
            size = line[:-2].partition(b";")[0].strip()
            if not _HEX.fullmatch(size):
                raise BadRequest(400, "invalid chunk size")
            self.chunk_left = int(size, 16)
            if self.chunk_left == 0:
                while await self.inp.until(b"\r\n", MAX_HEADER_BYTES, 431, "the trailer section") != b"\r\n":
                    pass
                self.left = 0
                return b""
            if self.received + self.chunk_left > self.limit:
                raise BodyTooLarge()
        data = await self.inp.some(min(self.chunk_left, 256 * 1024))
        self.chunk_left -= len(data)
        self.received += len(data)
        if self.chunk_left == 0 and await self.inp.exactly(2) != b"\r\n":
            raise BadRequest(400, "a chunk does not end with CRLF")
        return data
