// Several coordinators: each agent event reaches one
// of them through the shared durable consumer; the relay makes every other
// coordinator's live copy and watchers follow (coordinator/tasks/event-consumer.ts).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { TaskService, TaskUpdate } from "../../coordinator/tasks/service.ts";
import { waitFor } from "../../shared/net.ts";
import { functionStubId, startTaskHarness, type TaskHarness } from "./harness.ts";

describe("task events across coordinators (real NATS, one SQLite store)", () => {
  let h: TaskHarness;
  let a: TaskService;
  let b: TaskService;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    a = h.tasks;
    b = h.newService();
    await b.start();
    cleanups.unshift(() => b.stop());
    stubId = await functionStubId(h, "relay");
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  test("every event reaches the watchers and the live copy on both coordinators, whichever consumed it", async () => {
    const n = 30;
    const ids = await a.submit(
      h.ws.id,
      stubId,
      Array.from({ length: n }, (_, i) => Buffer.from(`in-${i}`)),
    );
    // Each event is consumed by one coordinator: for every task, one of the two watchers hears
    // it only through the relay, so without it this fails whatever the consumers' split.
    const heard = { a: new Map<string, TaskUpdate[]>(), b: new Map<string, TaskUpdate[]>() };
    const listen = (side: "a" | "b") => (u: TaskUpdate) => {
      if (u.type === "output") return;
      heard[side].set(u.taskId, [...(heard[side].get(u.taskId) ?? []), u]);
    };
    const unwatchA = a.watch(ids, listen("a"));
    const unwatchB = b.watch(ids, listen("b"));
    try {
      for (const [i, id] of ids.entries()) {
        await h.event({ type: "started", taskId: id, stubId, attempt: 1 });
        await h.event({
          type: "finished",
          taskId: id,
          stubId,
          attempt: 1,
          status: "COMPLETE",
          result: Buffer.from(`out-${i}`).toString("base64"),
          resultJson: JSON.stringify(i * i),
        });
      }
      const ended = (side: "a" | "b") =>
        ids.filter((id) => heard[side].get(id)?.some((u) => u.type === "result"));
      await waitFor(() => ended("a").length === n && ended("b").length === n, {
        timeoutMs: 15_000,
        what: `results on both coordinators (a ${ended("a").length}/${n}, b ${ended("b").length}/${n})`,
      });
      for (const side of ["a", "b"] as const) {
        for (const [i, id] of ids.entries()) {
          const results = (heard[side].get(id) ?? []).filter((u) => u.type === "result");
          assert.equal(results.length, 1, `${side}: one result for ${id}`);
          const r = results[0] as Extract<TaskUpdate, { type: "result" }>;
          assert.equal(r.status, "COMPLETE");
          assert.equal(r.resultJson, JSON.stringify(i * i), `${side}: the result of ${id}`);
        }
      }
    } finally {
      unwatchA();
      unwatchB();
    }
    // The submitting coordinator's own copy is not stale: both answer COMPLETE with the result.
    for (const svc of [a, b]) {
      for (const [i, id] of ids.entries()) {
        const t = await svc.getTask(h.ws.id, id);
        assert.equal(t.status, "COMPLETE");
        assert.equal(t.resultJson, JSON.stringify(i * i));
      }
    }
    // Neither keeps an ended task as waiting or running work.
    assert.equal(a.pendingTasks(h.ws.id), 0);
    assert.equal(b.pendingTasks(h.ws.id), 0);
  });

  test("a task another coordinator is running shows RUNNING on the one that queued it", async () => {
    const [id] = await a.submit(h.ws.id, stubId, [Buffer.from("x")]);
    await h.event({ type: "started", taskId: id as string, stubId, attempt: 1 });
    await waitFor(async () => (await a.getTask(h.ws.id, id as string)).status === "RUNNING", {
      timeoutMs: 10_000,
      what: "RUNNING on the coordinator that queued it",
    });
    await h.event({
      type: "finished",
      taskId: id as string,
      stubId,
      attempt: 1,
      status: "COMPLETE",
    } as never);
    await waitFor(async () => (await a.getTask(h.ws.id, id as string)).status === "COMPLETE", {
      timeoutMs: 10_000,
      what: "COMPLETE on the coordinator that queued it",
    });
  });

  test("a late open-status write of one coordinator never overwrites a row another already ended", async () => {
    const [id] = await a.submit(h.ws.id, stubId, [Buffer.from("late")]);
    const at = new Date().toISOString();
    await h.store.tasks.applyBatch(
      new Map([[id as string, { status: "COMPLETE", updatedAt: at, endedAt: at }]]),
      [],
    );
    await h.store.tasks.applyBatch(
      new Map([[id as string, { status: "RUNNING", attempt: 1, containerId: "ctr-late", updatedAt: at }]]),
      [],
    );
    const row = await h.store.tasks.get(id as string);
    assert.equal(row?.status, "COMPLETE");
    assert.equal(row?.containerId, null);
    // A change that is not a status change (the end time) still applies to an ended row.
    const later = new Date(Date.now() + 1000).toISOString();
    await h.store.tasks.applyBatch(new Map([[id as string, { endedAt: later, updatedAt: later }]]), []);
    assert.equal((await h.store.tasks.get(id as string))?.endedAt, later);
  });

  test("a second end of one task (another attempt, written by another coordinator) leaves the first: one final entry", async () => {
    const [id] = await a.submit(h.ws.id, stubId, [Buffer.from("twice")]);
    const task = id as string;
    const t1 = new Date().toISOString();
    const first = await h.store.tasks.applyBatch(
      new Map([
        [task, { status: "COMPLETE", attempt: 1, result: Buffer.from("one"), updatedAt: t1, endedAt: t1 }],
      ]),
      [
        { taskId: task, status: "RUNNING", attempt: 1, containerId: "ctr-1", reason: null, at: t1 },
        { taskId: task, status: "COMPLETE", attempt: 1, containerId: "ctr-1", reason: null, at: t1 },
      ],
    );
    assert.deepEqual([...first], []);
    // The delivery's ack was lost: the task ran again, and a coordinator whose live copy missed
    // the first end applies the second attempt's events in one batch with another task's change.
    const [other] = await a.submit(h.ws.id, stubId, [Buffer.from("other")]);
    const t2 = new Date(Date.now() + 1000).toISOString();
    const second = await h.store.tasks.applyBatch(
      new Map([
        [task, { status: "COMPLETE", attempt: 2, result: Buffer.from("two"), updatedAt: t2, endedAt: t2 }],
        [other as string, { status: "RUNNING", attempt: 1, updatedAt: t2 }],
      ]),
      [
        { taskId: task, status: "RETRY", attempt: 1, containerId: "ctr-1", reason: "redelivered", at: t2 },
        { taskId: task, status: "RUNNING", attempt: 2, containerId: "ctr-2", reason: null, at: t2 },
        { taskId: task, status: "COMPLETE", attempt: 2, containerId: "ctr-2", reason: null, at: t2 },
        {
          taskId: other as string,
          status: "RUNNING",
          attempt: 1,
          containerId: "ctr-3",
          reason: null,
          at: t2,
        },
      ],
    );
    assert.deepEqual([...second], [task], "the ended task's change is the one dropped");
    const row = await h.store.tasks.get(task);
    assert.equal(row?.status, "COMPLETE");
    assert.equal(row?.attempt, 1);
    assert.equal(row?.result?.toString(), "one");
    assert.equal(row?.endedAt, t1);
    assert.deepEqual(
      (await h.store.tasks.history(task))
        .filter((e) => e.status !== "PENDING")
        .map((e) => `${e.status}/${e.attempt}`),
      ["RUNNING/1", "COMPLETE/1"],
    );
    // The other task's change in the same batch is written.
    assert.equal((await h.store.tasks.get(other as string))?.status, "RUNNING");
    assert.deepEqual(
      (await h.store.tasks.history(other as string)).map((e) => e.status).filter((s) => s === "RUNNING"),
      ["RUNNING"],
    );
  });

  test("tasks queued through one coordinator count in the other's demand at once (its container manager scales from it)", async () => {
    // Earlier cases left a task waiting (never run): counted on both.
    const base = a.demandOf(stubId)?.pending ?? 0;
    const ids = await a.submit(h.ws.id, stubId, [Buffer.from("1"), Buffer.from("2"), Buffer.from("3")]);
    await waitFor(() => b.demandOf(stubId)?.pending === base + 3, {
      timeoutMs: 10_000,
      what: `three waiting tasks in the other coordinator's demand (${JSON.stringify(b.demandOf(stubId))})`,
    });
    for (const id of ids) {
      await h.event({ type: "started", taskId: id, stubId, attempt: 1 });
      await h.event({ type: "finished", taskId: id, stubId, attempt: 1, status: "COMPLETE" } as never);
    }
    for (const svc of [a, b])
      await waitFor(
        () => (svc.demandOf(stubId)?.pending ?? 0) + (svc.demandOf(stubId)?.running ?? 0) === base,
        {
          timeoutMs: 10_000,
          what: "no demand left once the tasks ended",
        },
      );
  });
});
