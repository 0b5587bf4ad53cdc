// Sandboxes and runner containers through the one planner: a sandbox takes
// the room of idle warm function containers (they are stopped), waits while
// busy ones hold the host and fails with the reason at the deadline, and is
// placed when room is released before it. Real container manager and
// sandbox service over fake agents, sharing one fleet and one planner.

import assert from "node:assert/strict";
import { test } from "node:test";
import { BerthError } from "../../shared/errors.ts";
import type { SandboxServiceOptions } from "../../coordinator/sandboxes/types.ts";
import { capacity, stubRecord, world } from "../containers/fakes.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { sandboxWorld } from "./fakes.ts";

/** A host of 4 cores filled by two 2-core containers of a function with keep_warm_seconds 300. */
async function fullHost(
  t: { after: (fn: () => unknown) => void },
  over: Partial<SandboxServiceOptions> = {},
) {
  const cw = world();
  const runners = cw.addAgent("agent-a", capacity(4, 64));
  cw.stubs.set(
    "stub-fn",
    stubRecord("stub-fn", { config: { keep_warm_seconds: 300 }, extra: { cpu_millicores: 2000 } }),
  );
  cw.activity.set("stub-fn", 2);
  await cw.tick();
  assert.equal(cw.mgr.activeContainers("stub-fn"), 2);
  const sw = await sandboxWorld(t, { fleet: cw.fleet, planner: cw.planner, ...over });
  const sbAgent = new FakeContainerApi({ agentId: "agent-a", servesExposePort: false });
  sw.agents.set("agent-a", sbAgent);
  t.after(() => cw.mgr.stop({ stopContainers: false }));
  const stub = await sw.stub("sb", "sandbox", { cpu_millicores: 2000 });
  return { cw, runners, sw, sbAgent, stub };
}

test("a sandbox created while idle warm function containers fill the host starts, and one of them is stopped for it", async (t) => {
  const { cw, runners, sw, stub } = await fullHost(t);
  const [older, newer] = cw.mgr.containersOf("stub-fn").map((c) => c.id) as [string, string];
  // Their tasks are done: idle, kept only by keep_warm_seconds; the older went idle first.
  cw.activity.set("stub-fn", 0);
  cw.clock.now += 10_000;
  cw.activity.activity.set(older, { busy: false, lastActiveAt: cw.clock.now - 5000 });
  cw.activity.activity.set(newer, { busy: false, lastActiveAt: cw.clock.now - 1000 });
  await cw.tick(1000);
  assert.equal(cw.mgr.activeContainers("stub-fn"), 2, "still warm");
  const v = await sw.svc.create(sw.ws, stub.id);
  assert.equal(v.status, "running");
  assert.equal(v.agentId, "agent-a");
  assert.deepEqual(
    runners.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1]),
    [older],
    "the longest idle container gave its room up, and only as much as was needed",
  );
  await cw.tick();
  assert.deepEqual(
    cw.mgr.containersOf("stub-fn").map((c) => c.id),
    [newer],
  );
  assert.deepEqual(
    sw.svc.reservations().map((r) => [r.agentId, r.cpuMillicores]),
    [["agent-a", 2000]],
  );
  assert.equal(
    cw.planner.usage("ws-1").cpuMillicores,
    2000,
    "the function's workspace holds one container now",
  );
});

test("with the host busy (tasks in flight) a sandbox waits, says why, then fails with resource_exhausted and the reason", async (t) => {
  const waits: { reason: string; waitMs: number }[] = [];
  const { cw, runners, sw, sbAgent, stub } = await fullHost(t, {
    placementWaitMs: 300,
    onWaiting: (w) => waits.push(w),
  });
  for (const c of cw.mgr.containersOf("stub-fn"))
    cw.activity.activity.set(c.id, { busy: true, lastActiveAt: cw.clock.now });
  cw.activity.set("stub-fn", 0, 2);
  const t0 = Date.now();
  await assert.rejects(sw.svc.create(sw.ws, stub.id), (e: unknown) => {
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "resource_exhausted");
    assert.match(e.message, /cannot place the sandbox: every agent is full for cpu=2 .*agent-a has cpu=0/);
    assert.match(e.message, /no idle warm container can be stopped/);
    assert.match(e.message, /waited 0 s for room|waited \d+ s for room/);
    return true;
  });
  assert.ok(Date.now() - t0 >= 280, "it waited for placementWaitMs");
  assert.equal(waits.length, 1);
  assert.match(waits[0]?.reason ?? "", /every agent is full/);
  assert.equal(waits[0]?.waitMs, 300);
  assert.equal(runners.count("stopContainer"), 0, "busy containers keep their room");
  assert.equal(sbAgent.runs.length, 0);
  assert.deepEqual(sw.svc.reservations(), []);
  assert.equal(await sw.store.sandboxes.list(sw.ws).then((l) => l.length), 0, "nothing recorded");
});

test("a waiting sandbox is placed when a container's exit releases room before the deadline", async (t) => {
  let waiting!: () => void;
  const waited = new Promise<void>((r) => {
    waiting = r;
  });
  const { cw, sw, stub } = await fullHost(t, { placementWaitMs: 10_000, onWaiting: () => waiting() });
  const [first, second] = cw.mgr.containersOf("stub-fn").map((c) => c.id) as [string, string];
  for (const id of [first, second]) cw.activity.activity.set(id, { busy: true, lastActiveAt: cw.clock.now });
  cw.activity.set("stub-fn", 0, 2);
  cw.mgr.start(); // it hears exit events from now on
  const created = sw.svc.create(sw.ws, stub.id);
  await waited;
  // One task ends and its container exits (it was the last of its kind of work): the room is the sandbox's.
  cw.activity.set("stub-fn", 0, 1);
  cw.emit({ type: "exit", agentId: "agent-a", containerId: first, exitCode: 0 });
  const v = await created;
  assert.equal(v.status, "running");
  assert.equal(v.agentId, "agent-a");
  assert.deepEqual(
    cw.mgr.containersOf("stub-fn").map((c) => c.id),
    [second],
  );
});
