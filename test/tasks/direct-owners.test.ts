// A coordinator that starts ends the direct tasks (endpoint requests) left
// open by a dead coordinator, but never those another live coordinator still
// serves (coordinator/tasks/direct-owners.ts).

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import { recordDirectTask, startTaskHarness, stubConfig, stubExtra } from "./harness.ts";

const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

test("a starting coordinator leaves a live coordinator's open direct task alone and ends a dead one's", async () => {
  const h = await startTaskHarness({ after: (fn) => cleanups.push(fn) }, { directFoldMs: 20 });
  const serving = h.newService();
  await serving.start();
  let servingStopped = false;
  cleanups.push(() => (servingStopped ? undefined : serving.stop()));
  const { stub } = await serving.upsertStub(h.ws.id, {
    name: "ep",
    type: "endpoint",
    config: stubConfig(),
    extra: stubExtra(),
  });
  const { id } = recordDirectTask(serving.direct, stub);
  assert.equal(serving.direct.started(id, "ctr-1", "agent-1"), true);
  await waitFor(async () => (await h.store.tasks.get(id))?.status === "RUNNING", {
    timeoutMs: 5000,
    what: "the open request's row",
  });

  // Another coordinator starts while the serving one lives: the request stays open.
  const other = h.newService();
  await other.start();
  cleanups.push(() => other.stop());
  assert.equal((await h.store.tasks.get(id))?.status, "RUNNING");
  assert.equal((await other.getTask(h.ws.id, id)).status, "RUNNING");

  // The serving coordinator goes (its caller's connection with it); the next one to start ends the task.
  await serving.stop();
  servingStopped = true;
  const next = h.newService();
  await next.start();
  cleanups.push(() => next.stop());
  await waitFor(async () => (await h.store.tasks.get(id))?.status === "FAILED", {
    timeoutMs: 5000,
    what: "the dead coordinator's request to end",
  });
  const row = await h.store.tasks.get(id);
  assert.equal(row?.error?.type, "CoordinatorRestarted");
});
