// build_with_gpu through the coordinator: the build is placed by the real
// planner (reservation kind image-build) on the host that has the GPU type,
// holds that GPU while it runs, and tells the agent the type chosen; with no
// host of that type it is refused as unplaceable, naming the type, and
// nothing is held or sent to an agent.

import assert from "node:assert/strict";
import { test } from "node:test";
import { IMAGE_BUILD_KIND } from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";
import { RecordingAgent, buildsThrough, collect, sqliteStore } from "./builds.ts";

test("build_with_gpu is placed on a host with that GPU type, or refused as unplaceable", async (t) => {
  const store = await sqliteStore(t);
  const ws = (await store.workspaces.create("gpu-builds")).id;
  // The CPU host is bigger, so a build without a GPU would go there first.
  const fleet = fleetOf([
    ["cpu-host", capacity(64, 256)],
    ["gpu-host", capacity(8, 64, [{ type: "H100", uuid: "GPU-h100-0" }])],
  ]);
  const planner = new Planner({ fleet });
  const heldDuring: unknown[] = [];
  const agent = new RecordingAgent(() =>
    heldDuring.push(...planner.list([IMAGE_BUILD_KIND]).map((h) => [h.agentId, h.gpuCount, h.gpuType])),
  );
  const { builds, asked } = buildsThrough(store, planner, agent, { placementWaitMs: 1_000 });

  await t.test("placed on the H100 host, holding its GPU while it builds", async () => {
    const ev = await collect(builds.build(ws, { commands: ["nvidia-smi"], build_with_gpu: "H100" }));
    assert.equal(ev.at(-1)?.type, "image");
    assert.deepEqual(asked, ["gpu-host"]);
    assert.deepEqual(heldDuring, [["gpu-host", 1, "H100"]]);
    assert.deepEqual(
      agent.calls[0]?.gpu,
      { count: 1, types: ["H100"] },
      "the agent's steps ask for that GPU",
    );
    assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), [], "released at the end");
  });

  await t.test("no host has an A10G: unplaceable, naming it; nothing held or built", async () => {
    await assert.rejects(
      collect(builds.build(ws, { commands: ["nvidia-smi"], build_with_gpu: "A10G" })),
      (e: unknown) => {
        const err = e as { code?: string; message: string };
        assert.equal(err.code, "unplaceable");
        assert.match(err.message, /cannot place the image build/);
        assert.match(err.message, /A10G/);
        return true;
      },
    );
    assert.equal(agent.calls.length, 1, "no agent was asked to build");
    assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), []);
  });
});
