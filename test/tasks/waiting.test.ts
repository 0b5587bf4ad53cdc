// `berth task get` and GET /api/v1/task/{ws}/{id} say why a task waits
// (docs/tasks.md "Why a task waits"): a real task service (nats-server,
// SQLite) and a real container manager and planner over a fake fleet.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { runCli } from "../helpers/cluster.ts";
import { tempDir } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { GiB, capacity, stubRecord, world, type World } from "../containers/fakes.ts";
import { startTaskApp, startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

interface Waiting {
  kind: string;
  message: string;
  position: number;
  ahead: number;
  waiting: number;
  containers: number;
}

describe("why a task waits", () => {
  let h: TaskHarness;
  let w: World;
  let env: NodeJS.ProcessEnv;
  let base: string;
  let token: string;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    const app: FastifyInstance = await startTaskApp(h, cleanups);
    base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    token = (await h.store.tokens.create(h.ws.id)).secret;
    env = { HOME: tempDir({ after: (fn) => cleanups.push(fn) }), SERVICE_TOKEN: token, BERTH_URL: base };
    const extra = stubExtra({ gpu_types: ["A100"], gpu_count: 1 });
    stubId = (
      await h.tasks.upsertStub(h.ws.id, { name: "gpu", type: "function", config: stubConfig(), extra })
    ).stub.id;
    w = world({ activity: h.tasks });
    cleanups.unshift(() => w.mgr.stop());
    w.stubs.set(
      stubId,
      stubRecord(stubId, { workspaceId: h.ws.id, extra: { gpu_types: ["A100"], gpu_count: 1 } }),
    );
    h.tasks.useContainerCounts(w.mgr);
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const get = async (id: string) => {
    const r = await fetch(`${base}/api/v1/task/${h.ws.id}/${id}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(r.status, 200);
    return (await r.json()) as { status: string; waiting: Waiting | null };
  };

  test("no room for the GPU type, then queued behind the others, then not waiting once it runs", async () => {
    w.addAgent("gpu-a", capacity(16, 64, [{ type: "A100", uuid: "GPU-0" }]));
    await w.tick(); // the manager knows the agent's containers: the planner places there from now on
    // Something else (a sandbox of another workspace) holds the fleet's only A100.
    const hold = w.planner.reserve({
      id: "sbx-hold",
      kind: "sandbox",
      workspaceId: h.otherWs.id,
      placement: { cpuMillicores: 1000, memoryBytes: GiB, gpuTypes: ["A100"], gpuCount: 1 },
    });
    assert.ok(hold.ok, hold.ok ? "" : hold.reason);
    const ids = (await h.tasks.submit(
      h.ws.id,
      stubId,
      ["a", "b", "c"].map((x) => Buffer.from(x)),
    )) as string[];
    const third = ids[2] as string;
    await waitUntil(async () => (await get(third)).waiting?.ahead === 2, { what: "the three tasks queued" });
    await w.tick();

    const r = await get(third);
    assert.equal(r.status, "PENDING");
    assert.equal(r.waiting?.kind, "no_room");
    assert.match(r.waiting?.message ?? "", /gpu=1xA100 \(1 of 1 ready agents can hold it when free\)/);
    assert.deepEqual(
      { position: r.waiting?.position, ahead: r.waiting?.ahead, waiting: r.waiting?.waiting },
      { position: 3, ahead: 2, waiting: 3 },
    );
    assert.equal((await get(ids[0] as string)).waiting?.position, 1);

    const cli = await runCli(["task", "get", third], env);
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stdout, /place\s+3 of 3 waiting \(2 ahead\)/);
    assert.match(cli.stdout, /waiting\s+no_room: every agent is full for .*gpu=1xA100/);

    // The A100 frees up: a container starts; the tasks are then only queued, in their order.
    w.planner.release("sbx-hold");
    await w.tick();
    assert.equal(w.mgr.activeContainers(stubId), 1);
    // The stub wants a container per task; no room for the other two yet.
    const partly = await get(third);
    assert.equal(partly.waiting?.kind, "no_room");
    assert.equal(partly.waiting?.containers, 1);
    assert.match(partly.waiting?.message ?? "", /; 1 container\(s\) of the stub take its tasks meanwhile$/);

    // A host with two more A100s joins: every container starts; the tasks are then only queued, in their order.
    w.addAgent(
      "gpu-b",
      capacity(16, 64, [
        { type: "A100", uuid: "GPU-1" },
        { type: "A100", uuid: "GPU-2" },
      ]),
    );
    await w.tick();
    await w.tick();
    assert.equal(w.mgr.activeContainers(stubId), 3);
    const queued = await get(third);
    assert.equal(queued.waiting?.kind, "queued");
    assert.equal(queued.waiting?.containers, 3);
    assert.match(
      queued.waiting?.message ?? "",
      /queued: 2 task\(s\) of the stub ahead of it, 3 container\(s\) taking them/,
    );

    // The first task starts: the third moves up one place, the running one does not wait.
    await h.event({ type: "started", taskId: ids[0] as string, stubId, attempt: 1, containerId: "ctr-x" });
    await waitUntil(async () => (await get(third)).waiting?.position === 2, {
      what: "the third task moved up",
    });
    assert.equal((await get(ids[0] as string)).waiting, null);
    const plain = await runCli(["task", "get", ids[0] as string], env);
    assert.doesNotMatch(plain.stdout, /^waiting/m);
  });
});
