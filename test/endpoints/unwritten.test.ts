// An endpoint request's task before its row is written (coordinator/tasks/unwritten.ts):
// the status APIs show it as they show any task, cancel works, and a short
// request costs one write; a long one is written while it runs.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { TaskHistoryEntry, TaskPatch, TaskRecord } from "../../coordinator/tasks/store.ts";
import { waitFor } from "../../shared/net.ts";
import { SPEC_TASK_FIELDS } from "../tasks/fixtures.ts";
import { type EndpointHarness, startEndpointHarness } from "./harness.ts";
import { bearer } from "../helpers/auth.ts";

interface Write {
  inserts: string[];
  patches: string[];
  history: TaskHistoryEntry[];
}

interface WritesHarness {
  e: EndpointHarness;
  writes: Write[];
  /** The batches that wrote anything of task `id`. */
  writesOf(id: string): { inserted: boolean; patched: boolean; history: string[] }[];
  get(path: string, token?: string): Promise<Response>;
  post(path: string, body: unknown): Promise<Response>;
}

/** An endpoint harness whose store records every batch written. */
function harnessWithWrites(directFoldMs: number): WritesHarness {
  const cleanups: (() => unknown)[] = [];
  const writes: Write[] = [];
  const s: WritesHarness = {
    e: undefined as unknown as EndpointHarness,
    writes,
    writesOf: (id: string) =>
      writes
        .filter(
          (w) => w.inserts.includes(id) || w.patches.includes(id) || w.history.some((h) => h.taskId === id),
        )
        .map((w) => ({
          inserted: w.inserts.includes(id),
          patched: w.patches.includes(id),
          history: w.history.filter((h) => h.taskId === id).map((h) => h.status),
        })),
    get: (path: string, token = s.e.token) => fetch(`${s.e.base}${path}`, { headers: bearer(token) }),
    post: (path: string, body: unknown) =>
      fetch(`${s.e.base}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearer(s.e.token) },
        body: JSON.stringify(body),
      }),
  };
  before(async () => {
    s.e = await startEndpointHarness({ after: (fn) => cleanups.push(fn) }, { directFoldMs });
    const repo = s.e.h.store.tasks;
    const apply = repo.applyBatch.bind(repo);
    repo.applyBatch = async (
      patches: Map<string, TaskPatch>,
      history: TaskHistoryEntry[],
      inserts: TaskRecord[] = [],
    ) => {
      const dropped = await apply(patches, history, inserts);
      writes.push({ inserts: inserts.map((r) => r.id), patches: [...patches.keys()], history: [...history] });
      return dropped;
    };
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });
  return s;
}

/** The id of the request the runner holds (its X-Task-Id). */
async function heldTaskId(runner: { seen: { headers: Record<string, unknown> }[] }, n: number) {
  await waitFor(() => runner.seen.length === n, { what: "the request at the container" });
  return runner.seen[n - 1]?.headers["x-task-id"] as string;
}

describe("endpoint tasks before their row is written", () => {
  const s = harnessWithWrites(60_000);

  test("a request in flight shows in /v2/task and the REST task route; one write once it answers", async () => {
    const d = await s.e.deploy("held", "endpoint");
    const runner = await s.e.addContainer(d.stub.id, "ctr-held");
    const pending = s.post("/endpoint/held", { op: "hold" });
    const id = await heldTaskId(runner, 1);
    await waitFor(async () => (await s.e.h.tasks.getTask(s.e.ws.id, id)).status === "RUNNING", {
      what: "the task RUNNING",
    });
    assert.equal(await s.e.h.store.tasks.get(id), undefined, "no row written while the request is open");
    assert.deepEqual(s.writesOf(id), []);

    const v2 = await s.get(`/v2/task/${id}/`);
    assert.equal(v2.status, 200);
    const t = (await v2.json()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(t).sort(), SPEC_TASK_FIELDS);
    assert.equal(t.status, "RUNNING");
    assert.equal(t.container_id, "ctr-held");
    assert.ok(t.started_at);
    assert.equal(t.ended_at, null);
    assert.equal((t.stub as { id: string }).id, d.stub.id);
    assert.equal((await s.get(`/v2/task/${id}/`, s.e.otherToken)).status, 404, "another workspace's");
    const rest = await s.get(`/api/v1/task/${s.e.ws.externalId}/${id}`);
    assert.equal(rest.status, 200);
    const restBody = (await rest.json()) as { status: string; history: { status: string }[] };
    assert.equal(restBody.status, "RUNNING");
    assert.deepEqual(
      restBody.history.map((h) => h.status),
      ["RUNNING"],
    );

    runner.release();
    const res = await pending;
    assert.equal(res.status, 200);
    await waitFor(async () => (await s.e.h.store.tasks.get(id))?.status === "COMPLETE", { what: "the row" });
    assert.deepEqual(s.writesOf(id), [{ inserted: true, patched: false, history: ["RUNNING", "COMPLETE"] }]);
    const done = (await (await s.get(`/v2/task/${id}`)).json()) as Record<string, unknown>;
    assert.equal(done.status, "COMPLETE");
    assert.equal(done.started_at, t.started_at);
    assert.ok(done.ended_at);
    const hist = await s.e.h.tasks.history(s.e.ws.id, id);
    assert.deepEqual(
      hist.map((h) => `${h.status}/${h.containerId}`),
      ["RUNNING/ctr-held", "COMPLETE/ctr-held"],
    );
    assert.ok((hist[0]?.at ?? "") <= (hist[1]?.at ?? ""));
  });

  test("cancel through the gateway route ends an unwritten task: 409 to the caller, one write", async () => {
    const d = await s.e.deploy("cancel-unwritten", "endpoint");
    const runner = await s.e.addContainer(d.stub.id, "ctr-cu");
    const pending = s.post("/endpoint/cancel-unwritten", { op: "hold" });
    const id = await heldTaskId(runner, 1);
    await waitFor(async () => (await s.e.h.tasks.getTask(s.e.ws.id, id)).status === "RUNNING", {
      what: "the task RUNNING",
    });
    assert.equal(await s.e.h.store.tasks.get(id), undefined);
    const cancelled = await fetch(`${s.e.base}/api/v1/gateway/tasks/${id}/cancel`, {
      method: "POST",
      headers: bearer(s.e.token),
    });
    assert.deepEqual(await cancelled.json(), { ok: true, task_id: id, status: "CANCELLED" });
    assert.equal((await pending).status, 409);
    const row = await s.e.h.store.tasks.get(id);
    assert.equal(row?.status, "CANCELLED", "written by the time cancel answered");
    assert.equal(row?.error?.type, "TaskCancelled");
    assert.deepEqual(s.writesOf(id), [{ inserted: true, patched: false, history: ["RUNNING", "CANCELLED"] }]);
    await waitFor(() => runner.aborted === 1, { what: "the container's request to be aborted" });
  });

  test("a request waiting for a container is PENDING in the status API, unwritten", async () => {
    const d = await s.e.deploy("cold-unwritten", "endpoint");
    const pending = s.post("/endpoint/cold-unwritten", { n: 1 });
    await waitFor(() => s.e.endpoints.slots.waitingFor(d.stub.id) === 1, { what: "a waiting request" });
    const waiting = [...s.e.h.tasks.demand()].find((x) => x.stubId === d.stub.id);
    assert.equal(waiting?.pending, 1);
    await s.e.addContainer(d.stub.id, "ctr-cold-u");
    const res = await pending;
    assert.equal(res.status, 200);
    const id = res.headers.get("x-task-id") as string;
    await waitFor(async () => (await s.e.h.store.tasks.get(id))?.status === "COMPLETE", { what: "the row" });
    assert.deepEqual(s.writesOf(id), [{ inserted: true, patched: false, history: ["RUNNING", "COMPLETE"] }]);
  });
});

describe("endpoint tasks open longer than the fold time", () => {
  const s = harnessWithWrites(50);

  test("a long request is written while it runs and updated when it answers", async () => {
    const d = await s.e.deploy("long", "endpoint");
    const runner = await s.e.addContainer(d.stub.id, "ctr-long");
    const pending = s.post("/endpoint/long", { op: "hold" });
    const id = await heldTaskId(runner, 1);
    await waitFor(async () => (await s.e.h.store.tasks.get(id))?.status === "RUNNING", {
      what: "the open task's row",
    });
    const v2 = (await (await s.get(`/v2/task/${id}/`)).json()) as Record<string, unknown>;
    assert.equal(v2.status, "RUNNING");
    assert.deepEqual(
      (await s.e.h.tasks.history(s.e.ws.id, id)).map((h) => h.status),
      ["RUNNING"],
    );
    runner.release();
    assert.equal((await pending).status, 200);
    await waitFor(async () => (await s.e.h.store.tasks.get(id))?.status === "COMPLETE", {
      what: "the update",
    });
    const w = s.writesOf(id);
    assert.equal(w[0]?.inserted, true, "first written whole");
    assert.deepEqual(w.at(-1), { inserted: false, patched: true, history: ["COMPLETE"] }, "then updated");
    assert.equal(w.filter((x) => x.inserted).length, 1);
    assert.deepEqual(
      w.flatMap((x) => x.history),
      ["RUNNING", "COMPLETE"],
    );
    assert.deepEqual(
      (await s.e.h.tasks.history(s.e.ws.id, id)).map((h) => h.status),
      ["RUNNING", "COMPLETE"],
    );
  });
});
