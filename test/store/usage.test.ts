// Usage reports read from the store on SQLite and PostgreSQL (docs/usage.md):
// the submitting token of tasks and sandboxes (migration 0024) survives,
// thousands of runs are read in pages without loss, a running task counts up
// to now, a sandbox counts its life, the GPU type is the one its agent has,
// and /v1 tokens are summed by day in the database.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Store } from "../../coordinator/records.ts";
import { UsageRepo, UsageService } from "../../coordinator/usage/index.ts";
import { STORE_ENGINES, openSuiteStore } from "../helpers/engines.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

const T0 = Date.parse("2026-11-30T00:00:00Z");
const iso = (ms: number) => new Date(ms).toISOString();
const RUNS = 2500;

for (const engine of STORE_ENGINES) {
  describe(`usage from the ${engine.name} store`, async () => {
    const now = T0 + 30 * 3_600_000; // 2026-12-01T06:00Z

    const store: Store = await openSuiteStore(engine);
    const ws = (await store.workspaces.create("usage-a")).id;
    const tokenId = (await store.tokens.create(ws, { name: "carol" })).record.id;
    {
      const { stub } = await store.stubs.upsert(ws, {
        name: "train",
        type: "function",
        config: stubConfig({ runtime: { cpu: 4, gpu: "H100,A100", memory: 2048, image_id: "" } }),
        extra: stubExtra({ cpu_millicores: 4000, gpu_types: ["H100", "A100"], gpu_count: 1 }),
        objectId: null,
      });
      await store.agents.upsertJoin({ id: "agent-a100", hostname: "h", version: "t", grpcAddress: "h:1" });
      await store.agents.recordSeen("agent-a100", {
        state: "ready",
        lastSeenAt: iso(T0),
        capacity: {
          cpuCores: 8,
          memoryBytes: 2 ** 34,
          disk: { path: "/", totalBytes: 1, freeBytes: 1 },
          gpus: {
            available: true,
            toolkit: false,
            devices: [{ index: 0, uuid: "GPU-1", model: "NVIDIA A100", type: "A100", memoryMiB: 81920 }],
          },
        },
      });
      // RUNS tasks of 10 s each on day one, then one still running since 05:00 on day two.
      const ids = Array.from({ length: RUNS + 1 }, (_, i) => `task-${String(i).padStart(5, "0")}`);
      await store.tasks.insertMany(
        ids.map((id) => ({
          id,
          workspaceId: ws,
          stubId: stub.id,
          headless: false,
          callbackUrl: null,
          expiresAt: null,
          createdAt: iso(T0),
          tokenId,
        })),
      );
      const patches = new Map(
        ids.slice(0, RUNS).map((id, i) => {
          const start = T0 + 3_600_000 + i * 10_000;
          return [
            id,
            {
              status: "COMPLETE" as const,
              agentId: "agent-a100",
              startedAt: iso(start),
              endedAt: iso(start + 10_000),
              updatedAt: iso(start + 10_000),
            },
          ];
        }),
      );
      patches.set(
        ids[RUNS] as string,
        {
          status: "RUNNING" as const,
          agentId: "agent-a100",
          startedAt: iso(now - 3_600_000),
          updatedAt: iso(now - 3_600_000),
        } as never,
      );
      await store.tasks.applyBatch(patches, []);
      // A sandbox of the same stub alive for 90 s.
      await store.sandboxes.insert({
        id: "ctr-sbx",
        workspaceId: ws,
        stubId: stub.id,
        agentId: "agent-a100",
        kind: "sandbox",
        ttlSeconds: -1,
        ports: [],
        egress: { mode: "allow" } as never,
        imageId: null,
        at: iso(T0 + 600_000),
        tokenId,
      });
      await store.sandboxes.markTerminated("ctr-sbx", iso(T0 + 690_000), "terminated");
      // /v1 requests: two on day one (one without a total: prompt + completion counts), one on day two.
      const v1 = (atMs: number, prompt: number, completion: number, total: number | null) => ({
        workspaceId: ws,
        tokenId,
        model: "m",
        route: "chat.completions",
        deploymentId: null,
        taskId: null,
        stream: false,
        status: 200,
        errorCode: null,
        promptTokens: prompt,
        completionTokens: completion,
        totalTokens: total,
        ttftMs: 1,
        durationMs: 2,
        atMs,
      });
      await store.inference.recordUsageRows([
        v1(T0 + 1000, 10, 20, 30),
        v1(T0 + 86_399_999, 1, 2, null),
        v1(T0 + 86_400_000, 100, 200, 300),
      ]);
    }

    test("the task keeps its submitting token", async () => {
      assert.equal((await store.tasks.get("task-00000"))?.tokenId, tokenId);
    });

    test("totals over thousands of runs, a running task and a sandbox, by day", async () => {
      const usage = new UsageService({ repo: new UsageRepo(store.db), clock: () => now });
      const r = await usage.report(ws, { fromMs: T0, toMs: T0 + 2 * 86_400_000, by: ["day"] });
      const day1 = r.rows.find((x) => x.day === "2026-11-30");
      const day2 = r.rows.find((x) => x.day === "2026-12-01");
      assert.equal(day1?.usage.tasks, RUNS);
      assert.equal(day1?.usage.sandboxes, 1);
      assert.equal(day1?.usage.run_seconds, RUNS * 10 + 90);
      assert.equal(day1?.usage.cpu_seconds, 4 * (RUNS * 10 + 90));
      assert.equal(day1?.usage.memory_gib_seconds, 2 * (RUNS * 10 + 90));
      assert.deepEqual(day1?.usage.gpu_seconds_by_type, { A100: RUNS * 10 + 90 });
      // The running task: from 05:00 to now (06:00), counted on day two.
      assert.equal(day2?.usage.run_seconds, 3600);
      assert.equal(day2?.usage.tasks, 1);
      assert.deepEqual(
        [day1?.usage.inference_requests, day1?.usage.prompt_tokens, day1?.usage.total_tokens],
        [2, 11, 33],
      );
      assert.deepEqual([day2?.usage.inference_requests, day2?.usage.total_tokens], [1, 300]);
      assert.equal(r.totals.run_seconds, RUNS * 10 + 90 + 3600);
      assert.equal(r.rows.length, 2);
      const m = await usage.report(ws, { fromMs: T0, toMs: T0 + 2 * 86_400_000, by: ["member"] });
      assert.deepEqual(
        m.rows.map((x) => [x.member, x.usage.run_seconds]),
        [[{ id: tokenId, name: "carol" }, RUNS * 10 + 90 + 3600]],
      );
    });
  });
}
