"""How long a caller keeps asking while no coordinator can be reached (docs/reliability.md).

Behind a load balancer another coordinator answers once a dead one is out of
rotation, so a task's end after its stream broke off, a sandbox process's wait
and its output streams are asked for again, through the same URL, for up to
UNAVAILABLE_WAIT_S of failures in a row.
"""

import time
from typing import Optional, Tuple

from ..errors import BerthError

UNAVAILABLE_WAIT_S = 60.0


class Unreachable:
    """Counts one stretch of failures to reach a coordinator; raises once it lasted UNAVAILABLE_WAIT_S.

    ``pause`` is the first and the last pause between tries: it doubles from one to the other.
    """

    def __init__(self, pause: Tuple[float, float] = (0.2, 2.0)) -> None:
        self.pause = pause
        self.since: Optional[float] = None
        self.tries = 0

    def reset(self) -> None:
        self.since, self.tries = None, 0

    def pause_or_raise(self, e: BaseException, what: str) -> None:
        now = time.monotonic()
        self.since = self.since if self.since is not None else now
        if now - self.since > UNAVAILABLE_WAIT_S:
            if isinstance(e, BerthError):
                raise e
            raise BerthError(
                "unavailable", f"{what} broke off and no coordinator answered for {UNAVAILABLE_WAIT_S:.0f} s: {e}"
            ) from None
        time.sleep(min(self.pause[1], self.pause[0] * (2**self.tries)))
        self.tries += 1
