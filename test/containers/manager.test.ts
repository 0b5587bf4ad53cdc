// The container manager's logic against a fake TaskActivity and fake agents
// that record calls: scaling to demand, limits, reuse, keep-warm, events,
// failures and code pushes.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { type TestContext, test } from "node:test";
import { CONFIG_VERSION_LABEL } from "../../coordinator/containers/runner-request.ts";
import { BerthError } from "../../shared/errors.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { capacity, stubRecord, world } from "./fakes.ts";

/**
 * A running manager, healthy after 30 s and giving up after maxAttempts
 * failed starts, with one task of stub-1 waiting and an agent with room.
 */
function crashingStub(t: TestContext, maxAttempts: number) {
  const w = world({ healthyAfterMs: 30_000, startBackoff: { initialMs: 1000, maxAttempts } });
  const a = w.addAgent("agent-a", capacity(8, 8));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 1);
  w.mgr.start();
  t.after(() => w.mgr.stop());
  return { w, a };
}

test("starts one runner per waiting task with the stub's runner request", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set(
    "stub-1",
    stubRecord("stub-1", {
      config: { on_start: "app:load", callback_url: "http://cb", workers: 1 },
      extra: { cpu_millicores: 1500, image_ref: "registry/img:1", retry_for: ["ValueError"] },
    }),
  );
  w.activity.set("stub-1", 3);
  await w.tick();
  const runs = a.runs;
  assert.equal(runs.length, 3);
  assert.equal(new Set(runs.map((r) => r.id)).size, 3);
  const r = runs[0];
  assert.ok(r?.id?.startsWith("ctr-"));
  assert.deepEqual(
    { ...r, id: "x" },
    {
      id: "x",
      args: [],
      cpu: 1.5,
      memoryBytes: 512 * 1024 * 1024,
      image: "registry/img:1",
      labels: {
        [RunnerLabels.stubId]: "stub-1",
        [RunnerLabels.workspaceId]: "ws-1",
        [RunnerLabels.managed]: "1",
        [CONFIG_VERSION_LABEL]: "1",
      },
      runner: {
        stubId: "stub-1",
        workspaceId: "ws-1",
        stubType: "function",
        handler: "app:square",
        onStart: "app:load",
        pythonVersion: "python3",
        callbackUrl: "http://cb",
        retryFor: ["ValueError"],
        workers: 1,
        configVersion: 1,
      },
    },
  );
  assert.equal(w.mgr.activeContainers("stub-1"), 3);
  assert.ok(w.mgr.list().every((c) => c.state === "running" && c.agentId === "agent-a"));
  // Demand unchanged: nothing more.
  await w.tick(1000);
  assert.equal(a.runs.length, 3);
});

test("the workspace limit caps containers across the workspace's stubs", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(64, 256));
  w.limits.set("ws-1", 4);
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.stubs.set("stub-2", stubRecord("stub-2"));
  w.stubs.set("stub-other", stubRecord("stub-other", { workspaceId: "ws-2" }));
  w.activity.set("stub-2", 1);
  await w.tick();
  w.activity.set("stub-1", 10);
  w.activity.set("stub-other", 2, 0, "ws-2");
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-2"), 1);
  assert.equal(w.mgr.activeContainers("stub-1"), 3, "4 allowed, 1 held by stub-2");
  assert.equal(w.mgr.activeContainers("stub-other"), 2, "another workspace has its own limit");
  await w.tick(1000);
  assert.equal(a.runs.length, 6);
});

test(".map over 1,000 inputs reuses a bounded set of containers", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(64, 256));
  w.limits.set("ws-1", 10);
  w.stubs.set("stub-map", stubRecord("stub-map"));
  w.activity.set("stub-map", 1000);
  await w.tick();
  assert.equal(a.runs.length, 10);
  // Runners take tasks from the shared consumer: demand drains, containers stay.
  for (let left = 990; left >= 0; left -= 90) {
    w.activity.set("stub-map", left, Math.min(10, left));
    await w.tick(100);
  }
  assert.equal(a.runs.length, 10);
});

