// Image(pool=...) through the coordinator: the build is placed only on that
// pool's agents; a pool no agent is in is refused as unplaceable, naming it
// and the fleet's pools, with nothing held or sent to an agent; a name no
// pool can have is invalid_request.

import assert from "node:assert/strict";
import { test } from "node:test";
import { IMAGE_BUILD_KIND } from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";
import { RecordingAgent, buildsThrough, collect, sqliteStore } from "./builds.ts";

test("Image(pool=...) builds on that pool's agents, or is refused naming the pool", async (t) => {
  const store = await sqliteStore(t);
  const ws = (await store.workspaces.create("pool-builds")).id;
  // The default-pool host is bigger: without a pool the build would go there.
  const fleet = fleetOf([
    ["big", capacity(64, 64)],
    ["builder", capacity(4, 64), { pool: "builders" }],
  ]);
  const planner = new Planner({ fleet });
  const agent = new RecordingAgent();
  const { builds, asked } = buildsThrough(store, planner, agent, { placementWaitMs: 1_000 });

  const ev = await collect(builds.build(ws, { commands: ["true"], pool: "builders" }));
  assert.equal(ev.at(-1)?.type, "image");
  assert.deepEqual(asked, ["builder"]);

  await assert.rejects(collect(builds.build(ws, { commands: ["true"], pool: "gpus" })), (e: unknown) => {
    const err = e as { code?: string; message: string };
    assert.equal(err.code, "unplaceable");
    assert.equal(
      err.message,
      'cannot place the image build: no agent is in pool "gpus" (the fleet has pools: builders, default)',
    );
    return true;
  });
  assert.throws(() => builds.build(ws, { commands: ["true"], pool: "Not A Pool" }), /is not a pool name/);
  assert.equal(agent.calls.length, 1, "only the first build reached an agent");
  assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), []);
});
