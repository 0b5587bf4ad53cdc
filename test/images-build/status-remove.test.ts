// Image status as workspace events and `berth image rm` (coordinator/images):
// each status a record takes (building, then ready or failed) reaches
// imageEvents as image.building / image.ready / image.failed of that
// workspace; remove() deletes a ready or failed record, answers not_found for
// another workspace's image, and refuses with conflict while an active
// deployment's stub runs the image or while it builds. Real planner and store
// (SQLite and PostgreSQL); the agent is scripted.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { imageEvents } from "../../coordinator/images/index.ts";
import type { EventType } from "../../coordinator/events/types.ts";
import { deploymentsUsingImage, ImageBuilds, type ImageBuildUpdate } from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity, oneAgentFleet } from "../containers/fakes.ts";
import { openSuiteStore, STORE_ENGINES } from "../helpers/engines.ts";
import { waitUntil } from "../helpers/wait.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

/** Builds whose image id and ref follow the first step's name; a step named "fail" fails; `gate` holds the steps. */
class ScriptedAgent implements ImageBuildApi {
  gate: Promise<void> = Promise.resolve();

  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    const name = req.steps[0]?.name ?? "none";
    const imageId = `img-${name.replace(/\W/g, "")}`;
    yield { type: "base", imageId, ref: "default", digest: "sha256:base" };
    await this.gate;
    if (name === "fail")
      throw new BerthError("image_build_failed", "build step 1/1 (fail) exited with code 1");
    yield { type: "step", index: 1, total: 1, name, cached: false };
    yield { type: "step_done", index: 1, cached: false, seconds: 0.1, digest: "sha256:layer" };
    const ref = `localhost/berth-build-cache:${imageId}`;
    yield { type: "done", imageId, ref, digest: "sha256:final", cachedSteps: 0, builtSteps: 1 };
  }
}

async function drain(it: AsyncIterable<ImageBuildUpdate>): Promise<void> {
  for await (const _ of it);
}

for (const engine of STORE_ENGINES) {
  describe(`image status events and removal (${engine.name})`, async () => {
    const store = await openSuiteStore(engine);
    const ws = (await store.workspaces.create("images-a")).id;
    const otherWs = (await store.workspaces.create("images-b")).id;
    const events: { ws: string; type: EventType; subject: string; data: Record<string, unknown> }[] = [];
    const agent = new ScriptedAgent();
    const builds = new ImageBuilds({
      repo: store.builtImages,
      planner: new Planner({ fleet: oneAgentFleet("agent-a", capacity(4, 64)) }),
      agents: { client: () => agent },
      onStatus: imageEvents((w, type, subject, data) => events.push({ ws: w, type, subject, data })),
      usedBy: deploymentsUsingImage(store.deployments),
    });

    test("a build emits image.building then image.ready, scoped to its workspace", async () => {
      events.length = 0;
      await drain(builds.build(ws, { commands: ["echo ok"] }));
      assert.deepEqual(
        events.map((e) => [e.ws, e.type, e.subject, e.data.status]),
        [
          [ws, "image.building", "img-echook", "building"],
          [ws, "image.ready", "img-echook", "ready"],
        ],
      );
      assert.equal(events[1]?.data.digest, "sha256:final");
      assert.deepEqual(events[1]?.data.steps, ["echo ok"]);
    });

    test("a failed build emits image.failed with the error", async () => {
      events.length = 0;
      await assert.rejects(drain(builds.build(otherWs, { commands: ["fail"] })), /exited with code 1/);
      assert.deepEqual(
        events.map((e) => [e.ws, e.type]),
        [
          [otherWs, "image.building"],
          [otherWs, "image.failed"],
        ],
      );
      assert.match(String(events[1]?.data.error), /step 1\/1 \(fail\) exited with code 1/);
    });

    test("remove deletes a ready image; another workspace's id is not_found", async () => {
      await drain(builds.build(ws, { commands: ["echo removable"] }));
      await assert.rejects(builds.remove(otherWs, "img-echoremovable"), (e: unknown) => {
        assert.equal((e as BerthError).code, "not_found");
        return true;
      });
      await builds.remove(ws, "img-echoremovable");
      assert.equal(await store.builtImages.get(ws, "img-echoremovable"), undefined);
      await assert.rejects(builds.remove(ws, "img-echoremovable"), /image img-echoremovable not found/);
      // A failed image can be removed too.
      await builds.remove(otherWs, "img-fail");
      assert.deepEqual(await store.builtImages.list(otherWs), []);
    });

    test("remove refuses with conflict while an active deployment runs the image, and after its stop removes it", async () => {
      await drain(builds.build(ws, { commands: ["echo deployed"] }));
      const ref = "localhost/berth-build-cache:img-echodeployed";
      const at = new Date().toISOString();
      const stub = await store.stubs.upsert(ws, {
        name: "uses-image",
        type: "endpoint/deployment",
        config: stubConfig(),
        extra: stubExtra({ image_ref: ref }),
        objectId: null,
      });
      const reserved = await store.deployments.reserveVersion(ws, "uses-image", "endpoint", at);
      const dep = await store.deployments.attachStub(reserved.id, stub.stub.id, at);
      await assert.rejects(builds.remove(ws, "img-echodeployed"), (e: unknown) => {
        const err = e as BerthError;
        assert.equal(err.code, "conflict");
        assert.match(err.message, /used by the deployment uses-image: stop or delete it first/);
        assert.deepEqual(err.details?.deployments, ["uses-image"]);
        return true;
      });
      assert.equal((await store.builtImages.get(ws, "img-echodeployed"))?.status, "ready", "still there");
      await store.deployments.setActive(dep.id, false, at);
      await builds.remove(ws, "img-echodeployed");
      assert.equal(await store.builtImages.get(ws, "img-echodeployed"), undefined);
    });

    test("remove refuses an image that is being built", async () => {
      let release!: () => void;
      agent.gate = new Promise((r) => (release = r));
      const running = drain(builds.build(ws, { commands: ["echo slow"] }));
      await waitUntil(async () => (await store.builtImages.get(ws, "img-echoslow"))?.status === "building", {
        what: "the building record",
      });
      await assert.rejects(builds.remove(ws, "img-echoslow"), /is being built/);
      release();
      await running;
      agent.gate = Promise.resolve();
    });
  });
}
