// The pure side of workspace limits: usage from reservations, the start
// check with the limit it names, the pending-tasks check, and the limits
// cache (a store read per TTL, invalidation, failed reads not kept).

import assert from "node:assert/strict";
import { test } from "node:test";
import { WorkspaceLimitsCache, checkPendingTasks } from "../../coordinator/limits/limits.ts";
import { everFitsLimits, fitsLimits, NO_USAGE, usageOf } from "../../coordinator/scheduler/index.ts";
import type { PlacementRequest } from "../../coordinator/scheduler/index.ts";
import { UNLIMITED, type WorkspaceLimits } from "../../coordinator/limits/store.ts";
import type { BerthError } from "../../shared/errors.ts";

const MiB = 1024 * 1024;
const req = (over: Partial<PlacementRequest> = {}): PlacementRequest => ({
  cpuMillicores: 1000,
  memoryBytes: 512 * MiB,
  gpuTypes: [],
  gpuCount: 0,
  ...over,
});

test("usage sums the reservations of a workspace's containers", () => {
  assert.deepEqual(usageOf([]), NO_USAGE);
  assert.deepEqual(
    usageOf([
      { cpuMillicores: 1500, memoryBytes: 512 * MiB, gpuCount: 0 },
      { cpuMillicores: 2000, memoryBytes: 1024 * MiB, gpuCount: 2 },
    ]),
    { containers: 2, cpuMillicores: 3500, memoryBytes: 1536 * MiB, gpus: 2 },
  );
});

test("a start fits until one limit would be passed, and names that limit", () => {
  const usage = { containers: 2, cpuMillicores: 2000, memoryBytes: 1024 * MiB, gpus: 1 };
  assert.deepEqual(fitsLimits(UNLIMITED, usage, req({ gpuCount: 8 })), { ok: true });
  const cases: {
    limits: Partial<WorkspaceLimits>;
    r?: Partial<PlacementRequest>;
    limit?: string;
    re?: RegExp;
  }[] = [
    { limits: { maxContainers: 3 } },
    {
      limits: { maxContainers: 2 },
      limit: "maxContainers",
      re: /runs 2 of its 2 containers \(limit max_containers\)/,
    },
    { limits: { maxCpuMillicores: 3000 } },
    {
      limits: { maxCpuMillicores: 2999 },
      limit: "maxCpuMillicores",
      re: /2000m of its 2999m CPU.*needs 1000m/,
    },
    { limits: { maxMemoryMb: 1536 } },
    {
      limits: { maxMemoryMb: 1535 },
      limit: "maxMemoryMb",
      re: /1024 MiB of its 1535 MiB memory.*needs 512 MiB/,
    },
    { limits: { maxGpus: 0 }, r: { gpuCount: 0 } },
    { limits: { maxGpus: 3 }, r: { gpuCount: 2 } },
    {
      limits: { maxGpus: 2 },
      r: { gpuCount: 2 },
      limit: "maxGpus",
      re: /1 of its 2 GPUs and one more needs 2/,
    },
    // The first limit passed is the one named.
    { limits: { maxContainers: 1, maxGpus: 0 }, r: { gpuCount: 1 }, limit: "maxContainers" },
  ];
  for (const c of cases) {
    const got = fitsLimits({ ...UNLIMITED, ...c.limits }, usage, req(c.r));
    const what = JSON.stringify(c.limits);
    if (!c.limit) {
      assert.deepEqual(got, { ok: true }, what);
      continue;
    }
    assert.equal(got.ok, false, what);
    if (got.ok) continue;
    assert.equal(got.limit, c.limit, what);
    if (c.re) assert.match(got.reason, c.re, what);
  }
});

test("a container bigger than the limit itself never fits", () => {
  assert.equal(everFitsLimits({ ...UNLIMITED, maxGpus: 1 }, req({ gpuCount: 2 })), false);
  assert.equal(everFitsLimits({ ...UNLIMITED, maxContainers: 0 }, req()), false);
  assert.equal(everFitsLimits({ ...UNLIMITED, maxCpuMillicores: 1000 }, req()), true);
});

test("pending tasks: refused with limit_exceeded past max_pending_tasks, naming it", () => {
  assert.doesNotThrow(() => checkPendingTasks(null, 1_000_000, 5));
  assert.doesNotThrow(() => checkPendingTasks(10, 9, 1));
  assert.throws(
    () => checkPendingTasks(10, 10, 1),
    (e: BerthError) => {
      assert.equal(e.code, "limit_exceeded");
      assert.match(e.message, /10 pending tasks.*max_pending_tasks is 10.*this task/);
      assert.deepEqual(e.details, {
        limit: "max_pending_tasks",
        max_pending_tasks: 10,
        pending_tasks: 10,
        requested: 1,
      });
      return true;
    },
  );
  // All of a map or none: 8 + 3 passes 10.
  assert.throws(() => checkPendingTasks(10, 8, 3), /these 3 tasks/);
  assert.throws(() => checkPendingTasks(0, 0, 1), { code: "limit_exceeded" });
});

test("the limits cache reads the store once per TTL, forgets on invalidate, and keeps no failed read", async () => {
  const clock = { now: 0 };
  let reads = 0;
  let fail = false;
  const stored: WorkspaceLimits = { ...UNLIMITED, maxPendingTasks: 5 };
  const cache = new WorkspaceLimitsCache({
    repo: {
      async get() {
        reads++;
        if (fail) throw new Error("store down");
        return { ...stored };
      },
    },
    ttlMs: 1000,
    clock: () => clock.now,
  });
  const [a, b] = await Promise.all([cache.get("ws-1"), cache.get("ws-1")]);
  assert.equal(reads, 1, "concurrent first reads share one");
  assert.deepEqual(a, b);
  assert.equal(await cache.maxPendingTasks("ws-1"), 5);
  stored.maxPendingTasks = 7;
  clock.now = 999;
  assert.equal(await cache.maxPendingTasks("ws-1"), 5, "still cached");
  cache.invalidate("ws-1");
  assert.equal(await cache.maxPendingTasks("ws-1"), 7);
  assert.equal(reads, 2);
  clock.now = 5000;
  fail = true;
  await assert.rejects(cache.get("ws-1"), /store down/);
  fail = false;
  assert.equal(await cache.maxPendingTasks("ws-1"), 7, "the failed read was not kept");
  assert.equal(reads, 4);
});
