// Hand-outs of several tasks to one runner worker, results in one call with
// the next ask, starts folded into outcomes, events stored in batches, and
// the unstarted rest of a hand-out released to another runner or kept from
// a dead container: against real JetStream, a Node client in place of a runner.

import assert from "node:assert/strict";
import { test } from "node:test";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import type { TaskAssignment } from "../../agent/tasks/types.ts";
import { TASK_EVENTS_STREAM, type TaskEvent } from "../../shared/tasks.ts";
import { tempDir } from "../helpers/env.ts";
import {
  eventsOf,
  post,
  publishTask,
  queueEmpty,
  rawEvents,
  runnerOpener,
  startTaskNats,
} from "./helpers.ts";

interface Answer {
  task?: TaskAssignment;
  tasks?: TaskAssignment[];
  results?: { id: string; status: number; error?: { message: string } }[];
}

const ok = (id: string, startedAt?: number) => ({
  id,
  status: "COMPLETE",
  result: Buffer.from(id).toString("base64"),
  ...(startedAt ? { started_at: startedAt } : {}),
});

test("batched hand-outs through the task bridge", { timeout: 120_000 }, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-bridge-batch-");
  const runners = new TaskRunners({
    kill: async () => {},
    // A start is held back long enough for every outcome here to fold it in.
    worker: { pullWaitMs: 1500, workingIntervalMs: 200, startedDelayMs: 5000 },
  });
  t.after(() => runners.stop());
  await runners.attach(n.agent, "agent-batch-test");
  const openRunner = runnerOpener(runners, dir, "ctr-b");
  const storedMessages = async () => (await n.jsm.streams.info(TASK_EVENTS_STREAM)).state.messages;

  await t.test("max hands out what is queued; results and the next ask share one call", async () => {
    const r = await openRunner("stub-batch");
    for (let i = 0; i < 5; i++) await publishTask(n, { stubId: "stub-batch", taskId: `task-b${i}` });
    const first = await post(r.socket, "/v1/tasks/next", { max: 3 });
    assert.equal(first.status, 200);
    const got = (first.body as Answer).tasks ?? [];
    assert.deepEqual(
      got.map((x) => [x.id, x.attempt]),
      [
        ["task-b0", 1],
        ["task-b1", 1],
        ["task-b2", 1],
      ],
    );
    assert.equal((first.body as Answer).task?.id, "task-b0", "task is the first, for one-at-a-time runners");
    // A second ask while the hand-out is unanswered: this worker is busy.
    assert.equal((await post(r.socket, "/v1/tasks/next", { max: 3 })).status, 409);
    const before = await storedMessages();
    const started = Date.now() - 5;
    const second = await post(r.socket, "/v1/tasks/results", {
      results: [ok("task-b0", started), ok("task-b1", started), ok("task-b2", started)],
      next: { max: 10 },
    });
    assert.equal(second.status, 200);
    const body = second.body as Answer;
    assert.deepEqual(
      body.results?.map((x) => [x.id, x.status]),
      [
        ["task-b0", 204],
        ["task-b1", 204],
        ["task-b2", 204],
      ],
    );
    assert.deepEqual(
      body.tasks?.map((x) => x.id),
      ["task-b3", "task-b4"],
      "a batch never waits to fill",
    );
    await eventsOf(n, "task-b2", 1);
    // Three outcomes given at once were stored as one message, each with its start folded in.
    assert.equal((await storedMessages()) - before, 1);
    for (const id of ["task-b0", "task-b1", "task-b2"]) {
      const evs = await rawEvents(n, id);
      assert.deepEqual(
        evs.map((e) => [e.type, e.type === "finished" ? e.status : ""]),
        [["finished", "COMPLETE"]],
      );
      assert.equal((evs[0] as Extract<TaskEvent, { type: "finished" }>).startedAt, started);
    }
    const third = await post(r.socket, "/v1/tasks/results", {
      results: [ok("task-b3"), ok("task-b4"), ok("task-unknown")],
    });
    const outcomes = (third.body as Answer).results ?? [];
    assert.deepEqual(
      outcomes.map((x) => [x.id, x.status]),
      [
        ["task-b3", 204],
        ["task-b4", 204],
        ["task-unknown", 404],
      ],
      "one bad entry does not sink the others",
    );
    assert.equal(third.body && (third.body as Answer).tasks, undefined, "no next ask, no tasks");
    await queueEmpty(n);
    await runners.close(r.containerId);
  });

  await t.test("released tasks go to the stub's next runner on this agent as the same attempt", async () => {
    const slow = await openRunner("stub-release");
    for (let i = 0; i < 3; i++) await publishTask(n, { stubId: "stub-release", taskId: `task-r${i}` });
    const handed = ((await post(slow.socket, "/v1/tasks/next", { max: 3 })).body as Answer).tasks ?? [];
    assert.equal(handed.length, 3);
    // Another runner of the stub already waits in a pull: the release wakes it.
    const other = await openRunner("stub-release");
    const waiting = post(other.socket, "/v1/tasks/next", { max: 5 });
    await new Promise((r) => setTimeout(r, 200));
    const rel = await post(slow.socket, "/v1/tasks/release", { ids: ["task-r1", "task-r2", "task-none"] });
    assert.deepEqual(rel.body, { released: 2 });
    const taken = ((await waiting).body as Answer).tasks ?? [];
    assert.deepEqual(
      taken.map((x) => [x.id, x.attempt]),
      [
        ["task-r1", 1],
        ["task-r2", 1],
      ],
    );
    // The released ones are no longer the first runner's to answer for.
    const late = await post(slow.socket, "/v1/tasks/results", { results: [ok("task-r0"), ok("task-r1")] });
    assert.deepEqual(
      ((late.body as Answer).results ?? []).map((x) => x.status),
      [204, 404],
    );
    await post(other.socket, "/v1/tasks/results", { results: [ok("task-r1"), ok("task-r2")] });
    await queueEmpty(n);
    await runners.close(slow.containerId);
    await runners.close(other.containerId);
  });

  await t.test(
    "a container dies mid-batch: its running task retries, the unstarted rest run elsewhere",
    async () => {
      const r1 = await openRunner("stub-die");
      for (let i = 0; i < 3; i++)
        await publishTask(n, { stubId: "stub-die", taskId: `task-d${i}`, maxRetries: 1 });
      const handed = ((await post(r1.socket, "/v1/tasks/next", { max: 3 })).body as Answer).tasks ?? [];
      assert.equal(handed.length, 3);
      // task-d0 answered; task-d1 was running when the container died; task-d2 never started.
      await post(r1.socket, "/v1/tasks/results", { results: [ok("task-d0")] });
      runners.exited(r1.containerId, 137);
      const r2 = await openRunner("stub-die");
      const first = ((await post(r2.socket, "/v1/tasks/next", { max: 5 })).body as Answer).tasks ?? [];
      const second =
        first.length < 2
          ? ((
              (
                await post(r2.socket, "/v1/tasks/results", {
                  results: first.map((x) => ok(x.id)),
                  next: { max: 5 },
                })
              ).body as Answer
            ).tasks ?? [])
          : [];
      const all = [...first, ...second].map((x) => [x.id, x.attempt]);
      assert.deepEqual(all.sort(), [
        ["task-d1", 2],
        ["task-d2", 1],
      ]);
      const d1 = await rawEvents(n, "task-d1");
      assert.deepEqual(
        d1.map((e) => [e.type, e.type === "retry" ? e.reason : ""]),
        [["retry", "container_exited: exit code 137"]],
      );
      await post(r2.socket, "/v1/tasks/results", {
        results: [ok("task-d1"), ok("task-d2")].filter(
          (x) => second.length === 0 || first.every((f) => f.id !== x.id),
        ),
      });
      await queueEmpty(n);
      await runners.close(r1.containerId);
      await runners.close(r2.containerId);
    },
  );

  await t.test("bad batch bodies are refused with the cause", async () => {
    const r = await openRunner("stub-bad");
    const badMax = await post(r.socket, "/v1/tasks/next", { max: 0 });
    assert.equal(badMax.status, 400);
    assert.match(JSON.stringify(badMax.body), /max must be a positive integer/);
    const badResults = await post(r.socket, "/v1/tasks/results", { results: "nope" });
    assert.equal(badResults.status, 400);
    const badRelease = await post(r.socket, "/v1/tasks/release", { ids: [1, 2] });
    assert.equal(badRelease.status, 400);
    assert.match(JSON.stringify(badRelease.body), /release takes/);
    await runners.close(r.containerId);
  });
});

