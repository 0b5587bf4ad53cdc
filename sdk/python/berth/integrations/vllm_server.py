"""The container side of ``integrations.VLLM``: vLLM's OpenAI server on loopback behind an ASGI pass-through.

vLLM runs as its own process (``python -m vllm.entrypoints.openai.api_server``,
its stable entry point, rather than its internal app-building functions that
change between releases). Lifespan startup starts it on a free loopback port
and waits for ``GET /health``; every HTTP request is then passed through with
its body, and the answer goes back chunk by chunk as vLLM writes it (SSE
streams included). When the caller goes away the upstream connection is closed,
which makes vLLM abort the generation. Lifespan shutdown stops the process.
"""

import asyncio
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
HEALTH_POLL_S = 0.5
STOP_GRACE_S = 15
# Hop-by-hop headers (RFC 9110 7.6.1) are the connection's own, never passed on.
_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"proxy-connection", b"host"}

MISSING_VLLM = (
    "integrations.VLLM: the package 'vllm' is not installed in this container's image, so vLLM's OpenAI "
    "server cannot start. Use the default image (it adds fastapi, vllm and huggingface_hub) or add it to "
    "yours: image=Image(...).add_python_packages(['vllm']), or Image.from_registry() of an image that has vllm"
)


def vllm_available() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServerApp:
    """An ASGI app (HTTP and lifespan) fronting one vLLM server process."""

    def __init__(self, args: List[str], startup_timeout_s: float = 3600, python: str = sys.executable):
        if not vllm_available():
            raise RuntimeError(MISSING_VLLM)
        self.args = list(args)
        self.python = python
        self.startup_timeout_s = startup_timeout_s if startup_timeout_s and startup_timeout_s > 0 else 3600
        self.port = 0
        self.process: Optional[subprocess.Popen] = None
        self.output: Deque[str] = deque(maxlen=40)

    # ---- process ----

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        # Tokenizers and configs land in the cache volume too, so a new container does not download them again.
        cache = os.path.abspath("vllm_cache")
        if os.path.isdir(cache):
            env.setdefault("HF_HOME", os.path.join(cache, "huggingface"))
        return env

    async def start(self) -> None:
        self.port = _free_port()
        argv = [self.python, "-m", VLLM_MODULE, "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        print(f"berth: starting vLLM: {' '.join(argv)}", file=sys.stderr, flush=True)
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self._env(), start_new_session=True
        )
        # A thread of its own (not the loop's executor, whose shutdown would wait for vLLM to exit).
        threading.Thread(target=self._relay_output, args=(self.process,), name="vllm-output", daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                await asyncio.sleep(0.1)  # the relay's last lines
                raise RuntimeError(f"vLLM exited with status {code} while starting; its last output:\n{self._tail()}")
            if await self._healthy():
                return
            if time.monotonic() > deadline:
                await self.stop()
                raise RuntimeError(
                    f"vLLM did not answer /health within {self.startup_timeout_s:g} s (the deployment's timeout); "
                    f"its last output:\n{self._tail()}"
                )
            await asyncio.sleep(HEALTH_POLL_S)

    def _relay_output(self, process: subprocess.Popen) -> None:
        """vLLM's output goes to the container's log and the last lines are kept for a startup error."""
        assert process.stdout is not None
        with process.stdout:
            for raw in process.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.output.append(line)
                print(line, file=sys.stderr, flush=True)

    def _tail(self) -> str:
        return "\n".join(self.output) or "(none)"

    async def _healthy(self) -> bool:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        try:
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            await writer.drain()
            status = await reader.readline()
            return status.split(b" ")[1:2] == [b"200"]
        except (OSError, IndexError):
            return False
        finally:
            writer.close()

    async def stop(self) -> None:
        p = self.process
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while p.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    # ---- ASGI ----

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        else:
            raise RuntimeError(f"integrations.VLLM serves HTTP only, not {kind}")

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as e:  # noqa: BLE001 - reported to the host, which answers every request with it
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError as e:
            await _plain(send, 502, f"vLLM's server is not reachable: {e}")
            return
        try:
            writer.write(_request_head(scope, len(body)) + bytes(body))
            await writer.drain()
            status, headers = await _response_head(reader)
            passed = [(n, v) for n, v in headers if n not in _HOP]
            await send({"type": "http.response.start", "status": status, "headers": passed})
            async for chunk in _body(reader, headers):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            # Also when the caller went away (send raised): closing the connection aborts vLLM's generation.
            writer.close()


async def _plain(send: Any, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": text.encode()})


def _request_head(scope: Dict[str, Any], length: int) -> bytes:
    path = scope.get("raw_path") or scope["path"].encode("utf-8")
    if scope.get("query_string"):
        path += b"?" + scope["query_string"]
    lines = [b"%s %s HTTP/1.1" % (scope["method"].encode("ascii"), path), b"host: 127.0.0.1", b"connection: close"]
    for name, value in scope.get("headers", []):
        if name.lower() not in _HOP and name.lower() != b"content-length":
            lines.append(name + b": " + value)
    lines.append(b"content-length: %d" % length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _response_head(reader: asyncio.StreamReader) -> Tuple[int, List[Tuple[bytes, bytes]]]:
    status_line = await reader.readline()
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise RuntimeError(f"vLLM answered something other than HTTP: {status_line[:80]!r}")
    headers: List[Tuple[bytes, bytes]] = []
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        headers.append((name.strip().lower(), value.strip()))
    return int(parts[1]), headers


def _header(headers: List[Tuple[bytes, bytes]], name: bytes) -> Optional[bytes]:
    for n, v in headers:
        if n == name:
            return v
    return None


async def _body(reader: asyncio.StreamReader, headers: List[Tuple[bytes, bytes]]) -> Any:
    """The response body as it arrives: chunked decoding, a Content-Length, or until vLLM closes."""
    if (_header(headers, b"transfer-encoding") or b"").lower() == b"chunked":
        while True:
            size_line = await reader.readline()
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return
            chunk = await reader.readexactly(size)
            await reader.readline()  # the CRLF after the chunk
            yield chunk
    length = _header(headers, b"content-length")
    if length is not None:
        remaining = int(length)
        while remaining > 0:
            chunk = await reader.read(min(remaining, 65536))
            if not chunk:
                return
            remaining -= len(chunk)
            yield chunk
        return
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            return
        yield chunk
