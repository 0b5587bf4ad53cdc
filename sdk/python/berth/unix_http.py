"""HTTP/1.1 over a unix socket: how code in a container reaches its agent.

Shared by the runner's bridge (berth.runtime.bridge) and the objects user code
saves through the agent (berth.api.output), which may not import the runtime.
"""

import http.client
import socket
from typing import Optional


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float] = None):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
