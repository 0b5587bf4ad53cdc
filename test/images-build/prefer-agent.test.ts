// A rebuild of a definition an agent built before is placed on that agent (its step cache holds
// every step), where the planner alone would pick another host; a new definition is placed as
// the planner likes. The agent is scripted; the planner and the store (SQLite) are real.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { ImageBuilds } from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { Store } from "../../coordinator/records.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";
import { tempDir } from "../helpers/env.ts";

class QuickAgent implements ImageBuildApi {
  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    const imageId = `img-${"b".repeat(24)}`;
    yield { type: "base", imageId, ref: "default", digest: "sha256:base" };
    yield {
      type: "done",
      imageId,
      ref: "r",
      digest: "sha256:d",
      cachedSteps: req.steps.length,
      builtSteps: 0,
    };
  }
}

test("a rebuild goes to the agent that built the same steps; a new definition where the planner likes", async (t) => {
  const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
  t.after(() => store.close());
  const ws = (await store.workspaces.create("images")).id;
  const fleet = fleetOf([
    ["agent-a", capacity(2, 8)],
    ["agent-b", capacity(16, 64)],
  ]);
  const asked: string[] = [];
  const builds = new ImageBuilds({
    repo: store.builtImages,
    planner: new Planner({ fleet }),
    agents: {
      client: (id) => {
        asked.push(id);
        return new QuickAgent();
      },
    },
  });
  const drain = async (commands: string[]) => {
    for await (const _ of builds.build(ws, { commands })) void _;
  };

  // Where the planner puts a build with no history.
  await drain(["echo first"]);
  const plannersChoice = asked[0];
  const other = plannersChoice === "agent-a" ? "agent-b" : "agent-a";
  // The same definition, as recorded built by the other agent.
  const [rec] = await store.builtImages.list(ws);
  assert.ok(rec);
  await store.builtImages.put({ ...rec, imageId: `img-${"c".repeat(24)}`, agentId: other });
  await store.builtImages.delete(ws, rec.imageId);
  asked.length = 0;
  await drain(["echo first"]);
  assert.deepEqual(asked, [other], "the rebuild goes where its steps were built");
  asked.length = 0;
  await drain(["echo something else"]);
  assert.deepEqual(asked, [plannersChoice], "a new definition is placed as the planner likes");
});
