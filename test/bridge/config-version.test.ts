// A runner container takes only tasks of the stub config it was started for
// (or an older one), against real JetStream: after a stub's config changes
// (its image, say), an idle container of the old config that asks first does
// not get a task submitted for the new config; the task waits on the agent
// for a runner of that config, which gets it as its first attempt, and the
// old container takes nothing more. A task of an older config still runs on a
// newer container (no container of an old config is ever started again).

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { resolveRunnerConfig } from "../../agent/host/runner.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import { ensureStubConsumer } from "../../coordinator/tasks/streams.ts";
import { waitFor } from "../../shared/net.ts";
import { stubConsumerName, TASKS_STREAM } from "../../shared/tasks.ts";
import { tempDir } from "../helpers/env.ts";
import { nextTask, post, publishTask, queueEmpty, startTaskNats } from "./helpers.ts";

test("runner containers take only tasks of their stub config", { timeout: 120_000 }, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-config-version-");
  const runners = new TaskRunners({
    kill: async () => {},
    worker: { pullWaitMs: 2000, workingIntervalMs: 200 },
  });
  t.after(() => runners.stop());
  await runners.attach(n.agent, "agent-config-version");
  const open = async (containerId: string, stubId: string, configVersion: number) => {
    const socket = join(dir, `${containerId}.sock`);
    await runners.open(
      containerId,
      { stubId, workspaceId: "ws-test", stubType: "function", handler: "app:f", configVersion },
      socket,
    );
    return socket;
  };
  const complete = async (socket: string, taskId: string) => {
    const body = { status: "COMPLETE", result: Buffer.from("1").toString("base64") };
    assert.equal((await post(socket, `/v1/tasks/${taskId}/result`, body)).status, 204);
  };

  await t.test(
    "an idle container of the old config asking first does not get the new config's task",
    async () => {
      await ensureStubConsumer(n.jsm, "stub-cv");
      const old = await open("ctr-old", "stub-cv", 1);
      // The old container asks while the queue is empty: its pull is waiting when the task comes.
      const oldAsk = post(old, "/v1/tasks/next");
      await waitFor(
        async () =>
          (await n.jsm.consumers.info(TASKS_STREAM, stubConsumerName("stub-cv"))).num_waiting > 0
            ? true
            : undefined,
        { timeoutMs: 10_000, intervalMs: 20, what: "the old container's waiting pull" },
      );
      await publishTask(n, { stubId: "stub-cv", taskId: "task-v2", configVersion: 2 });
      const oldGot = await oldAsk;
      assert.equal(oldGot.status, 204, `the old container got ${JSON.stringify(oldGot.body)}`);
      const fresh = await open("ctr-new", "stub-cv", 2);
      const task = await nextTask(fresh);
      assert.equal(task.id, "task-v2");
      assert.equal(task.attempt, 1, "held on the agent, not redelivered: still its first attempt");
      await complete(fresh, "task-v2");
      await queueEmpty(n);
    },
  );

  await t.test("once a newer config is known, the old container takes nothing more", async () => {
    await publishTask(n, { stubId: "stub-cv", taskId: "task-v2b", configVersion: 2 });
    const oldGot = await post(join(dir, "ctr-old.sock"), "/v1/tasks/next");
    assert.equal(oldGot.status, 204);
    const task = await nextTask(join(dir, "ctr-new.sock"));
    assert.equal(task.id, "task-v2b");
    assert.equal(task.attempt, 1);
    await complete(join(dir, "ctr-new.sock"), "task-v2b");
    await queueEmpty(n);
  });

  await t.test("a task of an older config runs on a newer container", async () => {
    await publishTask(n, { stubId: "stub-cv", taskId: "task-v1", configVersion: 1 });
    const task = await nextTask(join(dir, "ctr-new.sock"));
    assert.equal(task.id, "task-v1");
    await complete(join(dir, "ctr-new.sock"), "task-v1");
    await queueEmpty(n);
  });
});

test("the agent keeps a runner request's configVersion and refuses a malformed one", () => {
  const base = { stubId: "stub-1", workspaceId: "ws-1", stubType: "function", handler: "app:f" };
  assert.equal(resolveRunnerConfig({ ...base, configVersion: 3 })?.configVersion, 3);
  assert.equal(resolveRunnerConfig(base)?.configVersion, undefined);
  for (const bad of [0, -1, 1.5, "2"]) {
    assert.throws(
      () => resolveRunnerConfig({ ...base, configVersion: bad }),
      /runner\.configVersion must be a positive integer/,
    );
  }
});
