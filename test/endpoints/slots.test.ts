// EndpointSlots.take (the no-wait path each endpoint request tries first)
// against acquire(): same bookkeeping, FIFO kept, never past capacity.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { EndpointSlots, SlotWaitEnded } from "../../coordinator/endpoints/slots.ts";
import type { StubRecord } from "../../coordinator/tasks/stub-store.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { FakeContainers } from "./harness.ts";

const stub = (maxPending: number, concurrent: number): StubRecord => ({
  id: "stub-1",
  workspaceId: "ws-1",
  name: "hello",
  type: "endpoint/deployment",
  config: stubConfig({ max_pending_tasks: maxPending }),
  extra: stubExtra({ concurrent_requests: concurrent }),
  configVersion: 1,
  objectId: null,
  createdAt: "2026-11-26T00:00:00.000Z",
  updatedAt: "2026-11-26T00:00:00.000Z",
});

describe("EndpointSlots.take", () => {
  test("a free slot is taken at once, counted in flight, and given back by release", () => {
    const containers = new FakeContainers();
    const slots = new EndpointSlots(containers);
    const s = stub(10, 2);
    containers.set(s.id, [{ id: "ctr-a", agentId: "agent-1", state: "running" }]);
    assert.ok(slots.admit(s));
    assert.deepEqual(slots.take(s, { expiresAt: null }), { containerId: "ctr-a", agentId: "agent-1" });
    assert.ok(slots.admit(s));
    assert.ok(slots.take(s, { expiresAt: null }));
    assert.equal(slots.inFlightOn("ctr-a"), 2);
    assert.ok(slots.admit(s));
    assert.equal(slots.take(s, { expiresAt: null }), undefined, "the container is full");
    slots.release(s.id, { containerId: "ctr-a", agentId: "agent-1" });
    assert.equal(slots.inFlightOn("ctr-a"), 1);
    slots.close();
  });

  test("never jumps the queue: with a request waiting, take gives nothing and acquire serves in order", async () => {
    const containers = new FakeContainers();
    const slots = new EndpointSlots(containers);
    const s = stub(10, 1);
    assert.ok(slots.admit(s));
    const first = slots.acquire(s, { expiresAt: null });
    assert.equal(slots.waitingFor(s.id), 1);
    containers.set(s.id, [{ id: "ctr-a", agentId: "agent-1", state: "starting" }]);
    assert.ok(slots.admit(s));
    assert.equal(slots.take(s, { expiresAt: null }), undefined, "nothing runs yet");
    const second = slots.acquire(s, { expiresAt: null });
    containers.set(s.id, [{ id: "ctr-a", agentId: "agent-1", state: "running" }]);
    assert.equal((await first).containerId, "ctr-a");
    assert.equal(slots.waitingFor(s.id), 1, "the second still waits: one slot");
    slots.release(s.id, { containerId: "ctr-a", agentId: "agent-1" });
    assert.equal((await second).containerId, "ctr-a");
    slots.close();
  });

  test("admitted requests served by take count against max_pending_tasks only until taken", () => {
    const containers = new FakeContainers();
    const slots = new EndpointSlots(containers);
    const s = stub(1, 1);
    containers.set(s.id, [{ id: "ctr-a", agentId: "agent-1", state: "running" }]);
    assert.ok(slots.admit(s));
    assert.ok(slots.take(s, { expiresAt: null }));
    // The one pending place is free again; the container is full, so one more may wait, not two.
    assert.ok(slots.admit(s));
    assert.equal(slots.admit(s), false, "max_pending_tasks=1 already waits");
    slots.close();
  });

  test("an expired or aborted request takes nothing; acquire then says why", async () => {
    const containers = new FakeContainers();
    const slots = new EndpointSlots(containers, () => 1000);
    const s = stub(10, 4);
    containers.set(s.id, [{ id: "ctr-a", agentId: "agent-1", state: "running" }]);
    assert.ok(slots.admit(s));
    assert.equal(slots.take(s, { expiresAt: 1000 }), undefined);
    await assert.rejects(
      slots.acquire(s, { expiresAt: 1000 }),
      (e) => e instanceof SlotWaitEnded && e.why === "expired",
    );
    const c = new AbortController();
    c.abort();
    assert.ok(slots.admit(s));
    assert.equal(slots.take(s, { expiresAt: null, signal: c.signal }), undefined);
    await assert.rejects(
      slots.acquire(s, { expiresAt: null, signal: c.signal }),
      (e) => e instanceof SlotWaitEnded && e.why === "aborted",
    );
    assert.equal(slots.inFlightOn("ctr-a"), 0);
    slots.close();
  });

  test("avoid and prefer are kept: an avoided container is never taken, a preferred one with room is", () => {
    const containers = new FakeContainers();
    const slots = new EndpointSlots(containers);
    const s = stub(10, 4);
    containers.set(s.id, [
      { id: "ctr-a", agentId: "agent-1", state: "running" },
      { id: "ctr-b", agentId: "agent-1", state: "running" },
    ]);
    assert.ok(slots.admit(s));
    assert.equal(slots.take(s, { expiresAt: null, avoid: new Set(["ctr-a", "ctr-b"]) }), undefined);
    assert.equal(slots.take(s, { expiresAt: null, avoid: new Set(["ctr-a"]) })?.containerId, "ctr-b");
    assert.ok(slots.admit(s));
    assert.equal(slots.take(s, { expiresAt: null, prefer: "ctr-b" })?.containerId, "ctr-b");
    slots.close();
  });
});
