// Direct tasks' rows are written once, when the task ends or once it has been
// open for the fold time (coordinator/tasks/unwritten.ts), on both engines:
// the engine and the store, with a spy on the writes the batch writer makes.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { Store } from "../../coordinator/records.ts";
import type { StubRecord } from "../../coordinator/tasks/stub-store.ts";
import type { TaskHistoryEntry, TaskPatch, TaskRecord } from "../../coordinator/tasks/store.ts";
import { DirectTasks } from "../../coordinator/tasks/direct.ts";
import { recordDirectTask } from "./harness.ts";
import { TaskEngine } from "../../coordinator/tasks/engine.ts";
import type { LiveTask } from "../../coordinator/tasks/live-index.ts";
import { waitFor } from "../../shared/net.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { storedStub } from "./fixtures.ts";

interface Write {
  inserts: string[];
  patches: [string, TaskPatch][];
  history: TaskHistoryEntry[];
}

for (const engine of STORE_ENGINES) {
  describe(`direct tasks written once, on ${engine.name}`, () => {
    let store: Store;
    let stub: StubRecord;
    const writes: Write[] = [];
    const finished: LiveTask[] = [];
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    const log = pino({ level: "silent" });

    before(async () => {
      store = await Store.open(await engine.url(suite));
      const ws = await store.workspaces.create(`unwritten-${engine.name}`);
      stub = await storedStub(store.stubs, ws.id, { name: "e/v1", type: "endpoint/deployment" });
      // The spy: every batch the writer commits, by task.
      const apply = store.tasks.applyBatch.bind(store.tasks);
      store.tasks.applyBatch = async (patches, history, inserts: TaskRecord[] = []) => {
        const dropped = await apply(patches, history, inserts);
        writes.push({ inserts: inserts.map((r) => r.id), patches: [...patches], history: [...history] });
        return dropped;
      };
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    /** An engine and its direct tasks; stopped when the suite ends. */
    const setup = (foldMs: number) => {
      const eng = new TaskEngine(store.tasks, log, (t) => finished.push(t), {}, foldMs);
      cleanups.push(() => eng.stop());
      return { eng, direct: new DirectTasks(eng, log, Date.now) };
    };
    const writesOf = (id: string) =>
      writes
        .map((w) => ({
          inserted: w.inserts.includes(id),
          patched: w.patches.some(([p]) => p === id),
          history: w.history.filter((h) => h.taskId === id).map((h) => h.status),
        }))
        .filter((w) => w.inserted || w.patched || w.history.length > 0);
    const historyOf = async (id: string) => (await store.tasks.history(id)).map((h) => h.status);

    test("a short task: nothing written while open; one write with its row and ordered history when it ends", async () => {
      const { eng, direct } = setup(60_000);
      const info = recordDirectTask(direct, stub, { callbackUrl: "http://127.0.0.1:9/hook" });
      assert.equal(direct.started(info.id, "ctr-1", "agent-1"), true);
      await eng.writer.committed();
      assert.equal(await store.tasks.get(info.id), undefined, "no row while the task is open");
      assert.equal(eng.index.get(info.id)?.status, "RUNNING");
      assert.deepEqual(
        eng.unwrittenHistory(info.id)?.map((h) => h.status),
        ["RUNNING"],
      );
      assert.equal(direct.finished(info.id, { status: "COMPLETE", resultJson: '{"ok":1}' }), true);
      assert.equal(direct.finished(info.id, { status: "FAILED" }), false, "the first outcome stands");
      await eng.writer.committed();
      assert.deepEqual(writesOf(info.id), [
        { inserted: true, patched: false, history: ["RUNNING", "COMPLETE"] },
      ]);
      const row = await store.tasks.get(info.id);
      assert.equal(row?.status, "COMPLETE");
      assert.equal(row?.attempt, 1);
      assert.equal(row?.containerId, "ctr-1");
      assert.equal(row?.agentId, "agent-1");
      assert.equal(row?.resultJson, '{"ok":1}');
      assert.equal(row?.callbackUrl, "http://127.0.0.1:9/hook");
      assert.equal(row?.createdAt, info.createdAt);
      assert.equal(row?.expiresAt, info.expiresAt);
      assert.ok(row?.startedAt && row.endedAt && row.startedAt <= row.endedAt);
      const hist = await store.tasks.history(info.id);
      assert.deepEqual(
        hist.map((h) => [h.status, h.attempt, h.containerId]),
        [
          ["RUNNING", 1, "ctr-1"],
          ["COMPLETE", 1, "ctr-1"],
        ],
      );
      assert.equal(hist[0]?.at, row?.startedAt);
      assert.equal(hist[1]?.at, row?.endedAt);
      await waitFor(() => finished.some((t) => t.id === info.id), {
        what: "the after-commit step (callbacks)",
      });
      assert.equal(eng.index.get(info.id), undefined, "forgotten once written");
    });

    test("a retried task that never reached a container: RUNNING, RETRY, RUNNING, FAILED in one write", async () => {
      const { eng, direct } = setup(60_000);
      const { id } = recordDirectTask(direct, stub);
      direct.started(id, "ctr-a", "agent-1");
      direct.retry(id, { type: "EndpointProxyError", message: "refused", traceback: "" });
      direct.started(id, "ctr-b", "agent-1");
      direct.finished(id, {
        status: "FAILED",
        error: { type: "ValueError", message: "boom", traceback: "" },
      });
      await eng.writer.committed();
      assert.deepEqual(writesOf(id), [
        { inserted: true, patched: false, history: ["RUNNING", "RETRY", "RUNNING", "FAILED"] },
      ]);
      const row = await store.tasks.get(id);
      assert.equal(row?.status, "FAILED");
      assert.equal(row?.attempt, 2);
      assert.equal(row?.containerId, "ctr-b");
      assert.equal(row?.error?.message, "boom");
      assert.deepEqual(
        (await store.tasks.history(id)).map((h) => `${h.status}/${h.attempt}/${h.containerId}`),
        ["RUNNING/1/ctr-a", "RETRY/1/ctr-a", "RUNNING/2/ctr-b", "FAILED/2/ctr-b"],
      );
    });

    test("a long task is written once it has been open for the fold time, then updated when it ends", async () => {
      const { eng, direct } = setup(30);
      const { id } = recordDirectTask(direct, stub);
      direct.started(id, "ctr-1", "agent-1");
      await waitFor(async () => (await store.tasks.get(id))?.status === "RUNNING", {
        what: "the open task's row",
      });
      assert.equal(eng.isUnwritten(id), false);
      assert.deepEqual(await historyOf(id), ["RUNNING"]);
      direct.finished(id, { status: "COMPLETE", resultJson: "7" });
      await eng.writer.committed();
      assert.deepEqual(writesOf(id), [
        { inserted: true, patched: false, history: ["RUNNING"] },
        { inserted: false, patched: true, history: ["COMPLETE"] },
      ]);
      const row = await store.tasks.get(id);
      assert.equal(row?.status, "COMPLETE");
      assert.equal(row?.resultJson, "7");
      assert.ok(row?.endedAt);
      assert.deepEqual(await historyOf(id), ["RUNNING", "COMPLETE"]);
    });

    test("a task still waiting is written PENDING, with no history, and ends EXPIRED by an update", async () => {
      const { eng, direct } = setup(20);
      const { id } = recordDirectTask(direct, stub);
      await waitFor(async () => (await store.tasks.get(id))?.status === "PENDING", {
        what: "the PENDING row",
      });
      assert.deepEqual(await historyOf(id), []);
      direct.finished(id, {
        status: "EXPIRED",
        error: { type: "TaskExpired", message: "late", traceback: "" },
        reason: "expired",
      });
      await eng.writer.committed();
      assert.equal((await store.tasks.get(id))?.status, "EXPIRED");
      assert.deepEqual(await historyOf(id), ["EXPIRED"]);
    });

    test("many short tasks ending together share one batch; stopping writes the ones still open", async () => {
      const { eng, direct } = setup(60_000);
      const ids: string[] = [];
      for (let i = 0; i < 150; i++) ids.push(recordDirectTask(direct, stub).id);
      for (const [i, id] of ids.entries()) direct.started(id, `ctr-${i % 3}`, "agent-1");
      const before = writes.length;
      for (const id of ids.slice(0, 140)) direct.finished(id, { status: "COMPLETE", resultJson: `"${id}"` });
      await eng.writer.committed();
      assert.equal(writes.length - before, 1, "one batch for all of them");
      for (const id of ids.slice(0, 140)) {
        const row = await store.tasks.get(id);
        assert.equal(row?.resultJson, `"${id}"`);
        assert.deepEqual(await historyOf(id), ["RUNNING", "COMPLETE"]);
      }
      assert.equal(await store.tasks.get(ids[145] as string), undefined);
      await eng.stop();
      for (const id of ids.slice(140)) {
        assert.equal((await store.tasks.get(id))?.status, "RUNNING", "an open task's row is written on stop");
        assert.deepEqual(await historyOf(id), ["RUNNING"]);
      }
    });
  });
}
