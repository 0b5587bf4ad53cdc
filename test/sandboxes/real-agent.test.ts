// A sandbox on a real agent container host (runc, the test image pulled from a
// local registry) over the agent's real gRPC unix socket: create, exec
// `python3 -c "print(1+1)"`, block the network, files (once the agent's
// client implements them), terminate.

import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { SandboxService } from "../../coordinator/sandboxes/service.ts";
import type { SandboxAgentApi } from "../../coordinator/sandboxes/types.ts";
import { Store } from "../../coordinator/records.ts";
import { capacity, oneAgentFleet } from "../containers/fakes.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { HOST_COMMANDS } from "../host/harness.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

const AGENT = "agent-real";

async function* bytes(s: string) {
  yield Buffer.from(s);
}

test("a sandbox on a real agent: exec, output, block network, files, terminate", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const { h, client } = await realAgent(t);
  const store = await Store.open(`sqlite:${tempDir(t)}/berth.db`);
  t.after(() => store.close());
  const ws = (await store.workspaces.create("real")).id;
  const { stub } = await store.stubs.upsert(ws, {
    name: "sb",
    type: "sandbox",
    config: stubConfig({ handler: "", runtime: { cpu: 0, gpu: "", memory: 128, image_id: "" } }),
    extra: stubExtra({ cpu_millicores: 500, image_ref: h.imageRef, ports: [8000] }),
    objectId: null,
  });
  // The gRPC client gains the files and snapshot calls with the agent's sandbox work.
  const api = client as unknown as SandboxAgentApi;
  const svc = new SandboxService({
    repo: store.sandboxes,
    stubs: store.stubs,
    fleet: oneAgentFleet(AGENT, capacity(2, 4)),
    agents: { client: () => api },
    code: {
      open: () => {
        throw new Error("no code in this test");
      },
    },
    publicUrl: "http://127.0.0.1:8420",
    log: pino({ level: "silent" }),
    sweepIntervalMs: 3_600_000,
    stopGraceMs: 2000,
  });
  svc.open();
  t.after(() => svc.close());

  const v = await svc.create(ws, stub.id);
  t.after(async () => {
    // Pass or fail, the container goes.
    await client.stopContainer(v.sandboxId, { graceMs: 0, remove: true }).catch(() => {});
  });
  const running = await client.getContainer(v.sandboxId);
  assert.equal(running.state, "running");
  assert.deepEqual(running.exposedPorts, [8000]);
  assert.equal(running.labels["berth.managed"], undefined);

  // The agent keeps the processes; the service asks it for each.
  const wait = (pid: number) => svc.wait(ws, v.sandboxId, pid, { timeoutMs: 60_000 });
  const out = async (pid: number, stream: "stdout" | "stderr" | "combined") =>
    Buffer.from((await svc.readOutput(ws, v.sandboxId, pid, stream, 0)).data).toString();
  const p = await svc.exec(ws, v.sandboxId, { args: ["python3", "-c", "print(1+1)"] });
  const done = await wait(p.pid);
  assert.deepEqual([done.exitCode, done.status], [0, "exited"]);
  assert.equal(await out(p.pid, "stdout"), "2\n");
  assert.equal(await out(p.pid, "combined"), "2\n");

  // The coordinator asked for the process server (the test image has python3):
  // once it listens, processes are its children (PPID 1), not runc exec's (0).
  const ppid = async () => {
    const q = await svc.exec(ws, v.sandboxId, { args: ["sh", "-c", "echo $PPID"] });
    await wait(q.pid);
    return out(q.pid, "stdout");
  };
  for (let i = 0; (await ppid()) !== "1\n"; i++) {
    assert.ok(i < 100, "the sandbox's process server never answered");
    await new Promise((r) => setTimeout(r, 100));
  }

  // Two processes at once, one reading stdin.
  const cat = await svc.exec(ws, v.sandboxId, { args: ["cat"] });
  const echo = await svc.exec(ws, v.sandboxId, {
    args: ["sh", "-c", "echo $X >&2", "x"],
    env: { X: "from-env" },
  });
  await svc.writeStdin(ws, v.sandboxId, cat.pid, bytes("typed\n"), true);
  assert.equal((await wait(cat.pid)).exitCode, 0);
  assert.equal(await out(cat.pid, "stdout"), "typed\n");
  await wait(echo.pid);
  assert.equal(await out(echo.pid, "stderr"), "from-env\n");

  assert.deepEqual(await svc.updateNetwork(ws, v.sandboxId, { block_network: true }), {
    block_network: true,
    allow_list: null,
  });
  assert.deepEqual((await client.getContainer(v.sandboxId)).egress, { mode: "block" });

  if (typeof (client as unknown as { statPath?: unknown }).statPath === "function") {
    const f = await svc.withFiles(ws, v.sandboxId, (files, id) =>
      files.writeFile(id, "/work/hello.txt", bytes("hi there")),
    );
    assert.equal(f.size, 8);
    const r = await svc.exec(ws, v.sandboxId, { args: ["cat", "/work/hello.txt"] });
    await wait(r.pid);
    assert.equal(await out(r.pid, "stdout"), "hi there");
    const st = await svc.withFiles(ws, v.sandboxId, (files, id) => files.statPath(id, "/work/hello.txt"));
    assert.equal(st.isDir, false);
    await assert.rejects(
      svc.withFiles(ws, v.sandboxId, (files, id) => files.statPath(id, "/work/missing")),
      (e: unknown) => (e as { code?: string }).code === "path_not_found" && /\/work\/missing/.test(String(e)),
    );
  } else {
    t.diagnostic("files skipped: the agent's gRPC client has no statPath yet");
  }

  assert.equal(await svc.terminate(ws, v.sandboxId), true);
  assert.deepEqual(
    (await client.listContainers()).map((c) => c.id),
    [],
  );
  await assert.rejects(svc.exec(ws, v.sandboxId, { args: ["true"] }), /terminated/);
});
