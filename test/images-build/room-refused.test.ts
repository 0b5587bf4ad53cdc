// A build an agent refuses for room before it begins (this coordinator's view
// of the host was stale: runners started through other coordinators took the
// room since its last heartbeat) is placed again within the build's wait and
// completes, instead of failing the deploy; a refusal that lasts past the
// wait fails with the agent's own reason; a build that fails after it began
// is not run again. The agent is scripted; the planner and store are real.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { ImageBuilds } from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { Store } from "../../coordinator/records.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";
import { tempDir } from "../helpers/env.ts";

const NO_ROOM = "asked for 1 core, 2 GiB (0 cores free)";

/** Refuses the first `refusals` builds for room, then builds; `failAfterBase` fails a build once it began. */
class BusyAgent implements ImageBuildApi {
  calls = 0;
  constructor(
    private readonly refusals: number,
    private readonly failAfterBase = false,
  ) {}
  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    this.calls++;
    if (this.calls <= this.refusals) throw new BerthError("resource_exhausted", NO_ROOM);
    const imageId = `img-${"d".repeat(24)}`;
    yield { type: "base", imageId, ref: "default", digest: "sha256:base" };
    if (this.failAfterBase) throw new BerthError("resource_exhausted", "step 1: the disk is full");
    yield {
      type: "done",
      imageId,
      ref: "r",
      digest: "sha256:d",
      cachedSteps: 0,
      builtSteps: req.steps.length,
    };
  }
}

async function setup(t: test.TestContext, agent: BusyAgent, placementWaitMs: number) {
  const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
  t.after(() => store.close());
  const ws = (await store.workspaces.create("images")).id;
  const planner = new Planner({ fleet: fleetOf([["agent-a", capacity(4, 16)]]) });
  const builds = new ImageBuilds({
    repo: store.builtImages,
    planner,
    agents: { client: () => agent },
    placementWaitMs,
  });
  const drain = async () => {
    const types: string[] = [];
    for await (const u of builds.build(ws, { commands: ["echo hi"] })) types.push(u.type);
    return types;
  };
  return { store, ws, planner, drain };
}

test("a build refused for room before it began is placed again and completes", async (t) => {
  const agent = new BusyAgent(2);
  const { store, ws, planner, drain } = await setup(t, agent, 30_000);
  const types = await drain();
  assert.equal(agent.calls, 3, "asked twice more after two refusals");
  assert.ok(types.includes("image"), `the build answered its image: ${types}`);
  const [rec] = await store.builtImages.list(ws);
  assert.equal(rec?.status, "ready");
  assert.equal(planner.list().length, 0, "every attempt's room was given back");
});

test("a refusal that outlasts the wait fails with the agent's reason; one after the build began is not retried", async (t) => {
  const busy = new BusyAgent(1000);
  const a = await setup(t, busy, 1500);
  await assert.rejects(
    a.drain(),
    (e: unknown) => e instanceof BerthError && e.code === "resource_exhausted" && e.message === NO_ROOM,
  );
  assert.ok(busy.calls >= 1 && busy.calls <= 3, `asked within the wait only (${busy.calls})`);
  assert.equal(a.planner.list().length, 0);

  const broken = new BusyAgent(0, true);
  const b = await setup(t, broken, 30_000);
  await assert.rejects(b.drain(), /the disk is full/);
  assert.equal(broken.calls, 1, "a build that began is not run again");
  const [rec] = await b.store.builtImages.list(b.ws);
  assert.equal(rec?.status, "failed");
});
