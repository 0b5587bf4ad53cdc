// The shell's websocket framing over a real HTTP upgrade: a peer that goes
// away without a close frame (FIN only) still ends the session, so the
// shell's exec is killed and the server can close. Upgraded sockets of a
// node:http server are half-open capable: without handling "end" they never
// emit "close".

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { connect } from "node:net";
import { test } from "node:test";
import { FrameSocket } from "../../coordinator/http/routes/shell-socket.ts";

test("a peer's FIN without a close frame ends the server side's session", { timeout: 30_000 }, async (t) => {
  let closed: (code: number) => void = () => {};
  const ended = new Promise<number>((r) => {
    closed = r;
  });
  const server = createServer((_req, res) => res.end());
  server.on("upgrade", (_req, socket) => {
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    new FrameSocket(socket, "server", { message: () => {}, close: (code) => closed(code) });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  const { port } = server.address() as { port: number };
  const client = connect(port, "127.0.0.1");
  client.write(
    "GET /x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
  );
  await new Promise<void>((r) => client.once("data", () => r()));
  client.end();
  assert.equal(await ended, 1006);
  client.destroy();
});
