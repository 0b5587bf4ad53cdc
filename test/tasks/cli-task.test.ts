import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { waitFor } from "../../shared/net.ts";
import { runCli } from "../helpers/cluster.ts";
import { tempDir } from "../helpers/env.ts";
import { startTaskApp, startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

describe("berth task get / cancel against a coordinator", () => {
  let h: TaskHarness;
  let app: FastifyInstance;
  let env: NodeJS.ProcessEnv;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    app = await startTaskApp(h, cleanups);
    const port = (app.server.address() as { port: number }).port;
    const token = (await h.store.tokens.create(h.ws.id)).secret;
    env = {
      HOME: tempDir({ after: (fn) => cleanups.push(fn) }),
      SERVICE_TOKEN: token,
      BERTH_URL: `http://127.0.0.1:${port}`,
    };
    const spec = { name: "cli", type: "function", config: stubConfig(), extra: stubExtra() };
    stubId = (await h.tasks.upsertStub(h.ws.id, spec)).stub.id;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  test("task get prints status, timestamps and the history including a retry; --json is the REST answer", async () => {
    const [id] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("x")])) as [string];
    await h.event({ type: "started", taskId: id, stubId, attempt: 1, containerId: "ctr-cli" });
    await h.event({
      type: "retry",
      taskId: id,
      stubId,
      attempt: 1,
      containerId: "ctr-cli",
      reason: "container_exited",
    });
    await h.event({ type: "started", taskId: id, stubId, attempt: 2, containerId: "ctr-cli2" });
    await waitFor(async () => (await h.tasks.history(h.ws.id, id)).length === 3);
    const r = await runCli(["task", "get", id], env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`task\\s+${id}`));
    assert.match(r.stdout, /status\s+RUNNING/);
    assert.match(r.stdout, /container\s+ctr-cli2/);
    assert.match(r.stdout, /RETRY\s+1\s+ctr-cli\s+container_exited/);
    const j = await runCli(["task", "get", id, "--json"], env);
    const parsed = JSON.parse(j.stdout);
    assert.equal(parsed.id, id);
    assert.deepEqual(
      parsed.history.map((e: { status: string }) => e.status),
      ["RUNNING", "RETRY", "RUNNING"],
    );
  });

  test("task cancel cancels; an ended task says so; an unknown id fails with one line", async () => {
    const [id] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("x")])) as [string];
    const r = await runCli(["task", "cancel", id], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `cancelled ${id}\n`);
    assert.equal((await h.tasks.getTask(h.ws.id, id)).status, "CANCELLED");
    const [done] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("y")])) as [string];
    await h.event({ type: "started", taskId: done, stubId });
    await h.event({ type: "finished", taskId: done, stubId, status: "COMPLETE", result: "eA==" });
    await waitFor(async () => (await h.tasks.getTask(h.ws.id, done)).status === "COMPLETE");
    const ended = await runCli(["task", "cancel", done], env);
    assert.equal(ended.stdout, `${done} had already ended: COMPLETE\n`);
    const missing = await runCli(["task", "cancel", "task-nope"], env);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^berth: task task-nope not found\n$/);
    const missingGet = await runCli(["task", "get", "task-nope"], env);
    assert.equal(missingGet.code, 1);
    assert.match(missingGet.stderr, /not found/);
  });
});
