// The limits repo on SQLite and PostgreSQL: migration 0007 keeps each
// existing workspace's max_containers, a new workspace reads the column's
// default, changes are partial (null: no limit), bad values are refused.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { WorkspaceLimits } from "../../coordinator/limits/store.ts";
import type { Database } from "../../coordinator/store/index.ts";
import { STORE_ENGINES, openSuiteStoreFrom } from "../helpers/engines.ts";

/** A workspace's limits with none set: the column defaults. */
const DEFAULTS: WorkspaceLimits = {
  maxContainers: 32,
  maxCpuMillicores: null,
  maxMemoryMb: null,
  maxGpus: null,
  maxPendingTasks: null,
  maxQueueItems: null,
  maxVolumeMb: null,
  maxInferenceRequests: null,
  maxTokensPerMinute: null,
  gpuHoursPerMonth: null,
  cpuHoursPerMonth: null,
  v1TokensPerMonth: null,
  isolation: null,
  userNamespace: true,
  syscallFilter: "allowlist",
  maxGpusByType: null,
};

/** `set` is refused as an invalid request whose message matches `message`. */
function refused(set: Promise<unknown>, message: RegExp): Promise<void> {
  return assert.rejects(set, (e: Error & { code?: string }) => {
    assert.equal(e.code, "invalid_request");
    assert.match(e.message, message);
    return true;
  });
}

