import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { lstatSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { BerthError } from "../../shared/errors.ts";
import { waitFor } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";
import { FakeAgent, noGpuCapacity, sampleCapacity } from "./fake-agent.ts";

function client(t: { after: (fn: () => void) => void }, path: string, deadlineMs?: number): AgentRpcClient {
  const c = new AgentRpcClient({ address: `unix://${path}`, deadlineMs });
  t.after(() => c.close());
  return c;
}

test("health and capacity round-trip over the unix socket, which is created 0600", async (t) => {
  const dir = tempDir(t);
  const path = join(dir, "run", "agent.sock");
  const impl = new FakeAgent();
  const server = await startAgentRpcServer({ impl, unixSocket: path });
  t.after(() => server.close());

  const st = lstatSync(path);
  assert.ok(st.isSocket());
  assert.equal(st.mode & 0o777, 0o600);
  assert.equal(lstatSync(join(dir, "run")).mode & 0o777, 0o700);

  const c = client(t, path);
  assert.deepEqual(await c.health(), impl.healthReply);
  assert.deepEqual(await c.capacity(), sampleCapacity);

  // Optional fields left out stay out, and fractional cores survive.
  impl.capacityReply = noGpuCapacity;
  impl.healthReply = { ...impl.healthReply, status: "NOT_SERVING" };
  assert.deepEqual(await c.capacity(), noGpuCapacity);
  assert.equal((await c.health()).status, "NOT_SERVING");
  assert.equal(impl.calls, 4);

  await server.close();
  assert.throws(() => lstatSync(path), /ENOENT/);
});

test("a stale socket left by a killed process is replaced", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const holder = spawn(process.execPath, [
    "-e",
    `require("node:net").createServer().listen(${JSON.stringify(path)}); setInterval(() => {}, 1000)`,
  ]);
  t.after(() => holder.kill("SIGKILL"));
  await waitFor(() => lstatSync(path, { throwIfNoEntry: false })?.isSocket(), { what: "holder socket" });
  holder.kill("SIGKILL");
  await new Promise((r) => holder.once("exit", r));
  assert.ok(lstatSync(path).isSocket(), "SIGKILL leaves the socket file behind");

  const server = await startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path });
  t.after(() => server.close());
  assert.equal((await client(t, path).health()).status, "SERVING");
});

test("a socket another server is listening on is not stolen", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const first = await startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path });
  t.after(() => first.close());
  await assert.rejects(
    startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path }),
    (e: unknown) => e instanceof BerthError && e.code === "conflict" && e.message.includes(path),
  );
  assert.equal((await client(t, path).health()).agentId, "agent-test1");
});

test("a regular file at the socket path is left alone", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  writeFileSync(path, "not a socket");
  await assert.rejects(
    startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path }),
    (e: unknown) =>
      e instanceof BerthError && e.code === "failed_precondition" && /not a socket/.test(e.message),
  );
  assert.ok(lstatSync(path).isFile());
});

test("bad server and client options are refused with the cause", async () => {
  const impl = new FakeAgent();
  await assert.rejects(startAgentRpcServer({ impl }), /unixSocket path, a tcp listener, or both/);
  await assert.rejects(startAgentRpcServer({ impl, unixSocket: "relative.sock" }), /absolute path/);
  await assert.rejects(startAgentRpcServer({ impl, unixSocket: `/tmp/${"x".repeat(120)}.sock` }), /too long/);
  assert.throws(() => new AgentRpcClient({ address: "10.0.0.1:8421" }), /needs tls.caPem/);
  assert.throws(() => new AgentRpcClient({ address: "unix:relative.sock" }), /absolute path/);
  assert.throws(() => new AgentRpcClient({ address: "not an address" }), /unix:\/\/\/path or host:port/);
  assert.throws(() => new AgentRpcClient({ address: "unix:///x.sock", deadlineMs: 0 }), /deadlineMs/);
});

test("a missing socket is an unavailable error naming the agent", async (t) => {
  const path = join(tempDir(t), "nobody.sock");
  await assert.rejects(
    client(t, path).health(),
    (e: unknown) =>
      e instanceof BerthError &&
      e.code === "unavailable" &&
      e.message.startsWith(`agent at unix://${path} is unreachable:`),
  );
});
