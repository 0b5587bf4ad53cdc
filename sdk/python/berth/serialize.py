"""Pickling of task arguments and results (cloudpickle when importable).

cloudpickle pickles functions and classes of ``__main__`` by value, so a
script's own types travel to the container, which imports the script under
another name.
"""

import base64
import io
import os
import pickle
import sys
from typing import Any, Optional, Tuple

from .errors import ArgumentsTooLargeError, SerializationError

try:  # pragma: no cover - depends on the environment
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover
    _pickler = pickle

# Both ends may run different Python versions: protocol 4 reads on 3.8 and later.
PROTOCOL = 4
MAX_TASK_ARGS_BYTES = 4 * 1024 * 1024
MAX_TASK_RESULT_BYTES = 4 * 1024 * 1024


def dumps(obj: Any) -> bytes:
    return _pickler.dumps(obj, protocol=PROTOCOL)


def _main_alias() -> Optional[str]:
    """The name the container imports this process's script under ("app" for `python app.py`)."""
    if os.environ.get("BERTH_REMOTE") == "1":
        return None
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    file = getattr(main, "__file__", None)
    return os.path.splitext(os.path.basename(file))[0] if file else None


class _Unpickler(pickle.Unpickler):
    """Resolves the script's own classes to ``__main__``, so ``except MyError`` catches a remote MyError."""

    def __init__(self, data: io.BytesIO, alias: Optional[str]):
        super().__init__(data)
        self.alias = alias

    def find_class(self, module: str, name: str) -> Any:
        if self.alias and module == self.alias:
            obj: Any = sys.modules["__main__"]
            try:
                for part in name.split("."):
                    obj = getattr(obj, part)
                return obj
            except AttributeError:
                pass
        return super().find_class(module, name)


def loads(data: bytes) -> Any:
    alias = _main_alias()
    if alias is None:
        return pickle.loads(data)
    return _Unpickler(io.BytesIO(data), alias).load()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _describe(value: Any) -> str:
    t = type(value)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    return f"a {name}"


def _culprit(args: tuple, kwargs: dict) -> Tuple[str, Exception]:
    """Which argument fails to pickle, and why (pickles each one alone)."""
    for i, a in enumerate(args):
        try:
            dumps(a)
        except Exception as e:
            return f"argument {i} ({_describe(a)})", e
    for k, v in kwargs.items():
        try:
            dumps(v)
        except Exception as e:
            return f"keyword argument {k!r} ({_describe(v)})", e
    return "the arguments", SerializationError("the argument tuple does not pickle as a whole")


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB ({n} bytes)"


def dump_args(args: tuple, kwargs: dict, what: str = "the call") -> bytes:
    """The pickled ``(args, kwargs)`` of one task, checked against the 4 MiB limit."""
    try:
        data = dumps((tuple(args), dict(kwargs)))
    except Exception as e:
        name, reason = _culprit(tuple(args), dict(kwargs))
        if reason is None:
            reason = e
        raise SerializationError(
            f"{name} of {what} cannot be pickled: {type(reason).__name__}: {reason}"
        ) from None
    if len(data) > MAX_TASK_ARGS_BYTES:
        raise ArgumentsTooLargeError(
            f"the pickled arguments of {what} are {_size(len(data))}; the limit is 4 MiB "
            f"({MAX_TASK_ARGS_BYTES} bytes) per task: pass large data through a volume or "
            "Client.upload_file instead",
            len(data),
            MAX_TASK_ARGS_BYTES,
        )
    return data
