// The inference records on SQLite and PostgreSQL (migration 0016): usage
// rows with their filters and totals (at_ms is a bigint, sums are numbers on
// both engines), the catalog's publish/unpublish by deployment name.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { type UsageRecord, USAGE_ROWS_PER_INSERT } from "../../coordinator/inference/store.ts";
import { Store } from "../../coordinator/records.ts";
import { UsageWriter } from "../../coordinator/inference/usage-writer.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

const row = (o: Partial<UsageRecord>): UsageRecord => ({
  workspaceId: "ws-a",
  tokenId: "tok-1",
  model: "m1",
  route: "chat.completions",
  deploymentId: "dep-1",
  taskId: "task-1",
  stream: true,
  status: 200,
  errorCode: null,
  promptTokens: 3,
  completionTokens: 7,
  totalTokens: 10,
  ttftMs: 12.4,
  durationMs: 80.6,
  atMs: 1_800_000_000_000,
  ...o,
});

for (const engine of STORE_ENGINES) {
  describe(`inference records on ${engine.name}`, () => {
    let store: Store;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };

    before(async () => {
      store = await Store.open(await engine.url(suite));
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("usage rows: newest first, filtered by time and model, totals over the same filter", async () => {
      const repo = store.inference;
      await repo.recordUsage(row({}));
      await repo.recordUsage(row({ atMs: 1_800_000_001_000, model: "m2", stream: false, ttftMs: null }));
      await repo.recordUsage(
        row({
          atMs: 1_800_000_002_000,
          status: 499,
          errorCode: "cancelled",
          promptTokens: null,
          completionTokens: null,
          totalTokens: null,
        }),
      );
      await repo.recordUsage(row({ workspaceId: "ws-b", atMs: 1_800_000_003_000 }));
      const all = await repo.usage("ws-a", { limit: 10 });
      assert.deepEqual(
        all.map((r) => [r.atMs, r.model, r.status]),
        [
          [1_800_000_002_000, "m1", 499],
          [1_800_000_001_000, "m2", 200],
          [1_800_000_000_000, "m1", 200],
        ],
      );
      const first = all[2];
      assert.ok(first);
      assert.deepEqual(
        [
          first.stream,
          first.promptTokens,
          first.completionTokens,
          first.totalTokens,
          first.ttftMs,
          first.durationMs,
        ],
        [true, 3, 7, 10, 12, 81],
      );
      assert.equal(all[0]?.promptTokens, null);
      assert.equal(all[1]?.ttftMs, null);
      assert.deepEqual(
        (await repo.usage("ws-a", { sinceMs: 1_800_000_001_000, untilMs: 1_800_000_002_000, limit: 10 })).map(
          (r) => r.model,
        ),
        ["m2"],
      );
      assert.deepEqual(await repo.totals("ws-a", {}), {
        requests: 3,
        promptTokens: 6,
        completionTokens: 14,
        totalTokens: 20,
      });
      assert.deepEqual(await repo.totals("ws-a", { model: "m2" }), {
        requests: 1,
        promptTokens: 3,
        completionTokens: 7,
        totalTokens: 10,
      });
      assert.deepEqual(await repo.totals("ws-none", {}), {
        requests: 0,
        promptTokens: 0,
        completionTokens: 0,
        totalTokens: 0,
      });
      assert.equal((await repo.usage("ws-a", { limit: 1 })).length, 1);
    });

    test("usage rows in one statement: all of them, each its own id; over the statement's size refused", async () => {
      const repo = store.inference;
      const ws = "ws-batch";
      const ids = await repo.recordUsageRows(
        [1, 2, 3].map((i) => row({ workspaceId: ws, atMs: 1_800_000_100_000 + i, completionTokens: i })),
      );
      assert.equal(new Set(ids).size, 3);
      assert.deepEqual(
        (await repo.usage(ws, { limit: 10 })).map((r) => [r.id, r.completionTokens]),
        [
          [ids[2], 3],
          [ids[1], 2],
          [ids[0], 1],
        ],
      );
      const tooMany = Array.from({ length: USAGE_ROWS_PER_INSERT + 1 }, () => row({ workspaceId: ws }));
      await assert.rejects(repo.recordUsageRows(tooMany), /at most 500 usage rows/);
      assert.equal((await repo.totals(ws, {})).requests, 3, "nothing of a refused batch is written");
      assert.deepEqual(await repo.recordUsageRows([]), []);
    });

    test("rows the gateway's writer still holds are written before a read, so the read shows them", async () => {
      const repo = store.inference;
      const ws = "ws-queued";
      const writer = new UsageWriter(repo, pino({ level: "silent" }), { flushMs: 60_000 });
      repo.readsWriteFirst(writer);
      writer.add(row({ workspaceId: ws, completionTokens: 1 }));
      writer.add(row({ workspaceId: ws, completionTokens: 2 }));
      assert.equal(writer.queued, 2);
      assert.equal((await repo.totals(ws, {})).completionTokens, 3);
      assert.equal(writer.queued, 0);
      writer.add(row({ workspaceId: ws, completionTokens: 4 }));
      assert.equal((await repo.usage(ws, { limit: 10 })).length, 3);
      await writer.close();
    });

    test("the catalog: publish is idempotent, unpublish says whether it removed one", async () => {
      const repo = store.inference;
      await repo.publish("ws-a", "tiny", "2026-11-26T00:00:00.000Z");
      await repo.publish("ws-a", "tiny", "2026-11-26T00:00:01.000Z");
      await repo.publish("ws-b", "other", "2026-11-26T00:00:02.000Z");
      assert.deepEqual(
        (await repo.catalog()).map((r) => [r.workspaceId, r.deploymentName, r.publishedAt]),
        [
          ["ws-a", "tiny", "2026-11-26T00:00:00.000Z"],
          ["ws-b", "other", "2026-11-26T00:00:02.000Z"],
        ],
      );
      assert.equal(await repo.unpublish("ws-a", "tiny"), true);
      assert.equal(await repo.unpublish("ws-a", "tiny"), false);
      assert.deepEqual(
        (await repo.catalog()).map((r) => r.deploymentName),
        ["other"],
      );
    });
  });
}
