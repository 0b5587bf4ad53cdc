// GPUs at once by type (max_gpus_by_type, docs/limits.md) with the real
// planner and a fake fleet: many submissions at once never hold more of a
// type than its limit, a request of several types or of any type takes a
// type still under its limit, and a limit lowered under what runs stops
// nothing.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type ContainerLimits,
  type Planner,
  everFitsLimits,
  fitsLimits,
} from "../../coordinator/scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity, stubRecord, world } from "../containers/fakes.ts";

const NONE: ContainerLimits = {
  maxContainers: null,
  maxCpuMillicores: null,
  maxMemoryMb: null,
  maxGpus: null,
};

const gpus = (type: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ type, uuid: `GPU-${type}-${i}` }));

/** GPUs of each type the workspace's reservations hold, as the planner counts them. */
function heldByType(planner: Planner, ws: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const h of planner.list())
    if (h.workspaceId === ws && h.gpuType) out[h.gpuType] = (out[h.gpuType] ?? 0) + h.gpuCount;
  return out;
}

test("200 pending tasks on four GPU stubs hold at most each type's limit; the waiting stub names the limit and type", async (t) => {
  const limits = new Map<string, ContainerLimits>([
    ["ws-1", { ...NONE, maxGpusByType: { A100: 2, h100: 1 } }],
  ]);
  const w = world({ workspaceLimits: async (ws) => limits.get(ws) ?? NONE, stubCacheMs: 3_600_000 });
  w.mgr.start();
  t.after(() => w.mgr.stop());
  w.addAgent("agent-a", capacity(256, 1024, gpus("A100", 12)));
  w.addAgent("agent-h", capacity(256, 1024, gpus("H100", 8)));
  w.addAgent("agent-l", capacity(256, 1024, gpus("L4", 3)));
  const stub = (id: string, types: string[]) =>
    w.stubs.set(id, stubRecord(id, { extra: { gpu_types: types, gpu_count: 1 } }));
  stub("stub-a100", ["A100"]);
  stub("stub-h100", ["H100"]);
  stub("stub-either", ["H100", "A100"]);
  stub("stub-any", []);
  for (const id of ["stub-a100", "stub-h100", "stub-either", "stub-any"]) w.activity.set(id, 50);
  // Another workspace has no limit by type: it is not held back.
  w.stubs.set(
    "stub-other",
    stubRecord("stub-other", { workspaceId: "ws-2", extra: { gpu_types: ["A100"], gpu_count: 1 } }),
  );
  w.activity.set("stub-other", 4, 0, "ws-2");
  for (let i = 0; i < 5; i++) {
    await w.tick(1000);
    const held = heldByType(w.planner, "ws-1");
    assert.ok((held.A100 ?? 0) <= 2, `A100 held ${held.A100}`);
    assert.ok((held.H100 ?? 0) <= 1, `H100 held ${held.H100}`);
  }
  const held = heldByType(w.planner, "ws-1");
  assert.deepEqual(
    held,
    { A100: 2, H100: 1, L4: 3 },
    "each limited type full; L4 has no limit and the any-type stub took all 3",
  );
  assert.deepEqual(w.mgr.workspaceUsage("ws-1").gpusByType, { A100: 2, H100: 1, L4: 3 });
  assert.equal(w.mgr.activeContainers("stub-other"), 4);
  assert.match(
    w.mgr.waitReason("stub-either") ?? "",
    /hold 1 of its 1 h100 GPUs and one more needs 1 \(limit max_gpus_by_type h100\)/,
  );
  // Any type: A100 and H100 at their limits leave it L4 only, which is full.
  assert.match(w.mgr.waitReason("stub-any") ?? "", /every agent is full for .*gpu=1xL4/);

  // Lowered under what runs: nothing is stopped, nothing more starts.
  const before = w.planner
    .list()
    .filter((h) => h.workspaceId === "ws-1")
    .map((h) => h.id)
    .sort();
  limits.set("ws-1", { ...NONE, maxGpusByType: { A100: 0, H100: 0, L4: 0 } });
  w.mgr.invalidateLimits("ws-1");
  for (let i = 0; i < 3; i++) await w.tick(1000);
  const after = w.planner
    .list()
    .filter((h) => h.workspaceId === "ws-1")
    .map((h) => h.id)
    .sort();
  assert.deepEqual(after, before, "the same containers run");
  assert.equal(w.agents.get("agent-a")?.stops.length ?? 0, 0);
  assert.match(w.mgr.waitReason("stub-a100") ?? "", /hold 2 of its 0 A100 GPUs/);

  // Raised again: the waiting stubs start up to the new limits.
  limits.set("ws-1", { ...NONE, maxGpusByType: { A100: 5, H100: 1 } });
  w.mgr.invalidateLimits("ws-1");
  for (let i = 0; i < 3; i++) await w.tick(1000);
  assert.equal(heldByType(w.planner, "ws-1").A100, 5);
  assert.equal(heldByType(w.planner, "ws-1").H100, 1);
});