test("an idle container is reused instead of starting another", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 1);
  await w.tick();
  const [first] = w.mgr.list();
  assert.ok(first);
  // The task ran and finished; the container is warm.
  w.activity.activity.set(first.id, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-1", 0);
  await w.tick(1000);
  w.activity.set("stub-1", 1);
  await w.tick(1000);
  assert.equal(a.runs.length, 1, "the warm container takes the next task");
  // Two waiting with one container: one more.
  w.activity.set("stub-1", 1, 1);
  await w.tick(1000);
  assert.equal(a.runs.length, 2);
});

test("workers: one container takes that many tasks at once", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-1", stubRecord("stub-1", { config: { workers: 4 } }));
  w.activity.set("stub-1", 9);
  await w.tick();
  assert.equal(a.runs.length, 3);
  assert.equal(a.runs[0]?.runner?.workers, 4);
});

test("keep-warm: idle containers beyond demand stop after keep_warm_seconds, busy ones never", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-1", stubRecord("stub-1", { config: { keep_warm_seconds: 10 } }));
  w.activity.set("stub-1", 3);
  await w.tick();
  const [c1, c2, c3] = w.mgr.list().map((c) => c.id) as [string, string, string];
  const t0 = w.clock.now;
  w.activity.activity.set(c1, { busy: true, lastActiveAt: t0 });
  w.activity.activity.set(c2, { busy: false, lastActiveAt: t0 + 5000 });
  // c3 never took a task: its start time counts.
  w.activity.set("stub-1", 0, 1);
  await w.tick(9_000);
  assert.equal(a.count("stopContainer"), 0, "not idle long enough yet");
  await w.tick(2_000);
  assert.deepEqual(
    a.calls.filter((c) => c[0] === "stopContainer"),
    [["stopContainer", c3, { graceMs: 10_000, remove: true }]],
  );
  await w.tick(5_000);
  assert.deepEqual(
    a.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1]),
    [c3, c2],
  );
  // One task still runs: its container stays.
  await w.tick(60_000);
  assert.deepEqual(
    w.mgr.list().map((c) => c.id),
    [c1],
  );
  // Done and idle: scale to zero.
  w.activity.activity.set(c1, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-1", 0);
  await w.tick(10_000);
  assert.equal(w.mgr.activeContainers("stub-1"), 0);
  assert.equal(a.containers.size, 0);
});

test("keep_warm_seconds -1 never scales to zero", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-1", stubRecord("stub-1", { config: { keep_warm_seconds: -1 } }));
  w.activity.set("stub-1", 1);
  await w.tick();
  w.activity.set("stub-1", 0);
  await w.tick(3_600_000);
  assert.equal(a.count("stopContainer"), 0);
  assert.equal(w.mgr.activeContainers("stub-1"), 1);
});

test("an exit event forgets the container, frees its room, removes it and starts a replacement", async () => {
  const w = world({ healthyAfterMs: 1000 });
  // Room for exactly one container.
  const a = w.addAgent("agent-a", capacity(1, 1));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 2);
  await w.tick();
  assert.equal(a.runs.length, 1, "the second does not fit");
  const [c] = w.mgr.list();
  assert.ok(c);
  w.clock.now += 5000;
  w.mgr.start();
  try {
    // Not oom_killed: a runner killed for memory before its first task counts as a failed start at any age.
    w.emit({ agentId: "agent-a", containerId: c.id, type: "exit", exitCode: 1, reason: "exited" });
    await w.mgr.settled();
    assert.deepEqual(a.calls.filter((x) => x[0] === "stopContainer")[0], [
      "stopContainer",
      c.id,
      { graceMs: 0, remove: true },
    ]);
    assert.equal(a.runs.length, 2, "its room went to a new container");
    assert.ok(!w.mgr.list().some((x) => x.id === c.id));
    assert.equal(w.mgr.startAttempts("stub-1"), 0, "it lived long enough not to count as a crash");
    // Events for other containers and unmanaged ones are ignored or just cleaned up.
    w.emit({ agentId: "agent-a", containerId: "ctr-unknown", type: "exit", labels: {} });
    await w.mgr.settled();
    assert.equal(a.runs.length, 2);
  } finally {
    await w.mgr.stop();
  }
});

