// The connection the agent makes ahead to a sandbox's process server after
// an exec through it (SandboxInits.connectAhead / takeAhead, agent/host/
// sandbox-init.ts): the next exec takes it, already accepted; one the server
// closed is not handed out; removing the container closes it. A unix socket
// server stands in for the process server (no root needed).

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { SandboxInits } from "../../agent/host/sandbox-init.ts";
import { tempDir } from "../helpers/env.ts";

async function until(what: string, ok: () => boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

test("a connection made ahead is taken by the next exec; a closed one is not; close() ends it", async (t) => {
  const inits = new SandboxInits(join(tempDir(t), "inits"));
  const id = "sbx-ahead";
  mkdirSync(join(inits.socketOf(id), ".."), { recursive: true });
  // What the server saw: each accepted connection, and what came on it.
  const accepted: { sock: Socket; data: string; ended: boolean }[] = [];
  const server: Server = createServer((sock) => {
    const c = { sock, data: "", ended: false };
    accepted.push(c);
    sock.on("data", (d) => {
      c.data += d.toString();
    });
    sock.on("end", () => {
      c.ended = true;
      sock.end();
    });
    sock.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen(inits.socketOf(id), r));
  t.after(() => {
    for (const c of accepted) c.sock.destroy();
    server.close();
    inits.close(id);
  });

  assert.equal(await inits.takeAhead(id), undefined, "none made yet");
  inits.connectAhead(id);
  inits.connectAhead(id); // one at most
  await until("the connection made ahead", () => accepted.length === 1);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(accepted.length, 1);
  const taken = await inits.takeAhead(id);
  assert.ok(taken, "taken");
  taken.write("start");
  await until("the frame on the accepted connection", () => accepted[0]?.data === "start");
  assert.equal(accepted.length, 1, "no new connection for it");
  assert.equal(await inits.takeAhead(id), undefined, "taken once");
  taken.destroy();

  // The server closes the next one (its container stops): it is not handed out.
  inits.connectAhead(id);
  await until("a second connection", () => accepted.length === 2);
  accepted[1]?.sock.end();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(await inits.takeAhead(id), undefined);

  // The container is removed: the one made ahead ends.
  inits.connectAhead(id);
  await until("a third connection", () => accepted.length === 3);
  inits.close(id);
  await until("the third connection's end", () => accepted[2]?.ended === true);
  assert.equal(await inits.takeAhead(id), undefined);
});

test("no server to connect to: nothing is made ahead", async (t) => {
  const inits = new SandboxInits(join(tempDir(t), "inits"));
  inits.connectAhead("sbx-none");
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(await inits.takeAhead("sbx-none"), undefined);
});
