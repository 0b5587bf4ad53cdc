// An agent's task event is acknowledged only once what it says is in the
// store (coordinator/tasks/engine.ts, applyEvent): JetStream delivers it
// again otherwise, so a coordinator that stops before the write loses
// nothing. The engine and a real store, whose task writes are switched off
// for a while as a store that is down would be.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { Store } from "../../coordinator/records.ts";
import { TaskEngine } from "../../coordinator/tasks/engine.ts";
import { liveFromRecord } from "../../coordinator/tasks/live-index.ts";
import type { TaskRecord } from "../../coordinator/tasks/store.ts";
import type { StubRecord } from "../../coordinator/tasks/stub-store.ts";
import type { TaskFinishedEvent } from "../../shared/tasks.ts";
import { waitFor } from "../../shared/net.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { storedStub } from "./fixtures.ts";

const sqlite = STORE_ENGINES[0];

describe("task event acknowledgements", () => {
  let store: Store;
  let stub: StubRecord;
  let down = false;
  const cleanups: (() => unknown)[] = [];
  const suite = { after: (fn: () => unknown) => cleanups.push(fn) };

  before(async () => {
    assert.ok(sqlite);
    store = await Store.open(await sqlite.url(suite));
    const ws = await store.workspaces.create("event-acks");
    stub = await storedStub(store.stubs, ws.id);
    const apply = store.tasks.applyBatch.bind(store.tasks);
    store.tasks.applyBatch = async (patches, history, inserts: TaskRecord[] = []) => {
      if (down) throw new Error("the store is down");
      return apply(patches, history, inserts);
    };
  });
  const engines: TaskEngine[] = [];
  after(async () => {
    down = false;
    // Engines first: a writer still retrying against a closed store would never stop.
    for (const e of engines) await e.stop();
    await store?.close();
    for (const fn of cleanups.reverse()) await fn();
  });

  test("an event delivered again while its first delivery's write waits is acknowledged after that write, not before", async () => {
    const engine = new TaskEngine(store.tasks, pino({ level: "silent" }), () => {}, {
      flushAfterMs: 1,
      retryAfterMs: 20,
    });
    engines.push(engine);
    const id = randomUUID();
    await store.tasks.insertMany([
      {
        id,
        workspaceId: stub.workspaceId,
        stubId: stub.id,
        headless: false,
        callbackUrl: null,
        expiresAt: null,
        createdAt: new Date().toISOString(),
      },
    ]);
    const row = await store.tasks.get(id);
    assert.ok(row);
    const live = liveFromRecord(row);
    engine.index.add(live);
    const finished: TaskFinishedEvent = {
      type: "finished",
      status: "COMPLETE",
      taskId: id,
      stubId: stub.id,
      workspaceId: stub.workspaceId,
      agentId: "agent-1",
      containerId: "ctr-1",
      attempt: 1,
      at: Date.now(),
      startedAt: Date.now() - 5,
      resultJson: "42",
    };

    down = true;
    const acked: string[] = [];
    try {
      assert.equal(
        engine.applyEvent(live, finished, () => acked.push("first")),
        true,
      );
      // The first delivery's write fails and is retried: JetStream's ack wait passes, it delivers again.
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(
        engine.applyEvent(live, finished, () => acked.push("again")),
        false,
        "the second delivery changes nothing",
      );
      await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(acked, [], "nothing is acknowledged while the task's end is not written");
      assert.equal((await store.tasks.get(id))?.status, "PENDING");
    } finally {
      down = false;
    }
    await waitFor(() => acked.length === 2, { what: "both deliveries acknowledged" });
    assert.deepEqual(acked.sort(), ["again", "first"]);
    assert.equal((await store.tasks.get(id))?.status, "COMPLETE");
  });
});