test("a runner that exits at once counts as a failed start and backs off", async (t) => {
  const { w, a } = crashingStub(t, 3);
  for (let round = 1; round <= 3; round++) {
    await w.tick(20_000);
    const [c] = w.mgr.list();
    assert.ok(c, `round ${round} started a container`);
    w.emit({ agentId: "agent-a", containerId: c.id, type: "exit", exitCode: 127, reason: "exited" });
    await w.mgr.settled();
    assert.equal(w.mgr.activeContainers("stub-1"), 0, "backing off");
  }
  assert.equal(a.runs.length, 3);
  assert.equal(w.activity.failed.length, 1);
  assert.match(
    w.activity.failed[0]?.message ?? "",
    /after 3 attempts; last error: runner container ctr-\w+ ended \(exited, code 127\) 0 s after it started/,
  );
});

test("a runner killed for memory before its first task: the failure names the limit and memory=", async (t) => {
  const { w } = crashingStub(t, 1);
  await w.tick(20_000);
  const [c] = w.mgr.list();
  assert.ok(c);
  w.emit({
    agentId: "agent-a",
    containerId: c.id,
    type: "exit",
    exitCode: 137,
    reason: "oom_killed",
    memoryBytes: 128 * 2 ** 20,
  });
  await w.mgr.settled();
  assert.match(
    w.activity.failed[0]?.message ?? "",
    /last error: runner container ctr-\w+ ended 0 s after it started, before taking a task \(code 137\): killed for memory: the limit is 128 MiB; raise memory= /,
  );
});

test("a model server killed for memory while loading, however long it loaded, ends its tasks after the attempts", async (t) => {
  const { w } = crashingStub(t, 3);
  for (let round = 1; round <= 3; round++) {
    await w.tick(20_000);
    const [c] = w.mgr.list();
    assert.ok(c, `round ${round} started a container`);
    // Loading for a minute (past healthyAfterMs), then killed for memory before its first task.
    await w.tick(60_000);
    w.emit({ agentId: "agent-a", containerId: c.id, type: "exit", exitCode: 137, reason: "oom_killed" });
    await w.mgr.settled();
  }
  assert.equal(w.activity.failed.length, 1, "age alone did not end the streak");
  assert.match(
    w.activity.failed[0]?.message ?? "",
    /after 3 attempts; last error: runner container ctr-\w+ ended 60 s after it started, before taking a task \(code 137\): killed for memory: it reached its memory limit; raise memory= /,
  );
});

test("a request no agent can ever fit fails the waiting tasks with the cause", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-big", stubRecord("stub-big", { extra: { cpu_millicores: 64_000 } }));
  w.stubs.set("stub-gpu", stubRecord("stub-gpu", { extra: { gpu_types: ["H100"] } }));
  w.activity.set("stub-big", 2);
  w.activity.set("stub-gpu", 1);
  await w.tick();
  assert.equal(a.runs.length, 0);
  const byStub = new Map(w.activity.failed.map((f) => [f.stubId, f]));
  assert.equal(byStub.get("stub-big")?.code, "unplaceable");
  assert.match(
    byStub.get("stub-big")?.message ?? "",
    /no agent can fit cpu=64 memory=512 MiB; the largest agent has cpu=16 \(agent-a\)/,
  );
  assert.match(
    byStub.get("stub-gpu")?.message ?? "",
    /no agent has 1 GPU\(s\) of type H100 \(fleet GPUs: none\)/,
  );
  assert.equal(w.activity.demands.size, 0);
});

test("a full cluster keeps tasks waiting, then places when room frees", async () => {
  const w = world();
  w.addAgent("agent-a", capacity(2, 64));
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { cpu_millicores: 2000 } }));
  w.stubs.set("stub-2", stubRecord("stub-2", { extra: { cpu_millicores: 2000 } }));
  w.activity.set("stub-1", 1);
  await w.tick();
  w.activity.set("stub-2", 1);
  await w.tick(1000);
  assert.equal(w.activity.failed.length, 0);
  assert.equal(w.mgr.activeContainers("stub-2"), 0);
  const b = w.addAgent("agent-b", capacity(4, 64));
  await w.tick(1000);
  assert.equal(b.runs.length, 1);
  assert.equal(w.mgr.activeContainers("stub-2"), 1);
});

