// Workspace limits in the container manager (fake agents and activity, as
// in test/containers): a start past a CPU, memory, GPU or container limit
// waits with that limit as its reason, and starts once usage drops or the
// limit is raised; other workspaces are not held back.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { ContainerLimits } from "../../coordinator/scheduler/index.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { capacity, stubRecord, world } from "../containers/fakes.ts";

const NONE: ContainerLimits = {
  maxContainers: null,
  maxCpuMillicores: null,
  maxMemoryMb: null,
  maxGpus: null,
};

function limitedWorld(initial: Record<string, Partial<ContainerLimits>>) {
  const limits = new Map(Object.entries(initial).map(([ws, l]) => [ws, { ...NONE, ...l }]));
  let reads = 0;
  const w = world({
    workspaceLimits: async (ws) => {
      reads++;
      return limits.get(ws) ?? NONE;
    },
    // Cached for a long time: only invalidateLimits makes a change seen.
    stubCacheMs: 3_600_000,
  });
  return { w, limits, reads: () => reads };
}

test("a CPU limit caps starts, the stub waits naming it, and a drop in usage starts the next", async (t) => {
  const { w } = limitedWorld({ "ws-1": { maxCpuMillicores: 2500 } });
  w.mgr.start();
  t.after(() => w.mgr.stop());
  const a = w.addAgent("agent-a", capacity(64, 256));
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { cpu_millicores: 1000 } }));
  w.stubs.set(
    "stub-other",
    stubRecord("stub-other", { workspaceId: "ws-2", extra: { cpu_millicores: 1000 } }),
  );
  w.activity.set("stub-1", 5);
  w.activity.set("stub-other", 4, 0, "ws-2");
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 2, "2 × 1000m fit in 2500m; a third would not");
  assert.equal(w.mgr.activeContainers("stub-other"), 4, "another workspace has no limit");
  assert.match(
    w.mgr.waitReason("stub-1") ?? "",
    /2000m of its 2500m CPU and one more needs 1000m \(limit max_cpu_millicores\)/,
  );
  assert.equal(w.mgr.waitReason("stub-other"), undefined);
  assert.deepEqual(w.mgr.workspaceUsage("ws-1"), {
    containers: 2,
    cpuMillicores: 2000,
    memoryBytes: 2 * 512 * 1024 * 1024,
    gpus: 0,
  });

  // One container exits: usage drops, the next waiting start goes ahead.
  const first = w.mgr.containersOf("stub-1")[0];
  assert.ok(first);
  w.emit({ type: "exit", agentId: "agent-a", containerId: first.id, exitCode: 0 });
  await w.tick(60_000);
  assert.equal(w.mgr.activeContainers("stub-1"), 2);
  assert.equal(a.runs.filter((r) => r.labels?.[RunnerLabels.stubId] === "stub-1").length, 3);

  // Demand met: the stub no longer waits.
  w.activity.set("stub-1", 0, 2);
  await w.tick();
  assert.equal(w.mgr.waitReason("stub-1"), undefined);
});

test("memory and GPU limits hold starts back the same way", async () => {
  const { w } = limitedWorld({ "ws-1": { maxMemoryMb: 1024 }, "ws-g": { maxGpus: 2 } });
  const gpus = [0, 1, 2, 3].map((i) => ({ type: "A100", uuid: `GPU-${i}` }));
  w.addAgent("agent-a", capacity(64, 256, gpus));
  w.stubs.set(
    "stub-mem",
    stubRecord("stub-mem", { config: { runtime: { cpu: 1, gpu: "", memory: 400, image_id: "" } } }),
  );
  w.stubs.set(
    "stub-gpu",
    stubRecord("stub-gpu", { workspaceId: "ws-g", extra: { gpu_types: ["A100"], gpu_count: 1 } }),
  );
  w.activity.set("stub-mem", 4);
  w.activity.set("stub-gpu", 4, 0, "ws-g");
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-mem"), 2, "2 × 400 MiB in 1024 MiB");
  assert.match(w.mgr.waitReason("stub-mem") ?? "", /limit max_memory_mb/);
  assert.equal(w.mgr.activeContainers("stub-gpu"), 2, "the fleet has 4 GPUs, the workspace may hold 2");
  assert.match(w.mgr.waitReason("stub-gpu") ?? "", /2 of its 2 GPUs and one more needs 1 \(limit max_gpus\)/);
  assert.equal(w.mgr.workspaceUsage("ws-g").gpus, 2);
});

