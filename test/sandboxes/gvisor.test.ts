// A sandbox with isolation="gvisor" on a real agent (runsc, the test image
// pulled from a local registry, over the agent's gRPC socket): it sees
// gVisor's kernel while a runc sandbox sees the host's; processes (output,
// stdin, env, exit codes), files both ways, and an exposed port the host
// reaches over the container's address.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { test } from "node:test";
import pino from "pino";
import { SandboxService } from "../../coordinator/sandboxes/service.ts";
import type { SandboxAgentApi } from "../../coordinator/sandboxes/types.ts";
import { Store } from "../../coordinator/records.ts";
import { waitFor } from "../../shared/net.ts";
import { capacity, oneAgentFleet } from "../containers/fakes.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { HOST_COMMANDS } from "../host/harness.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

const AGENT = "agent-gvisor";
const PORT = 8000;

async function* bytes(s: string) {
  yield Buffer.from(s);
}

function httpStatus(host: string, port: number): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host, port, path: "/", method: "GET", timeout: 5000 }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", () => resolve(0));
    req.on("timeout", () => req.destroy());
    req.end();
  });
}

test("a gVisor sandbox: its own kernel, processes, files both ways, an exposed port", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "runsc"] })) return;
  const { h, client } = await realAgent(t);
  const store = await Store.open(`sqlite:${tempDir(t)}/berth.db`);
  t.after(() => store.close());
  const ws = (await store.workspaces.create("gv")).id;
  const stub = async (name: string, isolation?: "gvisor") =>
    (
      await store.stubs.upsert(ws, {
        name,
        type: "sandbox",
        config: stubConfig({ handler: "", runtime: { cpu: 0, gpu: "", memory: 256, image_id: "" } }),
        extra: stubExtra({
          cpu_millicores: 500,
          image_ref: h.imageRef,
          ports: [PORT],
          ...(isolation ? { isolation } : {}),
        }),
        objectId: null,
      })
    ).stub;
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

  const gv = await svc.create(ws, (await stub("gv", "gvisor")).id);
  const rc = await svc.create(ws, (await stub("rc")).id);
  t.after(async () => {
    for (const id of [gv.sandboxId, rc.sandboxId]) {
      await client.stopContainer(id, { graceMs: 0, remove: true }).catch(() => {});
    }
  });
  const run = async (id: string, args: string[], extra: { env?: Record<string, string> } = {}) => {
    const p = await svc.exec(ws, id, { args, ...extra });
    const done = await svc.wait(ws, id, p.pid, { timeoutMs: 60_000 });
    const out = (s: "stdout" | "stderr") =>
      svc.readOutput(ws, id, p.pid, s, 0).then((r) => Buffer.from(r.data).toString());
    return { code: done.exitCode, stdout: await out("stdout"), stderr: await out("stderr") };
  };

  await t.test("gVisor's kernel in the gVisor sandbox, the host's in the runc one", async () => {
    const host = readFileSync("/proc/version", "utf8");
    assert.equal((await run(rc.sandboxId, ["cat", "/proc/version"])).stdout, host);
    const inGvisor = await run(gv.sandboxId, ["cat", "/proc/version"]);
    assert.equal(inGvisor.code, 0, inGvisor.stderr);
    assert.notEqual(inGvisor.stdout, host);
    assert.match(inGvisor.stdout, /^Linux version/);
  });

  await t.test("a process in one call (RunProcess over gRPC): started, output, exit", async () => {
    const r = await svc.run(
      ws,
      gv.sandboxId,
      { args: ["sh", "-c", "echo out; echo err >&2; exit 4"] },
      new AbortController().signal,
    );
    const out: Record<string, string> = { stdout: "", stderr: "" };
    let ended: number | undefined;
    for (let n = await r.events.next(); !n.done; n = await r.events.next()) {
      if (n.value.type === "output") out[n.value.stream] += Buffer.from(n.value.data).toString();
      if (n.value.type === "ended") ended = n.value.process.exitCode;
    }
    assert.equal(r.started.status, "running");
    assert.deepEqual([out.stdout, out.stderr, ended], ["out\n", "err\n", 4]);
  });

  await t.test("processes: output, exit codes, env, stdin", async () => {
    assert.deepEqual(await run(gv.sandboxId, ["python3", "-c", "print(1+1)"]), {
      code: 0,
      stdout: "2\n",
      stderr: "",
    });
    assert.equal((await run(gv.sandboxId, ["sh", "-c", "exit 7"])).code, 7);
    const env = await run(gv.sandboxId, ["sh", "-c", "echo $X >&2", "x"], { env: { X: "from-env" } });
    assert.equal(env.stderr, "from-env\n");
    const cat = await svc.exec(ws, gv.sandboxId, { args: ["cat"] });
    await svc.writeStdin(ws, gv.sandboxId, cat.pid, bytes("typed\n"), true);
    assert.equal((await svc.wait(ws, gv.sandboxId, cat.pid, { timeoutMs: 60_000 })).exitCode, 0);
    const typed = await svc.readOutput(ws, gv.sandboxId, cat.pid, "stdout", 0);
    assert.equal(Buffer.from(typed.data).toString(), "typed\n");
  });

  await t.test("files: an upload is seen inside, a file made inside is read back", async () => {
    const f = await svc.withFiles(ws, gv.sandboxId, (files, id) =>
      files.writeFile(id, "/work/hello.txt", bytes("hi there")),
    );
    assert.equal(f.size, 8);
    assert.equal((await run(gv.sandboxId, ["cat", "/work/hello.txt"])).stdout, "hi there");
    assert.equal((await run(gv.sandboxId, ["sh", "-c", "echo made inside > /work/inside.txt"])).code, 0);
    const st = await svc.withFiles(ws, gv.sandboxId, (files, id) => files.statPath(id, "/work/inside.txt"));
    assert.equal(st.size, "made inside\n".length);
    const chunks: Uint8Array[] = [];
    await svc.withFiles(ws, gv.sandboxId, async (files, id) => {
      for await (const c of files.readFile(id, "/work/inside.txt")) chunks.push(c);
    });
    assert.equal(Buffer.concat(chunks).toString(), "made inside\n");
  });

  await t.test("an exposed port answers the host at the container's address", async () => {
    const server = await svc.exec(ws, gv.sandboxId, {
      args: ["python3", "-m", "http.server", String(PORT)],
      cwd: "/work",
    });
    const ipv4 = (await client.getContainer(gv.sandboxId)).ipv4;
    assert.ok(ipv4, "the gVisor sandbox has an address");
    await waitFor(async () => (await httpStatus(ipv4, PORT)) === 200, {
      timeoutMs: 60_000,
      intervalMs: 200,
      what: "the gVisor sandbox's http.server",
    });
    await svc.kill(ws, gv.sandboxId, server.pid, "SIGKILL");
  });

  assert.equal(await svc.terminate(ws, gv.sandboxId), true);
  assert.equal(await svc.terminate(ws, rc.sandboxId), true);
  assert.deepEqual(
    (await client.listContainers()).map((c) => c.id),
    [],
  );
});