test("a dead container's unstarted tasks wake a runner already waiting in a pull", {
  timeout: 60_000,
}, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-bridge-wake-");
  // A pull that is not woken waits far past this test's timeout: the test fails rather than stall.
  const runners = new TaskRunners({
    kill: async () => {},
    worker: { pullWaitMs: 300_000, workingIntervalMs: 200 },
  });
  t.after(() => runners.stop());
  await runners.attach(n.agent, "agent-wake-test");
  const openRunner = runnerOpener(runners, dir, "ctr-w");
  const r1 = await openRunner("stub-wake");
  for (const id of ["task-w1", "task-w2"])
    await publishTask(n, { stubId: "stub-wake", taskId: id, maxRetries: 1 });
  const batch = ((await post(r1.socket, "/v1/tasks/next", { max: 2 })).body as Answer).tasks ?? [];
  assert.deepEqual(
    batch.map((x) => x.id),
    ["task-w1", "task-w2"],
  );
  const r2 = await openRunner("stub-wake");
  const waiting = post(r2.socket, "/v1/tasks/next", { max: 1 });
  // Give r2's ask time to reach its pull; the wake works either way (in the pull or before it).
  await new Promise((r) => setTimeout(r, 300));
  runners.exited(r1.containerId, 137);
  const got = ((await waiting).body as Answer).tasks ?? [];
  assert.deepEqual(
    got.map((x) => [x.id, x.attempt]),
    [["task-w2", 1]],
  );
  await post(r2.socket, "/v1/tasks/results", { results: [ok("task-w2")] });
  await runners.close(r1.containerId);
  await runners.close(r2.containerId);
});
