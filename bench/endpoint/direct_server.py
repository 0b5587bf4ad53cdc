"""The reference of bench/endpoint: the same handler behind a plain http.server.

Run in a runc container of the same rootfs: python3 direct_server.py PORT.
Prints "ready" once it listens.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def greet(name: str = "world") -> dict:
    return {"hello": name}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: without this, Nagle plus the client's
    # delayed ACK add ~40 ms to every keep-alive response.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        out = json.dumps(greet(**body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("ready", flush=True)
server.serve_forever()
