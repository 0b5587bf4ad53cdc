// A coordinator that missed the relay of a task's end (it was between NATS
// nodes when another coordinator committed it) takes the end in from the
// store: its live copy closes and its watchers hear the result
// (coordinator/tasks/catch-up.ts). The other coordinator's commit is written
// here straight to the shared store, with no relay, which is what the
// coordinator under test sees when that relay is lost.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { startNatsServer } from "../../shared/nats-server.ts";
import { waitFor } from "../../shared/net.ts";
import { clusterNatsUsers } from "../../shared/subjects.ts";
import type { TaskUpdate } from "../../coordinator/tasks/service.ts";
import { functionStubId, startTaskHarness, type TaskHarness } from "./harness.ts";

describe("catching up on task ends another coordinator committed (real NATS, SQLite)", () => {
  let h: TaskHarness;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    // No periodic read here: the first cases call it, or count on the reconnect's alone.
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) }, { catchUp: { everyMs: 3_600_000 } });
    stubId = await functionStubId(h, "catch-up");
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  /** Commits `taskId`'s end as another coordinator would: its row and history, nothing on NATS. */
  const endElsewhere = async (taskId: string, resultJson: string) => {
    const at = new Date().toISOString();
    await h.store.tasks.applyBatch(
      new Map([
        [
          taskId,
          {
            status: "COMPLETE",
            attempt: 1,
            result: Buffer.from(resultJson),
            resultJson,
            updatedAt: at,
            endedAt: at,
          },
        ],
      ]),
      [
        { taskId, status: "RUNNING", attempt: 1, containerId: "ctr-1", reason: null, at },
        { taskId, status: "COMPLETE", attempt: 1, containerId: "ctr-1", reason: null, at },
      ],
    );
  };

  /** Watches `ids` on the coordinator under test; the results heard, by task. */
  const watchResults = (ids: string[]) => {
    const results = new Map<string, TaskUpdate>();
    const unwatch = h.tasks.watch(ids, (u) => {
      if (u.type === "result") results.set(u.taskId, u);
    });
    cleanups.unshift(unwatch);
    return results;
  };

  test("a sweep takes in the ends it missed; watchers hear them; open tasks stay open", async () => {
    const base = h.tasks.demandOf(stubId)?.pending ?? 0;
    const [ended, open] = await h.tasks.submit(h.ws.id, stubId, [Buffer.from("a"), Buffer.from("b")]);
    const results = watchResults([ended as string, open as string]);
    await endElsewhere(ended as string, "9");
    // Without the relay, this coordinator's copy is still waiting.
    assert.equal((await h.tasks.getTask(h.ws.id, ended as string)).status, "PENDING");
    assert.equal(await h.tasks.catchUp.sweep(), 1);
    const heard = results.get(ended as string);
    assert.equal(heard?.type, "result");
    assert.equal(heard.type === "result" && heard.status, "COMPLETE");
    assert.equal(heard.type === "result" && heard.resultJson, "9");
    assert.equal(results.has(open as string), false);
    const row = await h.tasks.getTask(h.ws.id, ended as string);
    assert.equal(row.status, "COMPLETE");
    assert.equal(row.resultJson, "9");
    assert.equal(h.tasks.demandOf(stubId)?.pending, base + 1, "only the open task is still waiting");
    // A second sweep finds nothing more; a copy changed recently is not read at all.
    assert.equal(await h.tasks.catchUp.sweep(), 0);
    await endElsewhere(open as string, "4");
    assert.equal(await h.tasks.catchUp.sweep(60_000), 0, "a copy changed under a minute ago is left");
    assert.equal(await h.tasks.catchUp.sweep(), 1);
    assert.equal(h.tasks.demandOf(stubId)?.pending ?? 0, base);
  });

  test("after a reconnect to NATS, the catch-up runs by itself", async () => {
    const [id] = await h.tasks.submit(h.ws.id, stubId, [Buffer.from("c")]);
    const results = watchResults([id as string]);
    // NATS goes away; meanwhile another coordinator commits the task's end, and its relay is lost.
    await h.nats.stop();
    await endElsewhere(id as string, "16");
    const again = await startNatsServer({
      dir: h.nats.dir,
      port: h.nats.port,
      users: clusterNatsUsers({
        coordinatorPassword: h.nats.coordinator.password,
        agentPassword: h.nats.agent.password,
      }),
    });
    cleanups.unshift(() => again.stop());
    await waitFor(() => results.has(id as string), {
      timeoutMs: 15_000,
      what: "the watcher to hear the end once the connection is back",
    });
    const heard = results.get(id as string);
    assert.equal(heard?.type === "result" && heard.resultJson, "16");
  });

  test("an end whose relay was lost with no reconnect here is taken in by the periodic read", async () => {
    const other = h.newService({ catchUp: { everyMs: 300 } });
    await other.start();
    cleanups.unshift(() => other.stop());
    const [id] = await other.submit(h.ws.id, stubId, [Buffer.from("d")]);
    const heard: TaskUpdate[] = [];
    cleanups.unshift(other.watch([id as string], (u) => u.type === "result" && heard.push(u)));
    await endElsewhere(id as string, "25");
    await waitFor(() => heard.length > 0, {
      timeoutMs: 10_000,
      what: "the periodic read to take the end in",
    });
    assert.equal(heard[0]?.type === "result" && heard[0].resultJson, "25");
    assert.equal(heard.length, 1);
  });
});