test("200 sandbox reservations at once: at most the per-type limit placed, the rest refused naming it", async (t) => {
  const w = world();
  w.mgr.start();
  t.after(() => w.mgr.stop());
  w.addAgent("agent-a", capacity(256, 1024, gpus("A100", 8)));
  w.addAgent("agent-h", capacity(256, 1024, gpus("H100", 8)));
  await w.tick(); // the manager learns the agents' containers: they take new ones
  const planner = w.planner;
  const limits: ContainerLimits = { ...NONE, maxGpusByType: { A100: 3, H100: 2 } };
  const results = await Promise.allSettled(
    Array.from({ length: 200 }, (_, i) =>
      planner.reserveWithin(
        {
          id: `ctr-sb-${i}`,
          kind: "sandbox",
          workspaceId: "ws-1",
          limits,
          placement: {
            cpuMillicores: 100,
            memoryBytes: 0,
            gpuTypes: i % 3 === 0 ? ["A100"] : i % 3 === 1 ? ["H100", "A100"] : [],
            gpuCount: 1,
          },
        },
        { waitMs: 0, what: "the sandbox" },
      ),
    ),
  );
  const placed = results.filter((r) => r.status === "fulfilled");
  assert.equal(placed.length, 5, String(results.find((r) => r.status === "rejected")?.reason));
  assert.deepEqual(heldByType(planner, "ws-1"), { A100: 3, H100: 2 });
  for (const r of results) {
    if (r.status === "fulfilled") continue;
    const e = r.reason as BerthError;
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "limit_exceeded");
    assert.equal(e.details?.limit, "maxGpusByType");
    assert.match(e.message, /limit max_gpus_by_type (A100|H100)/);
  }
  // Each of the 200 ran through the real planner: the agents' other GPUs stay free.
  assert.equal(planner.list().length, 5);
});

test("a model's limit counts its MIG slices; a slice's own limit only its profile; types match without regard to case", () => {
  const usage = {
    containers: 2,
    cpuMillicores: 0,
    memoryBytes: 0,
    gpus: 2,
    gpusByType: { "A100:1g.10gb": 2 },
  };
  const slice = { cpuMillicores: 0, memoryBytes: 0, gpuTypes: ["A100:1g.10gb"], gpuCount: 1 };
  const byModel = fitsLimits({ ...NONE, maxGpusByType: { a100: 2 } }, usage, slice);
  assert.equal(byModel.ok, false);
  assert.match(
    byModel.ok ? "" : byModel.reason,
    /hold 2 of its 2 a100 GPUs.*\(limit max_gpus_by_type a100\)/,
  );
  assert.equal(fitsLimits({ ...NONE, maxGpusByType: { "A100:1g.10gb": 3 } }, usage, slice).ok, true);
  assert.equal(fitsLimits({ ...NONE, maxGpusByType: { "A100:3g.40gb": 0 } }, usage, slice).ok, true);
  // A whole-GPU request of another type is not held back by the A100 limit.
  assert.equal(
    fitsLimits({ ...NONE, maxGpusByType: { A100: 2 } }, usage, { ...slice, gpuTypes: ["H100"] }).ok,
    true,
  );
  // A limit a single container can never fit under says so (waiting cannot help).
  assert.equal(
    everFitsLimits({ ...NONE, maxGpusByType: { H100: 1 } }, { ...slice, gpuTypes: ["H100"], gpuCount: 2 }),
    false,
  );
});