test("a raised limit starts waiting containers once invalidated; one that can never fit says so", async () => {
  const { w, limits, reads } = limitedWorld({ "ws-1": { maxContainers: 1, maxGpus: 0 } });
  w.addAgent("agent-a", capacity(64, 256, [{ type: "A100", uuid: "GPU-0" }]));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.stubs.set("stub-gpu", stubRecord("stub-gpu", { extra: { gpu_types: ["A100"], gpu_count: 1 } }));
  w.activity.set("stub-1", 3);
  w.activity.set("stub-gpu", 1);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 1);
  assert.equal(w.mgr.activeContainers("stub-gpu"), 0);
  assert.match(w.mgr.waitReason("stub-gpu") ?? "", /cannot start until an operator raises the limit/);
  const before = reads();
  limits.set("ws-1", { ...NONE, maxContainers: 4, maxGpus: 1 });
  await w.tick(1000);
  assert.equal(w.mgr.activeContainers("stub-1"), 1, "the cached limits still hold");
  w.mgr.invalidateLimits("ws-1");
  await w.tick();
  assert.ok(reads() > before);
  assert.equal(w.mgr.activeContainers("stub-1"), 3);
  assert.equal(w.mgr.activeContainers("stub-gpu"), 1);
});

test("at a limit, an idle warm container of another of the workspace's stubs gives its room up", async () => {
  const { w } = limitedWorld({ "ws-1": { maxContainers: 2 } });
  w.addAgent("agent-a", capacity(64, 256));
  w.stubs.set("stub-warm", stubRecord("stub-warm", { config: { keep_warm_seconds: 600 } }));
  w.stubs.set("stub-busy", stubRecord("stub-busy"));
  w.activity.set("stub-warm", 2);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-warm"), 2);
  // Its tasks are done; the containers stay warm (keep_warm_seconds 600).
  w.activity.set("stub-warm", 0);
  await w.tick(1000);
  assert.equal(w.mgr.activeContainers("stub-warm"), 2);
  w.activity.set("stub-busy", 2);
  await w.tick(1000);
  await w.tick(1000);
  await w.tick(1000);
  assert.equal(w.mgr.activeContainers("stub-busy"), 2);
  assert.equal(w.mgr.activeContainers("stub-warm"), 0);
});

test("the older workspaceLimit option still caps containers", async () => {
  const w = world();
  w.addAgent("agent-a", capacity(64, 256));
  w.limits.set("ws-1", 2);
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 5);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 2);
  assert.match(w.mgr.waitReason("stub-1") ?? "", /runs 2 of its 2 containers/);
});

test("sandboxes and pods count toward the limits: what they hold in the one planner holds runner starts back", async (t) => {
  const w = world({ workspaceLimits: async () => ({ ...NONE, maxCpuMillicores: 2500 }) });
  const { planner } = w;
  w.mgr.start();
  t.after(() => w.mgr.stop());
  w.addAgent("agent-a", capacity(64, 256));
  // A sandbox of the workspace, as the sandbox service records it in the same planner.
  planner.adopt({
    id: "ctr-sandbox",
    kind: "sandbox",
    workspaceId: "ws-1",
    agentId: "agent-a",
    cpuMillicores: 2000,
    memoryBytes: 0,
    gpuCount: 0,
  });
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { cpu_millicores: 1000 } }));
  w.activity.set("stub-1", 3);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 0, "the sandbox's 2000m leaves no room for 1000m more");
  assert.match(w.mgr.waitReason("stub-1") ?? "", /2000m of its 2500m/);
  assert.equal(w.mgr.workspaceUsage("ws-1").cpuMillicores, 2000);
  // The sandbox ends: its release wakes the manager, which starts what waits.
  planner.release("ctr-sandbox");
  await w.tick(60_000);
  assert.equal(w.mgr.activeContainers("stub-1"), 2, "room freed by the sandbox: two fit in 2500m");
});
