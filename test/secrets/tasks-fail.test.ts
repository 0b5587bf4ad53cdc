// End to end on the coordinator side: a real task service over nats-server, a
// real store and secret service, the container manager with a recording
// agent. A task of a stub naming a missing secret ends FAILED with the cause;
// once the secret exists, the next task's container gets it in its env.

import assert from "node:assert/strict";
import { test } from "node:test";
import { SecretService } from "../../coordinator/secrets/index.ts";
import { waitFor } from "../../shared/net.ts";
import { capacity, world } from "../containers/fakes.ts";
import { needs } from "../helpers/env.ts";
import { startTaskHarness, stubConfig, stubExtra } from "../tasks/harness.ts";
import { randomKey } from "./helpers.ts";

test("a missing secret ends the stub's tasks FAILED naming it, not PENDING forever", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const h = await startTaskHarness(t);
  const secrets = new SecretService({ db: h.store.db, key: randomKey() });
  const w = world({ activity: h.tasks, stubs: h.store.stubs, secrets });
  t.after(() => w.mgr.stop());
  const agent = w.addAgent("agent-a", capacity(16, 64));
  const spec = {
    name: "needs-secret",
    type: "function",
    config: stubConfig(),
    extra: stubExtra({ secrets: ["HF_TOKEN"] }),
  };
  const stubId = (await h.tasks.upsertStub(h.ws.id, spec)).stub.id;

  const [first] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("x")])) as [string];
  await w.tick();
  await waitFor(async () => (await h.tasks.getTask(h.ws.id, first)).status === "FAILED", {
    timeoutMs: 10_000,
    what: "the task to fail",
  });
  const failed = await h.tasks.getTask(h.ws.id, first);
  assert.match(failed.error?.message ?? "", /secret HF_TOKEN not found in this workspace/);
  assert.equal(agent.runs.length, 0);

  await secrets.create(h.ws.id, "HF_TOKEN", "hf_now_there");
  const [second] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("y")])) as [string];
  // The failed start backs the stub off for a while (startBackoff.initialMs): step the clock past it.
  await w.tick(60_000);
  await waitFor(async () => agent.runs.length === 1, { timeoutMs: 10_000, what: "a container start" });
  assert.deepEqual(agent.runs[0]?.env, { HF_TOKEN: "hf_now_there" });
  assert.equal(
    (await h.tasks.getTask(h.ws.id, second)).status,
    "PENDING",
    "waits for the runner, not failed",
  );
});
