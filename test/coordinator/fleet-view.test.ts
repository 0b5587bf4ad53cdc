import assert from "node:assert/strict";
import { test } from "node:test";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import type { Heartbeat } from "../../shared/fleet.ts";

const hb = (agentId: string, intervalMs = 2000): Heartbeat => ({
  agentId,
  hostname: agentId,
  version: "t",
  sentAt: 0,
  intervalMs,
  grpcAddress: "127.0.0.1:1",
  capacity: {
    cpuCores: 1,
    memoryBytes: 1,
    disk: { path: "/", totalBytes: 1, freeBytes: 1 },
    gpus: { available: false, toolkit: false, devices: [] },
  },
});

test("first heartbeat makes an agent ready; repeated ones change nothing", () => {
  const v = new FleetView();
  assert.deepEqual(v.observe(hb("a"), 0), { agentId: "a", from: "unknown", to: "ready" });
  assert.equal(v.observe(hb("a"), 1000), undefined);
  assert.equal(v.ready().length, 1);
});

test("an agent is lost after missing 3 heartbeats (floor 5 s), and ready again when it returns", () => {
  const v = new FleetView({ missedHeartbeats: 3, minLostAfterMs: 5000 });
  v.observe(hb("a", 2000), 0);
  assert.deepEqual(v.sweep(6000), []);
  assert.deepEqual(v.sweep(6001), [{ agentId: "a", from: "ready", to: "lost" }]);
  assert.deepEqual(v.sweep(7000), [], "reported once");
  assert.deepEqual(v.observe(hb("a", 2000), 8000), { agentId: "a", from: "lost", to: "ready" });
  v.observe(hb("b", 100), 0);
  assert.deepEqual(v.sweep(4000), []);
  assert.deepEqual(
    v.sweep(5001).map((c) => c.agentId),
    ["b"],
    "short intervals use the floor",
  );
});

test("goodbye marks an agent left, and sweep leaves it alone", () => {
  const v = new FleetView();
  v.observe(hb("a"), 0);
  assert.deepEqual(v.leave("a"), { agentId: "a", from: "ready", to: "left" });
  assert.equal(v.leave("a"), undefined);
  assert.deepEqual(v.sweep(1e9), []);
  assert.equal(v.leave("ghost"), undefined);
});
