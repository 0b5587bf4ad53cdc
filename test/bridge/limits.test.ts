// A failed task names the container limit it ran into (agent/tasks/limits.ts):
// the task bridge against real JetStream, its runner's limits read from a
// table the test sets the way the runtime would report them (the runtime's
// own reading is test/runtime/limits.test.ts; a real container filling its
// disk and exhausting its pids is test/faults/container-limits.test.ts).

import assert from "node:assert/strict";
import { test } from "node:test";
import { limitHit } from "../../agent/tasks/limits.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import type { ContainerLimitState } from "../../agent/tasks/types.ts";
import type { TaskEvent } from "../../shared/tasks.ts";
import { waitFor } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";
import { eventsOf, nextTask, post, publishTask, queueEmpty, runnerOpener, startTaskNats } from "./helpers.ts";

const MiB = 2 ** 20;
type Finished = Extract<TaskEvent, { type: "finished" }>;
type Retry = Extract<TaskEvent, { type: "retry" }>;

const raised = {
  type: "RuntimeError",
  message: "can't start new thread",
  traceback:
    'Traceback (most recent call last):\n  File "app.py", line 9\nRuntimeError: can\'t start new thread\n',
  pickled: Buffer.from("pickled exception").toString("base64"),
};

test("limitHit: refused forks during the task, then a full disk, else nothing", () => {
  const state = (refused: number, full: boolean): ContainerLimitState => ({
    disk: { sizeBytes: 50 * 1024 * MiB, freeBytes: 3 * MiB, full },
    pids: { limit: 4096, refused },
  });
  const pids = limitHit(state(7, true), 5, raised);
  assert.equal(pids?.reason, "pids_exhausted");
  assert.equal(pids?.error.type, "PidsExhausted");
  assert.equal(
    pids?.error.message,
    "the container reached its pids limit of 4096: the kernel refused 2 fork(s) or thread(s) while the task ran; the task raised RuntimeError: can't start new thread",
  );
  assert.equal(pids?.error.traceback, raised.traceback);
  assert.equal(pids?.error.pickled, undefined, "the caller sees the limit, not the user's exception class");
  const disk = limitHit(state(5, true), 5, {
    ...raised,
    type: "OSError",
    message: "[Errno 28] No space left on device",
  });
  assert.equal(disk?.reason, "disk_full");
  assert.equal(
    disk?.error.message,
    "the container's disk of 50 GiB is full (3 MiB free); the task raised OSError: [Errno 28] No space left on device",
  );
  assert.equal(limitHit(state(5, false), 5, raised), undefined);
  assert.equal(limitHit(undefined, undefined, raised), undefined, "no reader: the task's own error");
  assert.equal(
    limitHit({ pids: { limit: null } }, undefined, raised),
    undefined,
    "uncounted forks are no evidence",
  );
});

