// The container manager's second look at each agent (fleet-sync.ts verify,
// docs/reliability.md "Stuck work: runner containers"): a runner container
// the table holds that vanished from its agent, or stopped there with no exit
// event seen, is forgotten within VERIFY_EVERY_MS and its stub's waiting
// tasks get a new container; one the agent still runs is kept.

import assert from "node:assert/strict";
import { test } from "node:test";
import { VERIFY_EVERY_MS } from "../../coordinator/containers/fleet-sync.ts";
import { capacity, stubRecord, world } from "./fakes.ts";

test("a runner container that vanished, or stopped unseen, is forgotten and replaced; a live one is kept", async () => {
  const w = world();
  const a = w.addAgent("agent-a", capacity(16, 64));
  /** The agent keeps reporting in as the test's clock moves. */
  const advance = async (ms: number) => {
    w.clock.now += ms;
    const hb = w.fleet.get("agent-a")?.heartbeat;
    assert.ok(hb);
    w.fleet.observe(hb, w.clock.now);
    await w.tick();
    await w.tick();
  };
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 2);
  await advance(0);
  const first = w.mgr.containersOf("stub-1").map((c) => c.id);
  assert.equal(first.length, 2);
  const [kept, lost] = first as [string, string];

  // Vanished from the agent with no event: within the interval the table still trusts it.
  a.containers.delete(lost);
  await advance(1000);
  assert.deepEqual(
    w.mgr
      .containersOf("stub-1")
      .map((c) => c.id)
      .sort(),
    [...first].sort(),
  );

  await advance(VERIFY_EVERY_MS);
  const second = w.mgr.containersOf("stub-1").map((c) => c.id);
  assert.ok(second.includes(kept), "the container the agent still runs is kept");
  assert.ok(!second.includes(lost), "the vanished container is forgotten");
  assert.equal(second.length, 2, "the waiting task got a new container");

  // Stopped on the agent, its exit event missed: handled as its exit (removed there too).
  const stopped = a.containers.get(kept);
  assert.ok(stopped);
  stopped.state = "stopped";
  stopped.exitCode = 137;
  await advance(VERIFY_EVERY_MS + 1);
  const third = w.mgr.containersOf("stub-1").map((c) => c.id);
  assert.ok(!third.includes(kept));
  assert.equal(third.length, 2);
  assert.equal(a.containers.has(kept), false, "the stopped container was removed on its agent");
});
