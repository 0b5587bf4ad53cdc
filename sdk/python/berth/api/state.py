"""Queue and Map: distributed state that outlives containers (docs/queues.md).

Values are pickled (cloudpickle when importable, as task arguments are) and
kept by the cluster's JetStream in the workspace of the token, or of the
container, that uses them.
"""

import re
import time
from typing import Any, Iterator, List, Optional, Tuple

from .. import serialize
from ..errors import BerthError
from . import state_transport

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_MISSING = object()


def check_name(kind: str, name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(
            f"{kind} name {name!r} is not valid: 1 to 63 letters, digits, '_' or '-', starting with a letter or digit"
        )
    return name


def _pack(value: Any) -> str:
    return serialize.b64(serialize.dumps(value))


def _unpack(text: str) -> Any:
    return serialize.loads(serialize.unb64(text))


class Queue:
    """A FIFO queue many containers share: each item is popped by exactly one of them."""

    def __init__(self, name: str):
        self.name = check_name("queue", name)

    def _call(self, op: str, **fields: Any) -> dict:
        return state_transport.call({"op": op, "name": self.name, **fields})

    def put(self, value: Any) -> bool:
        """Adds the item; it is stored once this returns."""
        self._call("queue.put", value=_pack(value))
        return True

    def pop(self, block: bool = False, timeout: Optional[float] = None) -> Any:
        """The oldest item, removed; None when the queue is empty.

        With ``block=True`` it waits for an item (up to ``timeout`` seconds,
        then None; forever without one), polling the queue.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.05
        while True:
            value = self._call("queue.pop").get("value")
            if value is not None:
                return _unpack(value)
            if not block:
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return None
            pause = delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 2, 1.0)

    def size(self) -> int:
        return int(self._call("queue.size")["size"])

    def empty(self) -> bool:
        return self.size() == 0

    def __len__(self) -> int:
        return self.size()

    def __repr__(self) -> str:
        return f"Queue(name={self.name!r})"


class Map:
    """A dict many containers share; keys are strings, values anything picklable."""

    def __init__(self, name: str):
        self.name = check_name("map", name)

    def _call(self, op: str, **fields: Any) -> dict:
        return state_transport.call({"op": op, "name": self.name, **fields})

    @staticmethod
    def _key(key: Any) -> str:
        if not isinstance(key, str):
            raise TypeError(f"Map keys are strings, not {type(key).__name__}")
        return key

    def set(self, key: str, value: Any) -> bool:
        self._call("map.set", key=self._key(key), value=_pack(value))
        return True

    def get(self, key: str, default: Any = None) -> Any:
        value = self._call("map.get", key=self._key(key)).get("value")
        return default if value is None else _unpack(value)

    def delete(self, key: str) -> bool:
        """Removes the key; False when it was not there."""
        return bool(self._call("map.delete", key=self._key(key)).get("deleted"))

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __delitem__(self, key: str) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    def keys(self) -> List[str]:
        return list(self._call("map.keys")["keys"])

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return int(self._call("map.size")["size"])

    def items(self) -> List[Tuple[str, Any]]:
        """Every (key, value), in key order; read page by page."""
        out: List[Tuple[str, Any]] = []
        after: Optional[str] = None
        while True:
            page = self._call("map.items", **({} if after is None else {"after": after}))
            out.extend((k, _unpack(v)) for k, v in page["items"])
            after = page.get("next")
            if after is None:
                return out

    def values(self) -> List[Any]:
        return [v for _, v in self.items()]

    def __repr__(self) -> str:
        return f"Map(name={self.name!r})"


__all__ = ["Map", "Queue", "BerthError"]
