// freePort (shared/net.ts): a port below the kernel's ephemeral range, so an
// outgoing connection made between the pick and the caller's bind cannot
// have taken it; one that something listens on is never given.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { test } from "node:test";
import { freePort } from "../../shared/net.ts";

const listen = (port: number) =>
  new Promise<Server>((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(port, "127.0.0.1", () => resolve(srv));
  });

test("freePort: below the ephemeral range, free to listen on, never a listening port", async () => {
  const ephemeralFrom = Number(
    readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").split(/\s+/)[0],
  );
  const held: Server[] = [];
  try {
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      if (ephemeralFrom > 1024 + 1) {
        assert.ok(port >= 1024 && port < ephemeralFrom, `${port} is below ${ephemeralFrom}`);
      }
      // Kept listening: a later pick must not give it again.
      held.push(await listen(port));
    }
    const ports = held.map((s) => (s.address() as { port: number }).port);
    assert.equal(new Set(ports).size, ports.length);
  } finally {
    for (const s of held) s.close();
  }
});
