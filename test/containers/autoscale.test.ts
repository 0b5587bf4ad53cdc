// The pure scale decisions: desired containers per docs/deployments.md
// "Autoscaling", and which containers may stop.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type StopCandidate,
  containersToStop,
  desiredContainers,
  slotsPerContainer,
} from "../../coordinator/containers/autoscale.ts";
import { stubRecord } from "./fakes.ts";

const autoscaler = (max_containers: number, tasks_per_container = 0, type = "queue_depth") => ({
  type,
  max_containers,
  tasks_per_container,
});

test("desiredContainers follows the table of docs/deployments.md", () => {
  const cases: {
    what: string;
    type: string;
    workers?: number;
    concurrent?: number;
    auto: ReturnType<typeof autoscaler>;
    pending: number;
    running: number;
    baseline: number;
    want: number;
  }[] = [
    {
      what: "no demand, no baseline",
      type: "taskqueue/deployment",
      auto: autoscaler(5),
      pending: 0,
      running: 0,
      baseline: 0,
      want: 0,
    },
    {
      what: "baseline with no demand",
      type: "endpoint/deployment",
      auto: autoscaler(5),
      pending: 0,
      running: 0,
      baseline: 2,
      want: 2,
    },
    {
      what: "baseline above max is clamped",
      type: "endpoint/deployment",
      auto: autoscaler(3),
      pending: 0,
      running: 0,
      baseline: 7,
      want: 3,
    },
    {
      what: "queued: one per worker slot",
      type: "taskqueue/deployment",
      workers: 2,
      auto: autoscaler(10),
      pending: 5,
      running: 0,
      baseline: 0,
      want: 3,
    },
    {
      what: "max clamps the demand",
      type: "taskqueue/deployment",
      auto: autoscaler(3),
      pending: 50,
      running: 0,
      baseline: 0,
      want: 3,
    },
    {
      what: "running counts too",
      type: "taskqueue/deployment",
      auto: autoscaler(10),
      pending: 1,
      running: 3,
      baseline: 0,
      want: 4,
    },
    {
      what: "tasks_per_container wins over slots",
      type: "taskqueue/deployment",
      workers: 4,
      auto: autoscaler(10, 3),
      pending: 7,
      running: 0,
      baseline: 0,
      want: 3,
    },
    {
      what: "direct: workers × concurrent_requests",
      type: "endpoint/deployment",
      workers: 2,
      concurrent: 4,
      auto: autoscaler(10),
      pending: 9,
      running: 8,
      baseline: 0,
      want: 3,
    },
    {
      what: "direct serve session",
      type: "asgi/serve",
      concurrent: 5,
      auto: autoscaler(10),
      pending: 5,
      running: 0,
      baseline: 0,
      want: 1,
    },
    {
      what: "realtime direct",
      type: "realtime/deployment",
      concurrent: 2,
      auto: autoscaler(10),
      pending: 3,
      running: 0,
      baseline: 0,
      want: 2,
    },
    {
      what: "demand above baseline",
      type: "endpoint/deployment",
      auto: autoscaler(10),
      pending: 4,
      running: 0,
      baseline: 2,
      want: 4,
    },
    {
      what: "max_containers 0: no upper clamp",
      type: "taskqueue/deployment",
      auto: autoscaler(0),
      pending: 40,
      running: 0,
      baseline: 1,
      want: 40,
    },
    {
      what: "another autoscaler type: no clamp, baseline kept",
      type: "taskqueue/deployment",
      auto: autoscaler(2, 0, ""),
      pending: 0,
      running: 0,
      baseline: 3,
      want: 3,
    },
    // A plain function: the SDK sends {queue_depth, 1, 1}, but .map() fans out by workers.
    {
      what: "function ignores its autoscaler",
      type: "function",
      workers: 4,
      auto: autoscaler(1, 1),
      pending: 9,
      running: 0,
      baseline: 0,
      want: 3,
    },
    {
      what: "deployed function applies it",
      type: "function/deployment",
      workers: 4,
      auto: autoscaler(2, 1),
      pending: 9,
      running: 0,
      baseline: 0,
      want: 2,
    },
  ];
  for (const c of cases) {
    const stub = stubRecord("s", {
      type: c.type,
      config: { workers: c.workers ?? 1, autoscaler: c.auto },
      extra: c.concurrent === undefined ? {} : { concurrent_requests: c.concurrent },
    });
    assert.equal(
      desiredContainers(stub, { pending: c.pending, running: c.running }, c.baseline),
      c.want,
      c.what,
    );
  }
});

test("slots: direct-served types multiply workers by concurrent_requests (default 1)", () => {
  const s = (type: string, extra = {}) => stubRecord("s", { type, config: { workers: 3 }, extra });
  assert.equal(slotsPerContainer(s("endpoint/deployment", { concurrent_requests: 4 })), 12);
  assert.equal(slotsPerContainer(s("endpoint/deployment")), 3);
  assert.equal(slotsPerContainer(s("taskqueue/deployment", { concurrent_requests: 4 })), 3);
});

test("containersToStop: never busy ones; keep-warm, oldest idle first; outdated at once; drain", () => {
  const now = 100_000;
  const c = (id: string, idleSince: number, busy = false, outdated = false): StopCandidate => ({
    id,
    busy,
    idleSince,
    outdated,
  });
  const base = { current: 4, keep: 1, keepWarmMs: 10_000, now, draining: false };
  const candidates = [
    c("a", now - 20_000),
    c("b", now - 5_000),
    c("c", now - 30_000),
    c("d", now - 90_000, true),
  ];
  assert.deepEqual(
    containersToStop({ ...base, candidates }).map((x) => x.id),
    ["c", "a"],
    "b is within keep-warm; d is busy",
  );
  assert.deepEqual(
    containersToStop({ ...base, keep: 3, candidates }).map((x) => x.id),
    ["c"],
    "only the excess",
  );
  assert.deepEqual(containersToStop({ ...base, keepWarmMs: -1000, candidates }), [], "-1: never");
  assert.deepEqual(
    containersToStop({ ...base, draining: true, candidates }).map((x) => [x.id, x.reason]),
    [
      ["a", "deployment stopped"],
      ["b", "deployment stopped"],
      ["c", "deployment stopped"],
    ],
  );
  const withOld = [c("old", now, false, true), c("oldBusy", now, true, true), c("new", now)];
  assert.deepEqual(containersToStop({ ...base, current: 1, keep: 1, candidates: withOld }), [
    { id: "old", reason: "config changed" },
  ]);
});
