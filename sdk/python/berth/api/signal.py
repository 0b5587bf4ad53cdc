"""Signal: tell running containers to do something (docs/queues.md).

``Signal(name).set(ttl)`` marks the signal set for ``ttl`` seconds. In every
running container of the workspace that made a ``Signal(name, handler=...)``
the handler then runs once for that set (a container that starts while the
signal is still set runs it too). With ``clear_after_interval`` the
container clears the signal that many seconds after its handler ran.
"""

import threading
import time
from typing import Any, Callable, Dict, Optional

from .. import env
from ..errors import BerthError
from ..unix_http import log
from . import state_transport
from .state import check_name

DEFAULT_TTL_S = 600
# How long one wait is held by the coordinator; the call's own timeout is longer.
WAIT_MS = 20_000


def _log(message: str) -> None:
    log(message, who="signal")


class Signal:
    def __init__(
        self,
        name: str,
        handler: Optional[Callable[[], Any]] = None,
        clear_after_interval: Optional[int] = None,
    ):
        self.name = check_name("signal", name)
        self.handler = handler
        self.clear_after_interval = clear_after_interval
        self._stopped = threading.Event()
        if handler is not None and env.is_remote():
            threading.Thread(target=self._listen, name=f"berth-signal-{name}", daemon=True).start()

    def _call(self, op: str, timeout: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
        return state_transport.call({"op": op, "name": self.name, **fields}, timeout)

    def set(self, ttl: Optional[int] = DEFAULT_TTL_S) -> bool:
        """Sets the signal for ``ttl`` seconds (1 to 86400); handlers of running containers fire."""
        self._call("signal.set", ttl=DEFAULT_TTL_S if ttl is None else int(ttl))
        return True

    def clear(self) -> bool:
        """Clears the signal; False when it was not set."""
        return bool(self._call("signal.clear").get("cleared"))

    def is_set(self) -> bool:
        return bool(self._call("signal.state")["signal"]["set"])

    def stop(self) -> None:
        """Stops this container's listener (the handler runs no more)."""
        self._stopped.set()

    def _listen(self) -> None:
        seen = 0
        delay = 0.5
        while not self._stopped.is_set():
            try:
                answer = state_transport.call(
                    {"op": "signal.wait", "names": [self.name], "seen": {self.name: seen}, "wait_ms": WAIT_MS},
                    WAIT_MS / 1000 + 40,
                )
                delay = 0.5
            except (BerthError, OSError) as e:
                _log(f"waiting for {self.name} failed ({e}); retrying in {delay:.1f} s")
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            except Exception as e:  # the agent went away for good (AgentGone) and the like
                _log(f"the listener for {self.name} stops: {e}")
                return
            for fired in answer.get("fired") or []:
                seen = max(seen, int(fired.get("revision") or 0))
                if self._stopped.is_set():
                    return
                self._fire()

    def _fire(self) -> None:
        _log(f"{self.name} is set: running its handler")
        try:
            self.handler()  # type: ignore[misc]
        except Exception as e:  # a failing handler must not end the listener
            _log(f"the handler of {self.name} raised {type(e).__name__}: {e}")
        interval = self.clear_after_interval
        if interval is not None and interval > 0:
            timer = threading.Timer(interval, self._clear_quietly)
            timer.daemon = True
            timer.start()

    def _clear_quietly(self) -> None:
        try:
            self.clear()
        except Exception as e:
            _log(f"clearing {self.name} failed: {e}")

    def __repr__(self) -> str:
        return f"Signal(name={self.name!r})"
