// A preempted container's tasks (docs/gpus.md, "Priorities and
// preemption"): the container manager asks the task service to requeue the
// RUNNING tasks of the container it preempts. They go to RETRY with reason
// `preempted` (counted as an attempt), run again when their queue message is
// redelivered, and complete with `preempted` in their history. Tasks of
// other containers are not touched. A real task service (nats-server,
// SQLite).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { waitUntil } from "../helpers/wait.ts";
import { startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

describe("tasks of a preempted container", () => {
  let h: TaskHarness;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    const spec = {
      name: "batch",
      type: "function",
      config: stubConfig(),
      extra: stubExtra({ preemptible: true }),
    };
    stubId = (await h.tasks.upsertStub(h.ws.id, spec)).stub.id;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const history = async (id: string) =>
    (await h.tasks.history(h.ws.id, id)).map((e) => `${e.status}/${e.attempt}/${e.reason ?? ""}`);

  test("go to RETRY (preempted), run again and complete; another container's task runs on", async () => {
    const [a, b] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("a"), Buffer.from("b")])) as [
      string,
      string,
    ];
    await h.event({ type: "started", taskId: a, stubId, attempt: 1, containerId: "ctr-batch" });
    await h.event({ type: "started", taskId: b, stubId, attempt: 1, containerId: "ctr-other" });
    for (const id of [a, b])
      await waitUntil(async () => (await h.tasks.getTask(h.ws.id, id)).status === "RUNNING", {
        what: `${id} running`,
      });

    assert.equal(h.tasks.requeuePreempted("ctr-batch", "the container was preempted for runner ctr-x"), 1);
    await waitUntil(async () => (await h.tasks.getTask(h.ws.id, a)).status === "RETRY", {
      what: "a in RETRY",
    });
    const ta = await h.tasks.getTask(h.ws.id, a);
    assert.equal(ta.error?.type, "Preempted");
    assert.match(ta.error?.message ?? "", /preempted for runner ctr-x/);
    assert.equal((await h.tasks.getTask(h.ws.id, b)).status, "RUNNING");
    // Nothing more runs there: a second call finds no RUNNING task of the container.
    assert.equal(h.tasks.requeuePreempted("ctr-batch", "again"), 0);

    // The queue message is redelivered: attempt 2 on another container completes.
    await h.event({ type: "started", taskId: a, stubId, attempt: 2, containerId: "ctr-later" });
    await h.event({
      type: "finished",
      taskId: a,
      stubId,
      attempt: 2,
      containerId: "ctr-later",
      status: "COMPLETE",
    });
    await waitUntil(async () => (await h.tasks.getTask(h.ws.id, a)).status === "COMPLETE", {
      what: "a complete",
    });
    assert.deepEqual(await history(a), ["RUNNING/1/", "RETRY/1/preempted", "RUNNING/2/", "COMPLETE/2/"]);
    assert.deepEqual(await history(b), ["RUNNING/1/"]);
  });
});
