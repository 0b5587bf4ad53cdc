"""The wire format of the sandbox process server (sandbox_init.py): frames,
their kinds, the START request and how an exit status is reported.

Loaded by sandbox_init.py from its own file path, never through the berth
package, so it stays stdlib only and Python 3.6+ syntax like the server.
"""

import json
import os
import struct

# A frame: kind (1 byte), payload length (4 bytes, big-endian), payload.
HEADER = struct.Struct(">cI")
MAX_FRAME = 1 << 20

# Client -> server.
START = b"S"  # JSON {args, env, cwd?, user?: [uid, gid]}; the first frame, once
STDIN = b"I"  # raw bytes for the process's stdin
CLOSE_STDIN = b"C"  # empty
SIGNAL = b"K"  # JSON {signal: number}
# Server -> client.
STARTED = b"P"  # JSON {pid}: pid inside the container
STDOUT = b"O"  # raw bytes
STDERR = b"E"  # raw bytes
EXIT = b"X"  # JSON {exit_code}: 128+signo when killed; after all output
FAILED = b"F"  # JSON {stage, errno, message}: the process never ran (bad request, exec failed)


class ProtocolError(Exception):
    pass


def encode(kind, payload=b""):
    return HEADER.pack(kind, len(payload)) + payload


def encode_json(kind, obj):
    return encode(kind, json.dumps(obj, separators=(",", ":")).encode())


class FrameReader:
    """Splits a byte stream into (kind, payload) frames."""

    def __init__(self, max_frame=MAX_FRAME):
        self.buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data):
        self.buf += data
        frames = []
        while len(self.buf) >= HEADER.size:
            kind, size = HEADER.unpack_from(self.buf)
            if size > self.max_frame:
                raise ProtocolError("frame of %d bytes is over the %d byte limit" % (size, self.max_frame))
            if len(self.buf) < HEADER.size + size:
                break
            frames.append((kind, bytes(self.buf[HEADER.size:HEADER.size + size])))
            del self.buf[:HEADER.size + size]
        return frames


def exit_code(status):
    """A wait status as ExecSession reports it: the exit code, or 128+signo."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 255


def _text(v):
    return isinstance(v, str) and "\0" not in v


def parse_start(payload):
    """The START frame's request, checked; raises ValueError naming what is wrong."""
    try:
        req = json.loads(payload.decode())
    except ValueError:
        raise ValueError("start request is not JSON")
    if not isinstance(req, dict):
        raise ValueError("start request must be an object")
    args, env, cwd, user = req.get("args"), req.get("env") or {}, req.get("cwd"), req.get("user")
    if not isinstance(args, list) or not args or not all(_text(a) for a in args):
        raise ValueError("args must be a non-empty list of strings")
    if args[0] == "":
        raise ValueError("args[0] must not be empty")
    if not isinstance(env, dict) or not all(_text(k) and k and "=" not in k and _text(v) for k, v in env.items()):
        raise ValueError("env must be an object of strings")
    if cwd is not None and not (_text(cwd) and cwd.startswith("/")):
        raise ValueError("cwd must be an absolute path")
    ids = user if isinstance(user, list) and len(user) == 2 else [None]
    if user is not None and not all(type(n) is int and 0 <= n <= 0xFFFFFFFF for n in ids):
        raise ValueError("user must be [uid, gid]")
    return {"args": args, "env": env, "cwd": cwd, "user": user}
