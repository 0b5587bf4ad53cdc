// The sandbox reconciler for agents that are gone (docs/reliability.md,
// "Stuck work: sandboxes"): a sandbox whose agent is lost, has left, or was
// never heard from since the coordinator started ends within the bound, with
// why; before the bound it is left alone; an agent that comes back has the
// container removed. A real SQLite store and FleetView, fake agents.

import assert from "node:assert/strict";
import { test } from "node:test";
import { BerthError } from "../../shared/errors.ts";
import { goneAgentReason } from "../../coordinator/sandboxes/upkeep.ts";
import { capacity } from "../containers/fakes.ts";
import { type SandboxWorld, sandboxWorld } from "./fakes.ts";

/** A heartbeat from `id`, seen at the world's clock (addAgent's is by the wall clock). */
function heartbeat(w: SandboxWorld, id: string): void {
  w.fleet.observe(
    {
      agentId: id,
      hostname: id,
      version: "t",
      sentAt: w.clock.now,
      intervalMs: 600_000,
      grpcAddress: "127.0.0.1:1",
      capacity: capacity(4, 8),
    },
    w.clock.now,
  );
}

test("a sandbox on an agent that left ends after the bound, without the agent; its return removes the container", async (t) => {
  const w = await sandboxWorld(t, { lostAgentAfterMs: 60_000 });
  const a = w.addAgent("agent-a");
  heartbeat(w, "agent-a");
  const v = await w.svc.create(w.ws, (await w.stub("sb", "sandbox")).id);
  w.fleet.leave("agent-a");
  // The agent no longer answers: a call to it would fail the sweep if it were made.
  w.agents.delete("agent-a");

  w.clock.now += 30_000;
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, v.sandboxId)).status, "running", "within the bound it may come back");

  w.clock.now += 31_000;
  await w.svc.sweep();
  const ended = await w.svc.get(w.ws, v.sandboxId);
  assert.equal(ended.status, "terminated");
  assert.equal(ended.terminatedReason, "its agent agent-a left and has been silent for 61 s");
  await assert.rejects(
    w.svc.exec(w.ws, v.sandboxId, { args: ["true"] }),
    (e: unknown) => e instanceof BerthError && e.code === "sandbox_terminated",
  );

  // It comes back, its container still running: the next look at it removes the container.
  w.agents.set("agent-a", a);
  heartbeat(w, "agent-a");
  assert.ok(a.containers.has(v.sandboxId));
  await w.svc.sweep();
  assert.equal(a.containers.has(v.sandboxId), false);
  assert.equal((await w.svc.get(w.ws, v.sandboxId)).terminatedReason, ended.terminatedReason, "ended once");
});

test("a sandbox on an agent never heard from since the coordinator started ends after the bound", async (t) => {
  const w = await sandboxWorld(t, { lostAgentAfterMs: 60_000 });
  const stub = await w.stub("sb", "sandbox");
  // A record from before a coordinator restart, on an agent that never reports again.
  await w.store.sandboxes.insert({
    id: "ctr-orphaned",
    workspaceId: w.ws,
    stubId: stub.id,
    agentId: "agent-gone",
    kind: "sandbox",
    ttlSeconds: -1,
    ports: [],
    egress: { mode: "open" },
    imageId: null,
    at: new Date(w.clock.now - 3_600_000).toISOString(),
  });
  await w.store.sandboxes.markRunning("ctr-orphaned");
  await w.svc.sweep();
  assert.equal((await w.svc.get(w.ws, "ctr-orphaned")).status, "running");
  w.clock.now += 61_000;
  await w.svc.sweep();
  const v = await w.svc.get(w.ws, "ctr-orphaned");
  assert.equal(v.status, "terminated");
  assert.equal(v.terminatedReason, "its agent agent-gone was not heard from in 61 s");
});

test("goneAgentReason: ready agents and agents within the bound are left alone", () => {
  const o = { now: 100_000, startedAt: 0, afterMs: 60_000 };
  assert.equal(goneAgentReason("a", { state: "ready", lastSeen: 0 }, o), undefined);
  assert.equal(goneAgentReason("a", { state: "lost", lastSeen: 40_000 }, o), undefined);
  assert.equal(
    goneAgentReason("a", { state: "lost", lastSeen: 39_000 }, o),
    "its agent a is lost and has been silent for 61 s",
  );
  assert.equal(goneAgentReason("a", undefined, { ...o, startedAt: 50_000 }), undefined);
});
