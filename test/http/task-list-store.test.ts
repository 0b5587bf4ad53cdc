// TaskRepo.list (the task list route's query) on both engines: keyset pages
// over (created_at, id) descending, with ties on created_at, and each filter.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import type { TaskRecord } from "../../coordinator/tasks/store.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { storedStub, stubConfig, stubExtra } from "../tasks/fixtures.ts";

for (const engine of STORE_ENGINES) {
  describe(`task list query on ${engine.name}`, () => {
    let store: Store;
    let ws: string;
    let stubs: string[];
    const cleanups: (() => unknown)[] = [];

    after(async () => {
      for (const fn of cleanups.reverse()) await fn();
    });
    before(async () => {
      store = await Store.open(await engine.url({ after: (fn) => cleanups.push(fn) }));
      cleanups.push(() => store.close());
      ws = (await store.workspaces.create("list")).id;
      const other = (await store.workspaces.create("other")).id;
      stubs = [];
      for (const name of ["f", "g"]) {
        const { stub } = await store.stubs.upsert(ws, {
          name,
          type: "function",
          config: stubConfig(),
          extra: stubExtra(),
          objectId: null,
        });
        stubs.push(stub.id);
      }
      const otherStub = await storedStub(store.stubs, other);
      // 12 tasks, three per second (ties on created_at), alternating stubs; one of another workspace.
      const rows = Array.from({ length: 12 }, (_, i) => ({
        id: `task-${String(i).padStart(2, "0")}`,
        workspaceId: ws,
        stubId: stubs[i % 2] as string,
        headless: false,
        callbackUrl: null,
        expiresAt: null,
        createdAt: new Date(Date.UTC(2025, 0, 1, 0, 0, Math.floor(i / 3))).toISOString(),
      }));
      rows.push({
        ...rows[0],
        id: "task-other",
        workspaceId: other,
        stubId: otherStub.id,
      } as (typeof rows)[0]);
      await store.tasks.insertMany(rows);
      await store.tasks.applyBatch(
        new Map([["task-05", { status: "COMPLETE", updatedAt: rows[5]?.createdAt as string }]]),
        [],
      );
    });

    const ids = (ts: TaskRecord[]) => ts.map((t) => t.id);

    test("newest first; keyset pages cover every task once, ties included", async () => {
      const all = await store.tasks.list(ws, {}, { limit: 100 });
      assert.deepEqual(
        ids(all),
        Array.from({ length: 12 }, (_, i) => `task-${String(11 - i).padStart(2, "0")}`),
      );
      const seen: string[] = [];
      let after: { createdAt: string; id: string } | undefined;
      for (;;) {
        const page = await store.tasks.list(ws, {}, { limit: 5, ...(after ? { after } : {}) });
        seen.push(...ids(page));
        const last = page[page.length - 1];
        if (page.length < 5 || !last) break;
        after = { createdAt: last.createdAt, id: last.id };
      }
      assert.deepEqual(seen, ids(all));
      assert.equal(all[0]?.result, null, "a list carries no results");
    });

    test("filters: statuses, stubs, created_after/before (strict); empty lists match nothing", async () => {
      assert.deepEqual(ids(await store.tasks.list(ws, { statuses: ["COMPLETE"] }, { limit: 100 })), [
        "task-05",
      ]);
      const pendingOrDone = await store.tasks.list(ws, { statuses: ["PENDING", "COMPLETE"] }, { limit: 100 });
      assert.equal(pendingOrDone.length, 12);
      const g = await store.tasks.list(ws, { stubIds: [stubs[1] as string] }, { limit: 100 });
      assert.deepEqual(ids(g), ["task-11", "task-09", "task-07", "task-05", "task-03", "task-01"]);
      const window = await store.tasks.list(
        ws,
        { createdAfter: "2025-01-01T00:00:01.000Z", createdBefore: "2025-01-01T00:00:03.000Z" },
        { limit: 100 },
      );
      assert.deepEqual(ids(window), ["task-08", "task-07", "task-06"]);
      assert.deepEqual(await store.tasks.list(ws, { stubIds: [] }, { limit: 100 }), []);
      assert.deepEqual(await store.tasks.list(ws, { statuses: [] }, { limit: 100 }), []);
    });
  });
}
