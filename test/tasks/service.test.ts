import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { TaskService } from "../../coordinator/tasks/service.ts";
import { ensureStubConsumer } from "../../coordinator/tasks/streams.ts";
import { waitFor } from "../../shared/net.ts";
import {
  MAX_TASK_ARGS_BYTES,
  stubConsumerName,
  TASK_CANCEL_SUBJECT,
  TASKS_STREAM,
  type TaskCancelMessage,
  TaskHeaders,
  type TaskStatus,
} from "../../shared/tasks.ts";
import { functionStubId, startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

describe("task service (real NATS, SQLite)", () => {
  let h: TaskHarness;
  let tasks: TaskService;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    tasks = h.tasks;
    stubId = await functionStubId(h, "square");
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const status = async (id: string) => (await tasks.getTask(h.ws.id, id)).status;
  const until = (id: string, s: TaskStatus) =>
    waitFor(async () => (await status(id)) === s, { timeoutMs: 5000, what: `task ${id} to be ${s}` });
  const submitOne = async (opts = {}) =>
    (await tasks.submit(h.ws.id, stubId, [Buffer.from("args")], opts))[0] as string;
  const historyOf = async (id: string) =>
    (await tasks.history(h.ws.id, id)).map((e) => `${e.status}/${e.attempt}`);

  test("upsertStub: get-or-create; config_version rises only on a change; the stub's consumer exists", async () => {
    const spec = { name: "versioned", type: "function", config: stubConfig(), extra: stubExtra() };
    const a = await tasks.upsertStub(h.ws.id, spec);
    assert.equal(a.created, true);
    assert.match(a.stub.id, /^stub-/);
    assert.equal(a.stub.configVersion, 1);
    const same = await tasks.upsertStub(h.ws.id, { ...spec, config: { ...stubConfig() } });
    assert.equal(same.stub.id, a.stub.id);
    assert.equal(same.stub.configVersion, 1);
    const changed = await tasks.upsertStub(h.ws.id, {
      ...spec,
      config: stubConfig({ keep_warm_seconds: 60 }),
    });
    assert.equal(changed.stub.configVersion, 2);
    const extraChanged = await tasks.upsertStub(h.ws.id, {
      ...spec,
      extra: stubExtra({ retry_for: ["ValueError"] }),
    });
    assert.equal(extraChanged.stub.configVersion, 3);
    const other = await tasks.upsertStub(h.otherWs.id, spec);
    assert.notEqual(other.stub.id, a.stub.id, "stubs are per workspace");
    const info = await (await h.nc.jetstreamManager()).consumers.info(
      TASKS_STREAM,
      stubConsumerName(a.stub.id),
    );
    assert.equal(info.config.filter_subject, `berth.tasks.${a.stub.id}`);
    await assert.rejects(tasks.getStub(h.otherWs.id, a.stub.id), { code: "not_found" });
    await assert.rejects(
      tasks.upsertStub(h.ws.id, { ...spec, extra: stubExtra({ code_sha256: "a".repeat(64) }) }),
      { code: "not_found" },
    );
  });

  test("submit: one PENDING row and one BERTH_TASKS message per input, with the task headers", async () => {
    const expiresAt = Date.now() + 3_600_000;
    const ids = await tasks.submit(h.ws.id, stubId, [Buffer.from("one"), Buffer.from("two")], {
      callbackUrl: "http://127.0.0.1:1/cb",
      expiresAt,
    });
    assert.equal(ids.length, 2);
    const jsm = await h.nc.jetstreamManager();
    for (const [i, id] of ids.entries()) {
      const t = await tasks.getTask(h.ws.id, id);
      assert.equal(t.status, "PENDING");
      assert.ok(t.streamSeq && t.streamSeq > 0, "stream sequence kept");
      const m = await jsm.streams.getMessage(TASKS_STREAM, { seq: t.streamSeq as number });
      assert.equal(m.subject, `berth.tasks.${stubId}`);
      assert.equal(Buffer.from(m.data).toString(), i === 0 ? "one" : "two");
      assert.equal(m.header.get(TaskHeaders.taskId), id);
      assert.equal(m.header.get(TaskHeaders.stubId), stubId);
      assert.equal(m.header.get(TaskHeaders.workspaceId), h.ws.id);
      assert.equal(m.header.get(TaskHeaders.maxRetries), "3");
      assert.equal(m.header.get(TaskHeaders.timeout), "3600");
      assert.equal(m.header.get(TaskHeaders.configVersion), "1", "the stub's config_version");
      assert.equal(m.header.get(TaskHeaders.expiresAt), String(expiresAt));
      assert.equal(m.header.get(TaskHeaders.callbackUrl), "http://127.0.0.1:1/cb");
      assert.ok(Number(m.header.get(TaskHeaders.createdAt)) > 0);
    }
    assert.ok((tasks.demandOf(stubId)?.pending ?? 0) >= 2);
    for (const id of ids) await tasks.cancel(h.ws.id, id);
  });

  test("submit: an unknown or foreign stub is not_found; an input over 4 MiB is refused by index", async () => {
    await assert.rejects(tasks.submit(h.otherWs.id, stubId, [Buffer.from("x")]), { code: "not_found" });
    await assert.rejects(tasks.submit(h.ws.id, "stub-nope", [Buffer.from("x")]), { code: "not_found" });
    const big = Buffer.alloc(MAX_TASK_ARGS_BYTES + 1);
    await assert.rejects(
      tasks.submit(h.ws.id, stubId, [Buffer.from("ok"), big]),
      (e: Error & { code: string }) => {
        assert.equal(e.code, "task_args_too_large");
        assert.match(e.message, /input 1/);
        assert.match(e.message, /4 MiB/);
        return true;
      },
    );
  });

  test("PENDING → RUNNING → RETRY → RUNNING → COMPLETE; late events change nothing; history shows the retry", async () => {
    const id = await submitOne();
    await h.event({ type: "started", taskId: id, stubId, attempt: 1, containerId: "ctr-a" });
    await until(id, "RUNNING");
    assert.equal(tasks.demandOf(stubId)?.running, 1);
    assert.equal(tasks.containerActivity("ctr-a")?.busy, true);
    await h.event({
      type: "retry",
      taskId: id,
      stubId,
      attempt: 1,
      containerId: "ctr-a",
      reason: "container_exited",
    });
    await until(id, "RETRY");
    assert.equal(tasks.containerActivity("ctr-a")?.busy, false);
    // A duplicate start of attempt 1 is not a new start.
    await h.event({ type: "started", taskId: id, stubId, attempt: 1, containerId: "ctr-a" });
    await h.event({ type: "started", taskId: id, stubId, attempt: 2, containerId: "ctr-b" });
    await until(id, "RUNNING");
    const result = Buffer.from("pickled 49").toString("base64");
    await h.event({
      type: "finished",
      taskId: id,
      stubId,
      attempt: 2,
      containerId: "ctr-b",
      status: "COMPLETE",
      result,
      resultJson: "49",
    });
    await until(id, "COMPLETE");
    await h.event({ type: "finished", taskId: id, stubId, attempt: 2, status: "FAILED" } as never);
    await h.event({ type: "started", taskId: id, stubId, attempt: 3 });
    await h.event({ type: "retry", taskId: id, stubId, attempt: 3, reason: "x" } as never);
    const done = await tasks.waitResult(h.ws.id, id, 1000);
    assert.equal(done.status, "COMPLETE");
    assert.equal(done.result?.toString(), "pickled 49");
    assert.equal(done.resultJson, "49");
    assert.equal(done.containerId, "ctr-b");
    assert.equal(done.attempt, 2);
    assert.ok(done.startedAt && done.endedAt);
    await waitFor(async () => (await historyOf(id)).length === 4, { what: "history written" });
    assert.deepEqual(await historyOf(id), ["RUNNING/1", "RETRY/1", "RUNNING/2", "COMPLETE/2"]);
    assert.equal((await tasks.history(h.ws.id, id))[1]?.reason, "container_exited");
    // Still COMPLETE after the late events were consumed.
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await status(id), "COMPLETE");
    assert.equal(tasks.demandOf(stubId), undefined, "no demand left");
  });

  test("RUNNING → FAILED, RUNNING → TIMEOUT, PENDING → EXPIRED (agent), RETRY → FAILED carry their errors", async () => {
    const err = { type: "KeyError", message: "'boo'", traceback: "Traceback..." };
    const failed = await submitOne();
    await h.event({ type: "started", taskId: failed, stubId });
    await h.event({ type: "finished", taskId: failed, stubId, status: "FAILED", error: err });
    await until(failed, "FAILED");
    assert.deepEqual((await tasks.getTask(h.ws.id, failed)).error, err);

    const timedOut = await submitOne();
    await h.event({ type: "started", taskId: timedOut, stubId });
    await h.event({ type: "finished", taskId: timedOut, stubId, status: "TIMEOUT", reason: "timeout" });
    await until(timedOut, "TIMEOUT");

    const expired = await submitOne();
    await h.event({ type: "finished", taskId: expired, stubId, status: "EXPIRED", reason: "expired" });
    await until(expired, "EXPIRED");

    const retried = await submitOne();
    await h.event({ type: "started", taskId: retried, stubId });
    await h.event({ type: "retry", taskId: retried, stubId, reason: "retry_for", error: err });
    await until(retried, "RETRY");
    await h.event({ type: "finished", taskId: retried, stubId, attempt: 1, status: "FAILED", error: err });
    await until(retried, "FAILED");
    await waitFor(async () => (await historyOf(retried)).length === 3);
    assert.deepEqual(await historyOf(retried), ["RUNNING/1", "RETRY/1", "FAILED/1"]);
  });

  test("a start for a later attempt while RUNNING counts as a crash: RETRY then RUNNING", async () => {
    const id = await submitOne();
    await h.event({ type: "started", taskId: id, stubId, attempt: 1 });
    await until(id, "RUNNING");
    await h.event({ type: "started", taskId: id, stubId, attempt: 2 });
    await waitFor(async () => (await historyOf(id)).length === 3, { what: "redelivery history" });
    assert.deepEqual(await historyOf(id), ["RUNNING/1", "RETRY/2", "RUNNING/2"]);
    await tasks.cancel(h.ws.id, id);
  });

  test("cancel: PENDING → CANCELLED deletes the message and tells agents; ended tasks keep their status", async () => {
    const cancels: TaskCancelMessage[] = [];
    const sub = h.agentNc.subscribe(TASK_CANCEL_SUBJECT, {
      callback: (_e, m) => cancels.push(JSON.parse(Buffer.from(m.data).toString())),
    });
    await h.agentNc.flush();
    const id = await submitOne();
    const seq = (await tasks.getTask(h.ws.id, id)).streamSeq as number;
    const jsm = await h.nc.jetstreamManager();
    await jsm.streams.getMessage(TASKS_STREAM, { seq });
    await assert.rejects(tasks.cancel(h.otherWs.id, id), { code: "not_found" });
    assert.deepEqual(await tasks.cancel(h.ws.id, id), { taskId: id, status: "CANCELLED" });
    await waitFor(
      async () => {
        try {
          await jsm.streams.getMessage(TASKS_STREAM, { seq });
          return false;
        } catch {
          return true;
        }
      },
      { what: "the task message to be deleted" },
    );
    await waitFor(() => cancels.some((c) => c.taskId === id && c.status === "CANCELLED"), {
      what: "cancel message",
    });
    assert.equal((await tasks.cancel(h.ws.id, id)).status, "CANCELLED");

    const running = await submitOne();
    await h.event({ type: "started", taskId: running, stubId });
    await until(running, "RUNNING");
    assert.equal((await tasks.cancel(h.ws.id, running)).status, "CANCELLED");
    await h.event({ type: "finished", taskId: running, stubId, status: "COMPLETE", result: "eA==" });
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await status(running), "CANCELLED", "terminal never changes");
    sub.unsubscribe();
  });

  test("sweeper: a PENDING task past expires_at becomes EXPIRED, its message deleted, agents told", async () => {
    const cancels: TaskCancelMessage[] = [];
    const sub = h.agentNc.subscribe(TASK_CANCEL_SUBJECT, {
      callback: (_e, m) => cancels.push(JSON.parse(Buffer.from(m.data).toString())),
    });
    await h.agentNc.flush();
    const id = await submitOne({ expiresAt: Date.now() + 300 });
    const seq = (await tasks.getTask(h.ws.id, id)).streamSeq as number;
    await until(id, "EXPIRED");
    const t = await tasks.getTask(h.ws.id, id);
    assert.equal(t.error?.type, "TaskExpired");
    await waitFor(() => cancels.some((c) => c.taskId === id && c.status === "EXPIRED"), {
      what: "expiry message",
    });
    const jsm = await h.nc.jetstreamManager();
    await waitFor(
      async () =>
        jsm.streams.getMessage(TASKS_STREAM, { seq }).then(
          () => false,
          () => true,
        ),
      { what: "the expired message to be deleted" },
    );
    sub.unsubscribe();
  });

  test("failPending ends waiting tasks as FAILED with the error, not running ones", async () => {
    const spec = { name: "too-big", type: "function", config: stubConfig(), extra: stubExtra() };
    const stub = (await tasks.upsertStub(h.ws.id, spec)).stub.id;
    const ids = await tasks.submit(h.ws.id, stub, [Buffer.from("a"), Buffer.from("b"), Buffer.from("c")]);
    await h.event({ type: "started", taskId: ids[2] as string, stubId: stub });
    await waitFor(() => tasks.demandOf(stub)?.running === 1);
    const n = await tasks.failPending(stub, { code: "unschedulable", message: "no host has 4 H100" });
    assert.equal(n, 2);
    const t = await tasks.getTask(h.ws.id, ids[0] as string);
    assert.equal(t.status, "FAILED");
    assert.deepEqual(t.error, { type: "unschedulable", message: "no host has 4 H100", traceback: "" });
    assert.equal(await status(ids[2] as string), "RUNNING");
    assert.deepEqual(tasks.demandOf(stub), { stubId: stub, workspaceId: h.ws.id, pending: 0, running: 1 });
    await tasks.cancel(h.ws.id, ids[2] as string);
  });

  test("watch hears status, output and result; a restarted service reloads demand from the store", async () => {
    const id = await submitOne();
    const heard: string[] = [];
    const unwatch = tasks.watch([id], (u) =>
      heard.push(u.type === "output" ? `output:${u.data}` : `${u.type}:${u.status}`),
    );
    await h.event({ type: "started", taskId: id, stubId });
    await waitFor(() => heard.includes("status:RUNNING"));
    h.output(id, "stdout", "hello\n");
    await waitFor(() => heard.includes("output:hello\n"), { what: "output" });

    const pendingId = await submitOne();
    const fresh = h.newService();
    await fresh.start();
    try {
      const d = fresh.demandOf(stubId);
      assert.equal(d?.running, 1);
      assert.equal(d?.pending, 1);
    } finally {
      await fresh.stop();
    }
    await h.event({ type: "finished", taskId: id, stubId, status: "COMPLETE", result: "eA==" });
    await waitFor(() => heard.includes("result:COMPLETE"));
    unwatch();
    await tasks.cancel(h.ws.id, pendingId);
  });

  test("ensureStubConsumer is idempotent for an existing stub", async () => {
    await ensureStubConsumer(await h.nc.jetstreamManager(), stubId);
  });
});
