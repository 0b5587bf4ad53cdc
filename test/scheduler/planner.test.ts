// The one planner (coordinator/scheduler/planner.ts) and its pure plan
// (plan.ts): reserve/release, workspace usage from one source, no double
// booking between kinds, idle warm containers stopped to make room, limits,
// and the bounded wait.

import assert from "node:assert/strict";
import { test } from "node:test";
import { type ContainerOwner, Planner, planPlacement } from "../../coordinator/scheduler/index.ts";
import type { PlacementRequest } from "../../coordinator/scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity, oneAgentFleet } from "../containers/fakes.ts";

const cpu = (cores: number): PlacementRequest => ({
  cpuMillicores: cores * 1000,
  memoryBytes: 1024 ** 2,
  gpuTypes: [],
  gpuCount: 0,
});

function planner(cores = 4) {
  const fleet = oneAgentFleet("agent-a", capacity(cores, 64));
  return new Planner({ fleet });
}

/** An owner whose idle list the test sets; stop() records and (optionally) releases at once. */
function owner(p: Planner, releaseOnStop = true) {
  const stopped: string[] = [];
  const o: ContainerOwner & { idleIds: string[]; stopped: string[] } = {
    idleIds: [],
    stopped,
    idle: () => o.idleIds.map((id, i) => ({ id, idleSince: i })),
    stop: (ids) => {
      stopped.push(...ids);
      if (releaseOnStop) for (const id of ids) queueMicrotask(() => p.release(id));
    },
  };
  p.addOwner(o);
  return o;
}

test("reserve commits, release frees; usage per workspace counts every kind together", () => {
  const p = planner(4);
  const r1 = p.reserve({
    id: "ctr-1",
    kind: "runner",
    workspaceId: "ws-1",
    stubId: "stub-f",
    placement: cpu(2),
  });
  const r2 = p.reserve({
    id: "ctr-2",
    kind: "sandbox",
    workspaceId: "ws-1",
    stubId: "stub-s",
    placement: cpu(1),
  });
  const r3 = p.reserve({ id: "ctr-3", kind: "pod", workspaceId: "ws-2", placement: cpu(1) });
  assert.ok(r1.ok && r2.ok && r3.ok);
  assert.equal(r1.reservation.agentId, "agent-a");
  assert.deepEqual(r1.stopping, []);
  assert.deepEqual(p.usage("ws-1"), {
    containers: 2,
    cpuMillicores: 3000,
    memoryBytes: 2 * 1024 ** 2,
    gpus: 0,
  });
  assert.equal(p.usage("ws-2").containers, 1);
  assert.deepEqual(
    p
      .list(["sandbox", "pod"])
      .map((h) => h.id)
      .sort(),
    ["ctr-2", "ctr-3"],
  );
  // The agent is full: a runner and a sandbox cannot both take the last core twice.
  const full = p.reserve({ id: "ctr-4", kind: "runner", workspaceId: "ws-1", placement: cpu(1) });
  assert.equal(full.ok, false);
  assert.match(full.ok ? "" : full.reason, /every agent is full for cpu=1/);
  assert.throws(
    () => p.reserve({ id: "ctr-1", kind: "runner", workspaceId: "ws-1", placement: cpu(0) }),
    /already holds/,
  );
  p.release("ctr-2");
  p.release("ctr-2"); // twice is fine
  assert.equal(p.usage("ws-1").containers, 1);
  const again = p.reserve({ id: "ctr-5", kind: "image-build", workspaceId: "ws-1", placement: cpu(1) });
  assert.ok(again.ok, "any kind, image-build included, goes through the same planner");
  assert.equal(p.usage("ws-1").cpuMillicores, 3000);
});

test("adopted containers hold their room; a limit checks every kind of the workspace", () => {
  const p = planner(16);
  p.adopt({
    id: "ctr-old",
    kind: "runner",
    workspaceId: "ws-1",
    agentId: "agent-a",
    cpuMillicores: 2000,
    memoryBytes: 0,
    gpuCount: 0,
  });
  const limits = { maxContainers: null, maxCpuMillicores: 2500, maxMemoryMb: null, maxGpus: null };
  const r = p.reserve({ id: "ctr-s", kind: "sandbox", workspaceId: "ws-1", placement: cpu(1), limits });
  assert.equal(r.ok, false);
  assert.ok(!r.ok && r.limit === "maxCpuMillicores" && !r.permanent);
  const never = p.reserve({ id: "ctr-t", kind: "sandbox", workspaceId: "ws-1", placement: cpu(3), limits });
  assert.ok(!never.ok && never.permanent);
  assert.ok(p.reserve({ id: "ctr-u", kind: "sandbox", workspaceId: "ws-2", placement: cpu(1), limits }).ok);
});

