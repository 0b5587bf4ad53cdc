// The gateway's usage writer (coordinator/inference/usage-writer.ts): rows
// of finished requests are queued and written together, in order, never
// lost to a refused write, and written at stop.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pino from "pino";
import { UsageWriter } from "../../coordinator/inference/usage-writer.ts";
import { type UsageRecord, USAGE_ROWS_PER_INSERT } from "../../coordinator/inference/store.ts";
import { waitUntil } from "../helpers/wait.ts";

const row = (n: number): UsageRecord => ({
  workspaceId: "ws-a",
  tokenId: "tok-1",
  model: "m1",
  route: "chat.completions",
  deploymentId: "dep-1",
  taskId: `task-${n}`,
  stream: true,
  status: 200,
  errorCode: null,
  promptTokens: 1,
  completionTokens: n,
  totalTokens: n + 1,
  ttftMs: 1,
  durationMs: 2,
  atMs: 1_800_000_000_000 + n,
});

/** A store that keeps what it is given, and refuses while `refuse` is set. */
class Sink {
  calls: UsageRecord[][] = [];
  refuse = false;
  async recordUsageRows(rows: readonly UsageRecord[]) {
    if (this.refuse) throw new Error("the store is down");
    this.calls.push([...rows]);
    return rows.map((r) => r.taskId);
  }
  get written() {
    return this.calls.flat().map((r) => r.completionTokens);
  }
}

const silent = pino({ level: "silent" });

describe("the gateway's usage writer", () => {
  test("rows queued within one flush interval are written together, in order, by the timer", async () => {
    const sink = new Sink();
    const w = new UsageWriter(sink, silent, { flushMs: 5 });
    for (let i = 1; i <= 5; i++) w.add(row(i));
    assert.equal(sink.calls.length, 0, "add() writes nothing itself");
    await waitUntil(() => sink.written.length === 5, { what: "the timer's write" });
    assert.deepEqual(sink.calls.length, 1);
    assert.deepEqual(sink.written, [1, 2, 3, 4, 5]);
    assert.equal(w.queued, 0);
  });

  test("flush() writes at once; a full statement's worth is split at the statement's size", async () => {
    const sink = new Sink();
    const w = new UsageWriter(sink, silent, { flushMs: 60_000 });
    for (let i = 1; i <= USAGE_ROWS_PER_INSERT + 2; i++) w.add(row(i));
    await w.flush();
    assert.deepEqual(
      sink.calls.map((c) => c.length),
      [USAGE_ROWS_PER_INSERT, 2],
    );
    assert.deepEqual(
      sink.written,
      Array.from({ length: USAGE_ROWS_PER_INSERT + 2 }, (_, i) => i + 1),
    );
    await w.close();
  });

  test("a refused write keeps its rows ahead of newer ones for the next write", async () => {
    const sink = new Sink();
    const w = new UsageWriter(sink, silent, { flushMs: 60_000 });
    w.add(row(1));
    w.add(row(2));
    sink.refuse = true;
    await assert.rejects(w.flush(), /the store is down/);
    assert.equal(w.queued, 2);
    w.add(row(3));
    sink.refuse = false;
    await w.flush();
    assert.deepEqual(sink.written, [1, 2, 3]);
    await w.close();
  });

  test("close() writes what is queued; a row added after it is written without waiting for the interval", async () => {
    const sink = new Sink();
    const w = new UsageWriter(sink, silent, { flushMs: 60_000 });
    w.add(row(1));
    w.add(row(2));
    await w.close();
    assert.deepEqual(sink.written, [1, 2]);
    w.add(row(3));
    await waitUntil(() => sink.written.length === 3, { what: "the row added after close" });
    assert.deepEqual(sink.written, [1, 2, 3]);
  });

  test("flushes never overlap: a second waits for the first, and each row is written once", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const sink = new Sink();
    const slow = {
      recordUsageRows: async (rows: readonly UsageRecord[]) => {
        await gate;
        return sink.recordUsageRows(rows);
      },
    };
    const w = new UsageWriter(slow, silent, { flushMs: 60_000 });
    w.add(row(1));
    const first = w.flush();
    w.add(row(2));
    const second = w.flush();
    release();
    await Promise.all([first, second]);
    assert.deepEqual(
      sink.calls.map((c) => c.map((r) => r.completionTokens)),
      [[1], [2]],
    );
    await w.close();
  });

  test("past maxQueued while the store refuses, the oldest rows go (memory stays bounded)", async () => {
    const sink = new Sink();
    sink.refuse = true;
    const w = new UsageWriter(sink, silent, { flushMs: 60_000, maxQueued: 3 });
    for (let i = 1; i <= 5; i++) w.add(row(i));
    assert.equal(w.queued, 3);
    sink.refuse = false;
    await w.flush();
    assert.deepEqual(sink.written, [3, 4, 5]);
    await w.close();
  });
});