test("an image that does not exist fails the waiting tasks with the agent's error", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  a.failRun.push(new BerthError("not_found", "image registry/nope:1 not found in the registry"));
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { image_ref: "registry/nope:1" } }));
  w.activity.set("stub-1", 1);
  await w.tick();
  assert.deepEqual(w.activity.failed, [
    { stubId: "stub-1", code: "not_found", message: "image registry/nope:1 not found in the registry" },
  ]);
  assert.equal(w.mgr.activeContainers("stub-1"), 0);
});

test("transient start failures retry with backoff and count attempts per stub", async () => {
  const w = world({ startBackoff: { initialMs: 1000, factor: 2, maxMs: 30_000, maxAttempts: 8 } });
  const a = w.addAgent("agent-a", capacity(16, 64));
  for (let i = 0; i < 3; i++) a.failRun.push(new BerthError("unavailable", "agent busy"));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 1);
  assert.equal(w.mgr.startError("stub-1"), undefined);
  await w.tick();
  assert.equal(a.runs.length, 1);
  assert.equal(w.mgr.startAttempts("stub-1"), 1);
  // What GET /deployment/{ws}/{id} answers as start_error (berth deploy of a pod reports it).
  assert.match(w.mgr.startError("stub-1") ?? "", /agent busy/);
  await w.tick(500);
  assert.equal(a.runs.length, 1, "within the first backoff (1 s)");
  await w.tick(500);
  assert.equal(a.runs.length, 2);
  assert.equal(w.mgr.startAttempts("stub-1"), 2);
  await w.tick(1500);
  assert.equal(a.runs.length, 2, "within the second backoff (2 s)");
  await w.tick(500);
  assert.equal(a.runs.length, 3);
  await w.tick(4000);
  assert.equal(a.runs.length, 4);
  assert.equal(w.mgr.activeContainers("stub-1"), 1, "the fourth attempt worked");
  assert.equal(w.activity.failed.length, 0);
  // A container that stays up ends the streak.
  await w.tick(31_000);
  assert.equal(w.mgr.startAttempts("stub-1"), 0);
});

test("code is pushed once per agent, even to containers starting together", async () => {
  const w = world();
  const archive = Buffer.from("a code archive");
  const sha = createHash("sha256").update(archive).digest("hex");
  w.objects.set(sha, archive);
  const a = w.addAgent("agent-a", capacity(2, 64));
  const b = w.addAgent("agent-b", capacity(2, 64));
  b.code.set(sha, archive);
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { code_sha256: sha } }));
  w.activity.set("stub-1", 4);
  await w.tick();
  assert.equal(a.runs.length + b.runs.length, 4);
  assert.equal(a.runs.length, 2);
  assert.deepEqual(a.runs[0]?.code, { sha256: sha });
  assert.equal(a.count("hasCode"), 1);
  assert.equal(a.count("putCode"), 1);
  assert.deepEqual(a.code.get(sha), archive);
  assert.equal(b.count("hasCode"), 1);
  assert.equal(b.count("putCode"), 0, "agent-b already had it");
  // Later containers on the same agents: no more checks.
  w.activity.set("stub-1", 4, 4);
  await w.tick(1000);
  assert.equal(a.count("hasCode") + b.count("hasCode"), 2);
});

test("containers go to agents holding the code before bin-packing elsewhere", async () => {
  const w = world();
  const archive = Buffer.from("code");
  const sha = createHash("sha256").update(archive).digest("hex");
  w.objects.set(sha, archive);
  const a = w.addAgent("agent-a", capacity(8, 64));
  const b = w.addAgent("agent-b", capacity(8, 64));
  b.code.set(sha, archive);
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { code_sha256: sha } }));
  w.activity.set("stub-1", 1);
  await w.tick();
  // Which one it tried first is bin-packing's call; from then on, the holder wins.
  const first = a.runs.length === 1 ? a : b;
  w.activity.set("stub-1", 3, 1);
  await w.tick(1000);
  assert.equal(first.runs.length, 4);
  assert.equal(a.runs.length + b.runs.length, 4);
});

