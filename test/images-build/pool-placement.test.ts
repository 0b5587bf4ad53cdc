// Image(pool=...) through the coordinator: the build is placed only on that
// pool's agents; a pool no agent is in is refused as unplaceable, naming it
// and the fleet's pools, with nothing held or sent to an agent; a name no
// pool can have is invalid_request.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { IMAGE_BUILD_KIND, ImageBuilds, type ImageBuildUpdate } from "../../coordinator/images/index.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { Store } from "../../coordinator/records.ts";
import { capacity } from "../containers/fakes.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

class RecordingAgent implements ImageBuildApi {
  readonly calls: BuildImageRequest[] = [];
  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    this.calls.push(req);
    const imageId = `img-${"c".repeat(24)}`;
    yield { type: "base", imageId, ref: "default", digest: "sha256:base" };
    yield { type: "step", index: 1, total: 1, name: req.steps[0]?.name ?? "", cached: false };
    yield { type: "step_done", index: 1, cached: false, seconds: 0.1, digest: "sha256:1" };
    yield { type: "done", imageId, ref: "localhost/x:y", digest: "sha256:y", cachedSteps: 0, builtSteps: 1 };
  }
}

async function collect(it: AsyncIterable<ImageBuildUpdate>): Promise<ImageBuildUpdate[]> {
  const out: ImageBuildUpdate[] = [];
  for await (const u of it) out.push(u);
  return out;
}

test("Image(pool=...) builds on that pool's agents, or is refused naming the pool", async (t) => {
  const sqlite = STORE_ENGINES.find((e) => e.name === "sqlite")!;
  const store = await Store.open(await sqlite.url(t));
  t.after(() => store.close());
  const ws = (await store.workspaces.create("pool-builds")).id;
  const fleet = new FleetView();
  const now = Date.now();
  // The default-pool host is bigger: without a pool the build would go there.
  for (const [agentId, cores, pool] of [
    ["big", 64, undefined],
    ["builder", 4, "builders"],
  ] as const)
    fleet.observe(
      {
        agentId,
        hostname: agentId,
        version: "t",
        sentAt: now,
        intervalMs: 600_000,
        grpcAddress: "127.0.0.1:1",
        ...(pool ? { pool } : {}),
        capacity: capacity(cores, 64),
      },
      now,
    );
  const planner = new Planner({ fleet });
  const agent = new RecordingAgent();
  const asked: string[] = [];
  const builds = new ImageBuilds({
    repo: store.builtImages,
    planner,
    agents: {
      client: (id) => {
        asked.push(id);
        return agent;
      },
    },
    placementWaitMs: 1_000,
  });

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