test("the plan stops the fewest idle containers, longest idle first, never the requester's own stub's", () => {
  const fleet = oneAgentFleet("agent-a", capacity(4, 64));
  const held = [
    {
      id: "a",
      kind: "runner",
      workspaceId: "ws-1",
      stubId: "s1",
      agentId: "agent-a",
      cpuMillicores: 1000,
      memoryBytes: 0,
      gpuCount: 0,
    },
    {
      id: "b",
      kind: "runner",
      workspaceId: "ws-1",
      stubId: "s2",
      agentId: "agent-a",
      cpuMillicores: 2000,
      memoryBytes: 0,
      gpuCount: 0,
    },
    {
      id: "c",
      kind: "runner",
      workspaceId: "ws-2",
      stubId: "s3",
      agentId: "agent-a",
      cpuMillicores: 1000,
      memoryBytes: 0,
      gpuCount: 0,
    },
  ];
  const plan = planPlacement({
    agents: fleet.list(),
    held,
    idle: [
      { id: "a", idleSince: 10 },
      { id: "b", idleSince: 20 },
      { id: "c", idleSince: 5 },
    ],
    want: { workspaceId: "ws-9", stubId: "s3", placement: cpu(2) },
  });
  // c is its own stub's; a (longest idle of the rest) frees 1 core, then b: both are needed for 2 cores.
  assert.deepEqual(plan, { ok: true, agentId: "agent-a", stop: ["a", "b"] });
  const none = planPlacement({
    agents: fleet.list(),
    held,
    idle: [],
    want: { workspaceId: "ws-9", placement: cpu(1) },
  });
  assert.ok(!none.ok && /no idle warm container can be stopped/.test(none.reason));
});

test("reserve commits the plan at once, its owner stops the victims, and the room is ready once they are released", async () => {
  const p = planner(4);
  const o = owner(p, false);
  assert.ok(
    p.reserve({ id: "warm-1", kind: "runner", workspaceId: "ws-1", stubId: "f", placement: cpu(2) }).ok,
  );
  assert.ok(
    p.reserve({ id: "warm-2", kind: "runner", workspaceId: "ws-1", stubId: "f", placement: cpu(2) }).ok,
  );
  o.idleIds = ["warm-1", "warm-2"];
  const r = p.reserve({ id: "sb", kind: "sandbox", workspaceId: "ws-2", stubId: "s", placement: cpu(2) });
  assert.ok(r.ok);
  assert.deepEqual(r.stopping, ["warm-1"]);
  assert.deepEqual(o.stopped, ["warm-1"]);
  // A victim being stopped is not picked twice, and no longer counts toward its workspace.
  assert.equal(p.usage("ws-1").containers, 1);
  // The room warm-1 frees is sb's: a second sandbox cannot count on it too (warm-2 alone is not enough then).
  const other = p.reserve({
    id: "sb2",
    kind: "sandbox",
    workspaceId: "ws-2",
    stubId: "s",
    placement: cpu(4),
  });
  assert.equal(other.ok, false);
  assert.deepEqual(o.stopped, ["warm-1"]);
  const one = p.reserve({ id: "sb2", kind: "sandbox", workspaceId: "ws-2", stubId: "s", placement: cpu(2) });
  assert.equal(one.ok, false, "warm-1's room is taken by sb, warm-2 frees only what the agent is over by");
  let ready = false;
  const wait = p.whenReady("sb", 5000).then(() => {
    ready = true;
  });
  await new Promise((r) => setImmediate(r));
  assert.equal(ready, false);
  p.release("warm-1");
  await wait;
  assert.equal(ready, true);
  // Victims that do not stop in time: the wait fails; releasing the reservation lets them make room again.
  p.release("sb");
  const big = p.reserve({ id: "sb4", kind: "sandbox", workspaceId: "ws-2", stubId: "s", placement: cpu(4) });
  assert.ok(big.ok);
  assert.deepEqual(big.stopping, ["warm-2"]);
  await assert.rejects(
    p.whenReady("sb4", 20),
    (e) => e instanceof BerthError && e.code === "resource_exhausted",
  );
  p.release("sb4");
  assert.equal(p.usage("ws-1").containers, 1, "warm-2 counts again");
});

test("reserveWithin waits, names its reason, fails with resource_exhausted at the deadline, and is woken by a release", async () => {
  const p = planner(2);
  assert.ok(p.reserve({ id: "busy", kind: "runner", workspaceId: "ws-1", placement: cpu(2) }).ok);
  const reasons: string[] = [];
  const t0 = Date.now();
  await assert.rejects(
    p.reserveWithin(
      { id: "sb", kind: "sandbox", workspaceId: "ws-1", placement: cpu(2) },
      { waitMs: 150, what: "the sandbox", onWait: (r) => reasons.push(r) },
    ),
    (e: unknown) =>
      e instanceof BerthError &&
      e.code === "resource_exhausted" &&
      /cannot place the sandbox: every agent is full for cpu=2.*agent-a has cpu=0/.test(e.message),
  );
  assert.ok(Date.now() - t0 >= 140);
  assert.equal(reasons.length, 1);
  assert.equal(p.get("sb"), undefined);
  const placed = p.reserveWithin(
    { id: "sb", kind: "sandbox", workspaceId: "ws-1", placement: cpu(2) },
    { waitMs: 10_000, what: "the sandbox", pollMs: 60_000 },
  );
  setTimeout(() => p.release("busy"), 30);
  assert.equal((await placed).agentId, "agent-a");
  // 0 refuses at once.
  await assert.rejects(
    p.reserveWithin(
      { id: "sb3", kind: "sandbox", workspaceId: "ws-1", placement: cpu(1) },
      { waitMs: 0, what: "the pod" },
    ),
    /cannot place the pod/,
  );
});