test("a code archive the coordinator lacks fails the waiting tasks", async () => {
  const w = world();
  w.addAgent("agent-a", capacity(8, 64));
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { code_sha256: "ab".repeat(32) } }));
  w.activity.set("stub-1", 1);
  await w.tick();
  assert.equal(w.activity.failed[0]?.code, "not_found");
  assert.match(w.activity.failed[0]?.message ?? "", /cannot read the code archive: object abab/);
});

test("GPU placement passes the chosen type and reserves the devices", async () => {
  const w = world();
  const gpus = [0, 1].map((i) => ({ type: "A100", uuid: `GPU-${i}` }));
  const a = w.addAgent("agent-a", capacity(32, 128, gpus));
  w.stubs.set("stub-1", stubRecord("stub-1", { extra: { gpu_types: ["H100", "A100"], gpu_count: 1 } }));
  w.activity.set("stub-1", 3);
  await w.tick();
  assert.equal(a.runs.length, 2, "two GPUs, two containers");
  assert.deepEqual(a.runs[0]?.gpu, { count: 1, types: ["A100"] });
  await w.tick(1000);
  assert.equal(a.runs.length, 2);
  assert.equal(w.activity.failed.length, 0, "full, not impossible");
});

test("containers on a lost agent are forgotten; a returning agent's containers are adopted", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(4, 64));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 2);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 2);
  w.fleet.sweep(w.clock.now + 120_000);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 0);
  // It comes back with both containers still running: adopted, not restarted.
  const back = w.addAgent("agent-a", capacity(4, 64));
  for (const [id, s] of a.containers) back.containers.set(id, s);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-1"), 2);
  assert.equal(back.runs.length, 0);
});

test("stop() stops every container it runs", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.mgr.start();
  w.activity.set("stub-1", 2);
  await w.mgr.settled();
  // The demand change alone triggered the reconcile.
  await new Promise((r) => setImmediate(r));
  await w.mgr.settled();
  assert.equal(a.runs.length, 2);
  await w.mgr.stop();
  assert.equal(a.containers.size, 0);
  assert.equal(a.count("stopContainer"), 2);
  assert.deepEqual(w.mgr.list(), []);
});

test("stop({ stopContainers: false }) leaves them running", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 1);
  await w.tick();
  await w.mgr.stop({ stopContainers: false });
  assert.equal(a.containers.size, 1);
  assert.equal(a.count("stopContainer"), 0);
});

test("an idle warm container of a stub with no tasks gives its room to waiting tasks of another stub", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(2, 64));
  w.stubs.set(
    "stub-1",
    stubRecord("stub-1", { config: { keep_warm_seconds: 300 }, extra: { cpu_millicores: 2000 } }),
  );
  w.stubs.set("stub-2", stubRecord("stub-2", { extra: { cpu_millicores: 2000 } }));
  w.activity.set("stub-1", 1);
  await w.tick();
  const [warm] = w.mgr.list().map((c) => c.id) as [string];
  // Busy: it keeps its room even though stub-2 waits.
  w.activity.activity.set(warm, { busy: true, lastActiveAt: w.clock.now });
  w.activity.set("stub-1", 0, 1);
  w.activity.set("stub-2", 1);
  await w.tick(1000);
  assert.equal(a.count("stopContainer"), 0);
  // Done and idle, well within its keep-warm time: it yields to stub-2.
  w.activity.activity.set(warm, { busy: false, lastActiveAt: w.clock.now });
  w.activity.set("stub-1", 0);
  await w.tick(1000);
  assert.deepEqual(
    a.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1]),
    [warm],
  );
  await w.tick(1000);
  assert.equal(w.mgr.activeContainers("stub-2"), 1);
  assert.equal(w.mgr.activeContainers("stub-1"), 0);
});
