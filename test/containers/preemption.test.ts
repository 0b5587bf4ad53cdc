// Preemption through the container manager, on fake agents: a stub of a
// higher priority whose tasks find the host full preempts the running
// container of a `preemptible` stub of a lower priority (its tasks requeued
// as preempted, then SIGTERM and the stop grace), and starts in its room;
// containers of stubs that are not preemptible, or of the same priority,
// are never touched.

import assert from "node:assert/strict";
import { test } from "node:test";
import { capacity, stubRecord, world } from "./fakes.ts";

test("a high-priority stub preempts the preemptible container on a full host and runs in its room", async () => {
  const w = world({ stopGraceMs: 7_000 });
  const a = w.addAgent("agent-a", capacity(8, 64));
  const fourCores = (id: string, extra: { priority?: number; preemptible?: boolean } = {}) =>
    stubRecord(id, { extra: { cpu_millicores: 4000, ...extra } });
  w.stubs.set("batch", fourCores("batch", { preemptible: true }));
  w.stubs.set("steady", fourCores("steady"));
  w.activity.set("batch", 0, 1);
  w.activity.set("steady", 0, 1);
  await w.tick();
  const idOf = (stubId: string) => w.mgr.list().find((c) => c.stubId === stubId)?.id;
  const batch = idOf("batch");
  const steady = idOf("steady");
  assert.ok(batch && steady);
  for (const id of [batch, steady]) w.activity.activity.set(id, { busy: true, lastActiveAt: w.clock.now });

  // The same priority as the batch work (0): it waits, nothing is preempted.
  w.stubs.set("even", fourCores("even"));
  w.activity.set("even", 1);
  await w.tick(1000);
  assert.deepEqual(a.stops, []);
  assert.equal(w.mgr.activeContainers("even"), 0);
  w.activity.set("even", 0);

  // Priority 10: the batch container is preempted, the steady one left alone.
  w.stubs.set("urgent", fourCores("urgent", { priority: 10 }));
  w.activity.set("urgent", 1);
  await w.tick(1000);
  assert.deepEqual(a.stops, [batch]);
  assert.deepEqual(a.lastCall("stopContainer"), [batch, { graceMs: 7_000, remove: true }]);
  assert.equal(w.activity.preempted.length, 1);
  assert.equal(w.activity.preempted[0]?.containerId, batch);
  assert.match(
    w.activity.preempted[0]?.message ?? "",
    /preempted on agent-a for runner ctr-\w+ \(priority 10\)/,
  );
  await w.tick(1000);
  assert.equal(w.mgr.activeContainers("urgent"), 1);
  assert.equal(w.mgr.activeContainers("steady"), 1);
  assert.equal(w.mgr.activeContainers("batch"), 0);

  // Another urgent container finds no preemptible work left: it waits; steady is never touched.
  w.activity.set("urgent", 1, 1);
  w.stubs.set("urgent", fourCores("urgent", { priority: 10 }));
  w.activity.set("urgent-2", 0);
  w.stubs.set("urgent-2", fourCores("urgent-2", { priority: 1000 }));
  w.activity.set("urgent-2", 1);
  await w.tick(1000);
  assert.deepEqual(a.stops, [batch]);
  assert.equal(w.mgr.activeContainers("steady"), 1);
  assert.equal(w.mgr.activeContainers("urgent-2"), 0);
});

test("of two waiting stubs, the higher priority takes the room first", async () => {
  const w = world();
  w.addAgent("agent-a", capacity(4, 64));
  w.stubs.set("low", stubRecord("low", { extra: { cpu_millicores: 4000 } }));
  w.stubs.set("high", stubRecord("high", { extra: { cpu_millicores: 4000, priority: 5 } }));
  // "low" waits first, and is not preemptible: "high" gets the room by order, not by preemption.
  w.activity.set("low", 1);
  w.activity.set("high", 1);
  await w.tick();
  assert.equal(w.mgr.activeContainers("high"), 1);
  assert.equal(w.mgr.activeContainers("low"), 0);
});
