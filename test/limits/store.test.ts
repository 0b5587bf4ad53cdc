// The limits repo on SQLite and PostgreSQL: migration 0007 keeps each
// existing workspace's max_containers, a new workspace reads the column's
// default, changes are partial (null: no limit), bad values are refused.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Migrator } from "kysely";
import { openDatabase } from "../../coordinator/store/db.ts";
import { migrationProvider } from "../../coordinator/store/migrations/index.ts";
import { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

for (const engine of STORE_ENGINES) {
  describe(`workspace limits on ${engine.name}`, () => {
    let store: Store;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    let migratedWs: string;

    before(async () => {
      const url = await engine.url(suite);
      // A store from before limits, with a workspace whose max_containers was changed.
      const { db } = await openDatabase(url);
      try {
        const r = await new Migrator({ db, provider: migrationProvider }).migrateTo("0006_webhooks");
        if (r.error) throw r.error;
        migratedWs = "ws-premigration";
        await db
          .insertInto("workspaces")
          .values({
            id: migratedWs,
            external_id: migratedWs,
            name: "old",
            created_at: new Date().toISOString(),
            max_containers: 7,
          })
          .execute();
      } finally {
        await db.destroy();
      }
      store = await Store.open(url);
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("migration 0007 keeps an existing workspace's max_containers; nothing else is limited", async () => {
      assert.deepEqual(await store.limits.get(migratedWs), {
        maxContainers: 7,
        maxCpuMillicores: null,
        maxMemoryMb: null,
        maxGpus: null,
        maxPendingTasks: null,
        maxQueueItems: null,
        maxVolumeMb: null,
        maxInferenceRequests: null,
        maxTokensPerMinute: null,
      });
    });

    test("a new workspace reads max_containers 32 until limits are set", async () => {
      const ws = await store.workspaces.create("fresh");
      assert.equal((await store.limits.get(ws.id)).maxContainers, 32);
      assert.equal((await store.limits.get(ws.id)).maxPendingTasks, null);
    });

    test("set changes only what it names; null removes a limit; max_containers stays readable the old way", async () => {
      const ws = await store.workspaces.create("tuned");
      const first = await store.limits.set(ws.id, {
        maxCpuMillicores: 8000,
        maxPendingTasks: 100,
        maxQueueItems: 500,
      });
      assert.deepEqual(first, {
        maxContainers: 32,
        maxCpuMillicores: 8000,
        maxMemoryMb: null,
        maxGpus: null,
        maxPendingTasks: 100,
        maxQueueItems: 500,
        maxVolumeMb: null,
        maxInferenceRequests: null,
        maxTokensPerMinute: null,
      });
      const second = await store.limits.set(ws.id, { maxContainers: 5, maxGpus: 0, maxPendingTasks: null });
      assert.deepEqual(second, {
        maxContainers: 5,
        maxCpuMillicores: 8000,
        maxMemoryMb: null,
        maxGpus: 0,
        maxPendingTasks: null,
        maxQueueItems: 500,
        maxVolumeMb: null,
        maxInferenceRequests: null,
        maxTokensPerMinute: null,
      });
      assert.deepEqual(await store.limits.get(ws.id), second);
      assert.equal(await store.workspaces.maxContainers(ws.id), 5);
      const unlimited = await store.limits.set(ws.id, { maxContainers: null });
      assert.equal(unlimited.maxContainers, null);
      assert.equal((await store.limits.get(ws.id)).maxContainers, null);
      assert.equal((await store.limits.get(ws.id)).maxCpuMillicores, 8000);
    });

    test("bad values and unknown workspaces are refused", async () => {
      const ws = await store.workspaces.create("strict");
      for (const v of [-1, 1.5, Number.NaN, 2 ** 31]) {
        await assert.rejects(store.limits.set(ws.id, { maxMemoryMb: v }), (e: Error & { code?: string }) => {
          assert.equal(e.code, "invalid_request");
          assert.match(e.message, /max_memory_mb must be a whole number/);
          return true;
        });
      }
      await assert.rejects(store.limits.get("ws-nope"), { code: "not_found" });
      await assert.rejects(store.limits.set("ws-nope", { maxGpus: 1 }), { code: "not_found" });
    });
  });
}
