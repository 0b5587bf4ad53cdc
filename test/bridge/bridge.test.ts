// The task bridge against real JetStream, driven by a Node HTTP client on its
// unix socket in place of a runner (no container): every path of the status
// table the agent decides, and the bridge's own errors.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { Msg } from "nats";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import { waitFor } from "../../shared/net.ts";
import {
  MAX_TASK_RESULT_BYTES,
  TASK_CANCEL_SUBJECT,
  type TaskEvent,
  TASKS_STREAM,
  stubConsumerName,
  taskOutputSubject,
} from "../../shared/tasks.ts";
import { tempDir } from "../helpers/env.ts";
import {
  eventsOf,
  nextTask,
  post,
  publishTask,
  queueEmpty,
  runnerOpener,
  startTaskNats,
  storedEvents,
} from "./helpers.ts";

const AGENT_ID = "agent-bridge-test";

const shape = (evs: TaskEvent[]) =>
  evs.map((e) => [e.type, e.type === "finished" ? e.status : e.type === "retry" ? e.reason : "", e.attempt]);

test("task bridge", { timeout: 120_000 }, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-bridge-");
  const killed: string[] = [];
  const runners = new TaskRunners({
    kill: async (id) => void killed.push(id),
    worker: { pullWaitMs: 1500, workingIntervalMs: 200 },
  });
  t.after(() => runners.stop());
  /** A runner slot of `stubId` on its own socket. */
  const openRunner = runnerOpener(runners, dir, "ctr-");

  await t.test("before NATS: runner containers are refused and the bridge answers 503", async () => {
    assert.throws(
      () => runners.check(),
      (e: Error & { code?: string }) => {
        assert.equal(e.code, "failed_precondition");
        assert.match(e.message, /not joined to a coordinator/);
        return true;
      },
    );
    const r = await openRunner("stub-early");
    const reply = await post(r.socket, "/v1/tasks/next");
    assert.equal(reply.status, 503);
    assert.deepEqual(Object.keys((reply.body as { error: object }).error).sort(), ["code", "message"]);
    await runners.attach(n.agent, AGENT_ID);
    runners.check();
    await runners.close(r.containerId);
  });

  await t.test("a task completes: started then finished, output forwarded, message acked", async () => {
    const r = await openRunner("stub-ok", { callbackUrl: "https://stub.example/cb" });
    await publishTask(n, { stubId: "stub-ok", taskId: "task-ok", payload: Buffer.from([0x80, 0x04, 0x95]) });
    const output: Msg[] = [];
    const sub = n.coord.subscribe(taskOutputSubject(AGENT_ID, "task-ok"), {
      callback: (_e, m) => output.push(m),
    });
    t.after(() => sub.unsubscribe());
    await n.coord.flush();
    const task = await nextTask(r.socket);
    assert.equal(task.id, "task-ok");
    assert.equal(task.args, Buffer.from([0x80, 0x04, 0x95]).toString("base64"));
    assert.equal(task.attempt, 1);
    assert.equal(task.timeout, -1);
    assert.equal(task.callback_url, "https://stub.example/cb", "the stub's callback when the task has none");
    assert.ok(task.created_at > 0);
    assert.equal(
      (await post(r.socket, "/v1/tasks/task-ok/output", { stream: "stdout", data: "hello\n" })).status,
      204,
    );
    assert.equal((await post(r.socket, "/v1/tasks/task-ok/heartbeat")).status, 204);
    const result = { status: "COMPLETE", result: Buffer.from("49").toString("base64"), result_json: "49" };
    assert.equal((await post(r.socket, "/v1/tasks/task-ok/result", result)).status, 204);
    const evs = await eventsOf(n, "task-ok", 2);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["finished", "COMPLETE", 1],
    ]);
    const fin = evs[1] as Extract<TaskEvent, { type: "finished" }>;
    assert.equal(fin.result, result.result);
    assert.equal(fin.resultJson, "49");
    for (const e of evs) {
      assert.equal(e.agentId, AGENT_ID);
      assert.equal(e.containerId, r.containerId);
      assert.equal(e.stubId, "stub-ok");
      assert.equal(e.workspaceId, "ws-test");
      assert.ok(e.at > 0);
    }
    await queueEmpty(n);
    await waitFor(() => output.length === 1 || undefined, { timeoutMs: 5000, what: "the output message" });
    const out = JSON.parse(new TextDecoder().decode(output[0]!.data));
    assert.deepEqual(
      { ...out, at: 0 },
      { taskId: "task-ok", containerId: r.containerId, stream: "stdout", data: "hello\n", at: 0 },
    );
    // The task is over: nothing more is accepted for it.
    assert.equal((await post(r.socket, "/v1/tasks/task-ok/heartbeat")).status, 404);
    await runners.close(r.containerId);
  });

  await t.test(
    "a JSON payload reaches the runner marked payload_format json; a pickled one unmarked",
    async () => {
      const r = await openRunner("stub-json");
      const body = JSON.stringify({ x: 5 });
      await publishTask(n, {
        stubId: "stub-json",
        taskId: "task-json",
        payload: Buffer.from(body),
        payloadFormat: "json",
      });
      await publishTask(n, {
        stubId: "stub-json",
        taskId: "task-pickled",
        payload: Buffer.from([0x80, 0x04]),
      });
      const result = { status: "COMPLETE", result: Buffer.from("5").toString("base64"), result_json: "5" };
      const taken: Record<string, unknown>[] = [];
      for (const id of ["task-json", "task-pickled"]) {
        const reply = await post(r.socket, "/v1/tasks/next");
        assert.equal(reply.status, 200);
        const task = (reply.body as { task: Record<string, unknown> }).task;
        assert.equal(task.id, id);
        taken.push(task);
        assert.equal((await post(r.socket, `/v1/tasks/${id}/result`, result)).status, 204);
      }
      assert.equal(taken[0]?.payload_format, "json");
      assert.equal(Buffer.from(String(taken[0]?.args), "base64").toString(), body);
      assert.equal("payload_format" in (taken[1] ?? {}), false);
      await queueEmpty(n);
      await runners.close(r.containerId);
    },
  );

  await t.test(
    "FAILED with retry is redelivered as attempt 2; the last attempt's failure is final",
    async () => {
      const r = await openRunner("stub-retry");
      await publishTask(n, { stubId: "stub-retry", taskId: "task-retry", maxRetries: 1 });
      const error = { type: "ValueError", message: "flaky", traceback: "Traceback ...", pickled: "gASV" };
      const first = await nextTask(r.socket);
      assert.equal(first.attempt, 1);
      assert.equal(
        (await post(r.socket, "/v1/tasks/task-retry/result", { status: "FAILED", error, retry: true }))
          .status,
        204,
      );
      const second = await nextTask(r.socket);
      assert.equal(second.id, "task-retry");
      assert.equal(second.attempt, 2);
      assert.equal(
        (await post(r.socket, "/v1/tasks/task-retry/result", { status: "FAILED", error, retry: true }))
          .status,
        204,
      );
      const evs = await eventsOf(n, "task-retry", 4);
      assert.deepEqual(shape(evs), [
        ["started", "", 1],
        ["retry", "retry_for", 1],
        ["started", "", 2],
        ["finished", "FAILED", 2],
      ]);
      assert.deepEqual((evs[1] as Extract<TaskEvent, { type: "retry" }>).error, error);
      assert.deepEqual((evs[3] as Extract<TaskEvent, { type: "finished" }>).error, error);
      await queueEmpty(n);
      await runners.close(r.containerId);
    },
  );

  await t.test("an expired task is finished EXPIRED on delivery and never reaches the runner", async () => {
    const r = await openRunner("stub-exp");
    await publishTask(n, { stubId: "stub-exp", taskId: "task-exp", expiresAt: Date.now() - 1000 });
    const reply = await post(r.socket, "/v1/tasks/next");
    assert.equal(reply.status, 204);
    const evs = await eventsOf(n, "task-exp", 1);
    assert.deepEqual(shape(evs), [["finished", "EXPIRED", 1]]);
    await queueEmpty(n);
    await runners.close(r.containerId);
  });

  await t.test("a task delivered more often than its retries allow fails as retries_exhausted", async () => {
    const r = await openRunner("stub-lost");
    await publishTask(n, { stubId: "stub-lost", taskId: "task-lost", maxRetries: 0 });
    // Another agent took the message and died with it: JetStream delivers it again.
    const consumer = await n.coord.jetstream().consumers.get(TASKS_STREAM, stubConsumerName("stub-lost"));
    const lost = await consumer.next({ expires: 5000 });
    assert.ok(lost, "the first delivery");
    lost.nak();
    assert.equal((await post(r.socket, "/v1/tasks/next")).status, 204);
    const evs = await eventsOf(n, "task-lost", 1);
    assert.deepEqual(shape(evs), [["finished", "FAILED", 2]]);
    assert.equal((evs[0] as Extract<TaskEvent, { type: "finished" }>).reason, "retries_exhausted");
    await queueEmpty(n);
    await runners.close(r.containerId);
  });

  await t.test(
    "cancel: an in-flight task is terminated and its container killed; a cancelled one is never run",
    async () => {
      const r = await openRunner("stub-cancel");
      await publishTask(n, { stubId: "stub-cancel", taskId: "task-cancel" });
      await nextTask(r.socket);
      n.coord.publish(TASK_CANCEL_SUBJECT, JSON.stringify({ taskId: "task-cancel", status: "CANCELLED" }));
      await waitFor(() => killed.includes(r.containerId) || undefined, { timeoutMs: 5000, what: "the kill" });
      const hb = await post(r.socket, "/v1/tasks/task-cancel/heartbeat");
      assert.equal(hb.status, 410);
      assert.equal((hb.body as { error: { code: string } }).error.code, "failed_precondition");
      await queueEmpty(n);
      assert.deepEqual(
        shape(await storedEvents(n, "task-cancel")).filter(([type]) => type !== "started"),
        [],
        "no event for the cancel (a start may have gone out before it)",
      );
      await runners.close(r.containerId);

      const r2 = await openRunner("stub-cancel");
      n.coord.publish(
        TASK_CANCEL_SUBJECT,
        JSON.stringify({ taskId: "task-cancel-early", status: "CANCELLED" }),
      );
      // The cancel travels on core NATS: a round trip on each side puts it in the agent's hands first.
      await n.coord.flush();
      await n.agent.flush();
      await publishTask(n, { stubId: "stub-cancel", taskId: "task-cancel-early" });
      assert.equal((await post(r2.socket, "/v1/tasks/next")).status, 204);
      await queueEmpty(n);
      assert.deepEqual(await storedEvents(n, "task-cancel-early"), []);
      await runners.close(r2.containerId);
    },
  );

  await t.test("the container exits mid-task: retry while retries are left, then FAILED", async () => {
    const r1 = await openRunner("stub-exit");
    await publishTask(n, { stubId: "stub-exit", taskId: "task-exit", maxRetries: 1 });
    await nextTask(r1.socket);
    runners.exited(r1.containerId, 137);
    const r2 = await openRunner("stub-exit");
    const again = await nextTask(r2.socket);
    assert.equal(again.attempt, 2);
    runners.exited(r2.containerId, 1);
    const evs = await eventsOf(n, "task-exit", 4);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["retry", "container_exited: exit code 137", 1],
      ["started", "", 2],
      ["finished", "FAILED", 2],
    ]);
    assert.equal(evs[3]!.containerId, r2.containerId);
    assert.equal(
      (evs[3] as Extract<TaskEvent, { type: "finished" }>).error?.message,
      "container exited with code 1 on the last attempt",
    );
    await queueEmpty(n);
    await runners.close(r1.containerId);
    await runners.close(r2.containerId);
  });

  await t.test("rank 0 of a gang exits mid-task: the retry and the failure name the rank", async () => {
    const r1 = await openRunner("stub-gang-exit", {}, undefined, 0);
    await publishTask(n, { stubId: "stub-gang-exit", taskId: "task-gang-exit", maxRetries: 1 });
    await nextTask(r1.socket);
    runners.exited(r1.containerId, 137);
    const r2 = await openRunner("stub-gang-exit", {}, undefined, 0);
    await nextTask(r2.socket);
    runners.exited(r2.containerId, 1);
    const evs = await eventsOf(n, "task-gang-exit", 4);
    assert.deepEqual(shape(evs)[1], ["retry", "gang rank 0 ended: container_exited: exit code 137", 1]);
    assert.equal(
      (evs[3] as Extract<TaskEvent, { type: "finished" }>).error?.message,
      "gang rank 0 ended: container exited with code 1 on the last attempt",
    );
    await queueEmpty(n);
    await runners.close(r1.containerId);
    await runners.close(r2.containerId);
  });

  await t.test(
    "an OOM-killed container names the reason: oom_killed retry, then FAILED OutOfMemory",
    async () => {
      const r1 = await openRunner("stub-oom");
      await publishTask(n, { stubId: "stub-oom", taskId: "task-oom", maxRetries: 1 });
      await nextTask(r1.socket);
      runners.exited(r1.containerId, 137, "oom_killed");
      const r2 = await openRunner("stub-oom");
      await nextTask(r2.socket);
      runners.exited(r2.containerId, 137, "oom_killed");
      const evs = await eventsOf(n, "task-oom", 4);
      assert.deepEqual(shape(evs), [
        ["started", "", 1],
        ["retry", "oom_killed: exit code 137", 1],
        ["started", "", 2],
        ["finished", "FAILED", 2],
      ]);
      const last = evs[3] as Extract<TaskEvent, { type: "finished" }>;
      assert.equal(last.reason, "oom_killed");
      assert.equal(last.error?.type, "OutOfMemory");
      assert.match(last.error?.message ?? "", /ran out of memory.*exit code 137/);
      await queueEmpty(n);
      await runners.close(r1.containerId);
      await runners.close(r2.containerId);
    },
  );

  await t.test("a timeout finishes the task TIMEOUT and kills its container", async () => {
    const r = await openRunner("stub-slow");
    await publishTask(n, { stubId: "stub-slow", taskId: "task-slow", timeoutS: 1, maxRetries: 3 });
    const task = await nextTask(r.socket);
    assert.equal(task.timeout, 1);
    const evs = await eventsOf(n, "task-slow", 2);
    assert.deepEqual(shape(evs), [
      ["started", "", 1],
      ["finished", "TIMEOUT", 1],
    ]);
    assert.ok(killed.includes(r.containerId));
    await queueEmpty(n);
    // A late result from the killed runner changes nothing.
    assert.equal(
      (await post(r.socket, "/v1/tasks/task-slow/result", { status: "COMPLETE", result: "" })).status,
      410,
    );
    await runners.close(r.containerId);
  });

  await t.test("a result over the size limit fails the task naming the limit", async () => {
    const r = await openRunner("stub-big");
    await publishTask(n, { stubId: "stub-big", taskId: "task-big" });
    await nextTask(r.socket);
    const big = Buffer.alloc(MAX_TASK_RESULT_BYTES + 1).toString("base64");
    assert.equal(
      (await post(r.socket, "/v1/tasks/task-big/result", { status: "COMPLETE", result: big })).status,
      204,
    );
    const evs = await eventsOf(n, "task-big", 2);
    const fin = evs[1] as Extract<TaskEvent, { type: "finished" }>;
    assert.equal(fin.status, "FAILED");
    assert.match(fin.error?.message ?? "", new RegExp(`over the limit of ${MAX_TASK_RESULT_BYTES} bytes`));
    await queueEmpty(n);
    await runners.close(r.containerId);
  });

  await t.test(
    "a runner that stops waiting withdraws its pull: the next task goes to another, as attempt 1",
    async () => {
      const idle = await openRunner("stub-churn");
      const waiting = post(idle.socket, "/v1/tasks/next").catch((e: Error) => e);
      // Let the pull reach the server, then take the container away while it waits.
      await new Promise((r) => setTimeout(r, 200));
      await runners.close(idle.containerId);
      await waiting;
      await publishTask(n, { stubId: "stub-churn", taskId: "task-churn" });
      const r = await openRunner("stub-churn");
      const task = await nextTask(r.socket);
      assert.equal(task.id, "task-churn");
      assert.equal(task.attempt, 1, "the withdrawn pull took no delivery");
      assert.equal(
        (await post(r.socket, "/v1/tasks/task-churn/result", { status: "COMPLETE", result: "" })).status,
        204,
      );
      await queueEmpty(n);
      await runners.close(r.containerId);
    },
  );

  await t.test("bridge errors are JSON with a code and a message", async () => {
    const r = await openRunner("stub-err");
    const code = (reply: { body: unknown }) =>
      (reply.body as { error: { code: string; message: string } }).error;
    assert.equal(code(await post(r.socket, "/v1/nope")).code, "route_not_found");
    const badJson = await post(r.socket, "/v1/tasks/x/result", undefined, "{not json");
    assert.equal(badJson.status, 400);
    assert.equal(code(badJson).code, "invalid_json");
    const unknown = await post(r.socket, "/v1/tasks/task-none/result", { status: "COMPLETE", result: "" });
    assert.equal(unknown.status, 404);
    assert.match(code(unknown).message, /task-none is not running in this container/);
    await publishTask(n, { stubId: "stub-err", taskId: "task-err" });
    await nextTask(r.socket);
    const busy = await post(r.socket, "/v1/tasks/next");
    assert.equal(busy.status, 409, "workers=1: one task at a time");
    const badResult = await post(r.socket, "/v1/tasks/task-err/result", { status: "DONE" });
    assert.equal(badResult.status, 400);
    assert.match(code(badResult).message, /status must be "COMPLETE" or "FAILED"/);
    assert.equal(
      (
        await post(r.socket, "/v1/tasks/task-err/result", {
          status: "FAILED",
          error: { type: "E", message: "m" },
        })
      ).status,
      204,
    );
    await eventsOf(n, "task-err", 2);
    await queueEmpty(n);
    await runners.close(r.containerId);
  });
});
