import assert from "node:assert/strict";
import { test } from "node:test";
import { ALLOWED, mayEnd, stepsFor } from "../../coordinator/tasks/transitions.ts";
import type { TaskEvent, TaskStatus } from "../../shared/tasks.ts";

const base = {
  taskId: "task-1",
  stubId: "stub-1",
  workspaceId: "ws-1",
  agentId: "a",
  containerId: "c",
  at: 0,
};
const started = (attempt: number): TaskEvent => ({ ...base, type: "started", attempt });
const retry = (attempt: number): TaskEvent => ({
  ...base,
  type: "retry",
  attempt,
  reason: "container_exited",
});
const finished = (
  attempt: number,
  status: "COMPLETE" | "FAILED" | "TIMEOUT" | "EXPIRED" | "CANCELLED",
): TaskEvent => ({
  ...base,
  type: "finished",
  attempt,
  status,
});
const path = (status: TaskStatus, attempt: number, ev: TaskEvent) =>
  stepsFor({ status, attempt }, ev).map((s) => s.status);

test("every arrow of docs/tasks.md is taken by its event", () => {
  assert.deepEqual(path("PENDING", 0, started(1)), ["RUNNING"]);
  assert.deepEqual(path("PENDING", 0, finished(1, "EXPIRED")), ["EXPIRED"]);
  assert.deepEqual(path("PENDING", 0, finished(1, "CANCELLED")), ["CANCELLED"]);
  for (const s of ["COMPLETE", "FAILED", "TIMEOUT", "CANCELLED"] as const) {
    assert.deepEqual(path("RUNNING", 1, finished(1, s)), [s]);
  }
  assert.deepEqual(path("RUNNING", 1, retry(1)), ["RETRY"]);
  assert.deepEqual(path("RETRY", 1, started(2)), ["RUNNING"]);
  for (const s of ["FAILED", "CANCELLED", "EXPIRED"] as const)
    assert.deepEqual(path("RETRY", 1, finished(1, s)), [s]);
});

test("terminal statuses never change; stale and duplicate events change nothing", () => {
  for (const s of ["COMPLETE", "FAILED", "TIMEOUT", "EXPIRED", "CANCELLED"] as const) {
    assert.deepEqual(ALLOWED[s], []);
    for (const ev of [started(5), retry(5), finished(5, "COMPLETE")]) assert.deepEqual(path(s, 1, ev), []);
  }
  assert.deepEqual(path("RUNNING", 1, started(1)), [], "duplicate start");
  assert.deepEqual(path("RETRY", 1, started(1)), [], "the failed attempt's start again");
  assert.deepEqual(path("RETRY", 1, retry(1)), [], "duplicate retry");
  assert.deepEqual(path("RUNNING", 2, finished(1, "COMPLETE")), [], "the earlier attempt's outcome");
  assert.deepEqual(path("RUNNING", 1, finished(1, "EXPIRED")), [], "no RUNNING → EXPIRED arrow");
});

test("implied steps stay on the table's arrows", () => {
  assert.deepEqual(path("RUNNING", 1, started(2)), ["RETRY", "RUNNING"], "redelivery after a lost agent");
  assert.deepEqual(path("RUNNING", 1, finished(2, "EXPIRED")), ["RETRY", "EXPIRED"]);
  assert.deepEqual(path("PENDING", 0, finished(1, "COMPLETE")), ["RUNNING", "COMPLETE"], "start event lost");
  assert.deepEqual(path("RETRY", 1, finished(2, "TIMEOUT")), ["RUNNING", "TIMEOUT"]);
  assert.deepEqual(path("RETRY", 1, finished(1, "COMPLETE")), []);
});

test("the coordinator ends tasks only along allowed arrows (plus FAILED for failPending)", () => {
  assert.equal(mayEnd("PENDING", "CANCELLED"), true);
  assert.equal(mayEnd("RUNNING", "CANCELLED"), true);
  assert.equal(mayEnd("PENDING", "EXPIRED"), true);
  assert.equal(mayEnd("RUNNING", "EXPIRED"), false);
  assert.equal(mayEnd("PENDING", "FAILED"), true);
  assert.equal(mayEnd("COMPLETE", "CANCELLED"), false);
});