for (const engine of STORE_ENGINES) {
  describe(`workspace limits on ${engine.name}`, async () => {
    // A store from before limits, with a workspace whose max_containers was changed.
    const migratedWs = "ws-premigration";
    const store = await openSuiteStoreFrom<Database>(engine, "0006_webhooks", async (db) => {
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
    });

    test("migration 0007 keeps an existing workspace's max_containers; nothing else is limited", async () => {
      assert.deepEqual(await store.limits.get(migratedWs), { ...DEFAULTS, maxContainers: 7 });
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
        ...DEFAULTS,
        maxCpuMillicores: 8000,
        maxPendingTasks: 100,
        maxQueueItems: 500,
      });
      const second = await store.limits.set(ws.id, { maxContainers: 5, maxGpus: 0, maxPendingTasks: null });
      assert.deepEqual(second, {
        ...DEFAULTS,
        maxContainers: 5,
        maxCpuMillicores: 8000,
        maxGpus: 0,
        maxQueueItems: 500,
      });
      assert.deepEqual(await store.limits.get(ws.id), second);
      assert.equal(await store.workspaces.maxContainers(ws.id), 5);
      const unlimited = await store.limits.set(ws.id, { maxContainers: null });
      assert.equal(unlimited.maxContainers, null);
      assert.equal((await store.limits.get(ws.id)).maxContainers, null);
      assert.equal((await store.limits.get(ws.id)).maxCpuMillicores, 8000);
    });

    test("v1_tokens_per_month: set, kept beside the other limits, null removes it, bad values refused", async () => {
      const ws = await store.workspaces.create("metered-v1");
      assert.equal((await store.limits.get(ws.id)).v1TokensPerMonth, null);
      const set = await store.limits.set(ws.id, { v1TokensPerMonth: 1_000_000, gpuHoursPerMonth: 2 });
      assert.deepEqual([set.v1TokensPerMonth, set.gpuHoursPerMonth], [1_000_000, 2]);
      const tuned = await store.limits.set(ws.id, { maxGpus: 1 });
      assert.equal(tuned.v1TokensPerMonth, 1_000_000, "a limit change keeps it");
      assert.deepEqual(await store.limits.get(ws.id), tuned);
      assert.equal((await store.limits.set(ws.id, { v1TokensPerMonth: 0 })).v1TokensPerMonth, 0);
      for (const bad of [-1, 1.5, 2_147_483_648]) {
        await refused(
          store.limits.set(ws.id, { v1TokensPerMonth: bad }),
          /^v1_tokens_per_month must be a whole number from 0 to 2147483647/,
        );
      }
      assert.equal((await store.limits.get(ws.id)).v1TokensPerMonth, 0, "nothing half written");
      const removed = await store.limits.set(ws.id, { v1TokensPerMonth: null });
      assert.deepEqual([removed.v1TokensPerMonth, removed.gpuHoursPerMonth], [null, 2]);
    });

    test("isolation: gvisor forced on a workspace, kept beside the limits, null gives it back to the stubs", async () => {
      const ws = await store.workspaces.create("untrusted");
      assert.equal((await store.limits.get(ws.id)).isolation, null);
      const forced = await store.limits.set(ws.id, { isolation: "gvisor" });
      assert.deepEqual([forced.isolation, forced.maxContainers], ["gvisor", 32]);
      const tuned = await store.limits.set(ws.id, { maxGpus: 1 });
      assert.deepEqual([tuned.isolation, tuned.maxGpus], ["gvisor", 1], "a limit change keeps it");
      assert.equal((await store.limits.get(ws.id)).isolation, "gvisor");
      assert.equal((await store.limits.set(ws.id, { isolation: null })).isolation, null);
      await refused(
        store.limits.set(ws.id, { isolation: "runsc" as never }),
        /isolation must be "gvisor", or null/,
      );
    });

    test("opt-outs: user namespace and system call filter default on, kept beside the limits, bad values refused", async () => {
      const ws = await store.workspaces.create("legacy");
      const fresh = await store.limits.get(ws.id);
      assert.deepEqual(
        [fresh.userNamespace, fresh.syscallFilter],
        [true, "allowlist"],
        "no row: the defaults",
      );
      const tuned = await store.limits.set(ws.id, { maxGpus: 2 });
      assert.deepEqual(
        [tuned.userNamespace, tuned.syscallFilter],
        [true, "allowlist"],
        "a row: still the defaults",
      );
      const out = await store.limits.set(ws.id, { userNamespace: false, syscallFilter: "denylist" });
      assert.deepEqual([out.userNamespace, out.syscallFilter, out.maxGpus], [false, "denylist", 2]);
      const kept = await store.limits.set(ws.id, { maxGpus: 3, isolation: "gvisor" });
      assert.deepEqual(
        [kept.userNamespace, kept.syscallFilter],
        [false, "denylist"],
        "a limit change keeps them",
      );
      assert.deepEqual(await store.limits.get(ws.id), kept);
      const back = await store.limits.set(ws.id, { userNamespace: true });
      assert.deepEqual([back.userNamespace, back.syscallFilter], [true, "denylist"], "each on its own");
      for (const [change, re] of [
        [{ userNamespace: "off" }, /user_namespace must be true or false; got "off"/],
        [{ userNamespace: null }, /user_namespace must be true or false; got null/],
        [{ syscallFilter: "none" }, /syscall_filter must be "allowlist" or "denylist"; got "none"/],
        [{ syscallFilter: null }, /syscall_filter must be "allowlist" or "denylist"; got null/],
      ] as const) {
        await refused(store.limits.set(ws.id, change as never), re);
      }
      assert.deepEqual(await store.limits.get(ws.id), back, "nothing half written");
      // A row written before migration 0030 has neither column: the defaults.
      await store.db
        .updateTable("workspace_limits")
        .set({ user_namespace: null, syscall_filter: null })
        .where("workspace_id", "=", ws.id)
        .execute();
      const old = await store.limits.get(ws.id);
      assert.deepEqual([old.userNamespace, old.syscallFilter], [true, "allowlist"]);
    });

    test("max_gpus_by_type: kept as JSON beside the limits, {} or null clears it, bad types refused", async () => {
      const ws = await store.workspaces.create("gpu-typed");
      assert.equal((await store.limits.get(ws.id)).maxGpusByType, null);
      const set = await store.limits.set(ws.id, { maxGpusByType: { A100: 2, "A100:1g.10gb": 3 } });
      assert.deepEqual(set.maxGpusByType, { A100: 2, "A100:1g.10gb": 3 });
      const tuned = await store.limits.set(ws.id, { maxGpus: 4 });
      assert.deepEqual(tuned.maxGpusByType, { A100: 2, "A100:1g.10gb": 3 }, "a limit change keeps it");
      assert.deepEqual((await store.limits.get(ws.id)).maxGpusByType, { A100: 2, "A100:1g.10gb": 3 });
      assert.equal((await store.limits.set(ws.id, { maxGpusByType: {} })).maxGpusByType, null);
      await store.limits.set(ws.id, { maxGpusByType: { H100: 0 } });
      assert.deepEqual((await store.limits.get(ws.id)).maxGpusByType, { H100: 0 }, "0 is a limit");
      const bads: Record<string, number>[] = [
        { "A 100": 1 },
        { A100: -1 },
        { A100: 0.5 },
        { a100: 1, A100: 1 },
      ];
      for (const bad of bads)
        await refused(store.limits.set(ws.id, { maxGpusByType: bad }), /max_gpus_by_type/);
      assert.deepEqual((await store.limits.get(ws.id)).maxGpusByType, { H100: 0 }, "nothing half written");
    });

    test("bad values and unknown workspaces are refused", async () => {
      const ws = await store.workspaces.create("strict");
      for (const v of [-1, 1.5, Number.NaN, 2 ** 31]) {
        await refused(store.limits.set(ws.id, { maxMemoryMb: v }), /max_memory_mb must be a whole number/);
      }
      await assert.rejects(store.limits.get("ws-nope"), { code: "not_found" });
      await assert.rejects(store.limits.set("ws-nope", { maxGpus: 1 }), { code: "not_found" });
    });
  });
}