test("task bridge with container limits", { timeout: 120_000 }, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-bridge-limits-");
  const state = new Map<string, ContainerLimitState>();
  const throwing = new Set<string>();
  const read = (id: string) => {
    if (throwing.has(id)) throw new Error(`the cgroup of ${id} is gone`);
    return state.get(id);
  };
  const killed: string[] = [];
  const runners = new TaskRunners({
    kill: async (id) => void killed.push(id),
    worker: { pullWaitMs: 1500, workingIntervalMs: 200 },
    limits: { limits: read, pidsRefused: (id) => read(id)?.pids.refused },
  });
  t.after(() => runners.stop());
  await runners.attach(n.agent, "agent-limits-test");
  const openSlot = runnerOpener(runners, dir, "ctr-limits-");
  /** A runner slot whose container reports `limits` from before it opens. */
  const openRunner = (stubId: string, limits: ContainerLimitState) =>
    openSlot(stubId, {}, (id) => state.set(id, limits));
  const waitUntilKilled = (id: string) =>
    waitFor(() => killed.includes(id) || undefined, { timeoutMs: 10_000, what: `the kill of ${id}` });
  const fail = (socket: string, taskId: string, retry = false, error: object = raised) =>
    post(socket, `/v1/tasks/${taskId}/result`, { status: "FAILED", error, retry });

  await t.test(
    "forks refused while the task ran: FAILED pids_exhausted, the user's error kept in the text",
    async () => {
      // Refusals before the runner took its first task (its own start-up) are not the task's.
      const r = await openRunner("stub-pids", { pids: { limit: 4096, refused: 3 } });
      await publishTask(n, { stubId: "stub-pids", taskId: "task-pids" });
      await nextTask(r.socket);
      state.set(r.containerId, { pids: { limit: 4096, refused: 9 } });
      assert.equal((await fail(r.socket, "task-pids")).status, 204);
      const fin = (await eventsOf(n, "task-pids", 2))[1] as Finished;
      assert.equal(fin.status, "FAILED");
      assert.equal(fin.reason, "pids_exhausted");
      assert.equal(fin.error?.type, "PidsExhausted");
      assert.match(
        fin.error?.message ?? "",
        /pids limit of 4096: the kernel refused 6 fork\(s\).*RuntimeError: can't start new thread/,
      );
      assert.equal(fin.error?.traceback, raised.traceback);
      await waitUntilKilled(r.containerId); // replaced: its leftover processes would fail the next task
      await queueEmpty(n);
      await runners.close(r.containerId);
    },
  );

  await t.test(
    "a completed task moves the baseline: a later failure without new refusals keeps its own error",
    async () => {
      const r = await openRunner("stub-base", { pids: { limit: 4096, refused: 0 } });
      await publishTask(n, { stubId: "stub-base", taskId: "task-base-1" });
      await nextTask(r.socket);
      // The task hit the limit, handled it and completed.
      state.set(r.containerId, { pids: { limit: 4096, refused: 2 } });
      await post(r.socket, "/v1/tasks/task-base-1/result", { status: "COMPLETE", result: "gAQu" });
      await publishTask(n, { stubId: "stub-base", taskId: "task-base-2" });
      await nextTask(r.socket);
      await fail(r.socket, "task-base-2", false, {
        type: "ValueError",
        message: "bad input",
        traceback: "tb",
      });
      const fin = (await eventsOf(n, "task-base-2", 2))[1] as Finished;
      assert.equal(fin.status, "FAILED");
      assert.equal(fin.reason, undefined);
      assert.equal(fin.error?.type, "ValueError");
      assert.ok(!killed.includes(r.containerId), "a failure no limit explains keeps its container");
      await queueEmpty(n);
      await runners.close(r.containerId);
    },
  );

  await t.test(
    "a full disk: a retry_for retry says disk_full, the last attempt FAILED DiskFull naming the size",
    async () => {
      const full: ContainerLimitState = {
        disk: { sizeBytes: 128 * MiB, freeBytes: 0, full: true },
        pids: { limit: 4096, refused: 0 },
      };
      const r = await openRunner("stub-disk", full);
      await publishTask(n, { stubId: "stub-disk", taskId: "task-disk", maxRetries: 1 });
      const enospc = { type: "OSError", message: "[Errno 28] No space left on device", traceback: "tb-disk" };
      await nextTask(r.socket);
      await fail(r.socket, "task-disk", true, enospc);
      // Its container is replaced; the retry runs in the next one (whose disk the test fills too).
      await waitUntilKilled(r.containerId);
      const r2 = await openRunner("stub-disk", full);
      const again = await nextTask(r2.socket);
      assert.equal(again.attempt, 2);
      await fail(r2.socket, "task-disk", true, enospc);
      const evs = await eventsOf(n, "task-disk", 4);
      const retry = evs.find((e) => e.type === "retry") as Retry;
      assert.equal(retry.reason, "disk_full: retry_for");
      assert.equal(retry.error?.type, "DiskFull");
      const fin = evs.at(-1) as Finished;
      assert.equal(fin.reason, "disk_full");
      assert.equal(fin.error?.type, "DiskFull");
      assert.equal(
        fin.error?.message,
        "the container's disk of 128 MiB is full (0 MiB free); the task raised OSError: [Errno 28] No space left on device",
      );
      assert.equal(fin.error?.traceback, "tb-disk");
      await waitUntilKilled(r2.containerId);
      await queueEmpty(n);
      await runners.close(r.containerId);
      await runners.close(r2.containerId);
    },
  );

  await t.test(
    "a container that dies under its task names the limit: a pids_exhausted retry, then FAILED disk_full; else container_exited",
    async () => {
      const r1 = await openRunner("stub-die", { pids: { limit: 4096, refused: 1 } });
      await publishTask(n, { stubId: "stub-die", taskId: "task-die", maxRetries: 1 });
      await nextTask(r1.socket);
      // The runner could not start a thread and died: forks were refused since its last answer.
      state.set(r1.containerId, { pids: { limit: 4096, refused: 4 } });
      runners.exited(r1.containerId, 1);
      const r2 = await openRunner("stub-die", { pids: { limit: 4096, refused: 0 } });
      assert.equal((await nextTask(r2.socket)).attempt, 2);
      state.set(r2.containerId, {
        disk: { sizeBytes: 50 * 1024 * MiB, freeBytes: MiB, full: true },
        pids: { limit: 4096, refused: 0 },
      });
      runners.exited(r2.containerId, 1);
      const evs = await eventsOf(n, "task-die", 4);
      assert.equal((evs.find((e) => e.type === "retry") as Retry).reason, "pids_exhausted: exit code 1");
      const fin = evs.at(-1) as Finished;
      assert.equal(fin.reason, "disk_full");
      assert.equal(fin.error?.type, "DiskFull");
      assert.equal(
        fin.error?.message,
        "the container's disk of 50 GiB is full (1 MiB free); its container exited with code 1",
      );
      // An OOM kill stays oom_killed (forks refused or not), and a death no limit explains container_exited.
      const r3 = await openRunner("stub-die", { pids: { limit: 4096, refused: 0 } });
      await publishTask(n, { stubId: "stub-die", taskId: "task-die-oom" });
      await nextTask(r3.socket);
      state.set(r3.containerId, { pids: { limit: 4096, refused: 2 } });
      runners.exited(r3.containerId, 137, "oom_killed");
      assert.equal(((await eventsOf(n, "task-die-oom", 2))[1] as Finished).reason, "oom_killed");
      const r4 = await openRunner("stub-die", { pids: { limit: 4096, refused: 0 } });
      await publishTask(n, { stubId: "stub-die", taskId: "task-die-2" });
      await nextTask(r4.socket);
      runners.exited(r4.containerId, 3);
      const plain = (await eventsOf(n, "task-die-2", 2))[1] as Finished;
      assert.equal(plain.reason, "container_exited");
      assert.equal(plain.error?.type, "ContainerExited");
      await queueEmpty(n);
      for (const r of [r1, r2, r3, r4]) await runners.close(r.containerId);
    },
  );

  await t.test("a reader that throws leaves the task its own error", async () => {
    const r = await openRunner("stub-throw", { pids: { limit: 4096, refused: 0 } });
    throwing.add(r.containerId);
    await publishTask(n, { stubId: "stub-throw", taskId: "task-throw" });
    await nextTask(r.socket);
    await fail(r.socket, "task-throw");
    const fin = (await eventsOf(n, "task-throw", 2))[1] as Finished;
    assert.equal(fin.reason, undefined);
    assert.equal(fin.error?.type, "RuntimeError");
    assert.equal(fin.error?.pickled, raised.pickled, "the user's exception reaches the caller as it was");
    await queueEmpty(n);
    await runners.close(r.containerId);
  });
});
